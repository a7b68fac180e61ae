// Command cosmicac is the single CosmicAC binary: every component (app-node,
// wrk-ork, wrk-server-k8s-nvidia, wrk-monitor, proxy-inference, the agents) and
// every user verb (jobs, racks, keys, rpc, ...) is a subcommand.
package main

import (
	"os"

	"github.com/cosmicac/cosmicac/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:]))
}
