package cosmictest

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"golang.org/x/term"

	"github.com/cosmicac/cosmicac/internal/agent"
	"github.com/cosmicac/cosmicac/internal/agent/shellproto"
	"github.com/cosmicac/cosmicac/internal/cosmic"
)

// ptyOut collects what the local terminal shows.
type ptyOut struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (p *ptyOut) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.b.Write(b)
}

func (p *ptyOut) String() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.b.String()
}

// TestPTYShellThroughThePlatform drives a real terminal through the whole
// path of `cosmicac jobs shell JOB`: a local PTY (the user's terminal, in
// raw mode) → agent.HTTPShellDialer → the app-node's relay
// (POST /api/v1/jobs/{id}/shell) → the fabric → the job's instance agent →
// a login shell on a PTY. The local side is what internal/cli's runShell
// does: the terminal's size at open, SIGWINCH sends the new size, and the
// remote exit code is the session's. Typed input, resize, Ctrl-C and the
// exit code are checked on what the local terminal shows.
func TestPTYShellThroughThePlatform(t *testing.T) {
	e := NewEnv(t)
	j := e.Create(Container("workstation", 1))
	e.WaitState(j.ID, cosmic.StateRunning)
	admin, err := e.P.AdminToken()
	if err != nil {
		t.Fatal(err)
	}

	master, tty, err := pty.Open()
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("CI is set, so this test must run, but there is no pty (/dev/ptmx): %v", err)
		}
		t.Skipf("no pty (/dev/ptmx): %v", err)
	}
	t.Cleanup(func() { tty.Close(); master.Close() })
	if err := pty.Setsize(master, &pty.Winsize{Rows: 30, Cols: 100}); err != nil {
		t.Fatal(err)
	}
	out := &ptyOut{}
	go io.Copy(out, master)
	typeIn := func(s string) {
		t.Helper()
		if _, err := master.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	waitFor := func(want string) {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for !strings.Contains(out.String(), want) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %q; the terminal shows:\n%q", want, out.String())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}

	// The CLI's side, on the PTY's tty end: its size at open, raw mode,
	// SIGWINCH → a resize frame.
	fd := int(tty.Fd())
	if !term.IsTerminal(fd) {
		t.Fatal("the pty's tty end is not a terminal")
	}
	cols, rows, err := term.GetSize(fd)
	if err != nil {
		t.Fatal(err)
	}
	d := agent.HTTPShellDialer{BaseURL: e.P.URL, Token: admin}
	octx, cancel := context.WithTimeout(e.Ctx, 30*time.Second)
	c, _, err := d.DialShell(octx, j.ID, shellproto.OpenParams{TTY: true, Term: "xterm", Rows: uint16(rows), Cols: uint16(cols)})
	cancel()
	if err != nil {
		t.Fatalf("open a shell: %v", err)
	}
	old, err := term.MakeRaw(fd)
	if err != nil {
		t.Fatal(err)
	}
	resize := make(chan agent.Size, 1)
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	defer signal.Stop(winch)
	stopWinch := make(chan struct{})
	defer close(stopWinch)
	go func() {
		for {
			select {
			case <-stopWinch:
				return
			case <-winch:
				if w, h, err := term.GetSize(fd); err == nil {
					select {
					case resize <- agent.Size{Rows: uint16(h), Cols: uint16(w)}:
					default:
					}
				}
			}
		}
	}()
	type result struct {
		st  shellproto.ExitStatus
		err error
	}
	done := make(chan result, 1)
	go func() {
		st, err := agent.RunSession(e.Ctx, c, agent.SessionIO{Stdin: tty, Stdout: tty, Stderr: tty, Resize: resize})
		done <- result{st, err}
	}()

	// Typed input; the window size of the open. ("\rhi\r\n" is the output,
	// not the echo of the typed line.)
	typeIn("echo hi\n")
	waitFor("\rhi\r\n")
	typeIn("stty size; echo term=$TERM\n")
	waitFor("30 100")
	waitFor("term=xterm")

	// Resize: the window changes, SIGWINCH arrives, the remote follows.
	if err := pty.Setsize(master, &pty.Winsize{Rows: 50, Cols: 132}); err != nil {
		t.Fatal(err)
	}
	syscall.Kill(os.Getpid(), syscall.SIGWINCH)
	time.Sleep(100 * time.Millisecond)
	typeIn("stty size\n")
	waitFor("50 132")

	// Ctrl-C typed during a sleep kills the remote foreground process; the
	// shell survives and reports 130.
	typeIn("sleep 100\n")
	time.Sleep(time.Second) // let bash start sleep: a ^C before that is not the test
	typeIn("\x03")
	typeIn("echo status-$?\n")
	waitFor("status-130")
	typeIn("echo still-$((40+2))\n")
	waitFor("still-42")

	// The remote exit code is the session's.
	typeIn("exit 3\n")
	select {
	case r := <-done:
		if r.err != nil || r.st.Code != 3 {
			t.Fatalf("session: exit code %d, err %v, want 3; the terminal shows:\n%q", r.st.Code, r.err, out.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("the session did not end; the terminal shows:\n%q", out.String())
	}
	if err := term.Restore(fd, old); err != nil {
		t.Fatal(err)
	}
	// The job runs on.
	if got, err := e.Client.GetJob(e.Ctx, j.ID); err != nil || got.Status.State != cosmic.StateRunning {
		t.Fatalf("after the shell: %v %v", got.Status.State, err)
	}
}
