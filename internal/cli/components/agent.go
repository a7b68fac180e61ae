package components

import (
	"github.com/spf13/cobra"

	"github.com/cosmicac/cosmicac/internal/agentcmd"
)

func init() { register((*app).agentCommand) }

// agentCommand is `cosmicac agent instance|inference`: the agents of
// cmd/cosmicac-agent (internal/agentcmd), also served by the full binary
// so that an image carrying either runs the same unit.
func (a *app) agentCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Run an agent inside a job's VM (started by the VM's systemd unit)",
	}
	cmd.AddCommand(agentcmd.Commands(a.Stdout, a.Stderr)...)
	return cmd
}
