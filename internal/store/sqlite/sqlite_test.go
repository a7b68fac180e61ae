package sqlite

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

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
	latest := ms[len(ms)-1].version
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
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	// Back to version 1, then jobs written without the counters' triggers.
	if _, err := s.w.ExecContext(ctx, `DROP TABLE job_counts;
		DROP TRIGGER job_counts_insert; DROP TRIGGER job_counts_delete; DROP TRIGGER job_counts_update;
		DELETE FROM schema_migrations WHERE version >= 2`); err != nil {
		t.Fatal(err)
	}
	states := []cosmic.State{cosmic.StateRunning, cosmic.StateStopped, cosmic.StateFailed}
	for i := range 30 {
		j := cosmic.Job{ID: fmt.Sprintf("j%02d", i), Team: fmt.Sprintf("t%d", i%2), User: fmt.Sprintf("u%d", i%3),
			CreatedAt: time.Unix(int64(i), 0), Status: cosmic.Status{State: states[i%3]}}
		if err := s.CreateJob(ctx, j); err != nil {
			t.Fatal(err)
		}
	}
	var n int
	if err := s.w.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_master WHERE name LIKE 'job_counts%'").Scan(&n); err != nil || n != 0 {
		t.Fatalf("at version 1: %d job_counts objects, %v", n, err)
	}
	s.Close()

	s, err = Open(path)
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
