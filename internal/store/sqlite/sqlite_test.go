package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/store"
	"github.com/cosmicac/cosmicac/internal/store/storetest"
)

func TestConformance(t *testing.T) {
	var (
		mu   sync.Mutex
		dirs = map[string]string{}
	)
	storetest.Run(t, func(t *testing.T) store.Store {
		mu.Lock()
		dir, ok := dirs[t.Name()]
		if !ok {
			dir = t.TempDir()
			dirs[t.Name()] = dir
		}
		mu.Unlock()
		s, err := Open(filepath.Join(dir, "cosmicac.db"))
		if err != nil {
			t.Fatalf("Open = %v", err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	})
}

func TestPragmas(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	for _, tt := range []struct {
		pragma string
		want   string
	}{
		{"journal_mode", "wal"},
		{"synchronous", "1"}, // NORMAL
		{"foreign_keys", "1"},
		{"busy_timeout", "10000"},
	} {
		var got string
		if err := s.w.QueryRowContext(ctx, "PRAGMA "+tt.pragma).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != tt.want {
			t.Errorf("writer PRAGMA %s = %s, want %s", tt.pragma, got, tt.want)
		}
	}
	var fk, qo string
	if err := s.r.QueryRowContext(ctx, "PRAGMA foreign_keys").Scan(&fk); err != nil || fk != "1" {
		t.Errorf("reader foreign_keys = %s, %v", fk, err)
	}
	if err := s.r.QueryRowContext(ctx, "PRAGMA query_only").Scan(&qo); err != nil || qo != "1" {
		t.Errorf("reader query_only = %s, %v", qo, err)
	}
	if err := s.IntegrityCheck(ctx); err != nil {
		t.Error(err)
	}
}

func TestMigrations(t *testing.T) {
	ms, err := migrations()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var n, max int
	if err := s.w.QueryRowContext(ctx, "SELECT count(*), max(version) FROM schema_migrations").Scan(&n, &max); err != nil {
		t.Fatal(err)
	}
	latest := ms[len(ms)-1].Version
	if n != len(ms) || max != latest {
		t.Errorf("schema_migrations: %d rows up to %d, want %d up to %d", n, max, len(ms), latest)
	}
	// A database from a newer binary is refused, and left as it is.
	if _, err := s.w.ExecContext(ctx, "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, 'future', 0)", latest+1); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := Open(path); !errors.Is(err, store.ErrSchemaTooNew) {
		t.Fatalf("Open(newer schema) = %v, want ErrSchemaTooNew", err)
	}
}

// TestFilesArePrivate: the database and its -wal and -shm are created
// 0600 (SQLite would make the main file 0644 and the others like it), and
// those of an older, looser database are tightened on Open.
func TestFilesArePrivate(t *testing.T) {
	dbPath := filepath.Join(t.TempDir(), "cosmicac.db")
	files := []string{dbPath, dbPath + "-wal", dbPath + "-shm"}
	check := func(when string) {
		t.Helper()
		for _, f := range files {
			fi, err := os.Stat(f)
			if err != nil {
				t.Fatalf("%s: %v", when, err)
			}
			if got := fi.Mode().Perm(); got != 0o600 {
				t.Errorf("%s: %s has mode %#o, want 0600", when, filepath.Base(f), got)
			}
		}
	}
	s, err := Open(dbPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CreateTeam(context.Background(), cosmic.Team{Name: "t"}); err != nil {
		t.Fatal(err)
	}
	check("new database")
	for _, f := range files {
		if err := os.Chmod(f, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s2, err := Open(dbPath) // while the first is open: its -wal and -shm are there
	if err != nil {
		t.Fatal(err)
	}
	check("reopened 0644 database")
	s2.Close()
	s.Close()
}

func TestOpenBadPath(t *testing.T) {
	for _, p := range []string{"", "a?b", filepath.Join(t.TempDir(), "no", "such", "dir", "db")} {
		if s, err := Open(p); err == nil {
			s.Close()
			t.Errorf("Open(%q) succeeded", p)
		}
	}
}

// TestMigrateJobCounts: migration 0002 applied to a database that already
// holds jobs counts them all, and the counters follow writes afterwards.
func TestMigrateJobCounts(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "db")
	db := openAt(t, path, 1)
	states := []cosmic.State{cosmic.StateRunning, cosmic.StateStopped, cosmic.StateFailed}
	for i := range 30 {
		if _, err := db.ExecContext(ctx, "INSERT INTO jobs (id, team, user_name, name, state, created_at, updated_at, spec, status) VALUES (?, ?, ?, '', ?, ?, 0, '{}', ?)",
			fmt.Sprintf("j%02d", i), fmt.Sprintf("t%d", i%2), fmt.Sprintf("u%d", i%3), string(states[i%3]), int64(i)*1e9,
			fmt.Sprintf(`{"state":%q}`, states[i%3])); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()

	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.DeleteJob(ctx, "j00"); err != nil { // t0 u0 running
		t.Fatal(err)
	}
	if _, err := s.UpdateJob(ctx, "j01", func(j *cosmic.Job) error { j.Status.State = cosmic.StateFailed; return nil }); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		q    store.ListJobsQuery
		want int
	}{
		{store.ListJobsQuery{}, 29},
		{store.ListJobsQuery{Team: "t0"}, 14},
		{store.ListJobsQuery{Team: "t1", States: []cosmic.State{cosmic.StateFailed}}, 6},
		{store.ListJobsQuery{States: []cosmic.State{cosmic.StateStopped, cosmic.StateFailed}}, 20},
		{store.ListJobsQuery{User: "u0", States: []cosmic.State{cosmic.StateRunning}}, 9},
	} {
		tt.q.Size = 1
		_, total, err := s.ListJobs(ctx, tt.q)
		if err != nil || total != tt.want {
			t.Errorf("ListJobs(%+v): total %d, %v; want %d", tt.q, total, err, tt.want)
		}
	}
	var sum int
	if err := s.r.QueryRowContext(ctx, "SELECT sum(n) FROM job_counts").Scan(&sum); err != nil || sum != 29 {
		t.Errorf("sum of job_counts = %d, %v; want 29", sum, err)
	}
}

// openAt makes a database at path that the first version migrations made,
// as an older binary left it, and returns it open without this package's
// Store.
func openAt(t *testing.T, path string, version int) *sql.DB {
	t.Helper()
	ms, err := migrations()
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	for _, m := range ms[:version] {
		if _, err := db.ExecContext(ctx, m.SQL); err != nil {
			t.Fatalf("apply %d: %v", m.Version, err)
		}
		if _, err := db.ExecContext(ctx, "INSERT INTO schema_migrations VALUES (?, ?, 0)", m.Version, m.Name); err != nil {
			t.Fatal(err)
		}
	}
	return db
}

// TestMigratePeople: migration 0004 turns the users of one team each into
// members (an admin becomes a platform admin owning the team), and keeps
// their tokens and API keys.
func TestMigratePeople(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "db")
	db := openAt(t, path, 3)
	for _, q := range []string{
		"INSERT INTO teams (name) VALUES ('default'), ('ml')",
		"INSERT INTO users (name, team, role) VALUES ('admin', 'default', 'admin'), ('bob', 'ml', 'member'), ('cy', 'ml', 'viewer')",
		"INSERT INTO tokens (id, name, user_name, hash, created_at, expires_at) VALUES ('bootstrap-admin', 'b', 'admin', x'01', 5, 0), ('t2', 'x', 'bob', x'02', 6, 0)",
		"INSERT INTO api_keys (id, name, team, created_by, prefix, hash, created_at) VALUES ('key_1', 'k', 'ml', 'bob', 'p', x'03', 7)",
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	db.Close()
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	users, err := s.ListUsers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]cosmic.User{{Name: "admin", PlatformAdmin: true}, {Name: "bob"}, {Name: "cy"}}, users); diff != "" {
		t.Errorf("users (-want +got):\n%s", diff)
	}
	for team, want := range map[string][]cosmic.Member{
		"default": {{Team: "default", User: "admin", Role: cosmic.RoleOwner}},
		"ml":      {{Team: "ml", User: "bob", Role: cosmic.RoleMember}, {Team: "ml", User: "cy", Role: cosmic.RoleViewer}},
	} {
		got, err := s.Members(ctx, team)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("members of %s (-want +got):\n%s", team, diff)
		}
	}
	tok, u, err := s.TokenByHash(ctx, []byte{2}, time.Now())
	if err != nil || u.Name != "bob" || tok.ID != "t2" || tok.Kind != store.KindToken || tok.Team != "" {
		t.Errorf("bob's token after migration = %+v of %+v, %v", tok, u, err)
	}
	if k, err := s.GetAPIKey(ctx, "key_1"); err != nil || k.Team != "ml" {
		t.Errorf("API key after migration = %+v, %v", k, err)
	}
	// Foreign keys are on again: a member of no team is refused.
	if err := s.PutMember(ctx, cosmic.Member{Team: "nope", User: "bob", Role: cosmic.RoleViewer}); err == nil {
		t.Error("PutMember to a missing team succeeded after migrating: foreign keys are off")
	}
	// Deleting a user still cascades to their tokens.
	if err := s.DeleteUser(ctx, "bob"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetToken(ctx, "t2"); err == nil {
		t.Error("bob's token outlived him")
	}
}

// TestMigrateJobSchema: a job stored before migration 0011 reads as
// schema version 1; a row of a version newer than this binary knows is
// refused as such, not misread (cosmic.ErrNewerJobSchema).
func TestMigrateJobSchema(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "db")
	db := openAt(t, path, 10)
	if _, err := db.ExecContext(ctx, "INSERT INTO jobs (id, team, user_name, name, state, created_at, updated_at, spec, status) VALUES ('j1', 't', 'u', 'n', 'running', 0, 0, ?, ?)",
		`{"type":"gpu-container","name":"n","location":"us"}`, `{"state":"running"}`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	j, err := s.GetJob(ctx, "j1")
	if err != nil || j.Spec.Name != "n" || j.Status.State != cosmic.StateRunning {
		t.Fatalf("a job stored before 0011: %+v, %v", j, err)
	}
	var v int
	if err := s.w.QueryRowContext(ctx, "SELECT schema_version FROM jobs WHERE id = 'j1'").Scan(&v); err != nil || v != 1 {
		t.Fatalf("its schema version %d (%v), want 1", v, err)
	}
	if _, err := s.w.ExecContext(ctx, "UPDATE jobs SET schema_version = ? WHERE id = 'j1'", cosmic.JobSchemaVersion+1); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetJob(ctx, "j1"); !errors.Is(err, cosmic.ErrNewerJobSchema) {
		t.Errorf("a row of a newer schema: %v, want ErrNewerJobSchema", err)
	}
}
