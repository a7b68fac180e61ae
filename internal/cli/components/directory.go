package components

import (
	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

	"github.com/cosmicac/cosmicac/internal/metrics"
	"github.com/cosmicac/cosmicac/internal/ork/orkapi"
	"github.com/cosmicac/cosmicac/internal/trust"
)

func init() { register((*app).wrkDirectoryCommand) }

// ---- wrk-directory

type directoryFileConfig struct {
	componentFlags `json:",inline"`
	Ork            string `json:"ork"`
}

// wrkDirectoryCommand is the agents' directory as its own process: a
// fabric node that serves nothing but a fabric.Directory, where the in-VM
// agents announce themselves. An agent's key is the user's (it lives in
// the user's VM): it may announce only under its own job's topic, within
// the directory's per-key caps, and it is admitted nowhere it could act on
// other jobs.
func (a *app) wrkDirectoryCommand() *cobra.Command {
	var cfg directoryFileConfig
	var configFile string
	cmd := &cobra.Command{
		Use:   "wrk-directory",
		Short: "Run the agents' directory: where the jobs' in-VM agents announce themselves",
		Long: "Runs a fabric node that serves only the directory (announce, lookup). The jobs' agents\n" +
			"announce there, each only under its own job's topic: their keys are bound to their jobs by\n" +
			"the ork (--ork), which the directory follows. The app-node and proxy-inference look agents\n" +
			"up (--app-node-key, --proxy-inference-key). Name it to the rack workers as their agents'\n" +
			"directory (wrk-server-k8s-nvidia --directory KEY@ADDR), to the app-node and to the proxy\n" +
			"(--directory).",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := loadConfigFile(cmd, configFile, &cfg); err != nil {
				return err
			}
			var p peers
			orkKey, err := p.one("ork", trust.Ork, cfg.Ork)
			if err != nil {
				return err
			}
			log := a.componentLogger(cfg.Verbose)
			n, ring, err := cfg.dialNode("wrk-directory", p, log)
			if err != nil {
				return err
			}
			defer cfg.unlock() // after the node: the data dir is free once all is closed
			defer n.Close()
			dir := trust.ServeAgentDirectory(n, ring) // a revoked agent's announcements go with it
			serveMetrics, err := cfg.listenMetrics(metrics.NewRegistry(metrics.DirectoryCollector(dir)))
			if err != nil {
				return err
			}
			a.printNode(n)
			g, ctx := errgroup.WithContext(cmd.Context())
			g.Go(func() error { return serveMetrics(ctx) })
			g.Go(func() error {
				ring.Follow(ctx, orkapi.NewClient(n, orkKey), log.With("component", "trust"))
				return nil
			})
			return waitAll(g)
		},
	}
	cfg.bind(cmd.Flags(), "0.0.0.0:7424", trust.Directory, trust.Ork)
	f := cmd.Flags()
	f.StringVar(&configFile, "config", "", "a YAML config file (flags override it)")
	f.StringVar(&cfg.Ork, "ork", "", "the ork, which binds the agents' keys: "+orkAddrs)
	return cmd
}
