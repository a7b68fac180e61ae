package postgres

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	_ "modernc.org/sqlite" // to read the SQLite store's schema

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/store"
	"github.com/cosmicac/cosmicac/internal/store/postgres/pgtest"
	"github.com/cosmicac/cosmicac/internal/store/sqlite"
)

// TestMigrationsMatch: the PostgreSQL migrations carry the numbers and
// names of SQLite's, one for one, so that a version means the same schema
// in both.
func TestMigrationsMatch(t *testing.T) {
	ms, err := migrations()
	if err != nil {
		t.Fatal(err)
	}
	var pg []string
	for _, m := range ms {
		pg = append(pg, filepath.Base(m.Name))
	}
	files, err := filepath.Glob("../sqlite/migrations/*.sql")
	if err != nil || len(files) == 0 {
		t.Fatalf("SQLite migrations: %v, %v", files, err)
	}
	var lite []string
	for _, f := range files {
		_, name, _ := strings.Cut(strings.TrimSuffix(filepath.Base(f), ".sql"), "_")
		lite = append(lite, name)
	}
	pgFiles, _ := filepath.Glob("migrations/*.sql")
	for i := range pgFiles {
		pgFiles[i] = filepath.Base(pgFiles[i])
	}
	for i := range files {
		files[i] = filepath.Base(files[i])
	}
	if diff := cmp.Diff(files, pgFiles); diff != "" {
		t.Errorf("migration files differ (-sqlite +postgres):\n%s", diff)
	}
	if diff := cmp.Diff(lite, pg); diff != "" {
		t.Errorf("migrations differ (-sqlite +postgres):\n%s", diff)
	}
}

// schema is the tables of a database, each with its column names sorted,
// and its named indexes and triggers.
type schema struct {
	Tables   map[string][]string
	Indexes  []string
	Triggers []string
}

// TestSchemasMatch migrates an empty SQLite database and an empty
// PostgreSQL schema and compares what they end with: the same tables with
// the same columns, the same indexes and triggers by name. Types differ by
// dialect (bigint for INTEGER, jsonb for JSON text, bytea for BLOB).
func TestSchemasMatch(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "cosmicac.db")
	ls, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	ls.Close()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	lite := schema{Tables: map[string][]string{}}
	rows, err := db.QueryContext(ctx, "SELECT type, name, coalesce(sql, '') FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY name")
	if err != nil {
		t.Fatal(err)
	}
	var tables []string
	for rows.Next() {
		var typ, name, def string
		if err := rows.Scan(&typ, &name, &def); err != nil {
			t.Fatal(err)
		}
		switch typ {
		case "table":
			tables = append(tables, name)
		case "index":
			if def != "" { // not an automatic index of a constraint
				lite.Indexes = append(lite.Indexes, name)
			}
		case "trigger":
			lite.Triggers = append(lite.Triggers, name)
		}
	}
	rows.Close()
	for _, tb := range tables {
		cols, err := db.QueryContext(ctx, "SELECT name FROM pragma_table_info(?)", tb)
		if err != nil {
			t.Fatal(err)
		}
		for cols.Next() {
			var c string
			if err := cols.Scan(&c); err != nil {
				t.Fatal(err)
			}
			lite.Tables[tb] = append(lite.Tables[tb], c)
		}
		cols.Close()
		sort.Strings(lite.Tables[tb])
	}

	dsn := pgtest.DSN(t)
	ps, err := Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer ps.Close()
	pg := schema{Tables: map[string][]string{}}
	q := func(query string, scan func(a, b string)) {
		t.Helper()
		rows, err := ps.pool.Query(ctx, query)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var a, b string
			if err := rows.Scan(&a, &b); err != nil {
				t.Fatal(err)
			}
			scan(a, b)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
	}
	q(`SELECT table_name::text, column_name::text FROM information_schema.columns
		WHERE table_schema = current_schema() ORDER BY 1, 2`, func(tb, c string) { pg.Tables[tb] = append(pg.Tables[tb], c) })
	// Indexes that back no constraint (primary keys and UNIQUE columns
	// are constraints in both).
	q(`SELECT i.indexname::text, '' FROM pg_indexes i WHERE i.schemaname = current_schema()
		AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conname = i.indexname AND c.connamespace = current_schema()::regnamespace)
		ORDER BY 1`, func(name, _ string) { pg.Indexes = append(pg.Indexes, name) })
	q(`SELECT tgname::text, '' FROM pg_trigger WHERE NOT tgisinternal
		AND tgrelid IN (SELECT oid FROM pg_class WHERE relnamespace = current_schema()::regnamespace) ORDER BY 1`,
		func(name, _ string) { pg.Triggers = append(pg.Triggers, name) })
	// Indexes of PostgreSQL's own, each said why in its migration.
	pg.Indexes = slices.DeleteFunc(pg.Indexes, func(name string) bool { return postgresOnlyIndexes[name] })
	slices.Sort(lite.Indexes)
	slices.Sort(lite.Triggers)
	if len(lite.Tables) < 15 || len(lite.Indexes) < 20 || len(lite.Triggers) < 5 {
		t.Fatalf("SQLite schema read wrong: %d tables, %d indexes, %d triggers", len(lite.Tables), len(lite.Indexes), len(lite.Triggers))
	}
	t.Logf("%d tables, %d indexes, %d triggers", len(pg.Tables), len(pg.Indexes), len(pg.Triggers))
	if diff := cmp.Diff(lite, pg); diff != "" {
		t.Errorf("schemas differ (-sqlite +postgres):\n%s", diff)
	}
}

// postgresOnlyIndexes are the indexes SQLite has no counterpart of.
var postgresOnlyIndexes = map[string]bool{
	"jobs_labels": true, // 0008: GIN on spec->'labels', for label selectors
}

// TestSchemaTooNew: a database migrated by a newer binary is refused, and
// left as it is; one at this binary's version opens again.
func TestSchemaTooNew(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.DSN(t)
	s, err := Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	ms, _ := migrations()
	latest := ms[len(ms)-1].Version
	var n, top int
	if err := s.pool.QueryRow(ctx, "SELECT count(*), max(version) FROM schema_migrations").Scan(&n, &top); err != nil {
		t.Fatal(err)
	}
	if n != len(ms) || top != latest {
		t.Errorf("schema_migrations: %d rows up to %d, want %d up to %d", n, top, len(ms), latest)
	}
	if _, err := s.pool.Exec(ctx, "INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, 'future', 0)", latest+1); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := Open(ctx, dsn); !errors.Is(err, store.ErrSchemaTooNew) {
		t.Fatalf("Open(newer schema) = %v, want ErrSchemaTooNew", err)
	}
}

// TestConcurrentOpen: processes starting at once against one new database
// migrate it once (the advisory lock), and all open it.
func TestConcurrentOpen(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.DSN(t)
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() {
			s, err := Open(ctx, dsn)
			if err == nil {
				s.Close()
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("Open %d = %v", i, err)
		}
	}
}

// TestOpenBadDSN: a DSN that does not parse is ErrInvalid and says so
// without the password; a schema that does not exist is refused at open.
func TestOpenBadDSN(t *testing.T) {
	ctx := context.Background()
	_, err := Open(ctx, "postgres://u:secret@host:notaport/db")
	if !errors.Is(err, cosmic.ErrInvalid) {
		t.Errorf("Open(bad port) = %v, want ErrInvalid", err)
	}
	if err != nil && strings.Contains(err.Error(), "secret") {
		t.Errorf("error shows the password: %v", err)
	}
	dsn := pgtest.DSN(t)
	i := strings.LastIndex(dsn, "search_path=")
	if _, err := Open(ctx, dsn[:i]+"search_path=nosuchschema"); !errors.Is(err, cosmic.ErrInvalid) {
		t.Errorf("Open(missing schema) = %v, want ErrInvalid", err)
	}
}

// TestRetryNoLostUpdate: two UpdateJob calls read the same job before
// either writes; SERIALIZABLE aborts one, which runs again from the start
// and sees the other's change: both changes are kept.
func TestRetryNoLostUpdate(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	j := cosmic.Job{ID: "j1", Team: "t", User: "u", Spec: cosmic.Spec{Name: "x", Labels: map[string]string{}}, Status: cosmic.Status{State: cosmic.StateQueued}}
	if err := s.CreateJob(ctx, j); err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		calls = map[string]int{}
		read  sync.WaitGroup
		wg    sync.WaitGroup
	)
	read.Add(2)
	for _, k := range []string{"a", "b"} {
		wg.Go(func() {
			_, err := s.UpdateJob(ctx, "j1", func(j *cosmic.Job) error {
				mu.Lock()
				calls[k]++
				first := calls[k] == 1
				mu.Unlock()
				if first { // both have read before either writes
					read.Done()
					read.Wait()
				}
				if j.Spec.Labels == nil {
					j.Spec.Labels = map[string]string{}
				}
				j.Spec.Labels[k] = "1"
				return nil
			})
			if err != nil {
				t.Errorf("UpdateJob(%s) = %v", k, err)
			}
		})
	}
	wg.Wait()
	got, err := s.GetJob(ctx, "j1")
	if err != nil {
		t.Fatal(err)
	}
	if got.Spec.Labels["a"] != "1" || got.Spec.Labels["b"] != "1" {
		t.Errorf("labels = %v, want both a and b (a lost update)", got.Spec.Labels)
	}
	if calls["a"]+calls["b"] < 3 {
		t.Errorf("the functions ran %v times: no transaction was retried", calls)
	}
}

// TestRetryWhenTheFunctionSwallowsTheFailure: a function that ignores the
// error of its write (here PutJob, whose savepoint rolls the failed update
// back and lets the transaction go on) is still run again when that error
// was a serialization failure: committing its transaction would lose the
// other's update.
func TestRetryWhenTheFunctionSwallowsTheFailure(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.CreateJob(ctx, cosmic.Job{ID: "j1", Team: "t", User: "u", Spec: cosmic.Spec{Name: "x"}, Status: cosmic.Status{State: cosmic.StateQueued}}); err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		calls int
		read  sync.WaitGroup
		wg    sync.WaitGroup
	)
	read.Add(2)
	for _, k := range []string{"a", "b"} {
		wg.Go(func() {
			first := true
			err := s.Update(ctx, func(tx store.Tx) error {
				mu.Lock()
				calls++
				mu.Unlock()
				j, err := tx.GetJob(ctx, "j1")
				if err != nil {
					return err
				}
				if first { // both have read before either writes
					first = false
					read.Done()
					read.Wait()
				}
				if j.Spec.Labels == nil {
					j.Spec.Labels = map[string]string{}
				}
				j.Spec.Labels[k] = "1"
				_ = tx.PutJob(ctx, j) // swallowed on purpose
				return nil
			})
			if err != nil {
				t.Errorf("Update(%s) = %v", k, err)
			}
		})
	}
	wg.Wait()
	got, err := s.GetJob(ctx, "j1")
	if err != nil {
		t.Fatal(err)
	}
	if got.Spec.Labels["a"] != "1" || got.Spec.Labels["b"] != "1" {
		t.Errorf("labels = %v, want both a and b (a swallowed serialization failure committed)", got.Spec.Labels)
	}
	if calls < 3 || s.Retries() < 1 {
		t.Errorf("%d calls, %d retries: no transaction was retried", calls, s.Retries())
	}
}
