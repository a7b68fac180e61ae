package postgres

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cosmicac/cosmicac/internal/store/postgres/pgtest"
	"github.com/cosmicac/cosmicac/internal/store/storetest"
)

// bench is the database of BenchmarkStore.
var bench struct {
	once  sync.Once
	s     *Store
	ids   []string
	build time.Duration
	err   error
}

// benchStore is the database of BenchmarkStore, storetest.BenchJob's jobs,
// built once per run (or found).
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
		if bench.ids, bench.err = pgx.CollectRows(rows, pgx.RowTo[string]); bench.err != nil || len(bench.ids) == storetest.BenchJobs {
			return
		}
		bench.ids = nil
		start := time.Now()
		bench.ids, bench.err = storetest.BenchFill(ctx, bench.s, storetest.BenchJob, 1000)
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

// BenchmarkStore is internal/store/sqlite's BenchmarkStore on PostgreSQL
// (both are storetest.Bench): the same 100,000 jobs (the same generator and
// seed), the same queries, and creates from several goroutines at once,
// with the retries they cost. Run both with
//
//	go test -run '^$' -bench BenchmarkStore$ -benchtime 2000x ./internal/store/sqlite/ ./internal/store/postgres/
//
// The server is pgtest's (fsync off: the figures are the database's CPU
// and the round trips, not the disk's; COSMICAC_PG_FSYNC=1 turns it on), or the database of
// $COSMICAC_BENCH_POSTGRES (a DSN) when set: one that already holds the
// 100,000 jobs is used as it is, an empty one is filled.
func BenchmarkStore(b *testing.B) {
	s := benchStore(b)
	b.Logf("built %d jobs in %v", storetest.BenchJobs, bench.build.Round(time.Millisecond))
	storetest.Bench(b, s, bench.ids, s.Retries)
}
