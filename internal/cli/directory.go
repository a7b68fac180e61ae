package cli

import (
	"github.com/spf13/cobra"

	"github.com/cosmicac/cosmicac/internal/config"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/ork/orkapi"
)

func init() { register((*app).wrkDirectoryCommand) }

// ---- wrk-directory

type directoryFileConfig struct {
	componentFlags   `json:",inline"`
	Ork              string          `json:"ork"`
	AgentKeysRefresh config.Duration `json:"agentKeysRefresh,omitempty"`
}

// wrkDirectoryCommand is the agents' directory as its own process: a
// fabric node that serves nothing but a fabric.Directory, where the in-VM
// agents announce themselves. An agent's key is the user's (it lives in
// the user's VM), so it gets full access only here, never on the ork.
func (a *app) wrkDirectoryCommand() *cobra.Command {
	cfg := directoryFileConfig{AgentKeysRefresh: config.Duration(defaultAgentKeysRefresh)}
	var configFile string
	cmd := &cobra.Command{
		Use:   "wrk-directory",
		Short: "Run the agents' directory: where the jobs' in-VM agents announce themselves",
		Long: "Runs a fabric node that serves only the directory (announce, lookup). It admits\n" +
			"with full access the keys of the live jobs' agents, as the ork lists them in the\n" +
			"jobs' status (refreshed from the ork, which must admit this node read-only), and\n" +
			"the keys given with --allow; give the app-node's key with --allow-readonly (it\n" +
			"looks agents up). Name it to the rack workers as their agents' directory\n" +
			"(wrk-server-k8s-nvidia --directory KEY@ADDR) and to the app-node (--directory).",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := loadConfigFile(cmd, configFile, &cfg); err != nil {
				return err
			}
			orkKey, orkAddrs, err := parsePeerFlag("ork", cfg.Ork)
			if err != nil {
				return err
			}
			log := a.componentLogger(cfg.Verbose)
			keys := &agentKeys{log: log.With("component", "wrk-directory")}
			n, allow, err := cfg.nodeWith("wrk-directory", log, func(base fabric.Policy) fabric.Policy {
				return keys.policy(base, fabric.AccessFull)
			})
			if err != nil {
				return err
			}
			defer cfg.unlock() // after the node: the data dir is free once all is closed
			defer n.Close()
			// The ork is only called (listJobs): read-only is enough.
			if allow.Access(orkKey) == fabric.AccessNone {
				allow.AllowReadOnly(orkKey)
			}
			n.AddAddrs(orkKey, orkAddrs...)
			keys.ork, keys.node = orkapi.NewClient(n, orkKey), n
			fabric.NewDirectory(nil).Register(n)
			a.printNode(n)
			keys.run(cmd.Context(), cfg.AgentKeysRefresh.D())
			return nil
		},
	}
	cfg.bind(cmd.Flags(), "0.0.0.0:7424")
	f := cmd.Flags()
	f.StringVar(&configFile, "config", "", "a YAML config file (flags override it)")
	f.StringVar(&cfg.Ork, "ork", "", "the ork: KEY@HOST:PORT")
	f.Var(&cfg.AgentKeysRefresh, "agent-keys-refresh", "how often the agents' keys are read from the ork")
	return cmd
}
