package inferagent

import (
	"context"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/cosmicac/cosmicac/internal/agent/agentapi"
	"github.com/cosmicac/cosmicac/internal/cosmic"
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
	// Files are written (0600, their directories 0700) before the start.
	Files []File
	// Stdout and Stderr receive the runtime's output.
	Stdout, Stderr io.Writer
}

// File is a file a runtime reads at its start.
type File struct {
	Path    string
	Content []byte
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

// Launcher starts runtimes. A launcher of a simulated runtime also has
// Simulated() bool, answering true: the agent's log then says no model
// server ran.
type Launcher interface {
	Start(ctx context.Context, l Launch) (Process, error)
}

// ---- exec: the real runtime, a child process

// ExecLauncher runs the command as a child process in its own process group.
type ExecLauncher struct{}

// Start implements Launcher.
func (ExecLauncher) Start(ctx context.Context, l Launch) (Process, error) {
	for _, f := range l.Files {
		if err := os.MkdirAll(filepath.Dir(f.Path), 0o700); err != nil {
			return nil, err
		}
		if err := os.WriteFile(f.Path, f.Content, 0o600); err != nil {
			return nil, err
		}
		if err := os.Chmod(f.Path, 0o600); err != nil { // an older file keeps its mode through WriteFile
			return nil, err
		}
	}
	cmd := exec.Command(l.Command.Path, l.Command.Args...)
	cmd.Env = append(os.Environ(), l.Env...)
	cmd.Stdout, cmd.Stderr = l.Stdout, l.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &execProcess{cmd: cmd, done: make(chan struct{})}
	if l.Role == agentapi.PlacementHead {
		p.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(portOf(l.Placement)))
		if l.Placement.Socket != "" {
			p.addr = l.Placement.Socket
		}
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
