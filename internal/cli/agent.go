package cli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

	"github.com/cosmicac/cosmicac/internal/agent"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/joblog"
	"github.com/cosmicac/cosmicac/internal/metrics"
	"github.com/cosmicac/cosmicac/internal/monitor"
)

func init() { register((*app).agentCommand) }

// agentSubcommands are the agents' commands (instance here; inference is
// added beside it).
var agentSubcommands = []func(*app) *cobra.Command{(*app).agentInstanceCommand}

func (a *app) agentCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Run an agent inside a job's VM (started by the VM's systemd unit)",
	}
	for _, f := range agentSubcommands {
		cmd.AddCommand(f(a))
	}
	return cmd
}

func (a *app) agentInstanceCommand() *cobra.Command {
	var (
		configFile    string
		listen        string
		verbose       bool
		metricsListen string
	)
	cmd := &cobra.Command{
		Use:   "instance --config FILE",
		Short: "Run the instance agent of a GPU container job: shells, the job's command, readiness",
		Long: "The instance agent runs inside a GPU container job's VM. It reads its bootstrap (the job,\n" +
			"its own key, the platform peers it may talk to) from --config (written by cloud-init at\n" +
			"/etc/cosmicac/agent.yaml), connects out to those peers, admits only them, announces itself\n" +
			"under instance/<job id>, serves shells and runs the job's command. See docs/shell.md.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if configFile == "" {
				return usageErrorf("--config FILE is required")
			}
			cfg, err := agent.LoadConfig(configFile)
			if err != nil {
				return usageErrorf("%v", err)
			}
			if listen != "" {
				cfg.Listen = listen
			}
			log := a.componentLogger(verbose)
			ag := agent.New(cfg, log)
			ctx, cancel := context.WithCancel(cmd.Context())
			defer cancel()
			// Records go to wrk-monitor when the bootstrap names one.
			reg := metrics.NewRegistry()
			var fw *joblog.Forwarder
			for _, p := range cfg.Peers {
				if p.Role != agent.RoleMonitor {
					continue
				}
				fw = joblog.NewForwarder(lazyCaller{ag}, p.Key, 0)
				ag.SetLogs(fw)
				reg.MustRegister(monitor.ForwarderCollector(agent.Component, fw))
				break
			}
			mf := componentFlags{MetricsListen: metricsListen}
			serveMetrics, err := mf.listenMetrics(reg)
			if err != nil {
				return err
			}
			// The agent, its forwarder and its metrics, owned by one group:
			// the first to fail stops the others.
			g, gctx := errgroup.WithContext(ctx)
			if fw != nil {
				g.Go(func() error { return fw.Run(gctx) })
			}
			g.Go(func() error { return serveMetrics(gctx) })
			g.Go(func() error {
				defer cancel() // the agent stopped: so does the rest
				return ag.Run(gctx)
			})
			errc := make(chan error, 1)
			go func() { errc <- waitAll(g) }()
			select {
			case <-ag.Ready():
				n := ag.Node()
				fmt.Fprintf(a.stdout, "agent %s ready (job %s)\n", n.PublicKey(), cfg.JobID)
			case err := <-errc:
				return err
			}
			return <-errc
		},
	}
	f := cmd.Flags()
	f.StringVar(&configFile, "config", "", "the agent's YAML config (the bootstrap)")
	f.StringVar(&listen, "listen", "", "also listen on this fabric address (default: dial out only)")
	f.BoolVarP(&verbose, "verbose", "v", false, "log at info level")
	f.StringVar(&metricsListen, "metrics-listen", "", "serve Prometheus metrics at http://ADDR/metrics (inside the VM)")
	return cmd
}

// lazyCaller calls through the agent's node once it has one.
type lazyCaller struct{ a *agent.Agent }

func (l lazyCaller) Call(ctx context.Context, key fabric.PublicKey, method string, params, result any) error {
	n := l.a.Node()
	if n == nil {
		return fabric.Errorf(fabric.CodeUnavailable, "agent not started")
	}
	return n.Call(ctx, key, method, params, result)
}
