package agentapi

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/cosmicac/cosmicac/internal/agent/shellproto"
	"github.com/cosmicac/cosmicac/internal/fabric"
)

// Conn is an open shell stream: the framed messages of shellproto, both
// ways. *fabric.Stream is one; so is a relayed HTTP connection.
type Conn interface {
	io.ReadWriteCloser
	// CloseWrite ends the outgoing half.
	CloseWrite() error
}

// ShellDialer opens a shell session on a job's agent. The CLI's dialer asks
// the app-node (which checks that the caller may use the job and relays the
// stream to the agent); FabricDialer reaches an agent directly.
type ShellDialer interface {
	DialShell(ctx context.Context, jobID string, p shellproto.OpenParams) (Conn, shellproto.OpenReply, error)
}

// FabricDialer opens shells on one agent over the fabric: over the
// connection the agent opened to Node (the agent is dial-only), or at an
// address Node knows for Agent. Node's key must be one the agent admits.
type FabricDialer struct {
	Node  *fabric.Node
	Agent fabric.PublicKey
}

// DialShell implements ShellDialer; jobID is not checked (the agent serves
// one job).
func (d FabricDialer) DialShell(ctx context.Context, _ string, p shellproto.OpenParams) (Conn, shellproto.OpenReply, error) {
	var reply shellproto.OpenReply
	st, err := d.Node.OpenStream(ctx, d.Agent, MethodShell, p, &reply)
	if err != nil {
		return nil, reply, err
	}
	return st, reply, nil
}

// Size is a terminal size.
type Size struct{ Rows, Cols uint16 }

// SessionIO is the client's side of a session.
type SessionIO struct {
	// Stdin is sent to the session; at its end a StdinEOF frame is sent
	// (nil: none at once). In TTY mode typed control characters (^C, ^D,
	// ^Z) travel as bytes and the remote terminal turns them into signals.
	Stdin io.Reader
	// Stdout and Stderr receive the session's output (Stderr: pipe mode).
	Stdout, Stderr io.Writer
	// Resize carries new terminal sizes (SIGWINCH).
	Resize <-chan Size
	// Signals carries signal names to deliver to the remote process
	// ("INT" for a Ctrl-C caught locally in pipe mode).
	Signals <-chan string
}

// ErrNoExit is returned when a session's stream ends without an exit
// status (the connection to the agent was lost).
var ErrNoExit = errors.New("shell session ended without an exit status (connection to the agent lost)")

// RunSession runs the client side of an opened session until the remote
// process exits, and returns its exit status. It closes c. The goroutine
// reading io.Stdin may outlive it while that read blocks.
func RunSession(ctx context.Context, c Conn, sio SessionIO) (shellproto.ExitStatus, error) {
	defer c.Close()
	w := shellproto.NewWriter(c)
	done := make(chan struct{})
	defer close(done)
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()

	if sio.Stdin == nil {
		w.Frame(shellproto.TypeStdinEOF, nil)
	} else {
		go func() {
			buf := make([]byte, shellproto.ChunkSize)
			for {
				n, err := sio.Stdin.Read(buf)
				if n > 0 {
					if w.Frame(shellproto.TypeStdin, buf[:n]) != nil {
						return
					}
				}
				if err != nil {
					select {
					case <-done:
					default:
						w.Frame(shellproto.TypeStdinEOF, nil)
					}
					return
				}
			}
		}()
	}
	if sio.Resize != nil || sio.Signals != nil {
		go func() {
			for {
				select {
				case <-done:
					return
				case sz, ok := <-sio.Resize:
					if !ok {
						sio.Resize = nil
						continue
					}
					w.Frame(shellproto.TypeResize, shellproto.ResizePayload(sz.Rows, sz.Cols))
				case sig, ok := <-sio.Signals:
					if !ok {
						sio.Signals = nil
						continue
					}
					w.Frame(shellproto.TypeSignal, []byte(sig))
				}
			}
		}()
	}

	stdout, stderr := sio.Stdout, sio.Stderr
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = stdout
	}
	r := shellproto.NewReader(c)
	for {
		f, err := r.Next()
		if err != nil {
			if ctx.Err() != nil {
				return shellproto.ExitStatus{}, ctx.Err()
			}
			if err == io.EOF {
				return shellproto.ExitStatus{}, ErrNoExit
			}
			return shellproto.ExitStatus{}, fmt.Errorf("shell session: %w", err)
		}
		switch f.Type {
		case shellproto.TypeStdout:
			if _, err := stdout.Write(f.Payload); err != nil {
				return shellproto.ExitStatus{}, err
			}
		case shellproto.TypeStderr:
			if _, err := stderr.Write(f.Payload); err != nil {
				return shellproto.ExitStatus{}, err
			}
		case shellproto.TypeExit:
			return f.Exit(), nil
		default:
			return shellproto.ExitStatus{}, fmt.Errorf("shell session: unexpected frame %q from the agent", f.Type)
		}
	}
}
