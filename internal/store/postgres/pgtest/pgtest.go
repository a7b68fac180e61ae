// Package pgtest runs a real PostgreSQL server for tests: initdb in a temp
// dir, postgres on a free loopback port (its unix socket in the same dir),
// once per test binary, and a schema of its own for each (sub)test that
// asks. It needs the PostgreSQL server binaries (initdb, postgres) on PATH
// or in /usr/lib/postgresql/*/bin; without them a test skips with a
// message, and under CI ($CI set) fails. Run as root (as CI does), the
// server runs as the user nobody, since postgres refuses to run as root.
//
// Use it from TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }
//
// and pgtest.DSN(t) in a test. The server is started by the first DSN
// call and stopped when Main returns.
//
// Importers: tests only (the PostgreSQL store's, the CLI's).
package pgtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cosmicac/cosmicac/internal/testenv"
)

// FsyncEnv set to 1 runs the server durably (fsync, synchronous_commit and
// full_page_writes on, PostgreSQL's defaults), for benchmarks that count
// the disk; otherwise they are off, for speed.
const FsyncEnv = "COSMICAC_PG_FSYNC"

// BinDirEnv names a directory holding initdb and postgres, to use instead
// of PATH.
const BinDirEnv = "COSMICAC_PG_BIN"

// Server is a running PostgreSQL server of the test binary.
type Server struct {
	// Dir holds the data directory, the socket and the log.
	Dir string
	// Port is its TCP port on 127.0.0.1.
	Port int
	// Bin is the directory of the server's binaries (pg_dump and
	// pg_restore are there too).
	Bin  string
	cmd  *exec.Cmd
	done chan error
	log  *bytes.Buffer

	mu      sync.Mutex
	schemas int
}

var (
	once     sync.Once
	shared   *Server
	startErr error
	missing  string // why the binaries are not there
)

// Main runs the tests of m and stops the server if one was started. Call
// it from TestMain.
func Main(m *testing.M) int {
	code := m.Run()
	if shared != nil {
		if err := shared.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: stop: %v\n", err)
		}
	}
	return code
}

// Get returns the server of the test binary, starting it the first time.
// Without the binaries t skips (under CI, fails).
func Get(t testing.TB) *Server {
	t.Helper()
	once.Do(func() {
		dir, why := binDir()
		if why != "" {
			missing = why
			return
		}
		shared, startErr = Start(dir)
	})
	if missing != "" {
		testenv.Require(t, false, "no PostgreSQL: %s (install postgresql-15; hack/install-deps.sh does)", missing)
	}
	if startErr != nil {
		t.Fatalf("start PostgreSQL: %v", startErr)
	}
	return shared
}

// DSN makes a new empty schema for t and returns a DSN whose connections
// use it (search_path). Calling it again in the same test makes another.
func DSN(t testing.TB) string {
	t.Helper()
	return Get(t).NewSchema(t)
}

// binDir finds the directory of initdb and postgres, or says why not.
func binDir() (string, string) {
	if d := os.Getenv(BinDirEnv); d != "" {
		if _, err := os.Stat(filepath.Join(d, "postgres")); err != nil {
			return "", fmt.Sprintf("%s=%s: %v", BinDirEnv, d, err)
		}
		return d, ""
	}
	if p, err := exec.LookPath("postgres"); err == nil {
		if _, err := exec.LookPath("initdb"); err == nil {
			return filepath.Dir(p), ""
		}
	}
	// Debian's packages keep them off PATH.
	found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres")
	sort.Strings(found)
	if len(found) > 0 {
		return filepath.Dir(found[len(found)-1]), ""
	}
	return "", "initdb and postgres are not on PATH nor in /usr/lib/postgresql/*/bin, and " + BinDirEnv + " is not set"
}

// Start runs initdb in a new temp dir and a postgres on it, with the
// binaries of bin, and waits until it accepts connections. The server is
// tuned for tests: fsync off (a crash of the machine loses it anyway),
// unless $COSMICAC_PG_FSYNC is 1.
func Start(bin string) (*Server, error) {
	dir, err := os.MkdirTemp(tempRoot(), "cosmicac-pg-")
	if err != nil {
		return nil, err
	}
	s := &Server{Dir: dir, Bin: bin, log: &bytes.Buffer{}, done: make(chan error, 1)}
	cred, err := credential(dir)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	data := filepath.Join(dir, "data")
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres", "-A", "trust",
		"-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	initdb.Dir = dir
	if out, err := initdb.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("initdb: %v\n%s", err, out)
	}
	for attempt := 0; ; attempt++ {
		if err = s.run(bin, data, cred); err == nil {
			return s, nil
		}
		if attempt == 2 {
			os.RemoveAll(dir)
			return nil, err
		}
	}
}

// run starts postgres on a free port and waits for it.
func (s *Server) run(bin, data string, cred *syscall.Credential) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	s.log.Reset()
	durable := "off"
	if os.Getenv(FsyncEnv) == "1" {
		durable = "on"
	}
	s.cmd = exec.Command(filepath.Join(bin, "postgres"), "-D", data,
		"-c", "listen_addresses=127.0.0.1", "-p", strconv.Itoa(port), "-c", "unix_socket_directories="+s.Dir,
		"-c", "fsync="+durable, "-c", "synchronous_commit="+durable, "-c", "full_page_writes="+durable,
		"-c", "max_connections=300", "-c", "shared_buffers=128MB", "-c", "max_pred_locks_per_transaction=256")
	s.cmd.Dir = s.Dir
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("start postgres: %w", err)
	}
	s.done = make(chan error, 1)
	go func() { s.done <- s.cmd.Wait() }()
	s.Port = port
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		conn, err := pgx.Connect(ctx, s.AdminDSN())
		if err == nil {
			conn.Close(ctx)
			return nil
		}
		select {
		case err := <-s.done:
			return fmt.Errorf("postgres exited: %v\n%s", err, s.log.String())
		case <-ctx.Done():
			s.cmd.Process.Kill()
			<-s.done
			return fmt.Errorf("postgres not ready after 60s: %v\n%s", err, s.log.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// credential is the user postgres runs as: nobody when we are root (the
// temp dir is given to it), else ourselves (nil).
func credential(dir string) (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("nobody")
	if err != nil {
		return nil, fmt.Errorf("running as root, postgres needs an unprivileged user: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(dir, uid, gid); err != nil {
		return nil, err
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}, nil
}

// tempRoot is where the server's dir is made: the usual temp dir, unless
// we are root and the user nobody could not reach it (a TMPDIR under
// /root), then /tmp.
func tempRoot() string {
	d := os.TempDir()
	if os.Geteuid() != 0 {
		return d
	}
	for p := d; ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil || fi.Mode().Perm()&0o001 == 0 {
			return "/tmp"
		}
		if p == filepath.Dir(p) {
			return d
		}
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// AdminDSN is the DSN of the superuser on the default database.
func (s *Server) AdminDSN() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", s.Port)
}

// NewSchema creates an empty schema named after t and returns a DSN whose
// connections use it.
func (s *Server) NewSchema(t testing.TB) string {
	t.Helper()
	s.mu.Lock()
	s.schemas++
	name := fmt.Sprintf("t%d_%s", s.schemas, sanitize(t.Name()))
	s.mu.Unlock()
	if len(name) > 60 {
		name = name[:60]
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, s.AdminDSN())
	if err != nil {
		t.Fatalf("pgtest: connect: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("pgtest: create schema %s: %v", name, err)
	}
	return s.AdminDSN() + "&search_path=" + url.QueryEscape(name)
}

// NewDatabase creates an empty database and returns its DSN.
func (s *Server) NewDatabase(t testing.TB) string {
	t.Helper()
	s.mu.Lock()
	s.schemas++
	name := fmt.Sprintf("db%d", s.schemas)
	s.mu.Unlock()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, s.AdminDSN())
	if err != nil {
		t.Fatalf("pgtest: connect: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("pgtest: create database %s: %v", name, err)
	}
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", s.Port, name)
}

func sanitize(name string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			return r
		case r >= 'A' && r <= 'Z':
			return r + 'a' - 'A'
		}
		return '_'
	}, name)
}

// Stop shuts the server down (fast shutdown) and removes its dir.
func (s *Server) Stop() error {
	var err error
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-s.done:
		case <-time.After(30 * time.Second):
			_ = s.cmd.Process.Kill()
			<-s.done
			err = errors.New("postgres did not stop in 30s; killed")
		}
	}
	return errors.Join(err, os.RemoveAll(s.Dir))
}

// Tool returns the path of one of PostgreSQL's programs (pg_dump,
// pg_restore, …) of the server's version: beside the server's binaries
// (following a link to where they really are), on PATH, or in Debian's
// /usr/lib/postgresql/*/bin. Without it t fails.
func (s *Server) Tool(t testing.TB, name string) string {
	t.Helper()
	dirs := []string{s.Bin}
	if real, err := filepath.EvalSymlinks(filepath.Join(s.Bin, "postgres")); err == nil {
		dirs = append(dirs, filepath.Dir(real))
	}
	found, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Sort(sort.Reverse(sort.StringSlice(found)))
	for _, d := range append(dirs, found...) {
		if _, err := os.Stat(filepath.Join(d, name)); err == nil {
			return filepath.Join(d, name)
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	t.Fatalf("pgtest: %s is not beside %s, in /usr/lib/postgresql/*/bin nor on PATH", name, s.Bin)
	return ""
}
