package sqlite

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/store"
)

// The benchmark database: benchJobs jobs of benchTeams teams, built once
// per run in a temporary directory.
const (
	benchJobs  = 100_000
	benchTeams = 20
	benchUsers = 200
)

type benchDB struct {
	once  sync.Once
	dir   string
	s     *Store
	ids   []string
	build time.Duration
	err   error
}

// parallelIDs numbers the jobs of create-parallel-8 across its runs.
var parallelIDs atomic.Int64

// bench is the mixed database of BenchmarkStore; broad holds benchJobs
// settled jobs of one team (BenchmarkStoreBroad).
var bench, broad benchDB

func TestMain(m *testing.M) {
	code := m.Run()
	for _, db := range []*benchDB{&bench, &broad} {
		if db.s != nil {
			db.s.Close()
		}
		if db.dir != "" {
			os.RemoveAll(db.dir)
		}
	}
	os.Exit(code)
}

// benchStates is the state mix of the benchmark jobs: most have ended,
// a third run.
var benchStates = []cosmic.State{
	cosmic.StateRunning, cosmic.StateRunning, cosmic.StateRunning, cosmic.StateStopped, cosmic.StateStopped,
	cosmic.StateFailed, cosmic.StateFailed, cosmic.StateQueued, cosmic.StatePending, cosmic.StateStarting,
}

func benchJob(r *rand.Rand, i int, t0 time.Time) cosmic.Job {
	id := fmt.Sprintf("%08x-0000-4000-8000-%012x", r.Uint32(), i)
	created := t0.Add(time.Duration(i) * time.Second)
	state := benchStates[r.IntN(len(benchStates))]
	j := cosmic.Job{
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
	return j
}

func benchStore(b *testing.B) *Store {
	return bench.open(b, func(r *rand.Rand, i int, t0 time.Time) cosmic.Job { return benchJob(r, i, t0) })
}

// broadJob is a job of the broad database: all of team "default", each
// stopped or failed, as the API benchmark (internal/cosmictest) seeds them.
func broadJob(r *rand.Rand, i int, t0 time.Time) cosmic.Job {
	j := benchJob(r, i, t0)
	j.Team, j.User = "default", "admin"
	j.Status.State = cosmic.StateStopped
	if i%3 == 0 {
		j.Status.State = cosmic.StateFailed
	}
	j.Status.History[3].State = j.Status.State
	return j
}

func broadStore(b *testing.B) *Store { return broad.open(b, broadJob) }

func (bench *benchDB) open(b *testing.B, job func(r *rand.Rand, i int, t0 time.Time) cosmic.Job) *Store {
	bench.once.Do(func() {
		bench.dir, bench.err = os.MkdirTemp("", "cosmicac-store-bench-")
		if bench.err != nil {
			return
		}
		bench.s, bench.err = Open(filepath.Join(bench.dir, "cosmicac.db"))
		if bench.err != nil {
			return
		}
		start := time.Now()
		r := rand.New(rand.NewPCG(1, 2))
		t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
		ctx := context.Background()
		bench.err = bench.s.Update(ctx, func(tx store.Tx) error {
			for i := range benchJobs {
				j := job(r, i, t0)
				if err := tx.CreateJob(ctx, j); err != nil {
					return err
				}
				bench.ids = append(bench.ids, j.ID)
			}
			return nil
		})
		bench.build = time.Since(start)
	})
	if bench.err != nil {
		b.Fatal(bench.err)
	}
	return bench.s
}

// reportLatency reports the median and the 99th percentile of ds.
func reportLatency(b *testing.B, ds []time.Duration) {
	slices.Sort(ds)
	b.ReportMetric(float64(ds[len(ds)/2])/1e3, "p50-µs")
	b.ReportMetric(float64(ds[len(ds)*99/100])/1e3, "p99-µs")
}

// BenchmarkStore measures create, get and list on a database of 100,000
// jobs.
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
	// Creates from 8 goroutines at once (PostgreSQL's benchmark has the
	// same): here they queue for the one writer.
	b.Run("create-parallel-8", func(b *testing.B) {
		var (
			mu sync.Mutex
			ds []time.Duration
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
	list := benchList(b, s)
	// The goal's case: one team's live jobs, newest first, a page of 50.
	list("list", func() store.ListJobsQuery {
		return store.ListJobsQuery{Team: fmt.Sprintf("team-%d", r.IntN(benchTeams)),
			States: []cosmic.State{cosmic.StateRunning, cosmic.StatePending}, Sort: store.SortCreatedAt, Order: store.OrderDesc,
			Page: r.IntN(5), Size: 50}
	})
	// Every job, newest first: the total counts all 100,000.
	list("list-all", func() store.ListJobsQuery {
		return store.ListJobsQuery{Page: r.IntN(5), Size: 50}
	})
	// A label selector and a user, by name.
	list("list-label-user", func() store.ListJobsQuery {
		return store.ListJobsQuery{User: fmt.Sprintf("user-%d", r.IntN(benchUsers)), Labels: map[string]string{"env": "prod"},
			Sort: store.SortName, Order: store.OrderAsc, Size: 50}
	})
	// A deep page of one team's jobs by update time.
	list("list-deep-page", func() store.ListJobsQuery {
		return store.ListJobsQuery{Team: fmt.Sprintf("team-%d", r.IntN(benchTeams)), Sort: store.SortUpdatedAt, Page: 80, Size: 50}
	})
}

// benchList returns a function that runs a sub-benchmark of ListJobs with
// the queries q returns, reporting p50 and p99.
func benchList(b *testing.B, s *Store) func(name string, q func() store.ListJobsQuery) {
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
			reportLatency(b, ds)
		})
	}
}

// BenchmarkStoreBroad measures lists whose filters match (nearly) every
// one of 100,000 jobs: all of one team, stopped or failed, the shape of
// the API benchmark (internal/cosmictest BenchmarkAPI).
func BenchmarkStoreBroad(b *testing.B) {
	s := broadStore(b)
	b.Logf("built %d jobs in %v", benchJobs, broad.build.Round(time.Millisecond))
	list := benchList(b, s)
	settled := []cosmic.State{cosmic.StateStopped, cosmic.StateFailed}
	var i int
	next := func() int { i++; return (i - 1) % 20 }
	// team + {stopped, failed}: all 100,000 match; pages 0-19 of 50.
	list("team-states", func() store.ListJobsQuery {
		return store.ListJobsQuery{Team: "default", States: settled, Page: next(), Size: 50}
	})
	// The same states without the team, oldest first.
	list("states-asc", func() store.ListJobsQuery {
		return store.ListJobsQuery{States: settled, Order: store.OrderAsc, Page: next(), Size: 50}
	})
	// One state (a third of the jobs).
	list("team-failed", func() store.ListJobsQuery {
		return store.ListJobsQuery{Team: "default", States: settled[1:], Page: next(), Size: 50}
	})
	// A state none has, next to one all have.
	list("team-stopped-running", func() store.ListJobsQuery {
		return store.ListJobsQuery{Team: "default", States: []cosmic.State{cosmic.StateRunning, cosmic.StateStopped}, Page: next(), Size: 50}
	})
	// By update time, the same broad filter.
	list("team-states-updated", func() store.ListJobsQuery {
		return store.ListJobsQuery{Team: "default", States: settled, Sort: store.SortUpdatedAt, Page: next(), Size: 50}
	})
	// A deep page: 20,000 jobs in.
	list("team-states-page-400", func() store.ListJobsQuery {
		return store.ListJobsQuery{Team: "default", States: settled, Page: 400, Size: 50}
	})
	// The last page: read from the end.
	list("team-states-last-page", func() store.ListJobsQuery {
		return store.ListJobsQuery{Team: "default", States: settled, Page: benchJobs/50 - 1, Size: 50}
	})
	// A label on top: the count cannot come from the counters.
	list("team-states-label", func() store.ListJobsQuery {
		return store.ListJobsQuery{Team: "default", States: settled, Labels: map[string]string{"env": "prod"}, Page: next(), Size: 50}
	})
}
