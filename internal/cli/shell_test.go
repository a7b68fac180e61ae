package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/cosmicac/cosmicac/internal/agent"
	"github.com/cosmicac/cosmicac/internal/agent/agentapi"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/testenv"
	"github.com/cosmicac/cosmicac/internal/waittest"
)

// shellRig is an agent that listens on loopback and admits the CLI key in
// keyFile, as the platform's relay would be admitted.
type shellRig struct {
	peer    string // KEY@ADDR of the agent
	keyFile string
	agent   *agent.Agent
}

func newShellRig(t *testing.T) *shellRig {
	t.Helper()
	dir := t.TempDir()
	cliID, _ := fabric.GenerateIdentity()
	keyFile := filepath.Join(dir, "cli.key")
	if err := fabric.WriteIdentityFile(keyFile, cliID); err != nil {
		t.Fatal(err)
	}
	agentID, _ := fabric.GenerateIdentity()
	ag := agent.New(agent.Config{JobID: "0b7c54a8-5f0e-4c1e-9d3a-2f6b8e1c4d70", Identity: agentID, Listen: "127.0.0.1:0",
		Peers: []agent.Peer{{Role: agentapi.RoleAppNode, Key: cliID.PublicKey()}}, Shell: "/bin/bash", WorkDir: dir}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ag.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-ag.Ready():
	case err := <-done:
		t.Fatal(err)
	}
	return &shellRig{peer: agentID.PublicKey().String() + "@" + ag.Node().Addr(), keyFile: keyFile, agent: ag}
}

func (r *shellRig) args(extra ...string) []string {
	return append([]string{"jobs", "shell", "0b7c54a8-5f0e-4c1e-9d3a-2f6b8e1c4d70", "--agent", r.peer, "--key-file", r.keyFile}, extra...)
}

// lockedBuf collects a terminal's output.
type lockedBuf = waittest.Buffer

// terminal is a local PTY standing for the user's terminal: the CLI gets
// its tty end as stdin and stdout, the test types into the master.
type terminal struct {
	master, tty *os.File
	out         *lockedBuf
}

func newTerminal(t *testing.T, rows, cols uint16) *terminal {
	t.Helper()
	m, tt, err := pty.Open()
	testenv.Require(t, err == nil, "no pty (/dev/ptmx): %v", err)
	if err := pty.Setsize(m, &pty.Winsize{Rows: rows, Cols: cols}); err != nil {
		t.Fatal(err)
	}
	term := &terminal{master: m, tty: tt, out: &lockedBuf{}}
	go io.Copy(term.out, m)
	t.Cleanup(func() { tt.Close(); m.Close() })
	return term
}

func (term *terminal) typeIn(t *testing.T, s string) {
	t.Helper()
	if _, err := term.master.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
}

func (term *terminal) waitFor(t *testing.T, want string) {
	t.Helper()
	waittest.NoError(t, func() error {
		if out := term.out.String(); !strings.Contains(out, want) {
			return fmt.Errorf("terminal shows:\n%s", out)
		}
		return nil
	}, "%q on the terminal", want)
}

// runOnTerminal runs the CLI with the terminal as stdin, stdout and stderr.
func runOnTerminal(t *testing.T, term *terminal, args []string) <-chan int {
	t.Helper()
	a := &App{Stdin: term.tty, Stdout: term.tty, Stderr: term.tty, Getenv: func(k string) string {
		if k == "TERM" {
			return "xterm"
		}
		return ""
	}}
	code := make(chan int, 1)
	go func() { code <- a.Run(context.Background(), args) }()
	return code
}

func waitCode(t *testing.T, ch <-chan int, term *terminal) int {
	t.Helper()
	select {
	case c := <-ch:
		return c
	case <-time.After(20 * time.Second):
		t.Fatalf("the CLI did not exit; terminal shows:\n%s", term.out.String())
	}
	return -1
}

func TestJobsShellInteractive(t *testing.T) {
	r := newShellRig(t)
	term := newTerminal(t, 30, 100)
	code := runOnTerminal(t, term, r.args())
	term.typeIn(t, "stty size; echo hi-$((40+2)) $TERM\n")
	term.waitFor(t, "30 100")
	term.waitFor(t, "hi-42 xterm")

	// Resize: the window changes, SIGWINCH arrives, the remote follows.
	resized(t, term, 50, 132)

	// Ctrl-C typed on the terminal kills the remote foreground sleep; the
	// shell carries on.
	interruptSleep(t, term)

	term.typeIn(t, "exit 3\n")
	if c := waitCode(t, code, term); c != 3 {
		t.Fatalf("exit code %d, want 3; terminal:\n%s", c, term.out.String())
	}
	// The local terminal is back in cooked mode.
	if st, err := termios(term.tty); err == nil && st.Lflag&syscall.ICANON == 0 {
		t.Fatal("the terminal was left in raw mode")
	}
}

func TestJobsShellCommandOnTerminal(t *testing.T) {
	r := newShellRig(t)
	term := newTerminal(t, 24, 80)
	code := runOnTerminal(t, term, r.args("--", "sleep", "100"))
	// Ctrl-C is a byte for the remote terminal only once the CLI has put
	// the local one in raw mode (before, its line discipline eats it), and
	// it interrupts the remote sleep only once the sleep owns the remote
	// terminal: the agent lists the session with its PID after starting
	// it, by when it is the terminal's session leader.
	waittest.NoError(t, func() error {
		if s := r.agent.Status().Sessions; len(s) != 1 || s[0].PID == 0 || !s[0].TTY {
			return fmt.Errorf("the agent's sessions: %+v", s)
		}
		if st, err := termios(term.tty); err != nil || st.Lflag&(syscall.ICANON|syscall.ISIG) != 0 {
			return fmt.Errorf("the local terminal is not raw: %+v, %v", st, err)
		}
		return nil
	}, "the remote sleep started and the local terminal raw")
	term.typeIn(t, "\x03")
	if c := waitCode(t, code, term); c != 130 {
		t.Fatalf("exit code %d, want 130; terminal:\n%s", c, term.out.String())
	}
}

func TestJobsShellPiped(t *testing.T) {
	r := newShellRig(t)
	var out, errb bytes.Buffer
	a := &App{Stdin: strings.NewReader("a\nb\n"), Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }}
	if c := a.Run(context.Background(), r.args("--", "wc", "-l")); c != 0 || strings.TrimSpace(out.String()) != "2" {
		t.Fatalf("exit %d, stdout %q, stderr %q", c, out.String(), errb.String())
	}
	out.Reset()
	errb.Reset()
	a = &App{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }}
	if c := a.Run(context.Background(), r.args("--", "sh", "-c", "uname -s; echo oops >&2; exit 7")); c != 7 ||
		strings.TrimSpace(out.String()) != "Linux" || !strings.Contains(errb.String(), "oops") {
		t.Fatalf("exit %d, stdout %q, stderr %q", c, out.String(), errb.String())
	}
	// The remote exit code is the exit code; nothing else is said.
	if strings.Contains(errb.String(), "error:") {
		t.Fatalf("a remote exit code was reported as an error: stderr %q", errb.String())
	}
	// Usage errors.
	if c, _, _ := runCLI(t, nil, r.args("-t", "-T")...); c != ExitUsage {
		t.Fatalf("-t -T: exit %d", c)
	}
	if c, _, _ := runCLI(t, nil, "jobs", "shell", "x", "uname"); c != ExitUsage {
		t.Fatalf("command without --: exit %d", c)
	}
}

func TestJobsShellRefusedKey(t *testing.T) {
	r := newShellRig(t)
	other := filepath.Join(t.TempDir(), "other.key")
	runCLI(t, nil, "keys", "generate", "--out", other)
	args := r.args("--", "true")
	for i, a := range args {
		if a == r.keyFile {
			args[i] = other
		}
	}
	c, _, errs := runCLI(t, nil, args...)
	if c != ExitFailure || !strings.Contains(errs, "refused") {
		t.Fatalf("exit %d, stderr %q", c, errs)
	}
}

// The API path: an API without the shell endpoint says so.
func TestJobsShellNoEndpoint(t *testing.T) {
	srv := newFakeShellless(t)
	c, _, errs := runCLI(t, map[string]string{envURL: srv, envToken: "t"}, "jobs", "shell", "0b7c54a8-5f0e-4c1e-9d3a-2f6b8e1c4d70", "--", "true")
	if c != ExitFailure || !strings.Contains(errs, "no endpoint") {
		t.Fatalf("exit %d, stderr %q", c, errs)
	}
}
