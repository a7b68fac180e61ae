package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/cosmicac/cosmicac/internal/agent/agentapi"
	"github.com/cosmicac/cosmicac/internal/agent/shellproto"
	"github.com/cosmicac/cosmicac/internal/fabric"
)

func (a *App) jobsShellCommand(conn *connFlags) *cobra.Command {
	var (
		forceTTY, noTTY bool
		env             []string
		agentPeer       string
		keyFile         string
	)
	cmd := &cobra.Command{
		Use:   "shell JOB [-- COMMAND...]",
		Short: "Open a shell (or run a command) in a GPU container job's VM",
		Long: "Open an interactive shell in the VM of a GPU container job, or run COMMAND there, through\n" +
			"the instance agent inside the VM (peer to peer over the fabric; no port is opened on the\n" +
			"cluster). A terminal is allocated when stdin and stdout are terminals (-t forces one, -T\n" +
			"turns it off); the window size follows yours, and Ctrl-C reaches the remote process. Without\n" +
			"a terminal stdin is piped to the command and its stdout and stderr stay apart. The remote\n" +
			"exit code is the exit code. Closing the shell never stops the job.",
		Example: "  cosmicac jobs shell 3f2a\n" +
			"  cosmicac jobs shell 3f2a -- nvidia-smi\n" +
			"  printf 'a\\nb\\n' | cosmicac jobs shell 3f2a -- wc -l",
		Args:              cobra.MinimumNArgs(1),
		ValidArgsFunction: a.completeJobIDs(conn),
		RunE: func(cmd *cobra.Command, args []string) error {
			if forceTTY && noTTY {
				return UsageErrorf("-t and -T contradict each other")
			}
			if dash := cmd.ArgsLenAtDash(); dash > 1 || dash < 0 && len(args) > 1 {
				return UsageErrorf("give the command after --: cosmicac jobs shell JOB -- COMMAND...")
			}
			for _, e := range env {
				if k, _, ok := strings.Cut(e, "="); !ok || k == "" {
					return UsageErrorf("--env %q: want NAME=value", e)
				}
			}
			jobID := args[0]
			var dialer agentapi.ShellDialer
			if agentPeer != "" {
				// Straight to an agent that listens (operators, development).
				n, key, err := a.agentNode(agentPeer, keyFile)
				if err != nil {
					return err
				}
				defer n.Close()
				dialer = agentapi.FabricDialer{Node: n, Agent: key}
			} else {
				var err error
				if dialer, jobID, err = a.relay(cmd.Context(), conn, jobID); err != nil {
					return err
				}
			}
			code, err := a.runShell(cmd.Context(), dialer, jobID, shellOptions{argv: args[1:], forceTTY: forceTTY, noTTY: noTTY, env: env})
			if err != nil {
				return err
			}
			if code != 0 {
				return &exitError{code: code, err: silentExit{code}}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVarP(&forceTTY, "tty", "t", false, "allocate a terminal even when stdin is not one")
	f.BoolVarP(&noTTY, "no-tty", "T", false, "never allocate a terminal")
	f.StringArrayVarP(&env, "env", "e", nil, "set NAME=value in the remote environment (repeatable)")
	f.StringVar(&agentPeer, "agent", "", "reach the agent directly at KEY@HOST:PORT over the fabric instead of through the API")
	f.StringVar(&keyFile, "key-file", "", "with --agent: the CLI's key file (default: ~/.config/cosmicac/identity.key)")
	return cmd
}

// agentNode is a fabric node of the CLI's (keyFile, LoadCLIIdentity) that
// reaches only the agent at peer, KEY@HOST:PORT (--agent), and the agent's
// key: shell and ssh reach an agent that listens without the API. The
// caller closes the node.
func (a *App) agentNode(peer, keyFile string) (*fabric.Node, fabric.PublicKey, error) {
	key, addrs, err := ParsePeerFlag("agent", peer)
	if err != nil {
		return nil, key, err
	}
	id, err := a.LoadCLIIdentity(keyFile)
	if err != nil {
		return nil, key, err
	}
	n, err := fabric.New(fabric.Config{Component: "cli", Identity: id, Policy: fabric.NewAllowList(key)})
	if err != nil {
		return nil, key, err
	}
	n.AddAddrs(key, addrs...)
	return n, key, nil
}

// relay is the API's relay to the agent of the job that arg names
// (resolveJobID), and the job's ID: shell and ssh reach an agent through it.
func (a *App) relay(ctx context.Context, conn *connFlags, arg string) (agentapi.HTTPShellDialer, string, error) {
	c, err := a.connect(conn)
	if err != nil {
		return agentapi.HTTPShellDialer{}, "", err
	}
	id, err := c.resolveJobID(ctx, arg)
	if err != nil {
		return agentapi.HTTPShellDialer{}, "", err
	}
	cfg, _ := a.clientConfig(conn)
	return agentapi.HTTPShellDialer{BaseURL: c.url, Token: cfg.Token}, id, nil
}

// silentExit is the remote command's non-zero exit: nothing to print.
type silentExit struct{ code int }

func (e silentExit) Error() string { return fmt.Sprintf("remote command exited with code %d", e.code) }

// Silent tells the root command not to print the error: the exit code is
// the remote command's own, as ssh reports it.
func (e silentExit) Silent() bool { return true }

type shellOptions struct {
	argv            []string
	forceTTY, noTTY bool
	env             []string
}

// runShell opens the session and runs it on the app's streams; it returns
// the remote exit code.
func (a *App) runShell(ctx context.Context, dialer agentapi.ShellDialer, jobID string, o shellOptions) (int, error) {
	inFile, _ := a.Stdin.(*os.File)
	outFile, _ := a.Stdout.(*os.File)
	inTerm := inFile != nil && term.IsTerminal(int(inFile.Fd()))
	outTerm := outFile != nil && term.IsTerminal(int(outFile.Fd()))
	tty := !o.noTTY && (o.forceTTY || inTerm && outTerm)
	// fd is the terminal whose size the remote one takes and follows, if
	// any.
	fd := -1
	if tty && outTerm {
		fd = int(outFile.Fd())
	} else if tty && inTerm {
		fd = int(inFile.Fd())
	}

	p := shellproto.OpenParams{Argv: o.argv, TTY: tty, Env: o.env}
	if tty {
		p.Term = a.Getenv("TERM")
		if fd >= 0 {
			if w, h, err := term.GetSize(fd); err == nil {
				p.Cols, p.Rows = uint16(w), uint16(h)
			}
		}
	}
	// The session outlives the root context's cancellation on SIGINT: in a
	// terminal Ctrl-C is a byte for the remote side, and otherwise it is
	// forwarded as a signal.
	sctx := context.WithoutCancel(ctx)
	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	c, _, err := dialer.DialShell(octx, jobID, p)
	cancel()
	if err != nil {
		return 0, WithExit(ExitFailure, fmt.Errorf("open a shell in job %s: %w", jobID, relayError(err)))
	}

	sio := agentapi.SessionIO{Stdin: a.Stdin, Stdout: a.Stdout, Stderr: a.Stderr}
	if tty && inTerm {
		old, err := term.MakeRaw(int(inFile.Fd()))
		if err == nil {
			defer term.Restore(int(inFile.Fd()), old)
		}
	}
	if fd >= 0 {
		resize := make(chan agentapi.Size, 1)
		winch := make(chan os.Signal, 1)
		signal.Notify(winch, syscall.SIGWINCH)
		defer signal.Stop(winch)
		done := make(chan struct{})
		defer close(done)
		go func() {
			for {
				select {
				case <-done:
					return
				case <-winch:
					if w, h, err := term.GetSize(fd); err == nil {
						select {
						case resize <- agentapi.Size{Rows: uint16(h), Cols: uint16(w)}:
						default:
						}
					}
				}
			}
		}()
		sio.Resize = resize
	}
	// SIGINT (and TERM, HUP) caught here go to the remote process.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	fwd := make(chan string, 4)
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			select {
			case <-done:
				return
			case s := <-sigs:
				name := "INT"
				switch s {
				case syscall.SIGTERM:
					name = "TERM"
				case syscall.SIGHUP:
					name = "HUP"
				}
				select {
				case fwd <- name:
				default:
				}
			}
		}
	}()
	sio.Signals = fwd

	es, err := agentapi.RunSession(sctx, c, sio)
	if err != nil {
		if errors.Is(err, io.ErrClosedPipe) {
			err = agentapi.ErrNoExit
		}
		return 0, WithExit(ExitFailure, err)
	}
	return es.Code, nil
}

// relayError words a refused relay as the API client's errors are: a
// token the API does not take is the same "not logged in".
func relayError(err error) error {
	var he *agentapi.HTTPError
	if errors.As(err, &he) && he.Status == http.StatusUnauthorized {
		return fmt.Errorf("not logged in or token invalid: run `cosmicac login` (%s)", he.Message)
	}
	return err
}
