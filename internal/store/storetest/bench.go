package storetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/store"
)

// The benchmark database of every store's BenchmarkStore: BenchJobs jobs
// of BenchTeams teams and BenchUsers users, made by BenchJob.
const (
	BenchJobs  = 100_000
	BenchTeams = 20
	BenchUsers = 200
)

// benchStates is the state mix of the benchmark jobs: most have ended,
// a third run.
var benchStates = []cosmic.State{
	cosmic.StateRunning, cosmic.StateRunning, cosmic.StateRunning, cosmic.StateStopped, cosmic.StateStopped,
	cosmic.StateFailed, cosmic.StateFailed, cosmic.StateQueued, cosmic.StatePending, cosmic.StateStarting,
}

// BenchJob is the benchmark job number i, of random owner, state and
// labels from r, created i seconds after t0. A store fills its benchmark
// database with BenchJobs of them from rand.NewPCG(1, 2) and t0 = 2025-01-01
// UTC, so that every store holds the same jobs.
func BenchJob(r *rand.Rand, i int, t0 time.Time) cosmic.Job {
	id := fmt.Sprintf("%08x-0000-4000-8000-%012x", r.Uint32(), i)
	created := t0.Add(time.Duration(i) * time.Second)
	state := benchStates[r.IntN(len(benchStates))]
	return cosmic.Job{
		ID: id, CreatedAt: created, UpdatedAt: created.Add(time.Duration(r.IntN(3600)) * time.Second),
		User: fmt.Sprintf("user-%d", r.IntN(BenchUsers)), Team: fmt.Sprintf("team-%d", r.IntN(BenchTeams)),
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

// BenchFill writes the benchmark database into s: job(r, i, t0) for every
// i < BenchJobs, with r from rand.NewPCG(1, 2) and t0 = 2025-01-01 UTC
// (job is BenchJob, or a variant of it), batch jobs a transaction. It
// returns their IDs.
func BenchFill(ctx context.Context, s store.Store, job func(r *rand.Rand, i int, t0 time.Time) cosmic.Job, batch int) ([]string, error) {
	var ids []string
	r := rand.New(rand.NewPCG(1, 2))
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := 0; i < BenchJobs; i += batch {
		err := s.Update(ctx, func(tx store.Tx) error {
			for k := i; k < min(i+batch, BenchJobs); k++ {
				j := job(r, k, t0)
				if err := tx.CreateJob(ctx, j); err != nil {
					return err
				}
				ids = append(ids, j.ID)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return ids, nil
}

// ReportLatency reports the median and the 99th percentile of ds.
func ReportLatency(b *testing.B, ds []time.Duration) {
	slices.Sort(ds)
	b.ReportMetric(float64(ds[len(ds)/2])/1e3, "p50-µs")
	b.ReportMetric(float64(ds[len(ds)*99/100])/1e3, "p99-µs")
}

// parallelIDs numbers the jobs of create-parallel-8 across its runs.
var parallelIDs atomic.Int64

// Bench measures create, get and list on s, which holds the benchmark
// database; ids are its jobs' IDs. retries, when not nil, counts the
// transactions s ran again (PostgreSQL's), reported per create of
// create-parallel-8.
func Bench(b *testing.B, s store.Store, ids []string, retries func() int64) {
	ctx := context.Background()
	r := rand.New(rand.NewPCG(3, 4))
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

	b.Run("create", func(b *testing.B) {
		var ds []time.Duration
		for b.Loop() {
			j := BenchJob(r, BenchJobs+len(ds)+r.IntN(1<<30), t0)
			start := time.Now()
			if err := s.CreateJob(ctx, j); err != nil {
				b.Fatal(err)
			}
			ds = append(ds, time.Since(start))
		}
		ReportLatency(b, ds)
	})
	// Creates from 8 goroutines at once (as several app-nodes' would be):
	// in SQLite they queue for the one writer; in PostgreSQL jobs of the
	// same owner and state update one job_counts row, so some
	// transactions are retried.
	b.Run("create-parallel-8", func(b *testing.B) {
		var (
			mu     sync.Mutex
			ds     []time.Duration
			before int64
		)
		if retries != nil {
			before = retries()
		}
		b.SetParallelism(max(1, 8/runtime.GOMAXPROCS(0)))
		start := time.Now()
		b.RunParallel(func(pb *testing.PB) {
			r := rand.New(rand.NewPCG(uint64(parallelIDs.Add(1)), 9))
			var mine []time.Duration
			for pb.Next() {
				j := BenchJob(r, 1<<31+int(parallelIDs.Add(1)), t0)
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
		if retries != nil {
			b.ReportMetric(float64(retries()-before)/float64(max(1, len(ds))), "retries/create")
		}
		ReportLatency(b, ds)
	})
	b.Run("get", func(b *testing.B) {
		var ds []time.Duration
		for b.Loop() {
			id := ids[r.IntN(len(ids))]
			start := time.Now()
			if _, err := s.GetJob(ctx, id); err != nil {
				b.Fatal(err)
			}
			ds = append(ds, time.Since(start))
		}
		ReportLatency(b, ds)
	})
	list := BenchList(b, s)
	// The goal's case: one team's live jobs, newest first, a page of 50.
	list("list", func() store.ListJobsQuery {
		return store.ListJobsQuery{Team: fmt.Sprintf("team-%d", r.IntN(BenchTeams)),
			States: []cosmic.State{cosmic.StateRunning, cosmic.StatePending}, Sort: store.SortCreatedAt, Order: store.OrderDesc,
			Page: r.IntN(5), Size: 50}
	})
	// Every job, newest first: the total counts all 100,000.
	list("list-all", func() store.ListJobsQuery {
		return store.ListJobsQuery{Page: r.IntN(5), Size: 50}
	})
	// A label selector and a user, by name.
	list("list-label-user", func() store.ListJobsQuery {
		return store.ListJobsQuery{User: fmt.Sprintf("user-%d", r.IntN(BenchUsers)), Labels: map[string]string{"env": "prod"},
			Sort: store.SortName, Order: store.OrderAsc, Size: 50}
	})
	// A deep page of one team's jobs by update time.
	list("list-deep-page", func() store.ListJobsQuery {
		return store.ListJobsQuery{Team: fmt.Sprintf("team-%d", r.IntN(BenchTeams)), Sort: store.SortUpdatedAt, Page: 80, Size: 50}
	})
}

// BenchList returns a function that runs a sub-benchmark of ListJobs with
// the queries q returns, reporting p50 and p99.
func BenchList(b *testing.B, s store.Store) func(name string, q func() store.ListJobsQuery) {
	ctx := context.Background()
	return func(name string, q func() store.ListJobsQuery) {
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
			ReportLatency(b, ds)
		})
	}
}
