package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/sync/errgroup"
	"sigs.k8s.io/yaml"

	"github.com/cosmicac/cosmicac/internal/appnode"
	"github.com/cosmicac/cosmicac/internal/config"
	"github.com/cosmicac/cosmicac/internal/datadir"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/inferproxy"
	"github.com/cosmicac/cosmicac/internal/joblog"
	"github.com/cosmicac/cosmicac/internal/metrics"
	"github.com/cosmicac/cosmicac/internal/monitor"
	"github.com/cosmicac/cosmicac/internal/ork"
	"github.com/cosmicac/cosmicac/internal/ork/orkapi"
	"github.com/cosmicac/cosmicac/internal/simcluster"
	"github.com/cosmicac/cosmicac/internal/store/sqlite"
	"github.com/cosmicac/cosmicac/internal/worker"
)

func init() {
	register((*app).wrkOrkCommand)
	register((*app).appNodeCommand)
	register((*app).wrkServerSimCommand)
	register((*app).wrkMonitorCommand)
}

// componentFlags are what every component takes (DESIGN §9): its data
// directory (its identity lives there), its fabric address, a YAML config
// file that flags override, and the keys it admits.
type componentFlags struct {
	DataDir  string   `json:"dataDir"`
	Listen   string   `json:"listen"`
	Allow    []string `json:"allow,omitempty"`
	ReadOnly []string `json:"allowReadOnly,omitempty"`
	AllowAny bool     `json:"allowAny,omitempty"`
	Verbose  bool     `json:"verbose,omitempty"`
	// MetricsListen serves /metrics (Prometheus) when set.
	MetricsListen string `json:"metricsListen,omitempty"`

	lock *datadir.Lock // the data dir's, taken by lockDataDir
}

func (c *componentFlags) bind(f *pflag.FlagSet, defListen string) {
	c.Listen = defListen
	f.StringVar(&c.DataDir, "data-dir", "", "the component's data directory (its fabric identity lives there)")
	f.StringVar(&c.Listen, "listen", c.Listen, "the fabric address to serve on (QUIC on UDP, fallback on TCP)")
	f.StringSliceVar(&c.Allow, "allow", nil, "public keys admitted with full access (repeatable)")
	f.StringSliceVar(&c.ReadOnly, "allow-readonly", nil, "public keys admitted to read-only methods (repeatable)")
	f.BoolVar(&c.AllowAny, "allow-any", false, "admit every key (development only)")
	f.BoolVarP(&c.Verbose, "verbose", "v", false, "log at info level")
	f.StringVar(&c.MetricsListen, "metrics-listen", "", "serve Prometheus metrics at http://ADDR/metrics")
}

// serveMetrics serves reg at /metrics on the component's metrics address,
// if one is set, until ctx ends.
func (c *componentFlags) serveMetrics(ctx context.Context, reg *prometheus.Registry) error {
	if c.MetricsListen == "" {
		return nil
	}
	ln, err := net.Listen("tcp", c.MetricsListen)
	if err != nil {
		return fmt.Errorf("metrics: listen: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", metrics.Handler(reg))
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		hs.Close()
	}()
	if err := hs.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// serveHTTP serves hs on ln in g until ctx ends, then shuts it down
// gracefully (5 s at most).
func serveHTTP(ctx context.Context, g *errgroup.Group, hs *http.Server, ln net.Listener) {
	g.Go(func() error {
		if err := hs.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
	g.Go(func() error {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return hs.Shutdown(sctx)
	})
}

// waitAll waits for g; its context ending (an interrupt) is no error.
func waitAll(g *errgroup.Group) error {
	if err := g.Wait(); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// node starts the component's fabric node with its allow-list.
func (c *componentFlags) node(component string, log *slog.Logger, extra ...fabric.PublicKey) (*fabric.Node, *fabric.AllowList, error) {
	return c.nodeWith(component, log, nil, extra...)
}

// nodeWith is node with a policy made from the allow-list by wrap (nil:
// the allow-list itself).
func (c *componentFlags) nodeWith(component string, log *slog.Logger, wrap func(fabric.Policy) fabric.Policy, extra ...fabric.PublicKey) (_ *fabric.Node, _ *fabric.AllowList, err error) {
	if err := c.lockDataDir(component, log); err != nil { // held until the caller's unlock
		return nil, nil, err
	}
	defer c.unlockIf(&err)
	id, err := fabric.LoadOrCreateIdentity(c.DataDir)
	if err != nil {
		return nil, nil, err
	}
	allow := fabric.NewAllowList(extra...)
	for _, list := range []struct {
		keys []string
		add  func(...fabric.PublicKey)
	}{{c.Allow, allow.Allow}, {c.ReadOnly, allow.AllowReadOnly}} {
		for _, s := range list.keys {
			k, err := fabric.ParsePublicKey(s)
			if err != nil {
				return nil, nil, usageErrorf("--allow %q: %v", s, err)
			}
			list.add(k)
		}
	}
	allow.SetAllowAny(c.AllowAny)
	var policy fabric.Policy = allow
	if wrap != nil {
		policy = wrap(allow)
	}
	n, err := fabric.New(fabric.Config{Component: component, Identity: id, Listen: c.Listen, Policy: policy, Logger: log})
	if err != nil {
		return nil, nil, err
	}
	c.lockAddr(n.Addr())
	return n, allow, nil
}

func (a *app) componentLogger(verbose bool) *slog.Logger {
	level := slog.LevelWarn
	if verbose {
		level = slog.LevelInfo
	}
	return slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: level}))
}

// loadConfigFile fills cfg from a YAML file, then puts back every flag given
// on the command line: flags override the file.
func loadConfigFile(cmd *cobra.Command, path string, cfg any) error {
	if path == "" {
		return nil
	}
	type given struct {
		f     *pflag.Flag
		s     string
		slice []string
	}
	var keep []given
	cmd.Flags().Visit(func(f *pflag.Flag) {
		if sv, ok := f.Value.(pflag.SliceValue); ok {
			keep = append(keep, given{f: f, slice: slices.Clone(sv.GetSlice())}) // the file decodes into the same array
		} else {
			keep = append(keep, given{f: f, s: f.Value.String()})
		}
	})
	b, err := os.ReadFile(path)
	if err != nil {
		return usageErrorf("--config: %v", err)
	}
	if err := yaml.UnmarshalStrict(b, cfg); err != nil {
		return usageErrorf("--config %s: %v", path, err)
	}
	for _, g := range keep {
		if g.slice != nil {
			g.f.Value.(pflag.SliceValue).Replace(g.slice)
		} else if err := g.f.Value.Set(g.s); err != nil {
			return err
		}
	}
	return nil
}

// parsePeerFlag parses a KEY@HOST:PORT flag value.
func parsePeerFlag(name, v string) (fabric.PublicKey, []string, error) {
	if v == "" {
		return fabric.PublicKey{}, nil, usageErrorf("--%s KEY@HOST:PORT is required", name)
	}
	k, addrs, err := fabric.ParsePeer(v)
	if err != nil {
		return k, nil, usageErrorf("--%s: %v", name, err)
	}
	if len(addrs) == 0 {
		return k, nil, usageErrorf("--%s: give an address, KEY@HOST:PORT", name)
	}
	return k, addrs, nil
}

func (a *app) printNode(n *fabric.Node) {
	fmt.Fprintf(a.stdout, "%s %s@%s\n", "fabric", n.PublicKey(), n.Addr())
}

// ---- wrk-ork

type orkFileConfig struct {
	componentFlags `json:",inline"`
	Database       string     `json:"database,omitempty"`
	Ork            orkSection `json:"ork"`
}

func (a *app) wrkOrkCommand() *cobra.Command {
	cfg := orkFileConfig{Ork: orkSectionOf(ork.DefaultConfig())}
	var configFile string
	cmd := &cobra.Command{
		Use:   "wrk-ork",
		Short: "Run cosmicac-wrk-ork: racks, queue, placement, reservations, job statuses",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := loadConfigFile(cmd, configFile, &cfg); err != nil {
				return err
			}
			log := a.componentLogger(cfg.Verbose)
			n, allow, err := cfg.node("wrk-ork", log)
			if err != nil {
				return err
			}
			defer cfg.unlock() // after the node: the data dir is free once all is closed
			defer n.Close()
			db := cfg.Database
			if db == "" {
				db = filepath.Join(cfg.DataDir, "ork.db")
			}
			st, err := sqlite.Open(db)
			if err != nil {
				return err
			}
			defer st.Close()
			o, err := ork.New(cfg.Ork.toConfig(), st, ork.FabricDialer(n, allow), log.With("component", "wrk-ork"))
			if err != nil {
				return usageErrorf("%v", err)
			}
			fabric.NewDirectory(nil).Register(n)
			o.Serve(n)
			ctx := cmd.Context()
			if err := o.Start(ctx); err != nil {
				return err
			}
			a.printNode(n)
			g, ctx := errgroup.WithContext(ctx)
			g.Go(func() error { return cfg.serveMetrics(ctx, metrics.NewRegistry(o.Collector())) })
			g.Go(func() error { return o.Run(ctx) })
			return g.Wait()
		},
	}
	cfg.bind(cmd.Flags(), "0.0.0.0:7420")
	cmd.Flags().StringVar(&configFile, "config", "", "a YAML config file (flags override it)")
	cmd.Flags().StringVar(&cfg.Database, "database", "", "the SQLite database (default DATA_DIR/ork.db)")
	cmd.Flags().Var(&cfg.Ork.Heartbeat, "heartbeat", "how often each worker is checked")
	return cmd
}

// ---- app-node

type appNodeFileConfig struct {
	componentFlags `json:",inline"`
	Ork            string         `json:"ork"`
	Database       string         `json:"database,omitempty"`
	API            appNodeSection `json:"api"`
	// Directories are the agents' directories (wrk-directory), where the
	// app-node looks up the jobs' agents for shells.
	Directories      []string        `json:"directories,omitempty"`
	AgentKeysRefresh config.Duration `json:"agentKeysRefresh,omitempty"`
}

func (a *app) appNodeCommand() *cobra.Command {
	cfg := appNodeFileConfig{API: appNodeSectionOf(appnode.DefaultConfig()), AgentKeysRefresh: config.Duration(defaultAgentKeysRefresh)}
	var configFile string
	cmd := &cobra.Command{
		Use:   "app-node",
		Short: "Run cosmicac-app-node: the HTTP API, authentication and accounts",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := loadConfigFile(cmd, configFile, &cfg); err != nil {
				return err
			}
			orkKey, orkAddrs, err := parsePeerFlag("ork", cfg.Ork)
			if err != nil {
				return err
			}
			log := a.componentLogger(cfg.Verbose)
			// The jobs' agents dial the app-node (which opens shells back
			// over their connections): their keys, as the ork lists them,
			// are admitted read-only.
			keys := &agentKeys{log: log.With("component", "app-node")}
			n, allow, err := cfg.nodeWith("app-node", log, func(base fabric.Policy) fabric.Policy {
				return keys.policy(base, fabric.AccessReadOnly)
			}, orkKey)
			if err != nil {
				return err
			}
			defer cfg.unlock() // after the node: the data dir is free once all is closed
			defer n.Close()
			n.AddAddrs(orkKey, orkAddrs...)
			keys.ork, keys.node = orkapi.NewClient(n, orkKey), n
			var dirs []fabric.PublicKey
			for _, d := range cfg.Directories {
				k, addrs, err := parsePeerFlag("directory", d)
				if err != nil {
					return err
				}
				if allow.Access(k) == fabric.AccessNone {
					allow.AllowReadOnly(k) // only called (lookup)
				}
				n.AddAddrs(k, addrs...)
				dirs = append(dirs, k)
			}
			db := cfg.Database
			if db == "" {
				db = filepath.Join(cfg.DataDir, "app.db")
			}
			st, err := sqlite.Open(db)
			if err != nil {
				return err
			}
			defer st.Close()
			cfg.API.DataDir = cfg.DataDir
			ctx := cmd.Context()
			tokenFile, created, err := appnode.Bootstrap(ctx, st, cfg.DataDir)
			if err != nil {
				return err
			}
			if created {
				fmt.Fprintf(a.stdout, "admin token written to %s\n", tokenFile)
			}
			s, err := appnode.New(cfg.API.toConfig(), orkapi.NewClient(n, orkKey), st, log.With("component", "app-node"))
			if err != nil {
				return usageErrorf("%v", err)
			}
			s.SetAPIKeys(st) // its database keeps the inference API keys too
			// proxy-inference checks keys here (inference.apiKeyByHash): only
			// the keys of the allow-list (give its key with --allow-readonly),
			// never the jobs' agents.
			inferproxy.ServeAPIKeys(n, st, func(k fabric.PublicKey) bool { return allow.Access(k) != fabric.AccessNone })
			if len(dirs) > 0 {
				// Shells reach an agent found in the directories only if the
				// ork lists its key for the job's replica.
				s.SetShells(appnode.FabricShells{Node: n, Directories: dirs, Verify: keys.verify})
			}
			go keys.run(ctx, cfg.AgentKeysRefresh.D())
			obs := metrics.NewAPIObserver()
			s.SetObserver(obs)
			go cfg.serveMetrics(ctx, metrics.NewRegistry(obs))
			ln, err := net.Listen("tcp", cfg.API.Listen)
			if err != nil {
				return fmt.Errorf("listen for the API: %w", err)
			}
			a.printNode(n)
			fmt.Fprintf(a.stdout, "api http://%s/api/v1\n", ln.Addr())
			return s.Serve(ctx, ln)
		},
	}
	cfg.bind(cmd.Flags(), "0.0.0.0:7421")
	f := cmd.Flags()
	f.StringVar(&configFile, "config", "", "a YAML config file (flags override it)")
	f.StringVar(&cfg.Ork, "ork", "", "the ork: KEY@HOST:PORT")
	f.StringVar(&cfg.Database, "database", "", "the accounts database (default DATA_DIR/app.db)")
	f.StringVar(&cfg.API.Listen, "api-listen", cfg.API.Listen, "the HTTP API's address")
	f.StringSliceVar(&cfg.Directories, "directory", nil, "the agents' directory (wrk-directory), KEY@HOST:PORT (repeatable): enables shells")
	f.Var(&cfg.AgentKeysRefresh, "agent-keys-refresh", "how often the agents' keys are read from the ork")
	return cmd
}

// ---- wrk-server-sim

type simFileConfig struct {
	componentFlags `json:",inline"`
	Ork            string     `json:"ork"`
	Monitor        string     `json:"monitor,omitempty"`
	Rack           simSection `json:"rack"`
}

func (a *app) wrkServerSimCommand() *cobra.Command {
	cfg := simFileConfig{Rack: simSectionOf(simcluster.DefaultConfig())}
	var configFile string
	cmd := &cobra.Command{
		Use:   "wrk-server-sim",
		Short: "Run a simulated rack worker (the worker of `cosmicac up`) as its own process",
		Long: "Runs the simulated rack as a separate process: the same worker contract as\n" +
			"wrk-server-k8s-nvidia, with simulated nodes and GPUs. Register it with\n" +
			"`cosmicac racks register --worker-key KEY --worker-addr HOST:PORT`.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := loadConfigFile(cmd, configFile, &cfg); err != nil {
				return err
			}
			rack := cfg.Rack.toConfig()
			if err := rack.Validate(); err != nil {
				return usageErrorf("%v", err)
			}
			orkKey, orkAddrs, err := parsePeerFlag("ork", cfg.Ork)
			if err != nil {
				return err
			}
			if err := cfg.lockDataDir("wrk-server-sim", a.componentLogger(cfg.Verbose)); err != nil {
				return err
			}
			defer cfg.unlock()
			id, err := fabric.LoadOrCreateIdentity(cfg.DataDir)
			if err != nil {
				return err
			}
			log := a.componentLogger(cfg.Verbose)
			allow := fabric.NewAllowList(orkKey)
			for _, s := range cfg.Allow {
				k, err := fabric.ParsePublicKey(s)
				if err != nil {
					return usageErrorf("--allow %q: %v", s, err)
				}
				allow.Allow(k)
			}
			allow.SetAllowAny(cfg.AllowAny)
			var (
				cluster  *simcluster.Cluster
				logs     joblog.Sink = joblog.Discard
				monKey   fabric.PublicKey
				monAddrs []string
			)
			if cfg.Monitor != "" {
				if monKey, monAddrs, err = parsePeerFlag("monitor", cfg.Monitor); err != nil {
					return err
				}
			}
			ep := simcluster.NewEndpoint(fabric.Config{Component: "wrk-server-sim", Identity: id, Listen: cfg.Listen, Policy: allow, Logger: log},
				func(n *fabric.Node) {
					worker.Serve(n, cluster)
					cluster.RegisterFaults(n)
					n.AddAddrs(orkKey, orkAddrs...)
					if len(monAddrs) > 0 {
						n.AddAddrs(monKey, monAddrs...)
					}
				})
			g, ctx := errgroup.WithContext(cmd.Context())
			reg := metrics.NewRegistry()
			if cfg.Monitor != "" {
				fwd := joblog.NewForwarder(joblog.NodeFunc(ep.Node), monKey, 10000)
				g.Go(func() error { return fwd.Run(ctx) })
				reg.MustRegister(monitor.ForwarderCollector("wrk-server-sim", fwd))
				logs = fwd
			}
			g.Go(func() error { return cfg.serveMetrics(ctx, reg) })
			cluster = simcluster.New(rack, ep.Reporter(orkKey), logs, log.With("component", "wrk-server-sim"))
			cluster.SetLink(ep)
			if err := ep.Up(); err != nil {
				return err
			}
			defer ep.Close()
			cfg.lockAddr(ep.Addr())
			a.printNode(ep.Node())
			g.Go(func() error { return cluster.Run(ctx) })
			err = g.Wait()
			if errors.Is(err, context.Canceled) {
				return nil
			}
			return err
		},
	}
	cfg.bind(cmd.Flags(), "0.0.0.0:7423")
	f := cmd.Flags()
	f.StringVar(&configFile, "config", "", "a YAML config file (flags override it)")
	f.StringVar(&cfg.Ork, "ork", "", "the ork: KEY@HOST:PORT")
	f.StringVar(&cfg.Monitor, "monitor", "", "wrk-monitor, to send job log records to: KEY@HOST:PORT")
	f.StringVar(&cfg.Rack.Rack, "rack", cfg.Rack.Rack, "the rack's ID")
	f.StringVar(&cfg.Rack.Location, "location", cfg.Rack.Location, "the rack's location")
	f.IntVar(&cfg.Rack.Nodes, "nodes", cfg.Rack.Nodes, "simulated nodes")
	f.IntVar(&cfg.Rack.GPUsPerNode, "gpus-per-node", cfg.Rack.GPUsPerNode, "GPUs per node")
	f.StringVar(&cfg.Rack.GPUModel, "gpu-model", cfg.Rack.GPUModel, "the GPUs' model")
	f.Var(&cfg.Rack.Step, "step", "time per simulated lifecycle step")
	return cmd
}

// ---- wrk-monitor

type monitorFileConfig struct {
	componentFlags `json:",inline"`
	HTTPListen     string         `json:"httpListen"`
	AppNodeURL     string         `json:"appNodeURL"`
	Monitor        monitorSection `json:"monitor"`
}

func (a *app) wrkMonitorCommand() *cobra.Command {
	cfg := monitorFileConfig{HTTPListen: "0.0.0.0:8082", Monitor: monitorSectionOf(monitor.DefaultConfig(""))}
	var configFile string
	cmd := &cobra.Command{
		Use:   "wrk-monitor",
		Short: "Run cosmicac-wrk-monitor: job log records in, live streams and Loki out",
		Long: "Takes log records from workers and agents over the fabric (admit their keys with --allow),\n" +
			"streams them live under /monitor/v1/jobs/{id}/logs, forwards them to Loki when --loki-url is\n" +
			"set, and reads history back from it. Viewers authenticate with their CosmicAC token, which\n" +
			"the monitor checks against the app-node (--app-node-url).",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := loadConfigFile(cmd, configFile, &cfg); err != nil {
				return err
			}
			if cfg.AppNodeURL == "" {
				return usageErrorf("--app-node-url is required (viewers' tokens are checked there)")
			}
			log := a.componentLogger(cfg.Verbose)
			n, _, err := cfg.node("wrk-monitor", log)
			if err != nil {
				return err
			}
			defer cfg.unlock() // after the node: the data dir is free once all is closed
			defer n.Close()
			mcfg := cfg.Monitor.toConfig()
			if mcfg.DataDir == "" {
				mcfg.DataDir = filepath.Join(cfg.DataDir, "spool")
			}
			m, err := monitor.New(mcfg, log.With("component", "wrk-monitor"))
			if err != nil {
				return usageErrorf("%v", err)
			}
			defer m.Close()
			m.Serve(n)
			mux := http.NewServeMux()
			mux.Handle("/monitor/metrics", m.MetricsHandler())
			mux.Handle("/monitor/", m.Handler(monitor.NewAPIAuthorizer(cfg.AppNodeURL, nil)))
			ln, err := net.Listen("tcp", cfg.HTTPListen)
			if err != nil {
				return fmt.Errorf("listen: %w", err)
			}
			hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
			hs.RegisterOnShutdown(m.CloseStreams)
			a.printNode(n)
			fmt.Fprintf(a.stdout, "monitor http://%s/monitor/v1\n", ln.Addr())
			g, ctx := errgroup.WithContext(cmd.Context())
			g.Go(func() error { return m.Run(ctx) })
			serveHTTP(ctx, g, hs, ln)
			return waitAll(g)
		},
	}
	cfg.bind(cmd.Flags(), "0.0.0.0:7422")
	f := cmd.Flags()
	f.StringVar(&configFile, "config", "", "a YAML config file (flags override it)")
	f.StringVar(&cfg.HTTPListen, "http-listen", cfg.HTTPListen, "the address of /monitor/v1 and /monitor/metrics")
	f.StringVar(&cfg.AppNodeURL, "app-node-url", "", "the app-node's base URL, to check viewers' tokens")
	f.StringVar(&cfg.Monitor.Loki.URL, "loki-url", "", "forward records to this Loki (e.g. http://loki:3100)")
	f.StringVar(&cfg.Monitor.Loki.TenantID, "loki-tenant", "", "the Loki tenant (X-Scope-OrgID)")
	return cmd
}
