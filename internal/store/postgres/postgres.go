// Package postgres is the PostgreSQL implementation of store.Store, for
// several app-nodes or orks sharing one database (DESIGN §8), through pgx.
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
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/store"
)

// Store is a store.Store on a PostgreSQL database (the schema first in the
// connections' search_path).
type Store struct {
	pool *pgxpool.Pool
	// retries counts the transactions run again after a serialization
	// failure or a deadlock.
	retries atomic.Int64
	// signIns counts TakeSignInAttempt's calls, to prune now and then.
	signIns atomic.Int64
}

var (
	_ store.Store   = (*Store)(nil)
	_ store.APIKeys = (*Store)(nil)
	_ store.Quotas  = (*Store)(nil)
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
	return &Store{pool: pool}, nil
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

// Update runs fn in one SERIALIZABLE transaction (store.Store), again
// from the start when the database aborts it for a serialization failure
// or a deadlock, up to maxAttempts times. fn's own error is never retried.
func (s *Store) Update(ctx context.Context, fn func(tx store.Tx) error) error {
	return s.retry(ctx, func(tx pgx.Tx, t *txn) error {
		t.q = &recorder{q: tx, t: t}
		return fn(t)
	})
}

// write runs fn in a SERIALIZABLE transaction, retried as Update's.
func (s *Store) write(ctx context.Context, fn func(tx querier) error) error {
	return s.retry(ctx, func(tx pgx.Tx, t *txn) error {
		return fn(&recorder{q: tx, t: t})
	})
}

func (s *Store) retry(ctx context.Context, fn func(tx pgx.Tx, t *txn) error) error {
	for attempt := 1; ; attempt++ {
		t := &txn{}
		err := s.attempt(ctx, t, fn)
		if err == nil || !t.mustRetry && !retryable(err) {
			return err
		}
		if t.mustRetry && !retryable(err) {
			// fn saw a serialization failure and went on: its result
			// rests on a snapshot the database gave up; never commit it.
			err = errors.Join(err, t.failure)
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
func (s *Store) attempt(ctx context.Context, t *txn, fn func(tx pgx.Tx, t *txn) error) error {
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
	if err := fn(tx, t); err != nil {
		return err
	}
	if t.mustRetry {
		return t.failure
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	committed = true
	return nil
}

// snapshot runs fn in a read-only REPEATABLE READ transaction: every read
// of it sees one snapshot.
func (s *Store) snapshot(ctx context.Context, fn func(t *txn) error) error {
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return fmt.Errorf("begin read: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // read-only
	t := &txn{}
	t.q = &recorder{q: tx, t: t}
	return fn(t)
}

// read is the Tx of the pool: each call a transaction of its own.
func (s *Store) read() *txn {
	t := &txn{}
	t.q = &recorder{q: s.pool, t: t}
	return t
}

// UpdateJob reads, changes and writes one job in one transaction.
func (s *Store) UpdateJob(ctx context.Context, id string, fn func(j *cosmic.Job) error) (cosmic.Job, error) {
	var out cosmic.Job
	err := s.Update(ctx, func(tx store.Tx) error {
		j, err := tx.GetJob(ctx, id)
		if err != nil {
			return err
		}
		if err := fn(&j); err != nil {
			return err
		}
		if j.ID != id {
			return fmt.Errorf("update job %s: the function changed its ID to %q: %w", id, j.ID, cosmic.ErrInvalid)
		}
		if err := tx.PutJob(ctx, j); err != nil {
			return err
		}
		out = j
		return nil
	})
	return out, err
}

// CreateJob implements store.Tx in a transaction of its own.
func (s *Store) CreateJob(ctx context.Context, j cosmic.Job) error {
	return s.Update(ctx, func(tx store.Tx) error { return tx.CreateJob(ctx, j) })
}

// GetJob implements store.Tx.
func (s *Store) GetJob(ctx context.Context, id string) (cosmic.Job, error) {
	return s.read().GetJob(ctx, id)
}

// PutJob implements store.Tx in a transaction of its own.
func (s *Store) PutJob(ctx context.Context, j cosmic.Job) error {
	return s.Update(ctx, func(tx store.Tx) error { return tx.PutJob(ctx, j) })
}

// ListJobs implements store.Tx; the page and the total come from one
// REPEATABLE READ snapshot, in two round trips: BEGIN with the first
// statement (the count, or the page when the count is not from the
// counters), then the other with COMMIT.
func (s *Store) ListJobs(ctx context.Context, q store.ListJobsQuery) ([]cosmic.Job, int, error) {
	l, err := newListing(q)
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
	if l.counted {
		sql, args := l.countSQL()
		b.Queue(sql, args...).QueryRow(func(row pgx.Row) error { return row.Scan(&total) })
	} else {
		sql, args, _ := l.pageSQL(0)
		b.Queue(sql, args...).Query(func(rows pgx.Rows) (err error) { jobs, err = collectJobs(rows); return err })
	}
	if err := conn.SendBatch(ctx, &b).Close(); err != nil {
		return nil, 0, fmt.Errorf("list jobs: %w", wrap(err))
	}
	b = pgx.Batch{}
	switch {
	case l.counted:
		sql, args, empty := l.pageSQL(total)
		if !empty {
			b.Queue(sql, args...).Query(func(rows pgx.Rows) (err error) { jobs, err = collectJobs(rows); return err })
		} else {
			jobs = []cosmic.Job{}
		}
	default:
		if n, ok := l.total(len(jobs)); ok {
			total = int64(n)
			break
		}
		sql, args := l.countSQL()
		b.Queue(sql, args...).QueryRow(func(row pgx.Row) error { return row.Scan(&total) })
	}
	b.Queue("COMMIT")
	if err := conn.SendBatch(ctx, &b).Close(); err != nil {
		return nil, 0, fmt.Errorf("list jobs: %w", wrap(err))
	}
	return jobs, int(total), nil
}

// DeleteJob implements store.Tx in a transaction of its own.
func (s *Store) DeleteJob(ctx context.Context, id string) error {
	return s.Update(ctx, func(tx store.Tx) error { return tx.DeleteJob(ctx, id) })
}

// ClaimGPUs implements store.Tx in a transaction of its own.
func (s *Store) ClaimGPUs(ctx context.Context, r cosmic.Reservation) error {
	return s.Update(ctx, func(tx store.Tx) error { return tx.ClaimGPUs(ctx, r) })
}

// Reservations implements store.Tx, from one snapshot.
func (s *Store) Reservations(ctx context.Context) (out []cosmic.Reservation, err error) {
	err = s.snapshot(ctx, func(t *txn) error {
		out, err = t.Reservations(ctx)
		return err
	})
	return out, err
}

// JobReservations implements store.Tx, from one snapshot.
func (s *Store) JobReservations(ctx context.Context, jobID string) (out []cosmic.Reservation, err error) {
	err = s.snapshot(ctx, func(t *txn) error {
		out, err = t.JobReservations(ctx, jobID)
		return err
	})
	return out, err
}

// ReleaseGPUs implements store.Tx in a transaction of its own.
func (s *Store) ReleaseGPUs(ctx context.Context, jobID string, replica int) error {
	return s.Update(ctx, func(tx store.Tx) error { return tx.ReleaseGPUs(ctx, jobID, replica) })
}

// PutRack implements store.Tx in a transaction of its own.
func (s *Store) PutRack(ctx context.Context, r store.Rack) error {
	return s.Update(ctx, func(tx store.Tx) error { return tx.PutRack(ctx, r) })
}

// GetRack implements store.Tx.
func (s *Store) GetRack(ctx context.Context, id string) (store.Rack, error) {
	return s.read().GetRack(ctx, id)
}

// Racks implements store.Tx.
func (s *Store) Racks(ctx context.Context) ([]store.Rack, error) { return s.read().Racks(ctx) }

// DeleteRack implements store.Tx in a transaction of its own.
func (s *Store) DeleteRack(ctx context.Context, id string) error {
	return s.Update(ctx, func(tx store.Tx) error { return tx.DeleteRack(ctx, id) })
}

// querier is what *pgxpool.Pool and pgx.Tx share.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// recorder is a querier that notes in its txn any serialization failure a
// statement meets, so that the transaction is retried even when the
// caller's function handles the error and goes on.
type recorder struct {
	q querier
	t *txn
}

func (r *recorder) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	tag, err := r.q.Exec(ctx, sql, args...)
	r.t.note(err)
	return tag, err
}

func (r *recorder) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	rows, err := r.q.Query(ctx, sql, args...)
	r.t.note(err)
	if err != nil {
		return rows, err
	}
	return &recordedRows{Rows: rows, t: r.t}, nil
}

func (r *recorder) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return recordedRow{row: r.q.QueryRow(ctx, sql, args...), t: r.t}
}

type recordedRows struct {
	pgx.Rows
	t *txn
}

func (r *recordedRows) Err() error {
	err := r.Rows.Err()
	r.t.note(err)
	return err
}

type recordedRow struct {
	row pgx.Row
	t   *txn
}

func (r recordedRow) Scan(dest ...any) error {
	err := r.row.Scan(dest...)
	r.t.note(err)
	return err
}

// txn implements store.Tx on a querier: a write transaction, a read
// snapshot, or the pool.
type txn struct {
	q querier
	// mustRetry: a statement met a serialization failure (failure).
	mustRetry bool
	failure   error
}

func (t *txn) note(err error) {
	if retryable(err) && !t.mustRetry {
		t.mustRetry, t.failure = true, err
	}
}

// savepoint runs fn so that its writes all happen or none does, also
// inside a larger transaction that goes on after fn fails (PostgreSQL
// aborts a transaction at its first error unless it rolls back to a
// savepoint).
func (t *txn) savepoint(ctx context.Context, fn func() error) error {
	if _, err := t.q.Exec(ctx, "SAVEPOINT sp"); err != nil {
		return fmt.Errorf("savepoint: %w", err)
	}
	if err := fn(); err != nil {
		if _, rerr := t.q.Exec(ctx, "ROLLBACK TO SAVEPOINT sp; RELEASE SAVEPOINT sp"); rerr != nil {
			return errors.Join(err, fmt.Errorf("rollback to savepoint: %w", rerr))
		}
		return err
	}
	if _, err := t.q.Exec(ctx, "RELEASE SAVEPOINT sp"); err != nil {
		return fmt.Errorf("release savepoint: %w", err)
	}
	return nil
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

// nanos and fromNanos store times as Unix nanoseconds, the zero time as 0.
func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

//go:embed migrations/*.sql
var migrationFiles embed.FS

type migration struct {
	version int
	name    string
	sql     string
}

// migrations lists the embedded migrations, NNNN_name.sql, by version: the
// same numbers and names as SQLite's (TestMigrationsMatch).
func migrations() ([]migration, error) {
	names, err := fs.Glob(migrationFiles, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	var ms []migration
	for _, n := range names {
		base := path.Base(n)
		num, name, ok := strings.Cut(strings.TrimSuffix(base, ".sql"), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("migration %s: name must be NNNN_name.sql", base)
		}
		b, err := migrationFiles.ReadFile(n)
		if err != nil {
			return nil, err
		}
		ms = append(ms, migration{version: v, name: name, sql: string(b)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].version < ms[j].version })
	for i := 1; i < len(ms); i++ {
		if ms[i].version == ms[i-1].version {
			return nil, fmt.Errorf("migration %d_%s: version %d is also %s's", ms[i].version, ms[i].name, ms[i].version, ms[i-1].name)
		}
	}
	return ms, nil
}

// migrate applies, in one transaction and in order, the migrations the
// database has not recorded. An advisory lock (per schema) makes processes
// that open the same database at once migrate one after the other.
func migrate(ctx context.Context, pool *pgxpool.Pool) error {
	ms, err := migrations()
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	latest := 0
	if len(ms) > 0 {
		latest = ms[len(ms)-1].version
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
	applied := map[int]bool{}
	cur := 0
	rows, err := tx.Query(ctx, "SELECT version FROM schema_migrations")
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			rows.Close()
			return fmt.Errorf("migrate: %w", err)
		}
		applied[v] = true
		cur = max(cur, v)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if cur > latest {
		return fmt.Errorf("migrate: database at version %d, this binary knows up to %d: %w", cur, latest, store.ErrSchemaTooNew)
	}
	for _, m := range ms {
		if applied[m.version] {
			continue
		}
		if _, err := tx.Exec(ctx, m.sql); err != nil {
			return fmt.Errorf("migrate: apply %04d_%s: %w", m.version, m.name, err)
		}
		if _, err := tx.Exec(ctx, "INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, $2, $3)",
			m.version, m.name, time.Now().UnixNano()); err != nil {
			return fmt.Errorf("migrate: record %04d_%s: %w", m.version, m.name, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("migrate: commit: %w", err)
	}
	return nil
}
