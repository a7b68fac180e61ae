package agent

import (
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

// LoginShell is the shell of a session without argv: configured, else
// $SHELL, else /bin/bash, else /bin/sh, the first found. It is exported
// so that the simulated rack's SSH server (internal/simsshd) starts the
// shell a `jobs shell` session would.
func LoginShell(configured string) string {
	for _, s := range []string{configured, os.Getenv("SHELL"), "/bin/bash", "/bin/sh"} {
		if s == "" {
			continue
		}
		if _, err := exec.LookPath(s); err == nil {
			return s
		}
	}
	return "/bin/sh"
}

// ExitStatus is how a session's process ended: its exit code (128+n when
// signal n killed it, as a shell reports it) and the signal's name if one
// did ("HUP", "KILL", …, the names SSH's exit-signal uses too). A nil
// state (the process never ran) is 127, a shell's "not found".
func ExitStatus(ps *os.ProcessState) (code int, signal string) {
	return exitCode(ps, nil)
}

// SessionsHearHangup makes the processes sessions start from now on take
// SIGHUP's default action even when this process was started with it
// ignored (under nohup): exec keeps an ignored signal ignored in the child
// but resets a caught one to its default, so SIGHUP is caught here, and
// dropped (this process still outlives its terminal). Hangup then ends a
// session's processes as a terminal's hang-up does.
func SessionsHearHangup() {
	hupOnce.Do(func() {
		if signal.Ignored(syscall.SIGHUP) {
			signal.Notify(make(chan os.Signal, 1), syscall.SIGHUP)
		}
	})
}

var hupOnce sync.Once

// Hangup ends the processes of a session whose process group leader is
// pid: SIGHUP to the group (as a terminal's hang-up does), then SIGKILL
// two seconds later unless exited is closed first. The job's command is
// in another process group and is never touched.
func Hangup(pid int, exited <-chan struct{}) {
	syscall.Kill(-pid, syscall.SIGHUP)
	syscall.Kill(-pid, syscall.SIGCONT)
	go func() {
		select {
		case <-exited:
		case <-time.After(2 * time.Second):
			syscall.Kill(-pid, syscall.SIGKILL)
		}
	}()
}
