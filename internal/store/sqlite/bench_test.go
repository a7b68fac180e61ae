package sqlite

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/store"
	"github.com/cosmicac/cosmicac/internal/store/storetest"
)

// The benchmark databases, built once per run in a temporary directory.
type benchDB struct {
	once  sync.Once
	dir   string
	s     *Store
	ids   []string
	build time.Duration
	err   error
}

// bench is the mixed database of BenchmarkStore; broad holds BenchJobs
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

// benchStore is the database of BenchmarkStore, storetest.BenchJob's jobs.
func benchStore(b *testing.B) *Store { return bench.open(b, storetest.BenchJob) }

// broadJob is a job of the broad database: all of team "default", each
// stopped or failed, as the API benchmark (internal/cosmictest) seeds them.
func broadJob(r *rand.Rand, i int, t0 time.Time) cosmic.Job {
	j := storetest.BenchJob(r, i, t0)
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
		// One transaction: SQLite's writer takes it whole.
		bench.ids, bench.err = storetest.BenchFill(context.Background(), bench.s, job, storetest.BenchJobs)
		bench.build = time.Since(start)
	})
	if bench.err != nil {
		b.Fatal(bench.err)
	}
	return bench.s
}

// BenchmarkStore measures create, get and list on a database of 100,000
// jobs (storetest.Bench; PostgreSQL's BenchmarkStore is the same).
func BenchmarkStore(b *testing.B) {
	s := benchStore(b)
	b.Logf("built %d jobs in %v", storetest.BenchJobs, bench.build.Round(time.Millisecond))
	storetest.Bench(b, s, bench.ids, nil)
}

// BenchmarkStoreBroad measures lists whose filters match (nearly) every
// one of 100,000 jobs: all of one team, stopped or failed, the shape of
// the API benchmark (internal/cosmictest BenchmarkAPI).
func BenchmarkStoreBroad(b *testing.B) {
	s := broadStore(b)
	b.Logf("built %d jobs in %v", storetest.BenchJobs, broad.build.Round(time.Millisecond))
	list := storetest.BenchList(b, s)
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
		return store.ListJobsQuery{Team: "default", States: settled, Page: storetest.BenchJobs/50 - 1, Size: 50}
	})
	// A label on top: the count cannot come from the counters.
	list("team-states-label", func() store.ListJobsQuery {
		return store.ListJobsQuery{Team: "default", States: settled, Labels: map[string]string{"env": "prod"}, Page: next(), Size: 50}
	})
}
