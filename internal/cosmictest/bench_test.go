package cosmictest

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/client"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/store"
)

// seedJobs bulk-inserts n settled jobs (stopped or failed: no GPUs) of the
// admin's team straight into the store, in one transaction.
func seedJobs(b *testing.B, e *Env, n int) []string {
	b.Helper()
	ids := make([]string, n)
	now := time.Now().Add(-time.Hour)
	err := e.P.Store.Update(e.Ctx, func(tx store.Tx) error {
		for i := range n {
			spec := Container(fmt.Sprintf("seed-%d", i), 1+i%8)
			spec.Labels = map[string]string{"batch": fmt.Sprint(i % 100)}
			spec.Default()
			j := cosmic.NewJob(cosmic.NewJobID(), "admin", "default", spec, now.Add(time.Duration(i)*time.Millisecond))
			j.SetState(cosmic.StateQueued, nil, j.CreatedAt)
			state := cosmic.StateStopped
			if i%3 == 0 {
				state = cosmic.StateFailed
			}
			j.SetState(state, nil, j.CreatedAt)
			ids[i] = j.ID
			if err := tx.CreateJob(e.Ctx, j); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return ids
}

// timed runs op b.N times, timing each, and reports p50 and p99.
func timed(b *testing.B, op func(i int) error) {
	b.Helper()
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		t0 := time.Now()
		if err := op(i); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}

// BenchmarkAPI measures the whole path (HTTP client → app-node → fabric →
// ork → SQLite) with 100,000 jobs in the store, next to the same reads
// straight from the store in the same run.
//
//	go test -run '^$' -bench BenchmarkAPI -benchtime 2000x ./internal/cosmictest
func BenchmarkAPI(b *testing.B) {
	e := NewEnv(b)
	ids := seedJobs(b, e, 100_000)
	listOpts := client.ListOptions{States: []cosmic.State{cosmic.StateStopped, cosmic.StateFailed}, Size: 50}
	storeQuery := store.ListJobsQuery{Team: "default", States: listOpts.States, Size: 50}

	b.Run("get/api", func(b *testing.B) {
		timed(b, func(i int) error { _, err := e.Client.GetJob(e.Ctx, ids[i*7919%len(ids)]); return err })
	})
	b.Run("get/store", func(b *testing.B) {
		timed(b, func(i int) error { _, err := e.P.Store.GetJob(e.Ctx, ids[i*7919%len(ids)]); return err })
	})
	b.Run("list/api", func(b *testing.B) {
		timed(b, func(i int) error {
			o := listOpts
			o.Page = 1 + i%20
			_, err := e.Client.ListJobs(e.Ctx, o)
			return err
		})
	})
	b.Run("list/store", func(b *testing.B) {
		timed(b, func(i int) error {
			q := storeQuery
			q.Page = i % 20
			_, _, err := e.P.Store.ListJobs(e.Ctx, q)
			return err
		})
	})
	b.Run("create/api", func(b *testing.B) {
		// Each create is admitted and queued (the rack is small): the cost
		// of validation, the store transaction and a scheduling pass.
		timed(b, func(i int) error {
			_, err := e.Client.CreateJob(e.Ctx, Container(fmt.Sprint("bench-", i), 8))
			return err
		})
	})
}
