// Package sqlite is the embedded implementation of store.Store: one SQLite
// file, through the pure-Go driver modernc.org/sqlite (no cgo, no server).
//
// The database runs in WAL mode with synchronous=NORMAL, foreign keys on
// and a busy timeout. Writes go through a pool of one connection whose
// transactions begin IMMEDIATE, so writers queue in the process instead of
// failing with SQLITE_BUSY; reads use a separate pool of read-only
// connections and never wait for writers. A committed transaction survives
// the process being killed (SIGKILL); after a power loss or an OS crash the
// transactions of the last moments may be lost but the file stays
// consistent (docs/store.md).
//
// Importers: the CLI wiring (which opens it) and tests; everything else sees
// only store.Store.
package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"runtime"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/store"
	"github.com/cosmicac/cosmicac/internal/store/sqlstore"
)

// Store is a store.Store on one SQLite file. Its statements are
// sqlstore's; its own are the connections, the transactions and the
// migrations.
type Store struct {
	*sqlstore.Store

	w *sql.DB // writer: one connection, BEGIN IMMEDIATE
	r *sql.DB // readers: query_only connections

	// credential is the prepared statement of Credential.
	credential *sql.Stmt

	// unanalyzed counts the rows written since the planner's statistics
	// were last refreshed.
	unanalyzed atomic.Int64
}

// analyzeEvery is how many written rows (jobs and claims) make the store
// refresh the query planner's statistics. ANALYZE samples at most
// analysisLimit rows per index, so it takes milliseconds at any size.
const (
	analyzeEvery  = 1000
	analysisLimit = 1000
)

var (
	_ store.Store        = (*Store)(nil)
	_ store.APIKeys      = (*Store)(nil)
	_ store.Quotas       = (*Store)(nil)
	_ store.SignInLimits = (*Store)(nil)
)

// busyTimeout is how long a connection waits for a lock held by another
// process (or the WAL checkpointer) before SQLITE_BUSY.
const busyTimeout = 10 * time.Second

// Open opens (creating it if needed) the database file at path and brings
// its schema up to date. A database migrated by a newer binary is refused
// with an error wrapping store.ErrSchemaTooNew. The file, and its -wal and
// -shm beside it, are private (mode 0600; an older, looser one is
// tightened).
func Open(path string) (*Store, error) {
	if path == "" || strings.ContainsAny(path, "?#") {
		return nil, fmt.Errorf("open sqlite %q: path must be a file name without ? or #: %w", path, cosmic.ErrInvalid)
	}
	if err := createPrivate(path); err != nil {
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	common := url.Values{}
	common.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", busyTimeout.Milliseconds()))
	common.Add("_pragma", "foreign_keys(1)")

	wq := url.Values{"_txlock": {"immediate"}}
	for k, v := range common {
		wq[k] = append(wq[k], v...)
	}
	wq.Add("_pragma", "journal_mode(WAL)")
	wq.Add("_pragma", "synchronous(NORMAL)")
	wq.Add("_pragma", fmt.Sprintf("analysis_limit(%d)", analysisLimit))
	w, err := sql.Open("sqlite", path+"?"+wq.Encode())
	if err != nil {
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	w.SetConnMaxIdleTime(0)
	ctx := context.Background()
	if err := migrate(ctx, w); err != nil {
		w.Close()
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}

	rq := url.Values{}
	for k, v := range common {
		rq[k] = append(rq[k], v...)
	}
	rq.Add("_pragma", "query_only(1)")
	r, err := sql.Open("sqlite", path+"?"+rq.Encode())
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	n := max(2, runtime.GOMAXPROCS(0))
	r.SetMaxOpenConns(n)
	r.SetMaxIdleConns(n)
	r.SetConnMaxLifetime(0)
	r.SetConnMaxIdleTime(0)
	if err := r.PingContext(ctx); err != nil {
		r.Close()
		w.Close()
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	s := &Store{w: w, r: r}
	// The credential read runs on every API request: parsed once.
	if s.credential, err = r.PrepareContext(ctx, dialect.CredentialQuery()); err != nil {
		r.Close()
		w.Close()
		return nil, fmt.Errorf("open sqlite %s: prepare: %w", path, err)
	}
	s.Store = sqlstore.New(sqlstore.Config{
		Dialect:  dialect,
		Read:     querier{r},
		Write:    s.write,
		Snapshot: s.snapshot,
		Credential: func(ctx context.Context, hash []byte) sqlstore.Row {
			return s.credential.QueryRowContext(ctx, hash)
		},
	})
	s.analyze(ctx)
	return s, nil
}

// fileMode is the mode of the database's files.
const fileMode fs.FileMode = 0o600

// createPrivate makes the database file exist, mode 0600, before SQLite
// opens it: SQLite creates the -wal and -shm files with the main file's
// mode, and would create the main file itself 0644. A looser file (of an
// older version) is tightened, with its -wal and -shm.
func createPrivate(name string) error {
	f, err := os.OpenFile(name, os.O_RDONLY|os.O_CREATE, fileMode)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if fi.Mode().Perm()&0o077 == 0 {
		return nil
	}
	if err := f.Chmod(fileMode); err != nil {
		return fmt.Errorf("make private: %w", err)
	}
	for _, suffix := range []string{"-wal", "-shm"} {
		if err := os.Chmod(name+suffix, fileMode); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("make private: %w", err)
		}
	}
	return nil
}

// analyze refreshes the statistics the query planner uses to choose, for
// example, between a label's index and a team's. It is an optimisation: a
// failure only leaves the old statistics.
func (s *Store) analyze(ctx context.Context) {
	s.unanalyzed.Store(0)
	_, _ = s.w.ExecContext(ctx, "ANALYZE")
}

// Close refreshes the query planner's statistics and closes the database.
func (s *Store) Close() error {
	_, errOpt := s.w.Exec("PRAGMA optimize")
	s.credential.Close()
	errR := s.r.Close()
	errW := s.w.Close()
	if err := errors.Join(errR, errW); err != nil {
		return fmt.Errorf("close sqlite: %w", err)
	}
	_ = errOpt // statistics are an optimisation; a closed or busy DB is not an error
	return nil
}

// IntegrityCheck runs PRAGMA integrity_check and returns an error holding
// its findings unless the database is sound.
func (s *Store) IntegrityCheck(ctx context.Context) error {
	rows, err := s.r.QueryContext(ctx, "PRAGMA integrity_check")
	if err != nil {
		return fmt.Errorf("integrity check: %w", err)
	}
	defer rows.Close()
	var found []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			return fmt.Errorf("integrity check: %w", err)
		}
		found = append(found, line)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("integrity check: %w", err)
	}
	if len(found) != 1 || found[0] != "ok" {
		return fmt.Errorf("integrity check: %s", strings.Join(found, "; "))
	}
	return nil
}

// write runs fn in a write transaction on the single writer connection
// (sqlstore.Config.Write), and refreshes the planner's statistics after
// every analyzeEvery rows of jobs and claims written.
func (s *Store) write(ctx context.Context, fn func(t *sqlstore.Tx) error) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin write: %w", err)
	}
	committed := false
	defer func() {
		if !committed {
			_ = tx.Rollback() // the error that got us here is the one to report
		}
	}()
	t := sqlstore.NewTx(querier{tx}, dialect)
	if err := fn(t); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	committed = true
	if s.unanalyzed.Add(int64(t.Writes())) >= analyzeEvery {
		s.analyze(ctx)
	}
	return nil
}

// snapshot runs fn in one read transaction of the read pool
// (sqlstore.Config.Snapshot).
func (s *Store) snapshot(ctx context.Context, fn func(t *sqlstore.Tx) error) error {
	tx, err := s.r.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin read: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // read-only
	return fn(sqlstore.NewTx(querier{tx}, dialect))
}

// dialect is SQLite's: its constraint codes, bytes for JSON, and a join on
// job_labels per label filter.
var dialect = &sqlstore.Dialect{
	IsUnique:     isUnique,
	IsForeignKey: isForeignKey,
	JSON:         func(b []byte) any { return b },
	StringAgg:    "group_concat",
	Listing:      sqlstore.ListingDialect{Labels: labelJoins, States: statesIn},
}

// labelJoins filters by labels with a join on job_labels' primary key
// (job_id, key) each: at most one row per job, so no duplicates; the
// planner starts from the label's (key, value) index or from the jobs'
// when that is narrower.
func labelJoins(p *sqlstore.Params, labels map[string]string) (join, cond string, err error) {
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		fmt.Fprintf(&b, " JOIN job_labels l%d ON l%d.job_id = jobs.id AND l%d.key = %s AND l%d.value = %s", i, i, i, p.Add(k), i, p.Add(labels[k]))
	}
	return b.String(), "", nil
}

// statesIn is "col IN (…)".
func statesIn(p *sqlstore.Params, col string, states []cosmic.State) string {
	var b strings.Builder
	b.WriteString(col + " IN (")
	for i, st := range states {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(p.Add(string(st)))
	}
	b.WriteString(")")
	return b.String()
}

// querier is a sqlstore.Querier on *sql.DB or *sql.Tx.
type querier struct {
	q interface {
		ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
		QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
		QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	}
}

func (q querier) Exec(ctx context.Context, query string, args ...any) (sqlstore.Result, error) {
	res, err := q.q.ExecContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return res, nil
}

func (q querier) Query(ctx context.Context, query string, args ...any) (sqlstore.Rows, error) {
	rows, err := q.q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return sqlRows{rows}, nil
}

func (q querier) QueryRow(ctx context.Context, query string, args ...any) sqlstore.Row {
	return q.q.QueryRowContext(ctx, query, args...)
}

// sqlRows is *sql.Rows as sqlstore.Rows (whose Close returns nothing: its
// error is Err's).
type sqlRows struct{ *sql.Rows }

func (r sqlRows) Close() { _ = r.Rows.Close() }

// sqliteCode is the extended result code of a driver error, or 0.
func sqliteCode(err error) int {
	var e *sqlite.Error
	if errors.As(err, &e) {
		return e.Code()
	}
	return 0
}

func isUnique(err error) bool {
	c := sqliteCode(err)
	return c == sqlite3.SQLITE_CONSTRAINT_UNIQUE || c == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY
}

func isForeignKey(err error) bool { return sqliteCode(err) == sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY }

//go:embed migrations/*.sql
var migrationFiles embed.FS

// migrations lists the embedded migrations (sqlstore.Migrations).
func migrations() ([]sqlstore.Migration, error) { return sqlstore.Migrations(migrationFiles) }

// migrate applies, in one transaction and in order, the migrations the
// database has not recorded.
func migrate(ctx context.Context, db *sql.DB) error {
	ms, err := migrations()
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	// Foreign keys are off while migrating, so that a migration may rebuild
	// a table that others refer to (SQLite's documented procedure: dropping
	// the old table would otherwise cascade); they are checked before the
	// commit. The pragma is a no-op inside a transaction, so it is set on
	// the connection first.
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "PRAGMA foreign_keys = OFF"); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer conn.ExecContext(context.WithoutCancel(ctx), "PRAGMA foreign_keys = ON") //nolint:errcheck // checked by Open's ping of the same pool
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("migrate: begin: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // no-op after commit
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    INTEGER PRIMARY KEY,
		name       TEXT NOT NULL,
		applied_at INTEGER NOT NULL)`); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if err := sqlstore.Apply(ctx, querier{tx}, ms); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if err := foreignKeyCheck(ctx, tx); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("migrate: commit: %w", err)
	}
	return nil
}

// foreignKeyCheck fails if a row refers to one that does not exist.
func foreignKeyCheck(ctx context.Context, tx *sql.Tx) error {
	rows, err := tx.QueryContext(ctx, "PRAGMA foreign_key_check")
	if err != nil {
		return err
	}
	defer rows.Close()
	if rows.Next() {
		var (
			table, parent string
			rowid         sql.NullInt64
			fk            int
		)
		if err := rows.Scan(&table, &rowid, &parent, &fk); err != nil {
			return err
		}
		return fmt.Errorf("row %d of %s refers to a missing row of %s", rowid.Int64, table, parent)
	}
	return rows.Err()
}
