// Package cli is the cosmicac command tree's root (Main, App, Register,
// the exit codes) and the user verbs (jobs, racks, keys, rpc, login, ...),
// which reach the platform through internal/client (and the fabric for
// keys, rpc and shells) and link no server (archtest). The component
// commands (app-node, wrk-ork, the workers, up, ...) are
// internal/cli/components', which add themselves with Register;
// cmd/cosmicac links both, and the tests of internal/cli/clitest and
// internal/cli/systest run the tree.
//
// Exit codes: 0 success, 1 the operation failed (the error is printed on
// stderr), 2 the command line was wrong, 3 a waited-for job ended failed,
// 130 interrupted.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/cosmicac/cosmicac/internal/version"
)

// Exit codes.
const (
	ExitOK          = 0
	ExitFailure     = 1
	ExitUsage       = 2
	ExitJobFailed   = 3
	ExitInterrupted = 130
)

// exitError carries an exit code through cobra.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// UsageErrorf reports a wrong command line (exit 2).
func UsageErrorf(format string, args ...any) error {
	return &exitError{code: ExitUsage, err: fmt.Errorf(format, args...)}
}

// WithExit attaches an exit code to err.
func WithExit(code int, err error) error {
	if err == nil {
		return nil
	}
	return &exitError{code: code, err: err}
}

// App is what every command shares: the streams, so tests can capture them.
type App struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	Getenv         func(string) string
	// noColor is --no-color.
	noColor bool
}

// color says whether to paint what goes to stdout: only a terminal, and
// neither --no-color nor NO_COLOR (https://no-color.org) nor TERM=dumb.
func (a *App) color() bool {
	return !a.noColor && a.Getenv("NO_COLOR") == "" && a.Getenv("TERM") != "dumb" && a.stdoutTerminal()
}

// stdoutTerminal says whether stdout is a terminal.
func (a *App) stdoutTerminal() bool {
	f, ok := a.Stdout.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// Main runs the command line and returns the process exit code.
func Main(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	a := &App{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv}
	return a.Run(ctx, args)
}

// Run runs the command line args and returns the exit code.
func (a *App) Run(ctx context.Context, args []string) int {
	root := a.RootCommand()
	root.SetArgs(args)
	root.SetIn(a.Stdin)
	root.SetOut(a.Stdout)
	root.SetErr(a.Stderr)
	return a.report(ctx, root.ExecuteContext(ctx))
}

// report prints a command's error, unless it is Silent (a remote exit code
// that is the exit code), and returns the exit code.
func (a *App) report(ctx context.Context, err error) int {
	if err == nil {
		return ExitOK
	}
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		return ExitInterrupted // Ctrl-C: the user knows
	}
	var silent interface{ Silent() bool }
	if !errors.As(err, &silent) || !silent.Silent() {
		fmt.Fprintln(a.Stderr, "error:", err)
	}
	var ee *exitError
	var coded interface{ ExitCode() int } // another package's, as agentcmd.UsageError
	switch {
	case errors.As(err, &ee):
		return ee.code
	case errors.As(err, &coded):
		return coded.ExitCode()
	case ctx.Err() != nil:
		return ExitInterrupted
	case isCobraUsageError(err):
		return ExitUsage
	default:
		return ExitFailure
	}
}

// RootCommand is the command tree: every command registered with Register.
func (a *App) RootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "cosmicac",
		Short:         "CosmicAC runs GPU workloads on your own Kubernetes cluster",
		Long:          "CosmicAC runs GPU Container Jobs and Managed Inference Jobs as KubeVirt GPU VMs on your own\nKubernetes cluster. `cosmicac up` runs the whole platform on one machine with a simulated rack.",
		Version:       version.String(),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().BoolVar(&a.noColor, "no-color", false, "never color the output (also NO_COLOR=1)")
	// --version says what cosmicac version says, not cobra's one line.
	root.SetVersionTemplate(version.Long())
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return UsageErrorf("%v\nSee '%s --help'.", err, c.CommandPath())
	})
	for _, add := range commandBuilders {
		root.AddCommand(add(a))
	}
	refuseUnknownSubcommands(root)
	return root
}

// refuseUnknownSubcommands makes every group of commands (jobs, racks, …)
// answer an unknown subcommand as the root does: exit 2 with "did you
// mean" and the nearest names, where cobra would print the group's help
// and exit 0. A group alone still prints its help.
func refuseUnknownSubcommands(c *cobra.Command) {
	for _, sub := range c.Commands() {
		refuseUnknownSubcommands(sub)
	}
	if !c.HasParent() || !c.HasSubCommands() || c.Runnable() {
		return // the root refuses them itself
	}
	c.Args = cobra.ArbitraryArgs
	c.SuggestionsMinimumDistance = 2 // cobra's own default, set only on the root
	c.RunE = func(c *cobra.Command, args []string) error {
		if len(args) == 0 {
			return c.Help()
		}
		msg := fmt.Sprintf("unknown command %q for %q", args[0], c.CommandPath())
		if s := c.SuggestionsFor(args[0]); len(s) > 0 {
			msg += "\n\nDid you mean this?\n\t" + strings.Join(s, "\n\t")
		}
		return UsageErrorf("%s\nRun '%s --help' for usage.", msg, c.CommandPath())
	}
}

// commandBuilders lists the top-level commands; each file adds its own in an
// init function, so that the tree is assembled in one place.
var commandBuilders []func(*App) *cobra.Command

func Register(f func(*App) *cobra.Command) { commandBuilders = append(commandBuilders, f) }

func isCobraUsageError(err error) bool {
	// cobra reports unknown commands and arg-count problems as plain errors.
	msg := err.Error()
	for _, p := range []string{"unknown command", "unknown flag", "accepts ", "requires ", "invalid argument"} {
		if strings.Contains(msg, p) {
			return true
		}
	}
	return false
}
