package agentcmd

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

	"github.com/cosmicac/cosmicac/internal/version"
)

// Main runs cosmicac-agent's command line and returns its exit code: 0,
// 1 when the agent failed, 2 for a wrong command line, 130 interrupted.
func Main(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return Run(ctx, args, os.Stdout, os.Stderr)
}

// Run is Main on the given context and streams.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := Root(stdout, stderr)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	switch {
	case err == nil:
		return 0
	case ctx.Err() != nil && errors.Is(err, context.Canceled):
		return 130
	}
	fmt.Fprintln(stderr, "error:", err)
	var ue *UsageError
	if errors.As(err, &ue) || strings.HasPrefix(err.Error(), "unknown command") {
		return 2
	}
	return 1
}

// Root is cosmicac-agent's command tree: `instance`, `inference` and
// `version`, and the same agents under `agent` (`cosmicac-agent agent
// instance …`, as the full binary has them), so that the VM's unit runs
// `BIN agent instance|inference` whichever binary BIN is.
func Root(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "cosmicac-agent",
		Short: "The CosmicAC agents that run inside a job's VM",
		Long: "cosmicac-agent is what CosmicAC runs inside a job's VM: the instance agent of a GPU\n" +
			"Container Job and the inference agent of a managed inference replica. It is the\n" +
			"agents of cosmicac alone, without the platform's components.",
		Version:       version.String(),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetVersionTemplate(version.Long())
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usageErrorf("%v\nSee '%s --help'.", err, c.CommandPath())
	})
	root.AddCommand(Commands(stdout, stderr)...)
	group := &cobra.Command{Use: "agent", Short: "The same agents, as `cosmicac agent` names them", Hidden: true}
	group.AddCommand(Commands(stdout, stderr)...)
	root.AddCommand(group)
	root.AddCommand(&cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		Run:   func(*cobra.Command, []string) { fmt.Fprint(stdout, version.Long()) },
	})
	return root
}
