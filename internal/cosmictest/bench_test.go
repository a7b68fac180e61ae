package cosmictest

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cosmicac/cosmicac/internal/client"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/platform"
	"github.com/cosmicac/cosmicac/internal/store"
	"github.com/cosmicac/cosmicac/internal/store/postgres/pgtest"
)

// seedJobs bulk-inserts n settled jobs (stopped or failed: no GPUs) of the
// admin's team straight into the store, 1,000 a transaction.
func seedJobs(b *testing.B, e *Env, n int) []string {
	b.Helper()
	ids := make([]string, n)
	now := time.Now().Add(-time.Hour)
	for from := 0; from < n; from += 1000 {
		err := e.P.Store.Update(e.Ctx, func(tx store.Tx) error {
			for i := from; i < min(from+1000, n); i++ {
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
// ork → store) with 100,000 jobs in the store, next to the same reads
// straight from the store in the same run, on SQLite and on PostgreSQL
// (pgtest's, on loopback) one after the other.
//
//	go test -run '^$' -bench BenchmarkAPI -benchtime 2000x ./internal/cosmictest
func BenchmarkAPI(b *testing.B) {
	b.Run("sqlite", func(b *testing.B) { benchAPI(b, NewEnvWithin(b, 20*time.Minute), nil) })
	b.Run("postgres", func(b *testing.B) {
		dsn := pgtest.DSN(b)
		e := NewEnvWithin(b, 20*time.Minute, func(c *platform.Config) { c.Database = dsn })
		benchAPI(b, e, func() {
			// What autovacuum does after a bulk load, at once, so that
			// the planner knows the tables' sizes.
			conn, err := pgx.Connect(e.Ctx, dsn)
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close(e.Ctx)
			if _, err := conn.Exec(e.Ctx, "VACUUM ANALYZE"); err != nil {
				b.Fatal(err)
			}
		})
	})
}

// benchAPI seeds e's store, runs loaded (if not nil) and times each
// operation.
func benchAPI(b *testing.B, e *Env, loaded func()) {
	ids := seedJobs(b, e, 100_000)
	if loaded != nil {
		loaded()
	}
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
	created := 0
	b.Run("create/api", func(b *testing.B) {
		// Each create is admitted and queued (the rack is small): the cost
		// of validation, the store transaction and a scheduling pass.
		// The benchmark function runs more than once (b.N = 1 first):
		// the names go on across runs.
		timed(b, func(int) error {
			created++
			_, err := e.Client.CreateJob(e.Ctx, Container(fmt.Sprint("bench-", created), 8))
			return err
		})
	})
}
