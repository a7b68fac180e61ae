// Package agentcmd is the command line of what runs inside a tenant's VM:
// the instance agent of a GPU Container Job and the inference agent of a
// managed inference replica. Both binaries serve it: the small
// cmd/cosmicac-agent, which the agent disk carries into every VM, and the
// full cosmicac (`cosmicac agent …`), so an image that carries either
// runs the same unit.
//
// It depends on the agents, the fabric, the job log's forwarder and the
// metrics only: no Kubernetes client, gateway, database driver, ork or
// app-node (archtest holds this for cmd/cosmicac-agent), since each VM is
// a tenant's, with root in it.
package agentcmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

	"github.com/cosmicac/cosmicac/internal/agent"
	"github.com/cosmicac/cosmicac/internal/httpserve"
	"github.com/cosmicac/cosmicac/internal/inferagent"
	"github.com/cosmicac/cosmicac/internal/inferagent/simlaunch"
	"github.com/cosmicac/cosmicac/internal/joblog"
	"github.com/cosmicac/cosmicac/internal/metrics"
	"github.com/cosmicac/cosmicac/internal/monitor"
	"github.com/cosmicac/cosmicac/internal/simruntime"
)

// UsageError is a wrong command line: its binary exits 2.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// ExitCode is 2, the exit code of a wrong command line.
func (e *UsageError) ExitCode() int { return 2 }

func usageErrorf(format string, args ...any) error {
	return &UsageError{Err: fmt.Errorf(format, args...)}
}

// Commands are the agents' commands, `instance` and `inference`, writing
// what they say to stdout and their logs to stderr.
func Commands(stdout, stderr io.Writer) []*cobra.Command {
	return []*cobra.Command{instanceCommand(stdout, stderr), inferenceCommand(stdout, stderr)}
}

// flags are what both agents take.
type flags struct {
	config        string
	listen        string
	verbose       bool
	metricsListen string
}

func (f *flags) add(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.config, "config", "", "the agent's YAML config (the bootstrap)")
	fl.StringVar(&f.listen, "listen", "", "also listen on this fabric address (default: dial out only)")
	fl.BoolVarP(&f.verbose, "verbose", "v", false, "log at info level")
	fl.StringVar(&f.metricsListen, "metrics-listen", "", "serve Prometheus metrics at http://ADDR/metrics (inside the VM)")
}

func (f *flags) logger(stderr io.Writer) *slog.Logger {
	level := slog.LevelWarn
	if f.verbose {
		level = slog.LevelInfo
	}
	return slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
}

func instanceCommand(stdout, stderr io.Writer) *cobra.Command {
	var f flags
	cmd := &cobra.Command{
		Use:   "instance --config FILE",
		Short: "Run the instance agent of a GPU container job: shells, the job's command, readiness",
		Long: "The instance agent runs inside a GPU container job's VM. It reads its bootstrap (the job,\n" +
			"its own key, the platform peers it may talk to) from --config (written by cloud-init at\n" +
			"/etc/cosmicac/agent.yaml), connects out to those peers, admits only them, announces itself\n" +
			"under instance/<job id>, serves shells and runs the job's command. See docs/shell.md.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.config == "" {
				return usageErrorf("--config FILE is required")
			}
			cfg, err := agent.LoadConfig(f.config)
			if err != nil {
				return usageErrorf("%v", err)
			}
			if f.listen != "" {
				cfg.Listen = f.listen
			}
			ag := agent.New(cfg, f.logger(stderr))
			return run(cmd.Context(), ag, agent.Component, f.metricsListen, func() {
				fmt.Fprintf(stdout, "agent %s ready (job %s)\n", ag.Node().PublicKey(), cfg.JobID)
			})
		},
	}
	f.add(cmd)
	return cmd
}

func inferenceCommand(stdout, stderr io.Writer) *cobra.Command {
	var (
		f         flags
		simulated bool
	)
	cmd := &cobra.Command{
		Use:   "inference --config FILE",
		Short: "Run the inference agent of a managed inference replica: the model server, probes, proxied requests",
		Long: "The inference agent runs inside each VM of a managed inference replica. It reads its bootstrap\n" +
			"from --config (/etc/cosmicac/agent.yaml), starts the model server (`vllm serve …` with the\n" +
			"parallelism of the placement, or the parakeet server; --simulated runs the simulated runtime\n" +
			"in-process), sends its output as application log records, reports the replica ready once a\n" +
			"real probe passes, announces itself under inference/<job id> and serves the proxy's requests\n" +
			"over the fabric. See docs/inference.md.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.config == "" {
				return usageErrorf("--config FILE is required")
			}
			cfg, err := inferagent.LoadConfig(f.config)
			if err != nil {
				return usageErrorf("%v", err)
			}
			if f.listen != "" {
				cfg.Listen = f.listen
			}
			if simulated || cfg.Simulated {
				cfg.Launcher = &simlaunch.Launcher{Config: simruntime.Config{TTFT: 50 * time.Millisecond, InterTokenDelay: 20 * time.Millisecond}}
			}
			ag := inferagent.New(cfg, f.logger(stderr))
			return run(cmd.Context(), ag, "agent-inference", f.metricsListen, func() {
				st := ag.Status()
				fmt.Fprintf(stdout, "inference agent %s ready (job %s, replica %d, %s)\n", st.Key, st.JobID, st.Replica, st.Role)
			})
		},
	}
	f.add(cmd)
	cmd.Flags().BoolVar(&simulated, "simulated", false, "run the simulated runtime in-process instead of the model server")
	return cmd
}

// anAgent is what both agents are to the command that runs them.
type anAgent interface {
	Run(context.Context) error
	Ready() <-chan struct{}
	Forwarder() *joblog.Forwarder
}

// run runs ag (which forwards its records to the wrk-monitor its bootstrap
// names, if any) and its metrics, owned by one group: the first to fail
// stops the others. ready is called once the agent is.
func run(ctx context.Context, ag anAgent, component, metricsListen string, ready func()) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	reg := metrics.NewRegistry()
	if fw := ag.Forwarder(); fw != nil {
		reg.MustRegister(monitor.ForwarderCollector(component, fw))
	}
	serveMetrics, err := metrics.Listen(metricsListen, reg, httpserve.Limits{})
	if err != nil {
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return serveMetrics(gctx) })
	g.Go(func() error {
		defer cancel() // the agent stopped: so does the rest
		return ag.Run(gctx)
	})
	errc := make(chan error, 1)
	go func() {
		err := g.Wait()
		if errors.Is(err, context.Canceled) {
			err = nil // an interrupt is no error
		}
		errc <- err
	}()
	select {
	case <-ag.Ready():
		ready()
	case err := <-errc:
		return err
	}
	return <-errc
}
