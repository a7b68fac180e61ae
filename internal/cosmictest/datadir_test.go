package cosmictest

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/client"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/datadir"
	"github.com/cosmicac/cosmicac/internal/platform"
)

// TestDataDirIsPrivate: a platform started on a 0755 data dir tightens it
// to 0700, and, once a job ran (agents' VM homes) and logs flowed (the
// monitor's spool), every directory the platform made there is 0700 and
// every file 0600: the database and its -wal and -shm, the identities, the
// admin token, the lock file. What a job writes in its simulated VM's home
// is the job's.
func TestDataDirIsPrivate(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	e := newEnvAt(t, dir, 5*time.Minute)
	j := e.Create(Container("box", 1))
	e.WaitState(j.ID, cosmic.StateRunning)
	// Looked at while it runs: closed, the database folds its -wal and
	// -shm away.

	vms := filepath.Join(dir, "vms")
	seen := map[string]bool{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil // removed meanwhile (a spool segment)
		}
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if parent := filepath.Dir(path); parent != vms && strings.HasPrefix(path, vms+string(filepath.Separator)) {
			return fs.SkipDir // inside a VM's home: the job's files
		}
		fi, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil // removed meanwhile (a spool segment)
		}
		if err != nil {
			return err
		}
		want := datadir.FileMode
		if d.IsDir() {
			want = datadir.DirMode
		}
		if got := fi.Mode().Perm(); got != want {
			t.Errorf("%s: mode %#o, want %#o", rel, got, want)
		}
		seen[filepath.Base(path)] = true
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{datadir.LockFile, "cosmicac.db", "cosmicac.db-wal", "cosmicac.db-shm", "admin.token", "identity.key", "vms", "wrk-monitor"} {
		if !seen[f] {
			t.Errorf("no %s in the data dir: the test no longer looks at it", f)
		}
	}
}

// TestSecondPlatformOnTheSameDataDirRefuses: in one process too, a second
// platform on a data dir in use fails at once with datadir.ErrInUse, and
// the first's jobs are untouched.
func TestSecondPlatformOnTheSameDataDirRefuses(t *testing.T) {
	e := NewEnv(t)
	j := e.Create(Container("box", 1))
	j = e.WaitState(j.ID, cosmic.StateRunning)
	cfg := e.Config
	cfg.Listen = "127.0.0.1:0"
	p, err := platform.Start(e.Ctx, cfg)
	if err == nil {
		p.Close()
		t.Fatal("a second platform started on the same data dir")
	}
	if !errors.Is(err, datadir.ErrInUse) || !strings.Contains(err.Error(), e.P.URL) {
		t.Errorf("second platform: %v, want the data dir in use by %s", err, e.P.URL)
	}
	after, err := e.Client.GetJob(e.Ctx, j.ID)
	if err != nil || after.Status.State != cosmic.StateRunning || len(after.Status.History) != len(j.Status.History) {
		t.Errorf("job after the refusal: %s, %d history entries (%v); want running, %d entries",
			after.Status.State, len(after.Status.History), err, len(j.Status.History))
	}
	// Restart closes the first, freeing the dir.
	e.Restart()
}

// TestPlatformsSharingADatabaseElectOneOrk: two `cosmicac up` on one
// database (a shared SQLite file here; PostgreSQL alike) do not both run
// an ork: the second follows the lease, and its start waits, until the
// first stops and releases it; then it leads and its API answers.
func TestPlatformsSharingADatabaseElectOneOrk(t *testing.T) {
	db := filepath.Join(t.TempDir(), "shared.db")
	shared := func(c *platform.Config) { c.Database = db }
	a := newEnvAt(t, t.TempDir(), 5*time.Minute, shared)
	tok, err := a.P.AdminToken() // the database's: the second platform makes none
	if err != nil {
		t.Fatal(err)
	}

	following := make(chan struct{})
	cfg := platform.DefaultConfig(t.TempDir())
	cfg.Listen, cfg.MetricsListen, cfg.Database = "127.0.0.1:0", "", db
	cfg.Logger = slog.New(onMessage{"following", sync.OnceFunc(func() { close(following) })})
	type started struct {
		p   *platform.Platform
		err error
	}
	done := make(chan started, 1)
	go func() {
		p, err := platform.Start(a.Ctx, cfg)
		done <- started{p, err}
	}()
	select {
	case <-following:
	case s := <-done:
		if s.p != nil {
			s.p.Close()
		}
		t.Fatalf("the second platform started (err %v) while the first led the shared database", s.err)
	}
	select {
	case s := <-done:
		if s.p != nil {
			s.p.Close()
		}
		t.Fatalf("the second platform started (err %v) while the first led the shared database", s.err)
	default:
	}
	a.Stop() // releases the lease
	s := <-done
	if s.err != nil {
		t.Fatalf("second platform: %v", s.err)
	}
	defer s.p.Close()
	if _, err := client.New(s.p.URL, tok).ListJobs(a.Ctx, client.ListOptions{}); err != nil {
		t.Fatalf("the second platform's API: %v", err)
	}
}

// onMessage is a slog handler that calls f for each record whose message
// is msg.
type onMessage struct {
	msg string
	f   func()
}

func (h onMessage) Enabled(context.Context, slog.Level) bool { return true }
func (h onMessage) Handle(_ context.Context, r slog.Record) error {
	if r.Message == h.msg {
		h.f()
	}
	return nil
}
func (h onMessage) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h onMessage) WithGroup(string) slog.Handler      { return h }
