package joblog_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/cosmicac/cosmicac/internal/joblog"
)

// A ring keeps the last max records, oldest first, per job, however many
// went through it; a ring of no size keeps none.
func TestRingKeepsTheLast(t *testing.T) {
	lines := func(recs []joblog.Record) []string {
		var out []string
		for _, r := range recs {
			out = append(out, r.Line)
		}
		return out
	}
	r := joblog.NewRing(3)
	for i := range 8 {
		job := "a"
		if i%2 == 1 {
			job = "b"
		}
		r.Emit(joblog.Record{JobID: job, Line: fmt.Sprint(i)})
		var want []string // the last three lines emitted, those of job a
		for j := max(0, i-2); j <= i; j++ {
			if j%2 == 0 {
				want = append(want, fmt.Sprint(j))
			}
		}
		if got := lines(r.Job("a")); !slices.Equal(got, want) {
			t.Fatalf("after %d records, job a: %q, want %q", i+1, got, want)
		}
	}
	empty := joblog.NewRing(0)
	empty.Emit(joblog.Record{JobID: "a"})
	if got := empty.Job("a"); len(got) != 0 {
		t.Errorf("a ring of no size kept %v", got)
	}
}

// BenchmarkRingEmit is an emit into a full ring of the platform's size
// (platform.go: 10,000 records).
//
//	go test -run '^$' -bench RingEmit ./internal/joblog/
func BenchmarkRingEmit(b *testing.B) {
	r := joblog.NewRing(10000)
	rec := joblog.Record{JobID: "job", Source: joblog.SourceApplication, Stream: "stderr", Line: "srv  log_server_r: request: POST /v1/chat/completions 127.0.0.1 200"}
	for range 10000 {
		r.Emit(rec)
	}
	for b.Loop() {
		r.Emit(rec)
	}
}
