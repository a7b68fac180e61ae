package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/store"
)

// testUsage: usage adds up by the minute; a batch recorded twice counts
// once; ListUsage sums by any grouping, within its time range and team,
// and the sums survive a reopen; bad rows and queries are ErrInvalid and
// change nothing.
func testUsage(t *testing.T, open func(t *testing.T) store.Store) {
	ctx := context.Background()
	s := open(t)
	day := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	row := func(min int, team, key, job, model string, req, p, c int64) store.UsageRow {
		return store.UsageRow{Start: day.Add(time.Duration(min)*time.Minute + 17*time.Second), Team: team, KeyID: key, JobID: job, Model: model,
			Requests: req, PromptTokens: p, CompletionTokens: c}
	}
	batches := map[string][]store.UsageRow{
		"p1-1": {row(0, "ml", "k1", "j1", "@ml/chat", 2, 100, 20), row(0, "web", "k2", "j1", "@ml/chat", 1, 10, 5)},
		"p1-2": {row(0, "ml", "k1", "j1", "@ml/chat", 1, 50, 10), row(61, "ml", "", "j2", "@ml/embed", 3, 30, 0)},
		"p2-1": {row(24*60+5, "ml", "k1", "j1", "@ml/chat", 1, 7, 3)},
		// The ork's: a GPU Container Job's GPU-seconds (no model, no requests).
		"gpu-1": {{Start: day, Team: "ml", JobID: "j3", GPUSeconds: 120}},
	}
	for _, id := range []string{"p1-1", "p1-2", "p2-1", "gpu-1", "p1-1", "gpu-1"} { // again: a retried delivery, a slot sampled twice
		if err := s.RecordUsage(ctx, id, batches[id]); err != nil {
			t.Fatalf("RecordUsage(%s) = %v", id, err)
		}
	}
	all := store.UsageQuery{From: day, To: day.Add(48 * time.Hour)}
	list := func(s store.Store, q store.UsageQuery, want ...store.UsageRow) {
		t.Helper()
		got, err := s.ListUsage(ctx, q)
		if err != nil {
			t.Fatalf("ListUsage(%+v) = %v", q, err)
		}
		if want == nil {
			want = []store.UsageRow{}
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("ListUsage(%+v) (-want +got):\n%s", q, diff)
		}
	}
	q := all
	list(s, q, store.UsageRow{Requests: 8, PromptTokens: 197, CompletionTokens: 38, GPUSeconds: 120})
	q.GroupBy = []store.UsageGroup{store.GroupKey, store.GroupTeam} // sorted by team, then key
	list(s, q,
		store.UsageRow{Team: "ml", Requests: 3, PromptTokens: 30, GPUSeconds: 120},
		store.UsageRow{Team: "ml", KeyID: "k1", Requests: 4, PromptTokens: 157, CompletionTokens: 33},
		store.UsageRow{Team: "web", KeyID: "k2", Requests: 1, PromptTokens: 10, CompletionTokens: 5})
	q.GroupBy = []store.UsageGroup{store.GroupModel, store.GroupJob, store.GroupDay}
	list(s, q,
		store.UsageRow{Start: day, JobID: "j3", GPUSeconds: 120},
		store.UsageRow{Start: day, Model: "@ml/chat", JobID: "j1", Requests: 4, PromptTokens: 160, CompletionTokens: 35},
		store.UsageRow{Start: day, Model: "@ml/embed", JobID: "j2", Requests: 3, PromptTokens: 30},
		store.UsageRow{Start: day.Add(24 * time.Hour), Model: "@ml/chat", JobID: "j1", Requests: 1, PromptTokens: 7, CompletionTokens: 3})
	q = store.UsageQuery{From: day, To: day.Add(2 * time.Hour), Team: "ml", GroupBy: []store.UsageGroup{store.GroupHour}}
	list(s, q,
		store.UsageRow{Start: day, Requests: 3, PromptTokens: 150, CompletionTokens: 30, GPUSeconds: 120},
		store.UsageRow{Start: day.Add(time.Hour), Requests: 3, PromptTokens: 30})
	list(s, store.UsageQuery{From: day.Add(time.Minute), To: day.Add(61 * time.Minute)}) // no minute of it has usage
	list(s, store.UsageQuery{From: day, To: day.Add(time.Hour), Team: "nobody"})

	for name, rows := range map[string][]store.UsageRow{
		"no team":      {row(0, "", "k", "j", "m", 1, 1, 1)},
		"no job":       {row(0, "t", "k", "", "m", 1, 1, 1)},
		"no model":     {row(0, "t", "k", "j", "", 1, 1, 1)},
		"negative GPU": {{Start: day, Team: "t", JobID: "j", GPUSeconds: -1}},
		"negative":     {row(0, "t", "k", "j", "m", 1, -1, 1)},
		"no start":     {{Team: "t", JobID: "j", Model: "m"}},
	} {
		wantErr(t, "RecordUsage("+name+")", s.RecordUsage(ctx, "bad-"+name, rows), cosmic.ErrInvalid)
	}
	wantErr(t, "RecordUsage(no batch)", s.RecordUsage(ctx, "", batches["p2-1"]), cosmic.ErrInvalid)
	for name, q := range map[string]store.UsageQuery{
		"no range":      {},
		"to before":     {From: day, To: day.Add(-time.Hour)},
		"hour and day":  {From: day, To: day.Add(time.Hour), GroupBy: []store.UsageGroup{store.GroupHour, store.GroupDay}},
		"unknown group": {From: day, To: day.Add(time.Hour), GroupBy: []store.UsageGroup{"week"}},
	} {
		_, err := s.ListUsage(ctx, q)
		wantErr(t, "ListUsage("+name+")", err, cosmic.ErrInvalid)
	}

	s.Close()
	s = open(t)
	list(s, all, store.UsageRow{Requests: 8, PromptTokens: 197, CompletionTokens: 38, GPUSeconds: 120})
	if err := s.RecordUsage(ctx, "p1-2", batches["p1-2"]); err != nil { // still known after the reopen
		t.Fatal(err)
	}
	list(s, all, store.UsageRow{Requests: 8, PromptTokens: 197, CompletionTokens: 38, GPUSeconds: 120})
}
