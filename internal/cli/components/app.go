// Package components is the cosmicac commands that run a component as its
// own process (app-node, wrk-ork, wrk-monitor, wrk-directory,
// proxy-inference, the rack workers wrk-server-sim, wrk-server-qemu and
// wrk-server-k8s-nvidia, the agents, the gateway) and `cosmicac up`, which
// runs them all in one; with the data-dir tools (backup, store, admin token,
// ork replay, trust). Each turns flags and a YAML file into the component's
// Config and runs it; internal/platform composes the same components for up.
// The user verbs (jobs, racks, login, …) are package cli's, which talk to
// the platform only through internal/client; cmd/cosmicac links both.
package components

import (
	"github.com/spf13/cobra"

	"github.com/cosmicac/cosmicac/internal/cli"
)

// app is the shared command state (streams, environment) of package cli,
// on which this package's commands are methods.
type app struct{ *cli.App }

// register adds a top-level command to the cosmicac command tree.
func register(f func(*app) *cobra.Command) {
	cli.Register(func(a *cli.App) *cobra.Command { return f(&app{a}) })
}
