// Package storetest is the conformance suite of store.Store: every
// implementation's tests call Run, so that they all behave alike.
//
// Importers: the tests of store implementations (store/sqlite,
// store/postgres).
package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/store"
)

// Run runs the conformance suite. open returns a store on the database of
// the (sub)test t, empty the first time; called again for the same t after
// the store is closed, it must reopen that same database (the suite checks
// that data survives a reopen). open registers the store's Close with
// t.Cleanup; closing a store twice must be harmless.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, open func(t *testing.T) store.Store)
	}{
		{"jobs", testJobs},
		{"list filters", testListFilters},
		{"list sort and pages", testListSortPages},
		{"list invalid", testListInvalid},
		{"list pages of several states", testListStatesPages},
		{"list totals follow writes", testListTotals},
		{"labels follow updates", testLabelsFollowUpdates},
		{"reservations", testReservations},
		{"cpu and memory", testCPUMemory},
		{"claim is all or nothing", testClaimAllOrNothing},
		{"concurrent claims", testConcurrentClaims},
		{"concurrent cpu claims", testConcurrentCPUClaims},
		{"concurrent job updates", testConcurrentJobUpdates},
		{"racks", testRacks},
		{"update commits", testUpdateCommits},
		{"update rolls back", testUpdateRollsBack},
		{"update job", testUpdateJob},
		{"teams and users", testTeamsUsers},
		{"members", testMembers},
		{"tokens", testTokens},
		{"sessions end with a new password", testSessionsEnd},
		{"delete team", testDeleteTeam},
		{"audit", testAudit},
		{"quotas", testQuotas},
		{"leases", testLeases},
		{"concurrent lease acquirers", testConcurrentAcquire},
		{"fenced claims race a takeover", testFencedRace},
		{"reopen", testReopen},
		{"concurrent writes", testConcurrentWrites},
		{"api keys", testAPIKeys},
		{"api key limits and rotation", testAPIKeyRotation},
		{"sign-in limits", testSignInLimits},
		{"usage", testUsage},
		{"datastores", testDatastores},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.fn(t, open) })
	}
}

// base is the time of the fixtures, with nanoseconds to prove they survive.
var base = time.Date(2025, 3, 4, 5, 6, 7, 891011121, time.UTC)

func at(minute int) time.Time { return base.Add(time.Duration(minute) * time.Minute) }

var jobOpts = cmp.Options{cmpopts.EquateEmpty()}

// job is a fixture: a job of the given owners in state, with its history.
func job(id, team, user string, state cosmic.State, name string, labels map[string]string, created, updated int) cosmic.Job {
	j := cosmic.Job{
		ID: id, Team: team, User: user, CreatedAt: at(created), UpdatedAt: at(updated),
		Spec: cosmic.Spec{
			Type: cosmic.TypeGPUContainer, Name: name, Labels: labels, Location: "us", Image: "ubuntu:24.04", DiskGB: 50,
			Command: []string{"sleep", "infinity"}, Resources: cosmic.Resources{GPU: 2, GPUModel: "GH100_H100_SXM5_80GB"},
		},
		Status: cosmic.Status{State: state, History: []cosmic.StatusChange{
			{State: cosmic.StateCreating, At: at(created)},
			{State: state, At: at(updated)},
		}},
	}
	if state == cosmic.StateFailed {
		j.Status.Reason = &cosmic.Reason{Code: cosmic.ReasonImportFailed, Message: "import failed", Fix: "check the image"}
		j.Status.History[1].Reason = cosmic.ReasonImportFailed
	}
	return j
}

func mustCreate(t *testing.T, s store.Tx, jobs ...cosmic.Job) {
	t.Helper()
	for _, j := range jobs {
		if err := s.CreateJob(context.Background(), j); err != nil {
			t.Fatalf("CreateJob(%s) = %v", j.ID, err)
		}
	}
}

func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Errorf("%s = %v, want an error wrapping %v", what, err, want)
	}
}

func testJobs(t *testing.T, open func(t *testing.T) store.Store) {
	ctx := context.Background()
	s := open(t)
	j := job("job-1", "t1", "u1", cosmic.StateFailed, "train", map[string]string{"env": "prod"}, 1, 2)
	j.Spec.Inference = nil
	j.Status.Replicas = []cosmic.ReplicaStatus{{Index: 0, State: cosmic.StateFailed, Nodes: []string{"n1"}}}
	mustCreate(t, s, j)

	got, err := s.GetJob(ctx, "job-1")
	if err != nil {
		t.Fatalf("GetJob = %v", err)
	}
	if diff := cmp.Diff(j, got, jobOpts); diff != "" {
		t.Errorf("GetJob (-want +got):\n%s", diff)
	}

	dup := j
	dup.Team = "other"
	wantErr(t, "CreateJob(duplicate)", s.CreateJob(ctx, dup), cosmic.ErrConflict)
	if got, _ := s.GetJob(ctx, "job-1"); got.Team != "t1" {
		t.Errorf("duplicate create changed the job: team %q", got.Team)
	}
	wantErr(t, "CreateJob(empty ID)", s.CreateJob(ctx, cosmic.Job{}), cosmic.ErrInvalid)

	_, err = s.GetJob(ctx, "nope")
	wantErr(t, "GetJob(missing)", err, cosmic.ErrNotFound)

	j.Status.State = cosmic.StateQueued
	j.Status.Reason = nil
	j.UpdatedAt = at(3)
	j.Spec.Name = "renamed"
	if err := s.PutJob(ctx, j); err != nil {
		t.Fatalf("PutJob = %v", err)
	}
	got, _ = s.GetJob(ctx, "job-1")
	if diff := cmp.Diff(j, got, jobOpts); diff != "" {
		t.Errorf("GetJob after PutJob (-want +got):\n%s", diff)
	}
	missing := j
	missing.ID = "nope"
	wantErr(t, "PutJob(missing)", s.PutJob(ctx, missing), cosmic.ErrNotFound)

	if err := s.DeleteJob(ctx, "job-1"); err != nil {
		t.Fatalf("DeleteJob = %v", err)
	}
	_, err = s.GetJob(ctx, "job-1")
	wantErr(t, "GetJob(deleted)", err, cosmic.ErrNotFound)
	wantErr(t, "DeleteJob(deleted)", s.DeleteJob(ctx, "job-1"), cosmic.ErrNotFound)
	if jobs, total, err := s.ListJobs(ctx, store.ListJobsQuery{}); err != nil || total != 0 || len(jobs) != 0 {
		t.Errorf("ListJobs after delete = %d jobs, total %d, %v; want none", len(jobs), total, err)
	}
}

// listFixture is seven jobs; a6 and a7 share createdAt, a5 and a7
// updatedAt, a1, a3 and a7 their name.
func listFixture() []cosmic.Job {
	prod, dev := map[string]string{"env": "prod"}, map[string]string{"env": "dev"}
	return []cosmic.Job{
		job("a1", "t1", "u1", cosmic.StateRunning, "alpha", map[string]string{"env": "prod", "tier": "gpu"}, 1, 10),
		job("a2", "t1", "u1", cosmic.StateQueued, "bravo", dev, 2, 9),
		job("a3", "t1", "u2", cosmic.StateFailed, "alpha", prod, 3, 8),
		job("a4", "t2", "u3", cosmic.StateRunning, "delta", nil, 4, 7),
		job("a5", "t2", "u3", cosmic.StatePending, "echo", map[string]string{"env": "prod", "tier": "gpu"}, 5, 6),
		job("a6", "t2", "u4", cosmic.StateStopped, "bravo", map[string]string{"tier": "cpu"}, 6, 5),
		job("a7", "t1", "u2", cosmic.StateRunning, "alpha", map[string]string{"tier": "gpu", "env": "dev"}, 6, 6),
	}
}

func ids(jobs []cosmic.Job) []string {
	out := make([]string, len(jobs))
	for i, j := range jobs {
		out[i] = j.ID
	}
	return out
}

func testListFilters(t *testing.T, open func(t *testing.T) store.Store) {
	ctx := context.Background()
	s := open(t)
	mustCreate(t, s, listFixture()...)
	tests := []struct {
		name string
		q    store.ListJobsQuery
		want []string
	}{
		{"all", store.ListJobsQuery{}, []string{"a1", "a2", "a3", "a4", "a5", "a6", "a7"}},
		{"team", store.ListJobsQuery{Team: "t1"}, []string{"a1", "a2", "a3", "a7"}},
		{"unknown team", store.ListJobsQuery{Team: "t9"}, nil},
		{"user", store.ListJobsQuery{User: "u3"}, []string{"a4", "a5"}},
		{"team and user", store.ListJobsQuery{Team: "t1", User: "u2"}, []string{"a3", "a7"}},
		{"name", store.ListJobsQuery{Name: "alpha"}, []string{"a1", "a3", "a7"}},
		{"team and name", store.ListJobsQuery{Team: "t2", Name: "bravo"}, []string{"a6"}},
		{"unknown name", store.ListJobsQuery{Name: "alph"}, nil},
		{"one state", store.ListJobsQuery{States: []cosmic.State{cosmic.StateRunning}}, []string{"a1", "a4", "a7"}},
		{"any of states", store.ListJobsQuery{States: []cosmic.State{cosmic.StateRunning, cosmic.StatePending}}, []string{"a1", "a4", "a5", "a7"}},
		{"unmatched state", store.ListJobsQuery{States: []cosmic.State{cosmic.StateDeleting}}, nil},
		{"one label", store.ListJobsQuery{Labels: map[string]string{"env": "prod"}}, []string{"a1", "a3", "a5"}},
		{"all labels", store.ListJobsQuery{Labels: map[string]string{"env": "prod", "tier": "gpu"}}, []string{"a1", "a5"}},
		{"label value exact", store.ListJobsQuery{Labels: map[string]string{"env": "pro"}}, nil},
		{"label and team", store.ListJobsQuery{Team: "t2", Labels: map[string]string{"tier": "gpu"}}, []string{"a5"}},
		{"updated after (exclusive)", store.ListJobsQuery{UpdatedAfter: at(7)}, []string{"a1", "a2", "a3"}},
		{"updated before (exclusive)", store.ListJobsQuery{UpdatedBefore: at(7)}, []string{"a5", "a6", "a7"}},
		{"updated between", store.ListJobsQuery{UpdatedAfter: at(5), UpdatedBefore: at(9)}, []string{"a3", "a4", "a5", "a7"}},
		{"everything", store.ListJobsQuery{Team: "t1", User: "u1", States: []cosmic.State{cosmic.StateRunning},
			Labels: map[string]string{"env": "prod"}, UpdatedAfter: at(9), UpdatedBefore: at(11)}, []string{"a1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			jobs, total, err := s.ListJobs(ctx, tt.q)
			if err != nil {
				t.Fatalf("ListJobs = %v", err)
			}
			got := ids(jobs)
			sort.Strings(got)
			if diff := cmp.Diff(tt.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("IDs (-want +got):\n%s", diff)
			}
			if total != len(tt.want) {
				t.Errorf("total = %d, want %d", total, len(tt.want))
			}
		})
	}
	// Whole jobs come back, not only IDs.
	jobs, _, err := s.ListJobs(ctx, store.ListJobsQuery{User: "u4"})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(listFixture()[5:6], jobs, jobOpts); diff != "" {
		t.Errorf("ListJobs(u4) (-want +got):\n%s", diff)
	}
}

const sortableTime = "2006-01-02T15:04:05.000000000"

// sortedFixture is listFixture sorted by key and order, ties by ID the
// same way: the reference the store must match.
func sortedFixture(key, order string) []string {
	jobs := listFixture()
	val := func(j cosmic.Job) string {
		switch key {
		case store.SortUpdatedAt:
			return j.UpdatedAt.Format(sortableTime)
		case store.SortName:
			return j.Spec.Name
		case store.SortState:
			return string(j.Status.State)
		}
		return j.CreatedAt.Format(sortableTime)
	}
	sort.Slice(jobs, func(a, b int) bool {
		ka, kb := val(jobs[a])+"\x00"+jobs[a].ID, val(jobs[b])+"\x00"+jobs[b].ID
		if order == store.OrderAsc {
			return ka < kb
		}
		return ka > kb
	})
	return ids(jobs)
}

func testListSortPages(t *testing.T, open func(t *testing.T) store.Store) {
	ctx := context.Background()
	s := open(t)
	mustCreate(t, s, listFixture()...)
	for _, key := range []string{store.SortCreatedAt, store.SortUpdatedAt, store.SortName, store.SortState} {
		for _, order := range []string{store.OrderAsc, store.OrderDesc} {
			t.Run(key+" "+order, func(t *testing.T) {
				want := sortedFixture(key, order)
				jobs, total, err := s.ListJobs(ctx, store.ListJobsQuery{Sort: key, Order: order})
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(want, ids(jobs)); diff != "" || total != 7 {
					t.Errorf("total %d; order (-want +got):\n%s", total, diff)
				}
				// Pages of 2 (and 3) put together are the whole list; each
				// reports the whole total; past the end is empty.
				for _, size := range []int{2, 3} {
					var all []string
					for page := 0; page*size < len(want)+size; page++ {
						jobs, total, err := s.ListJobs(ctx, store.ListJobsQuery{Sort: key, Order: order, Page: page, Size: size})
						if err != nil {
							t.Fatal(err)
						}
						if total != 7 {
							t.Errorf("size %d page %d: total %d, want 7", size, page, total)
						}
						if len(jobs) > size {
							t.Errorf("size %d page %d: %d jobs", size, page, len(jobs))
						}
						all = append(all, ids(jobs)...)
					}
					if diff := cmp.Diff(want, all); diff != "" {
						t.Errorf("size %d: pages (-want +got):\n%s", size, diff)
					}
				}
			})
		}
	}
	t.Run("defaults are createdAt desc", func(t *testing.T) {
		jobs, _, err := s.ListJobs(ctx, store.ListJobsQuery{})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(sortedFixture(store.SortCreatedAt, store.OrderDesc), ids(jobs)); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
	})
	t.Run("filtered page and total", func(t *testing.T) {
		jobs, total, err := s.ListJobs(ctx, store.ListJobsQuery{Team: "t1", Sort: store.SortName, Order: store.OrderAsc, Page: 1, Size: 2})
		if err != nil {
			t.Fatal(err)
		}
		// t1 by name asc: a1 a3 a7 (alpha), a2 (bravo).
		if diff := cmp.Diff([]string{"a7", "a2"}, ids(jobs)); diff != "" || total != 4 {
			t.Errorf("total %d, want 4; (-want +got):\n%s", total, diff)
		}
		jobs, total, err = s.ListJobs(ctx, store.ListJobsQuery{Team: "t1", Page: 5, Size: 2})
		if err != nil || len(jobs) != 0 || total != 4 {
			t.Errorf("past the end: %d jobs, total %d, %v; want none, 4", len(jobs), total, err)
		}
	})
}

// testListTotals changes jobs' owners and states, deletes some, rolls a
// transaction back, reopens, and checks after each step that every list
// (one or several states, team, user, none) has exactly the jobs and the
// total of a reference model, in order, page by page.
func testListTotals(t *testing.T, open func(t *testing.T) store.Store) {
	ctx := context.Background()
	s := open(t)
	teams := []string{"t1", "t2", "t3"}
	users := []string{"u1", "u2", "u3", "u4"}
	states := []cosmic.State{cosmic.StateRunning, cosmic.StateStopped, cosmic.StateFailed, cosmic.StatePending}
	model := map[string]cosmic.Job{}
	n := 0
	newJob := func() cosmic.Job {
		n++
		// Two jobs share each creation time: ties break by ID.
		return job(fmt.Sprintf("j%03d", n), teams[n%3], users[n%4], states[n%len(states)], "x", nil, n/2, n)
	}
	var created []cosmic.Job
	for range 40 {
		created = append(created, newJob())
	}
	mustCreate(t, s, created...)
	for _, j := range created {
		model[j.ID] = j
	}
	check := func(step string) {
		t.Helper()
		for _, team := range []string{"", "t1", "t2"} {
			for _, user := range []string{"", "u1", "u2"} {
				for _, st := range [][]cosmic.State{nil, {cosmic.StateRunning}, {cosmic.StateStopped, cosmic.StateFailed},
					{cosmic.StateRunning, cosmic.StateRunning, cosmic.StatePending}, {cosmic.StateDeleting, cosmic.StateFailed}, {cosmic.StateDeleting}} {
					var want []cosmic.Job
					for _, j := range model {
						if (team == "" || j.Team == team) && (user == "" || j.User == user) && (len(st) == 0 || slices.Contains(st, j.Status.State)) {
							want = append(want, j)
						}
					}
					sort.Slice(want, func(a, b int) bool {
						if !want[a].CreatedAt.Equal(want[b].CreatedAt) {
							return want[a].CreatedAt.After(want[b].CreatedAt)
						}
						return want[a].ID > want[b].ID
					})
					name := fmt.Sprintf("%s: team %q user %q states %v", step, team, user, st)
					for _, size := range []int{1, 3, 1000} {
						var got []string
						for page := 0; page*size <= len(want); page++ {
							jobs, total, err := s.ListJobs(ctx, store.ListJobsQuery{Team: team, User: user, States: st, Page: page, Size: size})
							if err != nil {
								t.Fatalf("%s: ListJobs = %v", name, err)
							}
							if total != len(want) {
								t.Errorf("%s: size %d page %d: total %d, want %d", name, size, page, total, len(want))
							}
							got = append(got, ids(jobs)...)
						}
						if diff := cmp.Diff(ids(want), got, cmpopts.EquateEmpty()); diff != "" {
							t.Errorf("%s: size %d: pages (-want +got):\n%s", name, size, diff)
						}
					}
				}
			}
		}
	}
	check("created")

	// Owners and states change; some jobs keep theirs; some are deleted.
	for i, j := range created {
		switch i % 5 {
		case 0:
			j.Status.State = cosmic.StateFailed
		case 1:
			j.Team = teams[(i+1)%3]
		case 2:
			j.User, j.Status.State = users[(i+1)%4], cosmic.StateDeleting
		case 3:
			j.Spec.Name = "renamed"
		case 4:
			if err := s.DeleteJob(ctx, j.ID); err != nil {
				t.Fatal(err)
			}
			delete(model, j.ID)
			continue
		}
		if err := s.PutJob(ctx, j); err != nil {
			t.Fatal(err)
		}
		model[j.ID] = j
	}
	if _, err := s.UpdateJob(ctx, created[3].ID, func(j *cosmic.Job) error {
		j.Status.State = cosmic.StateStopped
		model[j.ID] = *j
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	check("changed")

	// A transaction that creates, changes and deletes, then fails, leaves
	// every total as it was.
	errRollback := errors.New("roll back")
	err := s.Update(ctx, func(tx store.Tx) error {
		mustCreate(t, tx, newJob(), newJob())
		j := model[created[0].ID]
		j.Status.State = cosmic.StateRunning
		if err := tx.PutJob(ctx, j); err != nil {
			return err
		}
		if err := tx.DeleteJob(ctx, created[1].ID); err != nil {
			return err
		}
		return errRollback
	})
	wantErr(t, "Update(rolled back)", err, errRollback)
	check("rolled back")

	// A failed create (duplicate ID) counts nothing either.
	wantErr(t, "CreateJob(duplicate)", s.CreateJob(ctx, model[created[0].ID]), cosmic.ErrConflict)
	for _, j := range model {
		if err := s.DeleteJob(ctx, j.ID); err != nil {
			t.Fatal(err)
		}
		delete(model, j.ID)
		if len(model) == 10 {
			break
		}
	}
	check("deleted")

	if err := s.Close(); err != nil {
		t.Fatalf("Close = %v", err)
	}
	s = open(t)
	check("reopened")
}

// testListStatesPages: every page of a list of several states (a state
// named twice too), with and without a team, in both orders, is the slice
// of the whole ordered list, and the totals agree: the pages a store reads
// state by state, or from the end, are the same.
func testListStatesPages(t *testing.T, open func(t *testing.T) store.Store) {
	ctx := context.Background()
	s := open(t)
	states := []cosmic.State{cosmic.StateRunning, cosmic.StatePending, cosmic.StateStopped, cosmic.StateQueued}
	var all []cosmic.Job
	for i := range 37 {
		team := []string{"t1", "t2"}[i%2]
		// Equal creation times in pairs: ties break by ID.
		j := job(fmt.Sprintf("s%02d", (i*7)%37), team, "u1", states[i%len(states)], "x", nil, i/2, i)
		all = append(all, j)
	}
	mustCreate(t, s, all...)
	want := func(team, order string, pick []cosmic.State) []string {
		var out []cosmic.Job
		for _, j := range all {
			if (team == "" || j.Team == team) && slices.Contains(pick, j.Status.State) {
				out = append(out, j)
			}
		}
		sort.Slice(out, func(a, b int) bool {
			x, y := out[a], out[b]
			if !x.CreatedAt.Equal(y.CreatedAt) {
				return x.CreatedAt.Before(y.CreatedAt) == (order == store.OrderAsc)
			}
			return (x.ID < y.ID) == (order == store.OrderAsc)
		})
		return ids(out)
	}
	pick := []cosmic.State{cosmic.StateRunning, cosmic.StatePending, cosmic.StateRunning}
	for _, team := range []string{"", "t1"} {
		for _, order := range []string{store.OrderAsc, store.OrderDesc} {
			w := want(team, order, pick)
			for page := range len(w)/4 + 2 {
				q := store.ListJobsQuery{Team: team, States: pick, Order: order, Page: page, Size: 4}
				got, total, err := s.ListJobs(ctx, q)
				if err != nil {
					t.Fatalf("ListJobs(%+v) = %v", q, err)
				}
				lo, hi := min(page*4, len(w)), min(page*4+4, len(w))
				if diff := cmp.Diff(w[lo:hi], ids(got), cmpopts.EquateEmpty()); diff != "" || total != len(w) {
					t.Errorf("team %q %s page %d: total %d, want %d; ids (-want +got):\n%s", team, order, page, total, len(w), diff)
				}
			}
		}
	}
}

func testListInvalid(t *testing.T, open func(t *testing.T) store.Store) {
	s := open(t)
	for name, q := range map[string]store.ListJobsQuery{
		"sort":          {Sort: "id"},
		"order":         {Order: "up"},
		"negative page": {Page: -1},
		"negative size": {Size: -1},
		"size too big":  {Size: store.MaxPageSize + 1},
		// Each label is a join: too many are refused, not an SQL failure
		// (SQLite allows 64 tables in a join).
		"too many labels":  {Labels: labelFilter(store.MaxLabelFilters + 1)},
		"70 labels":        {Labels: labelFilter(70)},
		"long label key":   {Labels: map[string]string{strings.Repeat("k", cosmic.MaxLabelKeyLen+1): "v"}},
		"long label value": {Labels: map[string]string{"k": strings.Repeat("v", cosmic.MaxLabelValueLen+1)}},
		"too many states":  {States: slices.Repeat([]cosmic.State{cosmic.StateRunning}, store.MaxStateFilters+1)},
	} {
		_, _, err := s.ListJobs(context.Background(), q)
		wantErr(t, "ListJobs("+name+")", err, cosmic.ErrInvalid)
	}
	if _, _, err := s.ListJobs(context.Background(), store.ListJobsQuery{Size: store.MaxPageSize}); err != nil {
		t.Errorf("ListJobs(size max) = %v", err)
	}
	// At the limits: a query, not an error.
	if _, _, err := s.ListJobs(context.Background(), store.ListJobsQuery{Labels: labelFilter(store.MaxLabelFilters),
		States: slices.Repeat([]cosmic.State{cosmic.StateRunning}, store.MaxStateFilters)}); err != nil {
		t.Errorf("ListJobs(%d labels, %d states) = %v", store.MaxLabelFilters, store.MaxStateFilters, err)
	}
	long := map[string]string{strings.Repeat("p", 253) + "/" + strings.Repeat("n", 63): strings.Repeat("v", cosmic.MaxLabelValueLen)}
	if _, _, err := s.ListJobs(context.Background(), store.ListJobsQuery{Labels: long}); err != nil {
		t.Errorf("ListJobs(longest label) = %v", err)
	}
}

// labelFilter is a filter of n labels.
func labelFilter(n int) map[string]string {
	m := map[string]string{}
	for i := range n {
		m[fmt.Sprintf("k%d", i)] = "v"
	}
	return m
}

func testLabelsFollowUpdates(t *testing.T, open func(t *testing.T) store.Store) {
	ctx := context.Background()
	s := open(t)
	mustCreate(t, s, listFixture()...)
	count := func(labels map[string]string) int {
		t.Helper()
		_, total, err := s.ListJobs(ctx, store.ListJobsQuery{Labels: labels})
		if err != nil {
			t.Fatal(err)
		}
		return total
	}
	if _, err := s.UpdateJob(ctx, "a1", func(j *cosmic.Job) error {
		j.Spec.Labels = map[string]string{"env": "staging"}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if n := count(map[string]string{"env": "prod"}); n != 2 {
		t.Errorf("env=prod after relabel: %d jobs, want 2", n)
	}
	if n := count(map[string]string{"env": "staging"}); n != 1 {
		t.Errorf("env=staging after relabel: %d jobs, want 1", n)
	}
	if n := count(map[string]string{"tier": "gpu"}); n != 2 {
		t.Errorf("tier=gpu after its removal from a1: %d jobs, want 2", n)
	}
	if err := s.DeleteJob(ctx, "a5"); err != nil {
		t.Fatal(err)
	}
	if n := count(map[string]string{"tier": "gpu"}); n != 1 {
		t.Errorf("tier=gpu after deleting a5: %d jobs, want 1", n)
	}
}

// rackFixture registers racks r1 and r2 and creates jobs j1..j3.
func rackFixture(t *testing.T, s store.Store) {
	t.Helper()
	ctx := context.Background()
	for _, id := range []string{"r1", "r2"} {
		if err := s.PutRack(ctx, rack(id)); err != nil {
			t.Fatalf("PutRack(%s) = %v", id, err)
		}
	}
	for _, id := range []string{"j1", "j2", "j3"} {
		mustCreate(t, s, job(id, "t1", "u1", cosmic.StatePending, id, nil, 1, 1))
	}
}

func rack(id string) store.Rack {
	return store.Rack{
		Rack: cosmic.Rack{ID: id, Type: cosmic.RackTypeServer, Location: "us", GPUModel: "GH100_H100_SXM5_80GB",
			WorkerKey: strings.Repeat("ab", 32), CreatedAt: at(0)},
		WorkerAddrs: []string{"127.0.0.1:7001"},
		Nodes: []cosmic.Node{
			{Name: "n1", Rack: id, GPUModel: "GH100_H100_SXM5_80GB", GPUs: 8, Schedulable: true, Ready: true},
			{Name: "n2", Rack: id, GPUModel: "GH100_H100_SXM5_80GB", GPUs: 8, Schedulable: true, Ready: false},
		},
	}
}

func res(job string, replica int, rack string, nodes ...cosmic.NodeAlloc) cosmic.Reservation {
	return cosmic.Reservation{JobID: job, Replica: replica, Rack: rack, Nodes: nodes}
}

func on(node string, gpus ...int) cosmic.NodeAlloc { return cosmic.NodeAlloc{Node: node, GPUs: gpus} }

func wantReservations(t *testing.T, s store.Tx, want []cosmic.Reservation) {
	t.Helper()
	got, err := s.Reservations(context.Background())
	if err != nil {
		t.Fatalf("Reservations = %v", err)
	}
	if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("Reservations (-want +got):\n%s", diff)
	}
}

func testReservations(t *testing.T, open func(t *testing.T) store.Store) {
	ctx := context.Background()
	s := open(t)
	rackFixture(t, s)

	j1r0 := res("j1", 0, "r1", on("n1", 0, 1))
	if err := s.ClaimGPUs(ctx, j1r0); err != nil {
		t.Fatalf("ClaimGPUs(j1/0) = %v", err)
	}
	// Same indices on another node or rack are other GPUs. Nodes keep their
	// order; indices come back ascending.
	j1r1 := res("j1", 1, "r2", on("n2", 3, 1), on("n1", 0, 1))
	if err := s.ClaimGPUs(ctx, j1r1); err != nil {
		t.Fatalf("ClaimGPUs(j1/1) = %v", err)
	}
	j2r0 := res("j2", 0, "r1", on("n2", 0, 1, 2, 3))
	if err := s.ClaimGPUs(ctx, j2r0); err != nil {
		t.Fatalf("ClaimGPUs(j2/0) = %v", err)
	}
	j1r1sorted := res("j1", 1, "r2", on("n2", 1, 3), on("n1", 0, 1))
	wantReservations(t, s, []cosmic.Reservation{j1r0, j1r1sorted, j2r0})

	for _, tt := range []struct {
		name string
		r    cosmic.Reservation
		want error
	}{
		{"gpu claimed by another job", res("j3", 0, "r1", on("n1", 1)), cosmic.ErrConflict},
		{"replica already holds one", res("j1", 0, "r1", on("n1", 5)), cosmic.ErrConflict},
		{"unknown job", res("nope", 0, "r1", on("n1", 6)), cosmic.ErrNotFound},
		{"unknown rack", res("j3", 0, "r9", on("n1", 6)), cosmic.ErrInvalid},
		{"no gpus", res("j3", 0, "r1"), cosmic.ErrInvalid},
		{"empty node", res("j3", 0, "r1", on("n1")), cosmic.ErrInvalid},
		{"negative index", res("j3", 0, "r1", on("n1", -1)), cosmic.ErrInvalid},
		{"negative replica", res("j3", -1, "r1", on("n1", 6)), cosmic.ErrInvalid},
		{"gpu twice in the claim", res("j3", 0, "r1", on("n1", 6, 6)), cosmic.ErrInvalid},
		{"node twice in the claim", res("j3", 0, "r1", on("n1", 6), on("n1", 7)), cosmic.ErrInvalid},
	} {
		t.Run(tt.name, func(t *testing.T) {
			wantErr(t, "ClaimGPUs", s.ClaimGPUs(ctx, tt.r), tt.want)
			wantReservations(t, s, []cosmic.Reservation{j1r0, j1r1sorted, j2r0})
		})
	}

	got, err := s.JobReservations(ctx, "j1")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]cosmic.Reservation{j1r0, j1r1sorted}, got); diff != "" {
		t.Errorf("JobReservations(j1) (-want +got):\n%s", diff)
	}
	if got, err := s.JobReservations(ctx, "j3"); err != nil || len(got) != 0 {
		t.Errorf("JobReservations(j3) = %v, %v; want none", got, err)
	}

	// Release one replica, then all; releasing again is harmless.
	if err := s.ReleaseGPUs(ctx, "j1", 0); err != nil {
		t.Fatal(err)
	}
	wantReservations(t, s, []cosmic.Reservation{j1r1sorted, j2r0})
	if err := s.ClaimGPUs(ctx, res("j3", 0, "r1", on("n1", 0, 1))); err != nil {
		t.Errorf("claiming released GPUs = %v", err)
	}
	if err := s.ReleaseGPUs(ctx, "j3", store.AllReplicas); err != nil {
		t.Fatal(err)
	}
	if err := s.ReleaseGPUs(ctx, "j1", store.AllReplicas); err != nil {
		t.Fatal(err)
	}
	if err := s.ReleaseGPUs(ctx, "j1", store.AllReplicas); err != nil {
		t.Errorf("releasing nothing = %v", err)
	}
	wantReservations(t, s, []cosmic.Reservation{j2r0})

	// A rack with claimed GPUs cannot go; deleting the job releases them.
	wantErr(t, "DeleteRack(r1 in use)", s.DeleteRack(ctx, "r1"), cosmic.ErrConflict)
	if err := s.DeleteJob(ctx, "j2"); err != nil {
		t.Fatal(err)
	}
	wantReservations(t, s, nil)
	if err := s.DeleteRack(ctx, "r1"); err != nil {
		t.Errorf("DeleteRack(r1 free) = %v", err)
	}
}

// testCPUMemory: a claim takes no node past the CPU or memory it gives,
// all or nothing; a node that does not report them is not limited; a node
// that shrank keeps what it holds and takes no more.
func testCPUMemory(t *testing.T, open func(t *testing.T) store.Store) {
	ctx := context.Background()
	s := open(t)
	r := rack("r1")
	r.Nodes[0].CPUMilli, r.Nodes[0].MemoryMiB = 16000, 64*1024 // n1; n2 reports none
	r.Overhead = cosmic.VMOverhead{CPUMilli: 100, MemoryMiB: 180, MemoryMiBPerGPU: 1024}
	if err := s.PutRack(ctx, r); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetRack(ctx, "r1")
	if err != nil {
		t.Fatal(err)
	}
	if got.Overhead != r.Overhead || got.Nodes[0].CPUMilli != 16000 {
		t.Errorf("GetRack = overhead %+v, nodes %+v", got.Overhead, got.Nodes)
	}
	for _, id := range []string{"j1", "j2", "j3", "j4"} {
		mustCreate(t, s, job(id, "t1", "u1", cosmic.StatePending, id, nil, 1, 1))
	}
	n1 := func(cpu, mem int64, gpus ...int) cosmic.NodeAlloc {
		return cosmic.NodeAlloc{Node: "n1", GPUs: gpus, CPUMilli: cpu, MemoryMiB: mem}
	}
	j1 := res("j1", 0, "r1", n1(10000, 32*1024, 0))
	if err := s.ClaimGPUs(ctx, j1); err != nil {
		t.Fatalf("ClaimGPUs(j1) = %v", err)
	}
	// 6 vCPUs are left on n1: 8 is refused, and nothing of the claim
	// stays, its GPU on n2 included.
	over := res("j2", 0, "r1", n1(8000, 1024, 1), cosmic.NodeAlloc{Node: "n2", GPUs: []int{0}, CPUMilli: 1000})
	wantErr(t, "ClaimGPUs(past the CPU)", s.ClaimGPUs(ctx, over), cosmic.ErrConflict)
	wantErr(t, "ClaimGPUs(past the memory)", s.ClaimGPUs(ctx, res("j2", 0, "r1", n1(1000, 33*1024, 1))), cosmic.ErrConflict)
	wantErr(t, "ClaimGPUs(negative)", s.ClaimGPUs(ctx, res("j2", 0, "r1", n1(-1, 0, 1))), cosmic.ErrInvalid)
	wantReservations(t, s, []cosmic.Reservation{j1})
	// Exactly what is left fits; n2 does not limit.
	j2 := res("j2", 0, "r1", n1(6000, 32*1024, 1), cosmic.NodeAlloc{Node: "n2", GPUs: []int{0}, CPUMilli: 1 << 40, MemoryMiB: 1 << 40})
	if err := s.ClaimGPUs(ctx, j2); err != nil {
		t.Fatalf("ClaimGPUs(what is left) = %v", err)
	}
	wantReservations(t, s, []cosmic.Reservation{j1, j2})
	// n1 shrinks to 12 vCPUs: both stay, nothing more fits; released, j1's
	// room comes back to the new size.
	r.Nodes[0].CPUMilli = 12000
	if err := s.PutRack(ctx, r); err != nil {
		t.Fatal(err)
	}
	wantReservations(t, s, []cosmic.Reservation{j1, j2})
	wantErr(t, "ClaimGPUs(shrunk node)", s.ClaimGPUs(ctx, res("j3", 0, "r1", n1(1, 0, 2))), cosmic.ErrConflict)
	if err := s.ReleaseGPUs(ctx, "j1", store.AllReplicas); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "ClaimGPUs(past the shrunk node)", s.ClaimGPUs(ctx, res("j3", 0, "r1", n1(6001, 0, 2))), cosmic.ErrConflict)
	j3 := res("j3", 0, "r1", n1(6000, 0, 2))
	if err := s.ClaimGPUs(ctx, j3); err != nil {
		t.Fatalf("ClaimGPUs(the shrunk node's room) = %v", err)
	}
	if got, err := s.JobReservations(ctx, "j3"); err != nil || len(got) != 1 || got[0].Nodes[0].CPUMilli != 6000 {
		t.Errorf("JobReservations(j3) = %+v, %v", got, err)
	}
}

func testClaimAllOrNothing(t *testing.T, open func(t *testing.T) store.Store) {
	ctx := context.Background()
	s := open(t)
	rackFixture(t, s)
	held := res("j1", 0, "r1", on("n1", 4))
	if err := s.ClaimGPUs(ctx, held); err != nil {
		t.Fatal(err)
	}
	// Seven free GPUs and one taken: none is claimed.
	big := res("j2", 0, "r1", on("n2", 0, 1, 2, 3, 4, 5, 6, 7), on("n1", 3, 4))
	err := s.ClaimGPUs(ctx, big)
	wantErr(t, "ClaimGPUs(one GPU taken)", err, cosmic.ErrConflict)
	if err != nil && !strings.Contains(err.Error(), "r1/n1/4") {
		t.Errorf("error %q does not name the GPU r1/n1/4", err)
	}
	wantReservations(t, s, []cosmic.Reservation{held})

	// Inside a transaction that goes on after the failed claim, the claim
	// still left nothing behind.
	err = s.Update(ctx, func(tx store.Tx) error {
		if err := tx.ClaimGPUs(ctx, big); !errors.Is(err, cosmic.ErrConflict) {
			return fmt.Errorf("claim in tx = %v, want conflict", err)
		}
		return tx.ClaimGPUs(ctx, res("j2", 0, "r1", on("n2", 0, 1, 2, 3, 4, 5, 6, 7)))
	})
	if err != nil {
		t.Fatalf("Update = %v", err)
	}
	wantReservations(t, s, []cosmic.Reservation{held, res("j2", 0, "r1", on("n2", 0, 1, 2, 3, 4, 5, 6, 7))})
}

func testConcurrentClaims(t *testing.T, open func(t *testing.T) store.Store) {
	ctx := context.Background()
	s := open(t)
	if err := s.PutRack(ctx, rack("r1")); err != nil {
		t.Fatal(err)
	}
	const n = 8
	for i := range n {
		mustCreate(t, s, job(fmt.Sprintf("c%d", i), "t1", "u1", cosmic.StateQueued, "c", nil, i, i))
	}
	// Every job races for GPU 0 of n1 (plus one GPU of its own).
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			errs[i] = s.ClaimGPUs(ctx, res(fmt.Sprintf("c%d", i), 0, "r1", on("n1", 0), on("n2", i)))
		})
	}
	wg.Wait()
	won := 0
	for i, err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, cosmic.ErrConflict):
			t.Errorf("claim %d = %v, want nil or a conflict", i, err)
		}
	}
	if won != 1 {
		t.Errorf("%d claims of one GPU won, want 1", won)
	}
	all, err := s.Reservations(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 1 || all[0].Count() != 2 {
		t.Errorf("Reservations = %+v, want the winner's two GPUs", all)
	}
}

// testConcurrentCPUClaims: claims of distinct GPUs race for one node's
// CPU, which has room for three of them: exactly three win, the others are
// conflicts, and the node is never taken past what it gives.
func testConcurrentCPUClaims(t *testing.T, open func(t *testing.T) store.Store) {
	ctx := context.Background()
	s := open(t)
	r := rack("r1")
	r.Nodes[0].CPUMilli, r.Nodes[0].MemoryMiB = 3000, 0
	if err := s.PutRack(ctx, r); err != nil {
		t.Fatal(err)
	}
	const n = 8
	for i := range n {
		mustCreate(t, s, job(fmt.Sprintf("c%d", i), "t1", "u1", cosmic.StateQueued, "c", nil, i, i))
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			errs[i] = s.ClaimGPUs(ctx, res(fmt.Sprintf("c%d", i), 0, "r1", cosmic.NodeAlloc{Node: "n1", GPUs: []int{i}, CPUMilli: 1000}))
		})
	}
	wg.Wait()
	won := 0
	for i, err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, cosmic.ErrConflict):
			t.Errorf("claim %d = %v, want nil or a conflict", i, err)
		}
	}
	if won != 3 {
		t.Errorf("%d claims of 1 CPU each won on a node of 3 CPUs, want 3", won)
	}
	all, err := s.Reservations(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var cpu int64
	for _, r := range all {
		for _, a := range r.Nodes {
			cpu += a.CPUMilli
		}
	}
	if len(all) != 3 || cpu != 3000 {
		t.Errorf("Reservations = %d holding %d mCPU, want 3 holding 3000", len(all), cpu)
	}
}

// testConcurrentJobUpdates: UpdateJob calls on one job at once each add a
// label; none is lost (read-modify-write is one transaction).
func testConcurrentJobUpdates(t *testing.T, open func(t *testing.T) store.Store) {
	ctx := context.Background()
	s := open(t)
	mustCreate(t, s, job("j1", "t1", "u1", cosmic.StateQueued, "x", nil, 1, 1))
	const n = 6
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			_, err := s.UpdateJob(ctx, "j1", func(j *cosmic.Job) error {
				if j.Spec.Labels == nil {
					j.Spec.Labels = map[string]string{}
				}
				j.Spec.Labels[fmt.Sprintf("k%d", i)] = "v"
				return nil
			})
			if err != nil {
				t.Errorf("UpdateJob %d = %v", i, err)
			}
		})
	}
	wg.Wait()
	got, err := s.GetJob(ctx, "j1")
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Spec.Labels) != n {
		t.Errorf("labels = %v, want %d (an update was lost)", got.Spec.Labels, n)
	}
	if _, total, err := s.ListJobs(ctx, store.ListJobsQuery{Labels: map[string]string{"k0": "v", fmt.Sprintf("k%d", n-1): "v"}}); err != nil || total != 1 {
		t.Errorf("ListJobs(by labels) = %d, %v; want 1", total, err)
	}
}

func testRacks(t *testing.T, open func(t *testing.T) store.Store) {
	ctx := context.Background()
	s := open(t)
	r2, r1 := rack("r2"), rack("r1")
	for _, r := range []store.Rack{r2, r1} {
		if err := s.PutRack(ctx, r); err != nil {
			t.Fatalf("PutRack(%s) = %v", r.ID, err)
		}
	}
	got, err := s.GetRack(ctx, "r1")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(r1, got); diff != "" {
		t.Errorf("GetRack (-want +got):\n%s", diff)
	}
	// An update replaces everything but CreatedAt.
	upd := r1
	upd.Location = "eu"
	upd.CreatedAt = at(99)
	upd.WorkerAddrs = []string{"10.0.0.1:7001", "[::1]:7001"}
	upd.Nodes = upd.Nodes[:1]
	if err := s.PutRack(ctx, upd); err != nil {
		t.Fatal(err)
	}
	upd.CreatedAt = r1.CreatedAt
	list, err := s.Racks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]store.Rack{upd, r2}, list); diff != "" {
		t.Errorf("Racks (-want +got):\n%s", diff)
	}
	// No nodes reported yet.
	bare := store.Rack{Rack: cosmic.Rack{ID: "r3", Type: cosmic.RackTypeServer}}
	if err := s.PutRack(ctx, bare); err != nil {
		t.Fatal(err)
	}
	if got, err := s.GetRack(ctx, "r3"); err != nil || len(got.Nodes) != 0 || got.ID != "r3" {
		t.Errorf("GetRack(r3) = %+v, %v", got, err)
	}
	wantErr(t, "PutRack(empty ID)", s.PutRack(ctx, store.Rack{}), cosmic.ErrInvalid)

	if err := s.DeleteRack(ctx, "r2"); err != nil {
		t.Fatal(err)
	}
	_, err = s.GetRack(ctx, "r2")
	wantErr(t, "GetRack(deleted)", err, cosmic.ErrNotFound)
	wantErr(t, "DeleteRack(deleted)", s.DeleteRack(ctx, "r2"), cosmic.ErrNotFound)
	if list, _ := s.Racks(ctx); len(list) != 2 {
		t.Errorf("Racks after delete: %d, want 2", len(list))
	}
}

func testUpdateCommits(t *testing.T, open func(t *testing.T) store.Store) {
	ctx := context.Background()
	s := open(t)
	if err := s.PutRack(ctx, rack("r1")); err != nil {
		t.Fatal(err)
	}
	j := job("j1", "t1", "u1", cosmic.StateQueued, "x", nil, 1, 1)
	mustCreate(t, s, j)
	// Claim the GPUs and move the job to pending, together.
	r := res("j1", 0, "r1", on("n1", 0, 1))
	err := s.Update(ctx, func(tx store.Tx) error {
		if err := tx.ClaimGPUs(ctx, r); err != nil {
			return err
		}
		j, err := tx.GetJob(ctx, "j1")
		if err != nil {
			return err
		}
		if err := j.SetState(cosmic.StatePending, nil, at(2)); err != nil {
			return err
		}
		if err := tx.PutJob(ctx, j); err != nil {
			return err
		}
		// The transaction reads its own writes.
		if got, err := tx.GetJob(ctx, "j1"); err != nil || got.Status.State != cosmic.StatePending {
			return fmt.Errorf("read own write: %v %v", got.Status.State, err)
		}
		if got, err := tx.JobReservations(ctx, "j1"); err != nil || len(got) != 1 {
			return fmt.Errorf("read own claim: %v %v", got, err)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Update = %v", err)
	}
	got, _ := s.GetJob(ctx, "j1")
	if got.Status.State != cosmic.StatePending || !got.UpdatedAt.Equal(at(2)) {
		t.Errorf("job after Update: %s at %v", got.Status.State, got.UpdatedAt)
	}
	wantReservations(t, s, []cosmic.Reservation{r})
}

func testUpdateRollsBack(t *testing.T, open func(t *testing.T) store.Store) {
	ctx := context.Background()
	s := open(t)
	if err := s.PutRack(ctx, rack("r1")); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, s, job("j1", "t1", "u1", cosmic.StateQueued, "x", nil, 1, 1))
	boom := errors.New("boom")
	err := s.Update(ctx, func(tx store.Tx) error {
		mustCreate(t, tx, job("j2", "t1", "u1", cosmic.StateQueued, "y", map[string]string{"a": "b"}, 1, 1))
		if err := tx.ClaimGPUs(ctx, res("j1", 0, "r1", on("n1", 0))); err != nil {
			return err
		}
		if err := tx.PutRack(ctx, rack("r2")); err != nil {
			return err
		}
		if err := tx.DeleteJob(ctx, "j1"); err != nil {
			return err
		}
		return fmt.Errorf("wrapped: %w", boom)
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Update = %v, want the function's error", err)
	}
	check := func(when string) {
		t.Helper()
		if _, err := s.GetJob(ctx, "j2"); !errors.Is(err, cosmic.ErrNotFound) {
			t.Errorf("%s: job created in the transaction: %v", when, err)
		}
		if _, err := s.GetJob(ctx, "j1"); err != nil {
			t.Errorf("%s: job deleted in the transaction: %v", when, err)
		}
		if _, err := s.GetRack(ctx, "r2"); !errors.Is(err, cosmic.ErrNotFound) {
			t.Errorf("%s: rack put in the transaction: %v", when, err)
		}
		if _, total, _ := s.ListJobs(ctx, store.ListJobsQuery{Labels: map[string]string{"a": "b"}}); total != 0 {
			t.Errorf("%s: labels of the rolled back job remain", when)
		}
		wantReservations(t, s, nil)
	}
	check("error")

	func() {
		defer func() {
			if p := recover(); p != "panic in tx" {
				t.Errorf("recovered %v, want the function's panic", p)
			}
		}()
		_ = s.Update(ctx, func(tx store.Tx) error {
			mustCreate(t, tx, job("j2", "t1", "u1", cosmic.StateQueued, "y", nil, 1, 1))
			panic("panic in tx")
		})
	}()
	check("panic")
	// The store still works after both.
	mustCreate(t, s, job("j3", "t1", "u1", cosmic.StateQueued, "z", nil, 1, 1))
}

func testUpdateJob(t *testing.T, open func(t *testing.T) store.Store) {
	ctx := context.Background()
	s := open(t)
	orig := job("j1", "t1", "u1", cosmic.StateQueued, "x", nil, 1, 1)
	mustCreate(t, s, orig)
	got, err := s.UpdateJob(ctx, "j1", func(j *cosmic.Job) error {
		return j.SetState(cosmic.StatePending, nil, at(5))
	})
	if err != nil {
		t.Fatalf("UpdateJob = %v", err)
	}
	stored, _ := s.GetJob(ctx, "j1")
	if diff := cmp.Diff(stored, got, jobOpts); diff != "" || got.Status.State != cosmic.StatePending {
		t.Errorf("UpdateJob returned %s; (-stored +returned):\n%s", got.Status.State, diff)
	}

	// The domain's error aborts the update and comes back unchanged.
	_, err = s.UpdateJob(ctx, "j1", func(j *cosmic.Job) error {
		j.Spec.Name = "changed"
		return j.SetState(cosmic.StateCreating, nil, at(6))
	})
	wantErr(t, "UpdateJob(illegal transition)", err, cosmic.ErrIllegalTransition)
	if after, _ := s.GetJob(ctx, "j1"); after.Spec.Name != "x" || after.Status.State != cosmic.StatePending {
		t.Errorf("failed UpdateJob changed the job: %q %s", after.Spec.Name, after.Status.State)
	}
	_, err = s.UpdateJob(ctx, "nope", func(*cosmic.Job) error { return nil })
	wantErr(t, "UpdateJob(missing)", err, cosmic.ErrNotFound)
	_, err = s.UpdateJob(ctx, "j1", func(j *cosmic.Job) error { j.ID = "j9"; return nil })
	wantErr(t, "UpdateJob(changed ID)", err, cosmic.ErrInvalid)
}

func testReopen(t *testing.T, open func(t *testing.T) store.Store) {
	ctx := context.Background()
	s := open(t)
	rackFixture(t, s)
	r := res("j1", 0, "r1", on("n1", 0, 1))
	if err := s.ClaimGPUs(ctx, r); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateTeam(ctx, cosmic.Team{Name: "t1"}); err != nil {
		t.Fatal(err)
	}
	want, _, err := s.ListJobs(ctx, store.ListJobsQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close = %v", err)
	}
	// Opening again (migrations already applied) twice in a row.
	for i := range 2 {
		s = open(t)
		got, total, err := s.ListJobs(ctx, store.ListJobsQuery{})
		if err != nil {
			t.Fatalf("reopen %d: ListJobs = %v", i, err)
		}
		if diff := cmp.Diff(want, got, jobOpts); diff != "" || total != 3 {
			t.Errorf("reopen %d: total %d; jobs (-before +after):\n%s", i, total, diff)
		}
		wantReservations(t, s, []cosmic.Reservation{r})
		if racks, _ := s.Racks(ctx); len(racks) != 2 {
			t.Errorf("reopen %d: %d racks, want 2", i, len(racks))
		}
		if teams, _ := s.ListTeams(ctx); len(teams) != 1 {
			t.Errorf("reopen %d: %d teams, want 1", i, len(teams))
		}
		wantErr(t, "ClaimGPUs(after reopen)", s.ClaimGPUs(ctx, res("j2", 0, "r1", on("n1", 1))), cosmic.ErrConflict)
		if err := s.Close(); err != nil {
			t.Fatalf("Close = %v", err)
		}
	}
}

func testConcurrentWrites(t *testing.T, open func(t *testing.T) store.Store) {
	ctx := context.Background()
	s := open(t)
	const writers, each = 4, 25
	var wg sync.WaitGroup
	errs := make(chan error, writers*each*2)
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				id := fmt.Sprintf("w%d-%d", w, i)
				if err := s.CreateJob(ctx, job(id, "t1", "u1", cosmic.StateQueued, id, map[string]string{"w": fmt.Sprint(w)}, i, i)); err != nil {
					errs <- err
				}
				if _, _, err := s.ListJobs(ctx, store.ListJobsQuery{Labels: map[string]string{"w": fmt.Sprint(w)}}); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("concurrent write: %v", err)
	}
	if _, total, err := s.ListJobs(ctx, store.ListJobsQuery{}); err != nil || total != writers*each {
		t.Errorf("ListJobs = total %d, %v; want %d", total, err, writers*each)
	}
}
