package datadir_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/datadir"
)

// TestMain lets a test run this binary as a process that holds a lock:
// with DATADIR_TEST_HOLD=DIR it locks DIR, names its address, prints
// "locked" and waits to be killed.
func TestMain(m *testing.M) {
	if dir := os.Getenv("DATADIR_TEST_HOLD"); dir != "" {
		l, err := datadir.Acquire(dir, "holder", nil)
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		if err := l.SetAddr("127.0.0.1:7420"); err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		fmt.Println("locked")
		select {}
	}
	os.Exit(m.Run())
}

func perm(t *testing.T, path string) fs.FileMode {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

func acquire(t *testing.T, dir, component string, log *slog.Logger) *datadir.Lock {
	t.Helper()
	l, err := datadir.Acquire(dir, component, log)
	if err != nil {
		t.Fatalf("Acquire(%s): %v", dir, err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func TestAcquireCreatesPrivateDir(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "a", "b")
	l := acquire(t, dir, "wrk-ork", nil)
	for _, d := range []string{filepath.Join(base, "a"), dir} {
		if got := perm(t, d); got != datadir.DirMode {
			t.Errorf("%s: mode %#o, want %#o", d, got, datadir.DirMode)
		}
	}
	if got := perm(t, filepath.Join(dir, datadir.LockFile)); got != datadir.FileMode {
		t.Errorf("lock file: mode %#o, want %#o", got, datadir.FileMode)
	}
	h := l.Holder()
	if h.PID != os.Getpid() || h.Component != "wrk-ork" || h.Started.IsZero() || h.Addr != "" {
		t.Errorf("holder = %+v", h)
	}
}

func TestAcquireTightensLooseDir(t *testing.T) {
	for _, mode := range []fs.FileMode{0o755, 0o777, 0o750, 0o701} {
		t.Run(fmt.Sprintf("%#o", mode), func(t *testing.T) {
			dir := t.TempDir()
			if err := os.Chmod(dir, mode); err != nil {
				t.Fatal(err)
			}
			var logs bytes.Buffer
			acquire(t, dir, "cosmicac up", slog.New(slog.NewTextHandler(&logs, nil)))
			if got := perm(t, dir); got != datadir.DirMode {
				t.Errorf("mode %#o after Acquire, want %#o", got, datadir.DirMode)
			}
			if !strings.Contains(logs.String(), "data dir tightened") || !strings.Contains(logs.String(), fmt.Sprintf("old_mode=%#o", mode)) {
				t.Errorf("log %q: want the tightening, with the old mode", logs.String())
			}
		})
	}
	t.Run("private dir is left as it is", func(t *testing.T) {
		dir := t.TempDir()
		os.Chmod(dir, 0o700)
		var logs bytes.Buffer
		acquire(t, dir, "cosmicac up", slog.New(slog.NewTextHandler(&logs, nil)))
		if logs.Len() != 0 {
			t.Errorf("log %q for a private dir", logs.String())
		}
	})
}

// TestAcquireRefusesOtherUsersLooseDir: a loose directory the current user
// does not own is refused, and nothing is created in it.
func TestAcquireRefusesOtherUsersLooseDir(t *testing.T) {
	dir := "/tmp" // root's, 1777, on every Linux
	if os.Geteuid() == 0 {
		dir = t.TempDir()
		if err := os.Chown(dir, 65534, 65534); err != nil {
			t.Skipf("chown: %v", err)
		}
		os.Chmod(dir, 0o755)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		t.Skip(err)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int(st.Uid) == os.Geteuid() || fi.Mode().Perm()&0o077 == 0 {
		t.Skipf("%s is not another user's loose directory", dir)
	}
	_, err = os.Stat(filepath.Join(dir, datadir.LockFile))
	hadLock := err == nil
	l, err := datadir.Acquire(dir, "wrk-ork", nil)
	if err == nil {
		l.Close()
		t.Fatalf("Acquire(%s) of uid %d's dir mode %#o: no error", dir, fi.Sys().(*syscall.Stat_t).Uid, fi.Mode().Perm())
	}
	if !strings.Contains(err.Error(), "belongs to uid") || !strings.Contains(err.Error(), "cannot be made private") {
		t.Errorf("error %q: want it to say whose it is and why it is refused", err)
	}
	if _, err := os.Stat(filepath.Join(dir, datadir.LockFile)); err == nil && !hadLock {
		t.Errorf("a lock file was created in the refused dir")
	}
	if got := perm(t, dir); got != fi.Mode().Perm() {
		t.Errorf("refused dir's mode changed to %#o", got)
	}
}

func TestAcquireRefusesAFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	os.WriteFile(path, nil, 0o600)
	if _, err := datadir.Acquire(path, "x", nil); err == nil {
		t.Fatal("Acquire of a file: no error")
	}
}

func TestSecondAcquireIsRefused(t *testing.T) {
	dir := t.TempDir()
	l := acquire(t, dir, "cosmicac up", nil)
	if err := l.SetAddr("http://127.0.0.1:8080"); err != nil {
		t.Fatal(err)
	}
	_, err := datadir.Acquire(dir, "cosmicac up", nil)
	var iu *datadir.InUseError
	if !errors.As(err, &iu) || !errors.Is(err, datadir.ErrInUse) {
		t.Fatalf("second Acquire: %v, want an *InUseError", err)
	}
	want := fmt.Sprintf("data dir %s is in use by cosmicac up (pid %d, http://127.0.0.1:8080), started %s",
		dir, os.Getpid(), l.Holder().Started.Format(time.RFC3339))
	if err.Error() != want {
		t.Errorf("error\n %q\nwant\n %q", err, want)
	}
	// Released, it can be taken again.
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := l.SetAddr("x"); err == nil {
		t.Errorf("SetAddr after Close: no error")
	}
	l2 := acquire(t, dir, "wrk-ork", nil)
	if h := l2.Holder(); h.Component != "wrk-ork" || h.Addr != "" {
		t.Errorf("new holder %+v", h)
	}
}

func TestNilLock(t *testing.T) {
	var l *datadir.Lock
	if err := l.SetAddr("x"); err != nil {
		t.Error(err)
	}
	if err := l.Close(); err != nil {
		t.Error(err)
	}
}

// TestStaleLockFile: a lock file left behind (by a process that died or
// closed) does not block, and is rewritten for the new holder.
func TestStaleLockFile(t *testing.T) {
	dir := t.TempDir()
	stale := `{"pid":999999,"component":"cosmicac up","addr":"http://127.0.0.1:1","started":"2020-01-01T00:00:00Z"}` + "\n" + "trailing junk"
	if err := os.WriteFile(filepath.Join(dir, datadir.LockFile), []byte(stale), 0o644); err != nil {
		t.Fatal(err)
	}
	l := acquire(t, dir, "app-node", nil)
	l.SetAddr("127.0.0.1:7421")
	b, _ := os.ReadFile(filepath.Join(dir, datadir.LockFile))
	if s := string(b); !strings.Contains(s, `"pid":`+strconv.Itoa(os.Getpid())) || !strings.Contains(s, "app-node") ||
		!strings.Contains(s, "127.0.0.1:7421") || strings.Contains(s, "junk") || strings.Contains(s, "999999") {
		t.Errorf("lock file %q: want only the new holder", s)
	}
	if got := perm(t, filepath.Join(dir, datadir.LockFile)); got != datadir.FileMode {
		t.Errorf("a stale lock file of mode 0644 keeps mode %#o", got)
	}
}

func TestUnknownHolder(t *testing.T) {
	err := &datadir.InUseError{Dir: "/x"}
	if !strings.Contains(err.Error(), "in use by another process") {
		t.Errorf("%q", err)
	}
}

// TestLockAcrossProcesses: a process holding the lock refuses this one,
// named by its pid and address; once it is killed (SIGKILL: no cleanup),
// its lock file does not block.
func TestLockAcrossProcesses(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "DATADIR_TEST_HOLD="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "locked\n" {
		t.Fatalf("holder printed %q (%v)", line, err)
	}
	_, err = datadir.Acquire(dir, "wrk-ork", nil)
	var iu *datadir.InUseError
	if !errors.As(err, &iu) {
		t.Fatalf("Acquire while another process holds it: %v", err)
	}
	if iu.Holder.PID != cmd.Process.Pid || iu.Holder.Addr != "127.0.0.1:7420" || iu.Holder.Component != "holder" {
		t.Errorf("holder %+v, want pid %d at 127.0.0.1:7420", iu.Holder, cmd.Process.Pid)
	}
	if msg := err.Error(); !strings.Contains(msg, fmt.Sprintf("pid %d, 127.0.0.1:7420", cmd.Process.Pid)) {
		t.Errorf("error %q: want the holder's pid and address", msg)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	l := acquire(t, dir, "wrk-ork", nil)
	if l.Holder().PID != os.Getpid() {
		t.Errorf("holder after the kill: %+v", l.Holder())
	}
}
