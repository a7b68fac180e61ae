package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"

	"github.com/cosmicac/cosmicac/internal/agent/agentapi"
	"github.com/cosmicac/cosmicac/internal/agent/shellproto"
	"github.com/cosmicac/cosmicac/internal/fabric"
)

// signals a client may send by name.
var signals = map[string]syscall.Signal{
	"INT": syscall.SIGINT, "TERM": syscall.SIGTERM, "HUP": syscall.SIGHUP, "KILL": syscall.SIGKILL,
	"QUIT": syscall.SIGQUIT, "USR1": syscall.SIGUSR1, "USR2": syscall.SIGUSR2, "WINCH": syscall.SIGWINCH,
	"CONT": syscall.SIGCONT, "STOP": syscall.SIGSTOP, "TSTP": syscall.SIGTSTP,
}

func signalName(s syscall.Signal) string {
	for n, v := range signals {
		if v == s {
			return n
		}
	}
	return strconv.Itoa(int(s))
}

// session is one open shell session.
type session struct {
	info agentapi.SessionInfo
	cmd  *exec.Cmd
	tty  *os.File // the PTY's master, in TTY mode

	// ttyMu orders the PTY's ioctls (resize, the foreground process
	// group) before its close: os.File's Fd is not synchronised with
	// Close, and an ioctl on a closed descriptor number could reach a
	// file opened since.
	ttyMu     sync.Mutex
	ttyClosed bool

	stdin  io.WriteCloser // the process's stdin: the PTY master or a pipe
	once   sync.Once
	exited chan struct{} // closed once the process has been waited for
}

// ioctl runs f on the PTY unless it is closed.
func (s *session) ioctl(f func(tty *os.File)) {
	s.ttyMu.Lock()
	defer s.ttyMu.Unlock()
	if !s.ttyClosed {
		f(s.tty)
	}
}

// closeTTY closes the PTY once no ioctl runs on it.
func (s *session) closeTTY() {
	s.ttyMu.Lock()
	defer s.ttyMu.Unlock()
	if !s.ttyClosed {
		s.ttyClosed = true
		s.tty.Close()
	}
}

// hangup ends the session's processes (Hangup), once.
func (s *session) hangup() {
	s.once.Do(func() { Hangup(s.cmd.Process.Pid, s.exited) })
}

// loginShell is the shell of sessions without argv.
func (a *Agent) loginShell() string { return LoginShell(a.cfg.Shell) }

func checkOpen(p *shellproto.OpenParams) error {
	for _, e := range p.Env {
		if k, _, ok := strings.Cut(e, "="); !ok || k == "" || strings.ContainsRune(e, 0) {
			return fabric.Errorf(fabric.CodeBadRequest, "env %q: want NAME=value", e)
		}
	}
	for _, s := range p.Argv {
		if strings.ContainsRune(s, 0) {
			return fabric.Errorf(fabric.CodeBadRequest, "argv holds a NUL byte")
		}
	}
	if len(p.User) > 256 {
		return fabric.Errorf(fabric.CodeBadRequest, "user name too long")
	}
	return nil
}

func (a *Agent) handleShell(ctx context.Context, req *fabric.StreamRequest) error {
	var p shellproto.OpenParams
	if err := req.Decode(&p); err != nil {
		return err
	}
	if err := checkOpen(&p); err != nil {
		return err
	}
	a.mu.Lock()
	if a.closing {
		a.mu.Unlock()
		return fabric.Errorf(fabric.CodeUnavailable, "the agent is shutting down")
	}
	a.nextID++
	id := "s" + strconv.Itoa(a.nextID)
	a.sessionWG.Add(1)
	a.mu.Unlock()
	defer a.sessionWG.Done()

	if a.cfg.RefuseShells != "" {
		return a.refuseShell(req, id, p)
	}

	// The command.
	SessionsHearHangup()
	var cmd *exec.Cmd
	if len(p.Argv) == 0 {
		sh := a.loginShell()
		cmd = exec.Command(sh)
		cmd.Args = []string{"-" + filepath.Base(sh)} // a login shell, as login(1) starts it
	} else {
		cmd = exec.Command(p.Argv[0], p.Argv[1:]...)
	}
	cmd.Dir = a.workDir()
	cmd.Env = append(append(hostEnv(), a.cfg.Env...), "COSMICAC_SESSION="+id)
	if p.TTY {
		term := p.Term
		if term == "" {
			term = "xterm-256color"
		}
		cmd.Env = append(cmd.Env, "TERM="+term)
	}
	cmd.Env = append(cmd.Env, p.Env...)

	s := &session{cmd: cmd, exited: make(chan struct{}), info: agentapi.SessionInfo{ID: id, Peer: req.Peer.String(), User: p.User,
		Argv: p.Argv, TTY: p.TTY, StartedAt: time.Now()}}
	var (
		startErr      error
		stdoutR, errR *os.File
		pipeWs        []*os.File
	)
	if p.TTY {
		rows, cols := p.Rows, p.Cols
		if rows == 0 || cols == 0 {
			rows, cols = 24, 80
		}
		s.tty, startErr = pty.StartWithSize(cmd, &pty.Winsize{Rows: rows, Cols: cols})
		if startErr == nil {
			s.stdin = s.tty
		}
	} else {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		inR, inW, err1 := os.Pipe()
		outR, outW, err2 := os.Pipe()
		eR, eW, err3 := os.Pipe()
		if err := errors.Join(err1, err2, err3); err != nil {
			return fabric.Errorf(fabric.CodeInternal, "pipes: %v", err)
		}
		cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, eW
		pipeWs = []*os.File{inR, outW, eW}
		startErr = cmd.Start()
		for _, f := range pipeWs {
			f.Close()
		}
		if startErr != nil {
			inW.Close()
			outR.Close()
			eR.Close()
		} else {
			s.stdin, stdoutR, errR = inW, outR, eR
		}
	}

	var reply shellproto.OpenReply
	reply.Session = id
	if startErr == nil {
		reply.PID = cmd.Process.Pid
		s.info.PID = cmd.Process.Pid
	}
	st, err := req.Accept(reply)
	if err != nil {
		if startErr == nil {
			s.hangup()
			cmd.Wait()
			close(s.exited)
			if s.tty != nil {
				s.tty.Close()
			}
		}
		return err
	}
	w := shellproto.NewWriter(st)
	who := p.User
	if who == "" {
		who = "key " + req.Peer.Short()
	} else {
		who += " (via key " + req.Peer.Short() + ")"
	}
	mode := "pipes"
	if p.TTY {
		mode = "tty"
	}
	what := "login shell"
	if len(p.Argv) > 0 {
		what = strconv.Quote(strings.Join(p.Argv, " "))
	}
	if startErr != nil {
		// Like a shell: 127 for a command not found, 126 for one that
		// cannot be run.
		code := 127
		if errors.Is(startErr, os.ErrPermission) {
			code = 126
		}
		a.record("shell", "shell session %s by %s refused to start %s: %v", id, who, what, startErr)
		w.Data(shellproto.TypeStderr, []byte(fmt.Sprintf("cosmicac: %v\r\n", startErr)))
		w.Exit(shellproto.ExitStatus{Code: code, Error: startErr.Error()})
		return nil
	}

	a.mu.Lock()
	a.sessions[id] = s
	a.total++
	a.mu.Unlock()
	a.record("shell", "shell session %s opened by %s: %s (%s)", id, who, what, mode)
	a.changed()
	if a.cfg.Notice != "" {
		// Before any output, on stderr (a command's stdout stays its own).
		w.Data(shellproto.TypeStderr, []byte(lineEnds(a.cfg.Notice, p.TTY)))
	}

	// Output: the PTY, or stdout and stderr.
	var out sync.WaitGroup
	if p.TTY {
		out.Go(func() { io.Copy(shellproto.DataWriter{W: w, Type: shellproto.TypeStdout}, s.tty) })
	} else {
		out.Go(func() { io.Copy(shellproto.DataWriter{W: w, Type: shellproto.TypeStdout}, stdoutR) })
		out.Go(func() { io.Copy(shellproto.DataWriter{W: w, Type: shellproto.TypeStderr}, errR) })
	}

	// Input: frames from the client. The stream ending without the
	// process's exit means the client went away: hang the session up.
	exited := s.exited
	inDone := make(chan struct{})
	go func() {
		defer close(inDone)
		r := shellproto.NewReader(st)
		for {
			f, err := r.Next()
			if err != nil {
				select {
				case <-exited:
				default:
					s.hangup()
				}
				return
			}
			switch f.Type {
			case shellproto.TypeStdin:
				if _, err := s.stdin.Write(f.Payload); err != nil && !p.TTY {
					// The process closed its stdin; what follows is dropped.
					continue
				}
			case shellproto.TypeStdinEOF:
				if p.TTY {
					s.tty.Write([]byte{4}) // ^D: end of input to the line discipline
				} else {
					s.stdin.Close()
				}
			case shellproto.TypeResize:
				if p.TTY {
					rows, cols := f.Resize()
					s.ioctl(func(tty *os.File) { pty.Setsize(tty, &pty.Winsize{Rows: rows, Cols: cols}) })
				}
			case shellproto.TypeSignal:
				sig, ok := signals[string(f.Payload)]
				if !ok {
					continue
				}
				if p.TTY {
					// The foreground process group of the terminal.
					pgid := 0
					s.ioctl(func(tty *os.File) {
						if g, err := foreground(tty); err == nil {
							pgid = g
						}
					})
					if pgid > 0 {
						syscall.Kill(-pgid, sig)
						continue
					}
				}
				syscall.Kill(-cmd.Process.Pid, sig)
			}
		}
	}()

	werr := cmd.Wait()
	close(exited)
	code, sig := exitCode(cmd.ProcessState, werr)
	// The output left in the PTY or the pipes is read for at most a second:
	// a background child may hold them open.
	outDone := make(chan struct{})
	go func() { out.Wait(); close(outDone) }()
	select {
	case <-outDone:
	case <-time.After(time.Second):
		if s.tty != nil {
			s.tty.SetReadDeadline(time.Now())
		} else {
			stdoutR.SetReadDeadline(time.Now())
			errR.SetReadDeadline(time.Now())
		}
		<-outDone
	}
	if s.tty != nil {
		s.closeTTY()
	} else {
		stdoutR.Close()
		errR.Close()
		s.stdin.Close()
	}
	// The record comes first, so that a client that has read the exit
	// finds it in the log.
	a.mu.Lock()
	delete(a.sessions, id)
	a.mu.Unlock()
	a.record("shell", "shell session %s by %s closed after %s: exit code %d%s",
		id, who, time.Since(s.info.StartedAt).Round(time.Millisecond), code, suffix(sig, ""))
	a.changed()

	w.Exit(shellproto.ExitStatus{Code: code, Signal: sig})
	st.CloseWrite()
	// The client closes its half on reading the exit; do not wait forever.
	st.SetReadDeadline(time.Now().Add(10 * time.Second))
	<-inDone
	return nil
}

// foreground is the foreground process group of the terminal.
func foreground(tty *os.File) (int, error) {
	var pgid int
	sc, err := tty.SyscallConn()
	if err != nil {
		return 0, err
	}
	var ierr error
	err = sc.Control(func(fd uintptr) {
		pgid, ierr = ioctlGetPgrp(int(fd))
	})
	if err != nil {
		return 0, err
	}
	return pgid, ierr
}

// refuseShell answers a session the agent does not start
// (Config.RefuseShells): the message on stderr and exit code 126.
func (a *Agent) refuseShell(req *fabric.StreamRequest, id string, p shellproto.OpenParams) error {
	st, err := req.Accept(shellproto.OpenReply{Session: id})
	if err != nil {
		return err
	}
	w := shellproto.NewWriter(st)
	who := p.User
	if who == "" {
		who = "key " + req.Peer.Short()
	}
	a.record("shell", "shell session %s by %s refused: shells are turned off", id, who)
	w.Data(shellproto.TypeStderr, []byte(lineEnds(a.cfg.RefuseShells, p.TTY)))
	w.Exit(shellproto.ExitStatus{Code: 126, Error: "shells are turned off"})
	return nil
}

// lineEnds ends text with a newline, each a CR LF for a terminal (raw
// mode on the client's side).
func lineEnds(text string, tty bool) string {
	text = strings.TrimRight(text, "\n") + "\n"
	if tty {
		text = strings.ReplaceAll(text, "\n", "\r\n")
	}
	return text
}
