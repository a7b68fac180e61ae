// Command cosmicac is the single CosmicAC binary: every component (app-node,
// wrk-ork, wrk-server-k8s-nvidia, wrk-monitor, proxy-inference, the agents) and
// every user verb (jobs, racks, keys, rpc, ...) is a subcommand. The user
// verbs are internal/cli's; the component commands, internal/cli/components',
// which add themselves to the same command tree.
package main

import (
	"os"

	"github.com/cosmicac/cosmicac/internal/cli"
	_ "github.com/cosmicac/cosmicac/internal/cli/components" // the component commands and up
)

func main() {
	os.Exit(cli.Main(os.Args[1:]))
}
