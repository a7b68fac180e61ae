package cli

import (
	"fmt"
	"os"
	"syscall"
	"testing"

	"github.com/creack/pty"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/cosmictest"
)

// TestJobsShellThroughThePlatform runs `cosmicac jobs shell JOB` (the
// CLI's own code: runShell, its raw mode, its SIGWINCH handler) on a real
// terminal, through the whole path: a local PTY → the CLI →
// POST /api/v1/jobs/{id}/shell on the app-node → the fabric → the job's
// instance agent → a login shell on a PTY. Typed input, the window size at
// open and after a resize, Ctrl-C, the exit code and the terminal's mode
// afterwards are checked on what the local terminal shows.
func TestJobsShellThroughThePlatform(t *testing.T) {
	e := cosmictest.NewEnv(t)
	j := e.Create(cosmictest.Container("workstation", 1))
	e.WaitState(j.ID, cosmic.StateRunning)
	tok, err := e.P.AdminToken()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("HOME", t.TempDir()) // no login config of the user's
	term := newTerminal(t, 30, 100)
	code := runOnTerminal(t, term, []string{"jobs", "shell", j.ID, "--url", e.P.URL, "--token", tok})

	// Typed input; the window size of the open. ("\rhi\r\n" is the output,
	// not the echo of the typed line.)
	term.typeIn(t, "echo hi\n")
	term.waitFor(t, "\rhi\r\n")
	term.typeIn(t, "stty size; echo term=$TERM\n")
	term.waitFor(t, "30 100")
	term.waitFor(t, "term=xterm")

	// Resize: the window changes, SIGWINCH arrives, the remote follows.
	resized(t, term, 50, 132)

	// Ctrl-C typed during a sleep kills the remote foreground process; the
	// shell survives and reports 130.
	interruptSleep(t, term)
	term.typeIn(t, "echo still-$((40+2))\n")
	term.waitFor(t, "still-42")

	// The remote exit code is the CLI's.
	term.typeIn(t, "exit 3\n")
	if c := waitCode(t, code, term); c != 3 {
		t.Fatalf("exit code %d, want 3; terminal:\n%s", c, term.out.String())
	}
	if st, err := termios(term.tty); err == nil && st.Lflag&syscall.ICANON == 0 {
		t.Fatal("the terminal was left in raw mode")
	}
	// The job runs on.
	if got, err := e.Client.GetJob(e.Ctx, j.ID); err != nil || got.Status.State != cosmic.StateRunning {
		t.Fatalf("after the shell: %v %v", got.Status.State, err)
	}
}

// resized changes the terminal's window to rows×cols and waits until the
// remote terminal has it. The remote shell watches for the size before the
// window changes, so neither side's timing matters: the resize frame may
// overtake typed input or follow it.
func resized(t *testing.T, term *terminal, rows, cols uint16) {
	t.Helper()
	want := fmt.Sprintf("%d %d", rows, cols)
	term.typeIn(t, fmt.Sprintf("until [ \"$(stty size)\" = '%s' ]; do sleep 0.01; done; echo resized-$((%d+%d))\n", want, rows, cols))
	if err := pty.Setsize(term.master, &pty.Winsize{Rows: rows, Cols: cols}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGWINCH); err != nil {
		t.Fatal(err)
	}
	term.waitFor(t, fmt.Sprintf("resized-%d", rows+cols))
}

// interruptSleep runs a long sleep in the remote shell, types Ctrl-C once
// the sleep is the terminal's foreground process (it says so itself, after
// the shell has handed it the terminal), and waits for the shell to report
// the interrupted command's status, 130.
func interruptSleep(t *testing.T, term *terminal) {
	t.Helper()
	term.typeIn(t, "sh -c 'echo sleeping-$((6*7)); exec sleep 100'\n")
	term.waitFor(t, "sleeping-42")
	term.typeIn(t, "\x03")
	term.typeIn(t, "echo status-$?\n")
	term.waitFor(t, "status-130")
}
