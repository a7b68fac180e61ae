package qemu

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestFollowConsole: the lines QEMU writes to a VM's console reach the
// follower as they come, once each, in order, their line ends (\r\n and
// systemd's \r\r\n) taken off; a line written in two pieces comes whole,
// once its newline is there; a file that does not exist yet is waited
// for; a line longer than MaxConsoleLine comes in pieces; a truncated file
// (a new QEMU) is read from its start; when the VM ends, what it wrote
// last, newline or not, still comes.
func TestFollowConsole(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		path := filepath.Join(dir, ConsoleFile)
		var (
			mu  sync.Mutex
			got []string
		)
		take := func() []string {
			mu.Lock()
			defer mu.Unlock()
			out := got
			got = nil
			return out
		}
		done := make(chan struct{})
		ended := make(chan struct{})
		go func() {
			defer close(ended)
			FollowConsole(done, dir, time.Second, func(l string) bool {
				mu.Lock()
				defer mu.Unlock()
				got = append(got, l)
				return true
			})
		}()
		write := func(s string, flag int) {
			t.Helper()
			f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|flag, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteString(s); err != nil {
				t.Fatal(err)
			}
			f.Close()
		}
		step := func(want ...string) {
			t.Helper()
			time.Sleep(time.Second)
			synctest.Wait()
			if diff := cmp.Diff(want, take()); diff != "" {
				t.Errorf("lines (-want +got):\n%s", diff)
			}
		}
		step() // no file yet
		write("[    0.000000] Linux version 6.1.0\r\nWelcome to Debian!\r\r\nstock-0 login: ", os.O_APPEND)
		step("[    0.000000] Linux version 6.1.0", "Welcome to Debian!")
		write("[  151.3] cloud-init[415]: Cloud-init v. 22.4.2 running 'modules:config'\r\n", os.O_APPEND)
		step("stock-0 login: [  151.3] cloud-init[415]: Cloud-init v. 22.4.2 running 'modules:config'")
		step()
		long := strings.Repeat("x", MaxConsoleLine+10)
		write(long+"\n", os.O_APPEND)
		step(long[:MaxConsoleLine], long[MaxConsoleLine:])
		write("new boot\r\n", os.O_TRUNC)
		step("new boot")
		write("the last line\r\nno newline", os.O_APPEND)
		close(done)
		<-ended
		if diff := cmp.Diff([]string{"the last line", "no newline"}, take()); diff != "" {
			t.Errorf("lines after the VM ended (-want +got):\n%s", diff)
		}
	})
}

// TestFollowConsoleStops: a follower that says stop reads no further
// line, and returns while the VM still runs.
func TestFollowConsoleStops(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, ConsoleFile), []byte("a\nb\nc\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var got []string
	FollowConsole(make(chan struct{}), dir, time.Millisecond, func(l string) bool {
		got = append(got, l)
		return l != "b"
	})
	if !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("lines %q, want a and b", got)
	}
}
