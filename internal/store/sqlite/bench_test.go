package sqlite

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
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

var bench struct {
	once  sync.Once
	dir   string
	s     *Store
	ids   []string
	build time.Duration
	err   error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if bench.s != nil {
		bench.s.Close()
	}
	if bench.dir != "" {
		os.RemoveAll(bench.dir)
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
				j := benchJob(r, i, t0)
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
