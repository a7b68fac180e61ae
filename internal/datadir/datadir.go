// Package datadir guards a component's data directory. Acquire makes the
// directory private (mode 0700: created so, tightened when the current user
// owns a looser one, refused when another user does) and takes an
// exclusive lock on it, flock(2) on DATA_DIR/cosmicac.lock, held until
// Close or the process's death. A second process on the same directory
// refuses at once, before it touches anything, with an error that names
// the holder (its pid, component, address and start time, which the holder
// keeps in the lock file). A lock file left by a dead process does not
// block: the kernel drops a process's locks when it dies.
//
// Importers: internal/platform and internal/cli/components (the components' wiring).
package datadir

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Modes of what the platform creates in a data directory.
const (
	DirMode  fs.FileMode = 0o700
	FileMode fs.FileMode = 0o600
)

// LockFile is the lock's file inside the data directory. It stays there
// after Close; its content means something only while a process holds it.
const LockFile = "cosmicac.lock"

// ErrInUse is what a data directory locked by another process is (an
// *InUseError).
var ErrInUse = errors.New("data dir in use")

// Holder says who holds a data directory's lock.
type Holder struct {
	PID       int    `json:"pid"`
	Component string `json:"component"`
	// Addr is where the holder serves; empty until it listens.
	Addr    string    `json:"addr,omitempty"`
	Started time.Time `json:"started"`
}

// InUseError is a refusal to take a lock another process holds.
type InUseError struct {
	Dir string
	// Holder is who holds it, as the lock file says; zero if it says
	// nothing readable (the holder has not written it yet).
	Holder Holder
}

func (e *InUseError) Error() string {
	h := e.Holder
	if h.PID == 0 {
		return fmt.Sprintf("data dir %s is in use by another process (its lock file %s does not say which)", e.Dir, filepath.Join(e.Dir, LockFile))
	}
	who := fmt.Sprintf("pid %d", h.PID)
	if h.Addr != "" {
		who += ", " + h.Addr
	}
	component := h.Component
	if component == "" {
		component = "another process"
	}
	return fmt.Sprintf("data dir %s is in use by %s (%s), started %s", e.Dir, component, who, h.Started.UTC().Format(time.RFC3339))
}

// Is makes errors.Is(err, ErrInUse) true.
func (e *InUseError) Is(target error) bool { return target == ErrInUse }

// Lock is a held data directory lock.
type Lock struct {
	dir string

	mu     sync.Mutex
	f      *os.File
	holder Holder
}

// Acquire makes dir private and locks it for component, refusing with an
// *InUseError if another process (or another Lock of this one) holds it. A
// looser directory of the current user's is tightened to 0700, which is
// logged on log (nil: not logged); one of another user's is refused.
func Acquire(dir, component string, log *slog.Logger) (*Lock, error) {
	if dir == "" {
		return nil, errors.New("data dir: no path given")
	}
	if err := os.MkdirAll(dir, DirMode); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	tighten, err := check(dir)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, FileMode)
	if err != nil {
		return nil, fmt.Errorf("open data dir lock: %w", err)
	}
	if err := flock(f); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, &InUseError{Dir: dir, Holder: readHolder(path)}
		}
		return nil, fmt.Errorf("lock data dir %s: %w", dir, err)
	}
	// Held: only now may the directory be changed.
	l := &Lock{dir: dir, f: f, holder: Holder{PID: os.Getpid(), Component: component, Started: time.Now().UTC().Truncate(time.Second)}}
	if err := f.Chmod(FileMode); err != nil {
		l.Close()
		return nil, fmt.Errorf("data dir lock: %w", err)
	}
	if tighten != 0 {
		if err := os.Chmod(dir, DirMode); err != nil {
			l.Close()
			return nil, fmt.Errorf("tighten data dir %s: %w", dir, err)
		}
		if log != nil {
			log.Warn("data dir tightened", "dir", dir, "old_mode", fmt.Sprintf("%#o", tighten), "mode", fmt.Sprintf("%#o", DirMode))
		}
	}
	if err := l.write(); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// check says whether dir must be tightened (its old mode; 0: no) and
// refuses a directory that is not one, or that another user owns and group
// or others may use.
func check(dir string) (fs.FileMode, error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return 0, fmt.Errorf("data dir: %w", err)
	}
	if !fi.IsDir() {
		return 0, fmt.Errorf("data dir %s is not a directory", dir)
	}
	perm := fi.Mode().Perm()
	if perm&0o077 == 0 {
		return 0, nil
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return 0, fmt.Errorf("data dir %s has mode %#o and belongs to uid %d, not to this user (uid %d): "+
			"it cannot be made private (0700); give a directory of this user's, or have its owner chmod 700 it", dir, perm, st.Uid, os.Geteuid())
	}
	return perm, nil
}

// flock takes f's exclusive lock without waiting.
func flock(f *os.File) error {
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// readHolder reads the holder a lock file names. The holder writes it just
// after taking the lock: a file still empty (or mid-write) is read again a
// few times.
func readHolder(path string) Holder {
	for range 50 {
		b, err := os.ReadFile(path)
		if err != nil {
			return Holder{}
		}
		var h Holder
		// The first value only: a rewrite shorter than what it replaced
		// leaves an old tail until its truncate.
		if err := json.NewDecoder(bytes.NewReader(b)).Decode(&h); err == nil && h.PID != 0 {
			return h
		}
		time.Sleep(10 * time.Millisecond)
	}
	return Holder{}
}

// Dir is the locked directory.
func (l *Lock) Dir() string { return l.dir }

// Holder is what the lock file says of this process.
func (l *Lock) Holder() Holder {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.holder
}

// SetAddr records where the holder serves, once it listens, so that a
// refused process can name it. A nil Lock does nothing.
func (l *Lock) SetAddr(addr string) error {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return errors.New("data dir lock: closed")
	}
	l.holder.Addr = addr
	return l.writeLocked()
}

func (l *Lock) write() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.writeLocked()
}

func (l *Lock) writeLocked() error {
	b, err := json.Marshal(l.holder)
	if err != nil {
		return fmt.Errorf("data dir lock: %w", err)
	}
	b = append(b, '\n')
	// Overwrite, then cut: a reader never sees an empty file once the
	// first holder line is there.
	if _, err := l.f.WriteAt(b, 0); err != nil {
		return fmt.Errorf("write data dir lock: %w", err)
	}
	if err := l.f.Truncate(int64(len(b))); err != nil {
		return fmt.Errorf("write data dir lock: %w", err)
	}
	return nil
}

// Close releases the lock (the file stays). It is idempotent, and a nil
// Lock does nothing.
func (l *Lock) Close() error {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	err := l.f.Close() // closing the last descriptor drops the flock
	l.f = nil
	return err
}
