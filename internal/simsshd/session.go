package simsshd

import (
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
	"github.com/pkg/sftp"
	"golang.org/x/crypto/ssh"

	"github.com/cosmicac/cosmicac/internal/agent"
)

// The payloads of the session requests served (RFC 4254, section 6).
type (
	ptyRequest struct {
		Term                 string
		Cols, Rows, Wpx, Hpx uint32
		Modes                string
	}
	windowChange struct {
		Cols, Rows, Wpx, Hpx uint32
	}
	envRequest struct {
		Name, Value string
	}
	execRequest struct {
		Command string
	}
	exitStatus struct {
		Status uint32
	}
	exitSignal struct {
		Signal     string
		CoreDumped bool
		Message    string
		Lang       string
	}
)

// session serves one session channel: its requests until the client
// closes it, and the one process that a shell or exec request starts.
func (s *Server) session(sc *ssh.ServerConn, ch ssh.Channel, reqs <-chan *ssh.Request) {
	var in sync.WaitGroup
	defer in.Wait() // after the channel is closed, which ends its reads
	defer ch.Close()
	var (
		pr  *ptyRequest
		env []string
		p   *process
		sub chan struct{} // closed once the sftp subsystem has ended
	)
	for req := range reqs {
		ok := false
		switch req.Type {
		case "pty-req":
			var r ptyRequest
			if p == nil && ssh.Unmarshal(req.Payload, &r) == nil {
				pr, ok = &r, true
			}
		case "window-change":
			var r windowChange
			if pr != nil && ssh.Unmarshal(req.Payload, &r) == nil {
				pr.Cols, pr.Rows, pr.Wpx, pr.Hpx = r.Cols, r.Rows, r.Wpx, r.Hpx
				if p != nil {
					p.resize(pr)
				}
				ok = true
			}
		case "env":
			var r envRequest
			if p == nil && ssh.Unmarshal(req.Payload, &r) == nil && validEnv(r.Name, r.Value) {
				env, ok = append(env, r.Name+"="+r.Value), true
			}
		case "shell", "exec":
			if p != nil || sub != nil {
				break // one process a channel
			}
			var command *string
			if req.Type == "exec" {
				var r execRequest
				if ssh.Unmarshal(req.Payload, &r) != nil || strings.ContainsRune(r.Command, 0) {
					break
				}
				command = &r.Command
			}
			var err error
			if p, err = s.start(sc, ch, pr, env, command); err != nil {
				fmt.Fprintf(ch.Stderr(), "cosmicac: %v\r\n", err)
				break
			}
			ok = true
		case "subsystem":
			var r execRequest // a subsystem's name has the layout of a command
			if p == nil && sub == nil && ssh.Unmarshal(req.Payload, &r) == nil && r.Command == "sftp" {
				ok = true
			}
		}
		// Anything else (other subsystems, x11-req,
		// auth-agent-req@openssh.com, signal, …) is refused.
		if req.WantReply {
			req.Reply(ok, nil)
		}
		if ok && req.Type == "subsystem" {
			done := make(chan struct{})
			sub = done
			s.wg.Go(func() { defer close(done); s.sftp(sc, ch) })
		}
		// The process's output starts once its request is answered, so
		// that a client never sees the exit before the reply.
		if ok && (req.Type == "shell" || req.Type == "exec") {
			p.run(ch, &in)
		}
	}
	// The channel is gone (the client closed it or the connection
	// dropped): hang up what still runs.
	if p != nil {
		select {
		case <-p.exited:
		default:
			agent.Hangup(p.cmd.Process.Pid, p.exited)
		}
		<-p.done
	}
	if sub != nil {
		<-sub
	}
}

// sftp serves the sftp subsystem on ch (which scp uses too, since
// OpenSSH 9.0) until the client ends it, with paths relative to the
// replica's home and the platform's user's permissions, as a shell has.
func (s *Server) sftp(sc *ssh.ServerConn, ch ssh.Channel) {
	s.mu.Lock()
	s.nextID++
	id := "ssh" + strconv.Itoa(s.nextID)
	s.mu.Unlock()
	started, w := time.Now(), who(sc)
	srv, err := sftp.NewServer(ch, sftp.WithServerWorkingDirectory(s.cfg.Dir))
	if err != nil {
		s.record("ssh session %s by %s refused to start sftp: %v", id, w, err)
		ch.Close()
		return
	}
	s.record("ssh session %s opened by %s: sftp", id, w)
	code := 0
	if err := srv.Serve(); err != nil && !errors.Is(err, io.EOF) {
		code = 1
		s.cfg.Log.Debug("sftp ended", "session", id, "err", err)
	}
	s.record("ssh session %s by %s closed after %s: exit code %d", id, w, time.Since(started).Round(time.Millisecond), code)
	ch.SendRequest("exit-status", false, ssh.Marshal(exitStatus{Status: uint32(code)}))
	srv.Close() // and the channel
}

// validEnv refuses names a process environment cannot hold.
func validEnv(name, value string) bool {
	return name != "" && !strings.ContainsAny(name, "=\x00") && !strings.ContainsRune(value, 0)
}

// process is a session's shell or command.
type process struct {
	s       *Server
	cmd     *exec.Cmd
	id      string
	who     string
	what    string
	started time.Time

	mu    sync.Mutex
	tty   *os.File // the PTY's master with a pty-req; nil once closed
	stdin io.WriteCloser

	exited chan struct{} // closed once the process has been waited for
	done   chan struct{} // closed once its exit has been sent
}

// start starts the login shell, or the login shell running command with
// -c (as sshd does), as this process's user in the replica's home.
func (s *Server) start(sc *ssh.ServerConn, ch ssh.Channel, pr *ptyRequest, env []string, command *string) (*process, error) {
	s.mu.Lock()
	s.nextID++
	id := "ssh" + strconv.Itoa(s.nextID)
	s.mu.Unlock()
	sh := agent.LoginShell(s.cfg.Shell)
	p := &process{s: s, id: id, who: who(sc), what: "login shell", started: time.Now(),
		exited: make(chan struct{}), done: make(chan struct{})}
	agent.SessionsHearHangup()
	if command == nil {
		p.cmd = exec.Command(sh)
		p.cmd.Args = []string{"-" + filepath.Base(sh)} // a login shell, as login(1) starts it
	} else {
		p.cmd = exec.Command(sh, "-c", *command)
		p.what = strconv.Quote(*command)
	}
	p.cmd.Dir = s.cfg.Dir
	p.cmd.Env = append(append(os.Environ(), s.cfg.Env...), "COSMICAC_SESSION="+id,
		"SSH_CONNECTION="+strings.ReplaceAll(sc.RemoteAddr().String(), ":", " ")+" "+strings.ReplaceAll(sc.LocalAddr().String(), ":", " "))
	mode := "pipes"
	if pr != nil {
		mode = "tty"
		term := pr.Term
		if term == "" {
			term = "xterm-256color"
		}
		p.cmd.Env = append(p.cmd.Env, "TERM="+term)
	}
	p.cmd.Env = append(p.cmd.Env, env...)
	var err error
	if pr != nil {
		// pty.Start makes the shell a session leader with the PTY as its
		// controlling terminal: its pid is its process group.
		p.tty, err = pty.StartWithSize(p.cmd, winsize(pr))
		p.stdin = p.tty
	} else {
		p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		p.cmd.Stdout, p.cmd.Stderr = ch, ch.Stderr()
		// A background child holding stdout open delays the exit by at
		// most this much.
		p.cmd.WaitDelay = time.Second
		if p.stdin, err = p.cmd.StdinPipe(); err == nil {
			err = p.cmd.Start()
		}
	}
	if err != nil {
		s.record("ssh session %s by %s refused to start %s: %v", id, p.who, p.what, err)
		return nil, err
	}
	s.record("ssh session %s opened by %s: %s (%s)", id, p.who, p.what, mode)
	return p, nil
}

func winsize(pr *ptyRequest) *pty.Winsize {
	rows, cols := pr.Rows, pr.Cols
	if rows == 0 || cols == 0 {
		rows, cols = 24, 80
	}
	return &pty.Winsize{Rows: uint16(rows), Cols: uint16(cols), X: uint16(pr.Wpx), Y: uint16(pr.Hpx)}
}

func (p *process) resize(pr *ptyRequest) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty != nil {
		pty.Setsize(p.tty, winsize(pr))
	}
}

// run copies the channel to the process's input (until the client's EOF
// or the channel's close; in is its owner) and, in the background, the
// PTY to the channel, then waits for the process and sends its exit.
func (p *process) run(ch ssh.Channel, in *sync.WaitGroup) {
	pipes := p.tty == nil
	in.Go(func() {
		io.Copy(p.stdin, ch)
		if pipes {
			p.stdin.Close() // the client's EOF; a PTY's master stays open
		}
	})
	p.s.wg.Go(func() {
		defer close(p.done)
		var out sync.WaitGroup
		if p.tty != nil {
			out.Go(func() { io.Copy(ch, p.tty) })
		}
		p.cmd.Wait()
		close(p.exited)
		if p.tty != nil {
			// The output left in the PTY is read for at most a second: a
			// background child may hold it open.
			outDone := make(chan struct{})
			go func() { out.Wait(); close(outDone) }()
			select {
			case <-outDone:
			case <-time.After(time.Second):
				p.tty.SetReadDeadline(time.Now())
				<-outDone
			}
			p.mu.Lock()
			p.tty.Close()
			p.tty = nil
			p.mu.Unlock()
		}
		code, sig := agent.ExitStatus(p.cmd.ProcessState)
		detail := ""
		if sig != "" {
			detail = " (signal " + sig + ")"
		}
		p.s.record("ssh session %s by %s closed after %s: exit code %d%s",
			p.id, p.who, time.Since(p.started).Round(time.Millisecond), code, detail)
		ch.CloseWrite()
		if _, err := strconv.Atoi(sig); sig != "" && err != nil {
			ch.SendRequest("exit-signal", false, ssh.Marshal(exitSignal{Signal: sig}))
		} else {
			ch.SendRequest("exit-status", false, ssh.Marshal(exitStatus{Status: uint32(code)}))
		}
		ch.Close()
	})
}
