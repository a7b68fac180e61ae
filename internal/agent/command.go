package agent

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cosmicac/cosmicac/internal/agent/agentapi"
	"github.com/cosmicac/cosmicac/internal/joblog"
)

// runCommand runs the job's command once, with the config's environment,
// sending each output line as an application record; on ctx's end it
// sends SIGTERM to its process group, then SIGKILL after 10 s.
func (a *Agent) runCommand(ctx context.Context, done chan struct{}) {
	defer close(done)
	cfg := a.cfg
	st := &agentapi.CommandStatus{Argv: append([]string(nil), cfg.Command...), State: agentapi.CommandRunning, StartedAt: time.Now()}
	a.mu.Lock()
	a.command = st
	a.mu.Unlock()

	var tailMu sync.Mutex
	addTail := func(line string) {
		tailMu.Lock()
		defer tailMu.Unlock()
		a.mu.Lock()
		st.Tail = append(st.Tail, line)
		if len(st.Tail) > agentapi.TailLines {
			st.Tail = st.Tail[len(st.Tail)-agentapi.TailLines:]
		}
		a.mu.Unlock()
	}
	finish := func(code int, sig, errMsg string) {
		now := time.Now()
		a.mu.Lock()
		st.State, st.ExitCode, st.Signal, st.Error, st.EndedAt = agentapi.CommandExited, &code, sig, errMsg, &now
		a.mu.Unlock()
		ok := code == 0
		a.cfg.Logs.Emit(joblog.Record{Time: now, JobID: cfg.JobID, Team: cfg.Team, Replica: cfg.Replica,
			Source: joblog.SourceSystem, Stream: Component, Step: "command_exit", OK: &ok,
			Line: fmt.Sprintf("command %q exited with code %d%s", strings.Join(cfg.Command, " "), code, suffix(sig, errMsg))})
		a.changed()
	}

	cmd := exec.Command(cfg.Command[0], cfg.Command[1:]...)
	cmd.Env = append(hostEnv(), cfg.Env...)
	cmd.Dir = a.workDir()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	outR, outW, err := os.Pipe()
	if err != nil {
		finish(127, "", err.Error())
		return
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		finish(127, "", err.Error())
		return
	}
	cmd.Stdout, cmd.Stderr = outW, errW
	if err := cmd.Start(); err != nil {
		outR.Close()
		outW.Close()
		errR.Close()
		errW.Close()
		code := 127
		if errors.Is(err, os.ErrPermission) {
			code = 126
		}
		finish(code, "", err.Error())
		return
	}
	outW.Close()
	errW.Close()
	a.mu.Lock()
	st.PID = cmd.Process.Pid
	a.mu.Unlock()
	a.record("command_start", "command %q started (pid %d)", strings.Join(cfg.Command, " "), cmd.Process.Pid)
	a.changed()

	var readers sync.WaitGroup
	for _, p := range []struct {
		r      *os.File
		stream string
	}{{outR, "stdout"}, {errR, "stderr"}} {
		readers.Go(func() {
			defer p.r.Close()
			readLines(p.r, func(line string) {
				addTail(line)
				a.cfg.Logs.Emit(joblog.Record{Time: time.Now(), JobID: cfg.JobID, Team: cfg.Team, Replica: cfg.Replica,
					Source: joblog.SourceApplication, Stream: p.stream, Line: line})
			})
		})
	}
	waited := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
			select {
			case <-waited:
			case <-time.After(10 * time.Second):
				syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			}
		case <-waited:
		}
	}()
	err = cmd.Wait()
	close(waited)
	// Output of children that outlive the command is read for at most a
	// second more.
	rd := make(chan struct{})
	go func() { readers.Wait(); close(rd) }()
	select {
	case <-rd:
	case <-time.After(time.Second):
		outR.SetReadDeadline(time.Now())
		errR.SetReadDeadline(time.Now())
		<-rd
	}
	code, sig := exitCode(cmd.ProcessState, err)
	// What the job wrote goes back before its end is told: the end stops
	// the replica (docs/data.md). A push that fails keeps the files
	// where they are and fails the replica, saying so.
	if ctx.Err() == nil {
		if failure := a.pushVolumes(ctx); failure != nil {
			a.mu.Lock()
			a.failure = failure
			a.mu.Unlock()
		}
	}
	finish(code, sig, "")
}

func suffix(sig, errMsg string) string {
	s := ""
	if sig != "" {
		s += " (signal " + sig + ")"
	}
	if errMsg != "" {
		s += ": " + errMsg
	}
	return s
}

// readLines calls f with each line of r (without its newline); lines
// longer than 64 KiB are split.
func readLines(r io.Reader, f func(string)) {
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			f(strings.TrimRight(string(line), "\r\n"))
		}
		if err != nil && err != bufio.ErrBufferFull {
			return
		}
	}
}

// exitCode is a process's exit code as a shell reports it.
func exitCode(ps *os.ProcessState, err error) (int, string) {
	if ps == nil {
		return 127, ""
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal()), signalName(ws.Signal())
	}
	return ps.ExitCode(), ""
}

func (a *Agent) workDir() string {
	if a.cfg.WorkDir != "" {
		return a.cfg.WorkDir
	}
	if h, err := os.UserHomeDir(); err == nil {
		if fi, err := os.Stat(h); err == nil && fi.IsDir() {
			return h
		}
	}
	return "/"
}
