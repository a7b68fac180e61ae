package inferagent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/simruntime"
)

// Launch is what a Launcher starts: the command line, and the facts it was
// built from (the simulated launcher reads those instead of the argv).
type Launch struct {
	Command   Command
	Inference cosmic.InferenceSpec
	Placement Placement
	Role      string
	// Env is added to the agent's environment (NAME=value each).
	Env []string
	// Stdout and Stderr receive the runtime's output.
	Stdout, Stderr io.Writer
}

// Process is a started runtime.
type Process interface {
	// Addr is where the runtime serves HTTP (host:port); "" for a headless
	// worker.
	Addr() string
	// Done is closed when the runtime has exited; Err then says why.
	Done() <-chan struct{}
	Err() error
	// Stop asks the runtime to exit (SIGTERM), and kills it after grace.
	Stop(grace time.Duration)
}

// Launcher starts runtimes.
type Launcher interface {
	Start(ctx context.Context, l Launch) (Process, error)
}

// ---- exec: the real runtime, a child process

// ExecLauncher runs the command as a child process in its own process group.
type ExecLauncher struct{}

// Start implements Launcher.
func (ExecLauncher) Start(ctx context.Context, l Launch) (Process, error) {
	cmd := exec.Command(l.Command.Path, l.Command.Args...)
	cmd.Env = append(os.Environ(), l.Env...)
	cmd.Stdout, cmd.Stderr = l.Stdout, l.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &execProcess{cmd: cmd, done: make(chan struct{})}
	if l.Role == RoleHead {
		p.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(portOf(l.Placement)))
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func portOf(p Placement) int {
	if p.Port == 0 {
		return DefaultPort
	}
	return p.Port
}

type execProcess struct {
	cmd  *exec.Cmd
	addr string
	done chan struct{}
	err  error
}

func (p *execProcess) Addr() string          { return p.addr }
func (p *execProcess) Done() <-chan struct{} { return p.done }
func (p *execProcess) Err() error            { return p.err }

func (p *execProcess) Stop(grace time.Duration) {
	pg := -p.cmd.Process.Pid
	syscall.Kill(pg, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		syscall.Kill(pg, syscall.SIGKILL)
		<-p.done
	}
}

// ---- simulated: simruntime in-process

// SimLauncher starts simruntime in the agent's process instead of the
// command (the simulated rack has no GPU and no vLLM). The head serves on
// 127.0.0.1 at an ephemeral port (many replicas share the host); a
// worker only says it joined. It writes vLLM-like startup lines, saying
// plainly that the runtime is simulated, and an access log line per request.
type SimLauncher struct {
	// Config is the template of each runtime: delays, faults, load time.
	// Runtime, Model and ServedModelName come from the spec.
	Config simruntime.Config

	mu   sync.Mutex
	last *simruntime.Running
}

// Runtime is the runtime the launcher started last (nil before), for fault
// injection in tests.
func (s *SimLauncher) Runtime() *simruntime.Running {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}

// Start implements Launcher.
func (s *SimLauncher) Start(ctx context.Context, l Launch) (Process, error) {
	out := l.Stdout
	if out == nil {
		out = io.Discard
	}
	fmt.Fprintf(out, "INFO [cosmicac-simulated] this is a SIMULATED runtime: no model is loaded and replies are deterministic text\n")
	fmt.Fprintf(out, "INFO [cosmicac-simulated] on a GPU node the agent would run: %s\n", l.Command)
	p := &simProcess{done: make(chan struct{})}
	if l.Role != RoleHead {
		fmt.Fprintf(out, "INFO [cosmicac-simulated] headless worker (node rank %d) joined the head at %s\n", l.Placement.VMIIndex, first(l.Placement.Hosts))
		return p, nil
	}
	cfg := s.Config
	cfg.Runtime = string(l.Inference.Runtime)
	if cfg.Runtime == "" {
		cfg.Runtime = simruntime.RuntimeVLLM
	}
	cfg.Model, cfg.ServedModelName = l.Inference.Model, ServedModelName(l.Inference)
	cfg.AccessLog = out
	r, err := simruntime.Start("127.0.0.1:0", simruntime.New(cfg))
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "INFO:     Started server process [%d]\nINFO:     Uvicorn running on %s (Press CTRL+C to quit)\n", os.Getpid(), r.URL())
	p.run = r
	s.mu.Lock()
	s.last = r
	s.mu.Unlock()
	go func() {
		<-r.Done()
		p.once.Do(func() {
			p.err = errors.New("simulated runtime stopped")
			close(p.done)
		})
	}()
	return p, nil
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

type simProcess struct {
	run  *simruntime.Running
	once sync.Once
	done chan struct{}
	err  error
}

func (p *simProcess) Addr() string {
	if p.run == nil {
		return ""
	}
	return p.run.Addr()
}
func (p *simProcess) Done() <-chan struct{} { return p.done }
func (p *simProcess) Err() error            { return p.err }
func (p *simProcess) Stop(time.Duration) {
	if p.run != nil {
		p.run.Close()
	}
	p.once.Do(func() {
		p.err = errors.New("stopped")
		close(p.done)
	})
}
