package postgres

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/store"
	"github.com/cosmicac/cosmicac/internal/store/postgres/pgtest"
)

// BenchmarkStore is internal/store/sqlite's BenchmarkStore on PostgreSQL:
// the same 100,000 jobs (the same generator and seed), the same queries,
// plus creates from several goroutines at once. Run both with
//
//	go test -run '^$' -bench BenchmarkStore$ -benchtime 2000x ./internal/store/sqlite/ ./internal/store/postgres/
//
// The server is pgtest's (fsync off: the figures are the database's CPU
// and the round trips, not the disk's; COSMICAC_PG_FSYNC=1 turns it on), or the database of
// $COSMICAC_BENCH_POSTGRES (a DSN) when set: one that already holds the
// 100,000 jobs is used as it is, an empty one is filled.
// parallelIDs numbers the jobs of create-parallel-8 across its runs.
var parallelIDs atomic.Int64

const (
	benchJobs  = 100_000
	benchTeams = 20
	benchUsers = 200
)

var bench struct {
	once  sync.Once
	s     *Store
	ids   []string
	build time.Duration
	err   error
}

// benchStates is the state mix of the benchmark jobs (sqlite's).
var benchStates = []cosmic.State{
	cosmic.StateRunning, cosmic.StateRunning, cosmic.StateRunning, cosmic.StateStopped, cosmic.StateStopped,
	cosmic.StateFailed, cosmic.StateFailed, cosmic.StateQueued, cosmic.StatePending, cosmic.StateStarting,
}

// benchJob is sqlite's benchJob.
func benchJob(r *rand.Rand, i int, t0 time.Time) cosmic.Job {
	id := fmt.Sprintf("%08x-0000-4000-8000-%012x", r.Uint32(), i)
	created := t0.Add(time.Duration(i) * time.Second)
	state := benchStates[r.IntN(len(benchStates))]
	return cosmic.Job{
		ID: id, CreatedAt: created, UpdatedAt: created.Add(time.Duration(r.IntN(3600)) * time.Second),
		User: fmt.Sprintf("user-%d", r.IntN(benchUsers)), Team: fmt.Sprintf("team-%d", r.IntN(benchTeams)),
		Spec: cosmic.Spec{
			Type: cosmic.TypeGPUContainer, Name: fmt.Sprintf("job-%d", r.IntN(5000)), Location: "us", Image: "ubuntu:24.04",
			Labels: map[string]string{"env": []string{"prod", "dev", "test"}[r.IntN(3)], "project": fmt.Sprintf("p%d", r.IntN(50))},
			DiskGB: 100, Command: []string{"python", "train.py", "--epochs", "10"},
			Resources: cosmic.Resources{GPU: 8, GPUModel: "GH100_H100_SXM5_80GB", CPU: 64, Memory: 512},
			EnvVars:   []cosmic.EnvVar{{Name: "WANDB_PROJECT", Value: "llm"}},
		},
		Status: cosmic.Status{State: state, History: []cosmic.StatusChange{
			{State: cosmic.StateCreating, At: created}, {State: cosmic.StateQueued, At: created},
			{State: cosmic.StatePending, At: created}, {State: state, At: created},
		}},
	}
}

func benchStore(b *testing.B) *Store {
	bench.once.Do(func() {
		ctx := context.Background()
		dsn := os.Getenv("COSMICAC_BENCH_POSTGRES")
		if dsn == "" {
			dsn = pgtest.DSN(b)
		}
		bench.s, bench.err = Open(ctx, dsn)
		if bench.err != nil {
			return
		}
		rows, _ := bench.s.pool.Query(ctx, "SELECT id FROM jobs WHERE created_at < $1", time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
		if bench.ids, bench.err = pgx.CollectRows(rows, pgx.RowTo[string]); bench.err != nil || len(bench.ids) == benchJobs {
			return
		}
		bench.ids = nil
		start := time.Now()
		r := rand.New(rand.NewPCG(1, 2))
		t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
		for i := 0; i < benchJobs && bench.err == nil; i += 1000 {
			bench.err = bench.s.Update(ctx, func(tx store.Tx) error {
				for k := i; k < i+1000; k++ {
					j := benchJob(r, k, t0)
					if err := tx.CreateJob(ctx, j); err != nil {
						return err
					}
					bench.ids = append(bench.ids, j.ID)
				}
				return nil
			})
		}
		// What autovacuum would do after a bulk load, at once.
		if bench.err == nil {
			_, bench.err = bench.s.pool.Exec(ctx, "VACUUM ANALYZE")
		}
		bench.build = time.Since(start)
	})
	if bench.err != nil {
		b.Fatal(bench.err)
	}
	return bench.s
}

func reportLatency(b *testing.B, ds []time.Duration) {
	slices.Sort(ds)
	b.ReportMetric(float64(ds[len(ds)/2])/1e3, "p50-µs")
	b.ReportMetric(float64(ds[len(ds)*99/100])/1e3, "p99-µs")
}

func BenchmarkStore(b *testing.B) {
	s := benchStore(b)
	b.Logf("built %d jobs in %v", benchJobs, bench.build.Round(time.Millisecond))
	ctx := context.Background()
	r := rand.New(rand.NewPCG(3, 4))
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

	b.Run("create", func(b *testing.B) {
		var ds []time.Duration
		for b.Loop() {
			j := benchJob(r, benchJobs+len(ds)+r.IntN(1<<30), t0)
			start := time.Now()
			if err := s.CreateJob(ctx, j); err != nil {
				b.Fatal(err)
			}
			ds = append(ds, time.Since(start))
		}
		reportLatency(b, ds)
	})
	// Creates from 8 goroutines at once (as several app-nodes' would be):
	// jobs of the same owner and state update one job_counts row, so some
	// transactions are retried.
	b.Run("create-parallel-8", func(b *testing.B) {
		var (
			mu      sync.Mutex
			ds      []time.Duration
			retries = s.Retries()
		)
		b.SetParallelism(max(1, 8/runtime.GOMAXPROCS(0)))
		start := time.Now()
		b.RunParallel(func(pb *testing.PB) {
			r := rand.New(rand.NewPCG(uint64(parallelIDs.Add(1)), 9))
			var mine []time.Duration
			for pb.Next() {
				j := benchJob(r, 1<<31+int(parallelIDs.Add(1)), t0)
				t := time.Now()
				if err := s.CreateJob(ctx, j); err != nil {
					b.Error(err)
					return
				}
				mine = append(mine, time.Since(t))
			}
			mu.Lock()
			ds = append(ds, mine...)
			mu.Unlock()
		})
		b.ReportMetric(float64(len(ds))/time.Since(start).Seconds(), "creates/s")
		b.ReportMetric(float64(s.Retries()-retries)/float64(max(1, len(ds))), "retries/create")
		reportLatency(b, ds)
	})
	b.Run("get", func(b *testing.B) {
		var ds []time.Duration
		for b.Loop() {
			id := bench.ids[r.IntN(len(bench.ids))]
			start := time.Now()
			if _, err := s.GetJob(ctx, id); err != nil {
				b.Fatal(err)
			}
			ds = append(ds, time.Since(start))
		}
		reportLatency(b, ds)
	})
	list := func(name string, q func() store.ListJobsQuery) {
		b.Run(name, func(b *testing.B) {
			var ds []time.Duration
			for b.Loop() {
				q := q()
				start := time.Now()
				jobs, total, err := s.ListJobs(ctx, q)
				if err != nil {
					b.Fatal(err)
				}
				ds = append(ds, time.Since(start))
				if total < len(jobs) || (total > q.Size && len(jobs) != q.Size) {
					b.Fatalf("%d jobs of %d", len(jobs), total)
				}
			}
			reportLatency(b, ds)
		})
	}
	list("list", func() store.ListJobsQuery {
		return store.ListJobsQuery{Team: fmt.Sprintf("team-%d", r.IntN(benchTeams)),
			States: []cosmic.State{cosmic.StateRunning, cosmic.StatePending}, Sort: store.SortCreatedAt, Order: store.OrderDesc,
			Page: r.IntN(5), Size: 50}
	})
	list("list-all", func() store.ListJobsQuery {
		return store.ListJobsQuery{Page: r.IntN(5), Size: 50}
	})
	list("list-label-user", func() store.ListJobsQuery {
		return store.ListJobsQuery{User: fmt.Sprintf("user-%d", r.IntN(benchUsers)), Labels: map[string]string{"env": "prod"},
			Sort: store.SortName, Order: store.OrderAsc, Size: 50}
	})
	list("list-deep-page", func() store.ListJobsQuery {
		return store.ListJobsQuery{Team: fmt.Sprintf("team-%d", r.IntN(benchTeams)), Sort: store.SortUpdatedAt, Page: 80, Size: 50}
	})
}
