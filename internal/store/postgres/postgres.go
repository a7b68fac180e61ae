// Package postgres is the PostgreSQL implementation of store.Store, for
// several app-nodes or orks sharing one database (docs/store.md), through pgx.
// It passes the same conformance suite as the embedded SQLite store
// (store/storetest).
//
// Every write transaction runs at SERIALIZABLE and is retried, whole, on a
// serialization failure or a deadlock (SQLSTATE 40001, 40P01), so that the
// function given to Update may run more than once. The UNIQUE constraint on
// (rack, node, gpu_index) refuses a GPU claimed twice, and triggers a node
// taken past its CPU or memory, as in SQLite. Reads outside a transaction
// run at READ COMMITTED; ListJobs reads its page and its total in one
// REPEATABLE READ snapshot. Times are bigint nanoseconds, as in SQLite.
// The schema's migrations (migrations/) carry SQLite's numbers and names
// and end in the same tables and columns (TestSchemasMatch). See
// docs/store.md, "PostgreSQL".
//
// Importers: the CLI wiring (which opens it) and tests; everything else sees
// only store.Store.
package postgres

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/store"
	"github.com/cosmicac/cosmicac/internal/store/sqlstore"
)

// Store is a store.Store on a PostgreSQL database (the schema first in the
// connections' search_path). Its statements are sqlstore's; its own are the
// pool, the SERIALIZABLE transactions and their retries, the batched
// ListJobs and the migrations.
type Store struct {
	*sqlstore.Store

	pool *pgxpool.Pool
	// retries counts the transactions run again after a serialization
	// failure or a deadlock.
	retries atomic.Int64
}

var (
	_ store.Store        = (*Store)(nil)
	_ store.APIKeys      = (*Store)(nil)
	_ store.Quotas       = (*Store)(nil)
	_ store.SignInLimits = (*Store)(nil)
)

// connectTimeout bounds each new connection unless the DSN sets one.
const connectTimeout = 15 * time.Second

// idleInTxTimeout is how long the server lets a transaction of the store
// wait for its client: the store's transactions never wait on anything but
// the database, so longer means the client is gone.
const (
	idleInTxParam   = "idle_in_transaction_session_timeout"
	idleInTxTimeout = "5s"
)

// maxAttempts is how many times a write transaction is tried before its
// serialization failure is returned.
const maxAttempts = 30

// Open connects to the database of dsn (a postgres:// URL or a key=value
// string, as libpq takes) and brings its schema up to date. A DSN that
// does not parse is ErrInvalid; a database migrated by a newer binary is
// refused with an error wrapping store.ErrSchemaTooNew.
func Open(ctx context.Context, dsn string) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("open postgres: %w: %w", err, cosmic.ErrInvalid)
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		// A database that does not answer fails the start, instead of
		// the OS's TCP timeout (minutes); connect_timeout= overrides it.
		cfg.ConnConfig.ConnectTimeout = connectTimeout
	}
	if _, ok := cfg.ConnConfig.RuntimeParams[idleInTxParam]; !ok {
		// A client that vanished mid-transaction (its host gone, its
		// network cut) would hold its row locks for as long as the
		// server keeps its connection: the lease row, so that no other
		// ork could take over. The server ends such a transaction after
		// idleInTxTimeout; the DSN may set another (?idle_in_transaction_session_timeout=30s).
		cfg.ConnConfig.RuntimeParams[idleInTxParam] = idleInTxTimeout
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open postgres: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("open postgres %s:%d/%s: %w", cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Database, err)
	}
	if err := migrate(ctx, pool); err != nil {
		pool.Close()
		return nil, fmt.Errorf("open postgres: %w", err)
	}
	s := &Store{pool: pool}
	s.Store = sqlstore.New(sqlstore.Config{Dialect: dialect, Read: adapter{pool}, Write: s.write, Snapshot: s.snapshot})
	return s, nil
}

// ParseDSN checks that dsn parses as Open needs, without connecting; its
// error wraps ErrInvalid (pgx's message masks the password).
func ParseDSN(dsn string) error {
	if _, err := pgxpool.ParseConfig(dsn); err != nil {
		return fmt.Errorf("postgres: %w: %w", err, cosmic.ErrInvalid)
	}
	return nil
}

// Retries says how many write transactions were run again after a
// serialization failure or a deadlock since Open: a measure of contention.
func (s *Store) Retries() int64 { return s.retries.Load() }

// Close closes the connections. Closing twice is harmless; calls after
// Close fail.
func (s *Store) Close() error {
	s.pool.Close()
	return nil
}

// write runs fn in one SERIALIZABLE transaction (sqlstore.Config.Write,
// and so Update), again from the start when the database aborts it for a
// serialization failure or a deadlock, up to maxAttempts times. fn's own
// error is never retried.
func (s *Store) write(ctx context.Context, fn func(t *sqlstore.Tx) error) error {
	for attempt := 1; ; attempt++ {
		m := &retryMark{}
		err := s.attempt(ctx, m, fn)
		if err == nil || !m.mustRetry && !retryable(err) {
			return err
		}
		if m.mustRetry && !retryable(err) {
			// fn saw a serialization failure and went on: its result
			// rests on a snapshot the database gave up; never commit it.
			err = errors.Join(err, m.failure)
		}
		s.retries.Add(1)
		if attempt == maxAttempts {
			return fmt.Errorf("transaction aborted %d times by concurrent ones: %w", attempt, err)
		}
		// Jittered backoff, growing to about 50 ms.
		d := time.Duration(rand.Int64N(int64(time.Millisecond) << min(attempt, 6)))
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(d):
		}
	}
}

// attempt is one try of a write transaction.
func (s *Store) attempt(ctx context.Context, m *retryMark, fn func(t *sqlstore.Tx) error) error {
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.Serializable})
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	committed := false
	defer func() {
		if !committed {
			_ = tx.Rollback(context.WithoutCancel(ctx)) // the error that got us here is the one to report
		}
	}()
	if err := fn(sqlstore.NewTx(adapter{&recorder{q: tx, m: m}}, dialect)); err != nil {
		return err
	}
	if m.mustRetry {
		return m.failure
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	committed = true
	return nil
}

// snapshot runs fn in a read-only REPEATABLE READ transaction: every read
// of it sees one snapshot (sqlstore.Config.Snapshot).
func (s *Store) snapshot(ctx context.Context, fn func(t *sqlstore.Tx) error) error {
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return fmt.Errorf("begin read: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // read-only
	return fn(sqlstore.NewTx(adapter{tx}, dialect))
}

// ListJobs implements store.Tx; the page and the total come from one
// REPEATABLE READ snapshot, in two round trips: BEGIN with the first
// statement (the count, or the page when the count is not from the
// counters), then the other with COMMIT.
func (s *Store) ListJobs(ctx context.Context, q store.ListJobsQuery) ([]cosmic.Job, int, error) {
	l, err := sqlstore.NewListing(dialect, q)
	if err != nil {
		return nil, 0, err
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, 0, fmt.Errorf("list jobs: %w", err)
	}
	// A connection released inside the transaction (an error) is closed
	// by the pool, not reused.
	defer conn.Release()
	const begin = "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY"
	var (
		total int64
		jobs  []cosmic.Job
		b     pgx.Batch
	)
	b.Queue(begin)
	if l.Counted() {
		sql, args := l.CountSQL()
		b.Queue(sql, args...).QueryRow(func(row pgx.Row) error { return row.Scan(&total) })
	} else {
		sql, args, _ := l.PageSQL(0)
		b.Queue(sql, args...).Query(func(rows pgx.Rows) (err error) { jobs, err = collectJobs(rows); return err })
	}
	if err := conn.SendBatch(ctx, &b).Close(); err != nil {
		return nil, 0, fmt.Errorf("list jobs: %w", wrap(err))
	}
	b = pgx.Batch{}
	switch {
	case l.Counted():
		sql, args, empty := l.PageSQL(total)
		if !empty {
			b.Queue(sql, args...).Query(func(rows pgx.Rows) (err error) { jobs, err = collectJobs(rows); return err })
		} else {
			jobs = []cosmic.Job{}
		}
	default:
		if n, ok := l.Total(len(jobs)); ok {
			total = int64(n)
			break
		}
		sql, args := l.CountSQL()
		b.Queue(sql, args...).QueryRow(func(row pgx.Row) error { return row.Scan(&total) })
	}
	b.Queue("COMMIT")
	if err := conn.SendBatch(ctx, &b).Close(); err != nil {
		return nil, 0, fmt.Errorf("list jobs: %w", wrap(err))
	}
	return jobs, int(total), nil
}

func collectJobs(rows pgx.Rows) ([]cosmic.Job, error) {
	jobs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (cosmic.Job, error) { return sqlstore.ScanJob(r) })
	if jobs == nil {
		jobs = []cosmic.Job{}
	}
	return jobs, err
}

// Reservations implements store.Tx, from one snapshot.
func (s *Store) Reservations(ctx context.Context) (out []cosmic.Reservation, err error) {
	err = s.snapshot(ctx, func(t *sqlstore.Tx) error {
		out, err = t.Reservations(ctx)
		return err
	})
	return out, err
}

// JobReservations implements store.Tx, from one snapshot.
func (s *Store) JobReservations(ctx context.Context, jobID string) (out []cosmic.Reservation, err error) {
	err = s.snapshot(ctx, func(t *sqlstore.Tx) error {
		out, err = t.JobReservations(ctx, jobID)
		return err
	})
	return out, err
}

// dialect is PostgreSQL's: its SQLSTATEs, text for JSON, row locks, the
// server's clock, and labels and states as one parameter each.
var dialect = &sqlstore.Dialect{
	IsUnique:     isUnique,
	IsForeignKey: isForeignKey,
	Unstorable:   unstorable,
	Raised:       func(err error) bool { return pgCode(err) == codeRaiseException },
	JSON:         func(b []byte) any { return string(b) },
	StringAgg:    "string_agg",
	ForShare:     " FOR SHARE",
	ForUpdate:    " FOR UPDATE",
	Bigint:       "::bigint",
	// The server's clock in Unix nanoseconds.
	NowSQL:  "(extract(epoch from clock_timestamp()) * 1000000000)::bigint",
	Listing: sqlstore.ListingDialect{Labels: labelsContain, States: stateAny, MergeStates: true},
}

// labelsContain filters by labels with one containment test on the spec's
// labels, which the GIN index jobs_labels (migration 0008) answers;
// job_labels, SQLite's way, is kept in step but a join there is a hash join
// over every job of a common label (docs/benchmarks.md).
func labelsContain(p *sqlstore.Params, labels map[string]string) (join, cond string, err error) {
	b, err := json.Marshal(labels)
	if err != nil {
		return "", "", err
	}
	return "", "jobs.spec->'labels' @> " + p.Add(string(b)) + "::jsonb", nil
}

// stateAny is "col = ANY($N::text[])".
func stateAny(p *sqlstore.Params, col string, states []cosmic.State) string {
	arg := make([]string, len(states))
	for i, s := range states {
		arg[i] = string(s)
	}
	return col + " = ANY(" + p.Add(arg) + "::text[])"
}

// querier is what *pgxpool.Pool and pgx.Tx share.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// adapter is a querier as a sqlstore.Querier.
type adapter struct{ q querier }

func (a adapter) Exec(ctx context.Context, sql string, args ...any) (sqlstore.Result, error) {
	tag, err := a.q.Exec(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return commandTag{tag}, nil
}

func (a adapter) Query(ctx context.Context, sql string, args ...any) (sqlstore.Rows, error) {
	return a.q.Query(ctx, sql, args...)
}

func (a adapter) QueryRow(ctx context.Context, sql string, args ...any) sqlstore.Row {
	return a.q.QueryRow(ctx, sql, args...)
}

// commandTag is a pgconn.CommandTag as a sqlstore.Result.
type commandTag struct{ pgconn.CommandTag }

func (t commandTag) RowsAffected() (int64, error) { return t.CommandTag.RowsAffected(), nil }

// recorder is a querier that notes in its retryMark any serialization
// failure a statement meets, so that the transaction is retried even when
// the caller's function handles the error and goes on.
type recorder struct {
	q querier
	m *retryMark
}

func (r *recorder) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	tag, err := r.q.Exec(ctx, sql, args...)
	r.m.note(err)
	return tag, err
}

func (r *recorder) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	rows, err := r.q.Query(ctx, sql, args...)
	r.m.note(err)
	if err != nil {
		return rows, err
	}
	return &recordedRows{Rows: rows, m: r.m}, nil
}

func (r *recorder) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return recordedRow{row: r.q.QueryRow(ctx, sql, args...), m: r.m}
}

type recordedRows struct {
	pgx.Rows
	m *retryMark
}

func (r *recordedRows) Err() error {
	err := r.Rows.Err()
	r.m.note(err)
	return err
}

type recordedRow struct {
	row pgx.Row
	m   *retryMark
}

func (r recordedRow) Scan(dest ...any) error {
	err := r.row.Scan(dest...)
	r.m.note(err)
	return err
}

// retryMark notes that a statement of a write transaction met a
// serialization failure (failure): the transaction must be retried.
type retryMark struct {
	mustRetry bool
	failure   error
}

func (m *retryMark) note(err error) {
	if retryable(err) && !m.mustRetry {
		m.mustRetry, m.failure = true, err
	}
}

// SQLSTATEs the store maps (PostgreSQL's appendix A).
const (
	codeUniqueViolation      = "23505"
	codeForeignKeyViolation  = "23503"
	codeSerializationFailure = "40001"
	codeDeadlockDetected     = "40P01"
	codeRaiseException       = "P0001"
	// Text PostgreSQL cannot store: a NUL byte, bytes that are not UTF-8,
	// or a \u0000 escape in jsonb.
	codeUntranslatable  = "22P05"
	codeBadEncoding     = "22021"
	codeInvalidJSONText = "22P02"
)

func pgCode(err error) string {
	var e *pgconn.PgError
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

func retryable(err error) bool {
	c := pgCode(err)
	return c == codeSerializationFailure || c == codeDeadlockDetected
}

func isUnique(err error) bool     { return pgCode(err) == codeUniqueViolation }
func isForeignKey(err error) bool { return pgCode(err) == codeForeignKeyViolation }

// unstorable reports text PostgreSQL refuses (SQLite keeps any bytes): it
// is the caller's ErrInvalid.
func unstorable(err error) bool {
	switch pgCode(err) {
	case codeUntranslatable, codeBadEncoding, codeInvalidJSONText:
		return true
	}
	return false
}

// wrap adds ErrInvalid to an error of text PostgreSQL cannot store.
func wrap(err error) error {
	if unstorable(err) {
		return fmt.Errorf("%w: %w", err, cosmic.ErrInvalid)
	}
	return err
}

//go:embed migrations/*.sql
var migrationFiles embed.FS

// migrations lists the embedded migrations (sqlstore.Migrations): the same
// numbers and names as SQLite's (TestMigrationsMatch).
func migrations() ([]sqlstore.Migration, error) { return sqlstore.Migrations(migrationFiles) }

// migrate applies, in one transaction and in order, the migrations the
// database has not recorded. An advisory lock (per schema) makes processes
// that open the same database at once migrate one after the other.
func migrate(ctx context.Context, pool *pgxpool.Pool) error {
	ms, err := migrations()
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("migrate: begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	var schema *string
	if err := tx.QueryRow(ctx, "SELECT current_schema()").Scan(&schema); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if schema == nil {
		return fmt.Errorf("migrate: no schema to create tables in (search_path names none that exists): %w", cosmic.ErrInvalid)
	}
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext('cosmicac.migrate.' || $1::text))", *schema); err != nil {
		return fmt.Errorf("migrate: lock: %w", err)
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    integer PRIMARY KEY,
		name       text NOT NULL,
		applied_at bigint NOT NULL)`); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if err := sqlstore.Apply(ctx, adapter{tx}, ms); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("migrate: commit: %w", err)
	}
	return nil
}
