package components

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/sync/errgroup"
	"sigs.k8s.io/yaml"

	"github.com/cosmicac/cosmicac/internal/appnode"
	"github.com/cosmicac/cosmicac/internal/cli"
	"github.com/cosmicac/cosmicac/internal/config"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/datadir"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/httpserve"
	"github.com/cosmicac/cosmicac/internal/inferproxy/proxyapi"
	"github.com/cosmicac/cosmicac/internal/joblog"
	"github.com/cosmicac/cosmicac/internal/metrics"
	"github.com/cosmicac/cosmicac/internal/monitor"
	"github.com/cosmicac/cosmicac/internal/ork"
	"github.com/cosmicac/cosmicac/internal/ork/orkapi"
	"github.com/cosmicac/cosmicac/internal/simcluster"
	"github.com/cosmicac/cosmicac/internal/store"
	"github.com/cosmicac/cosmicac/internal/trust"
	"github.com/cosmicac/cosmicac/internal/webui"
)

func init() {
	register((*app).wrkOrkCommand)
	register((*app).appNodeCommand)
	register((*app).wrkServerSimCommand)
	register((*app).wrkMonitorCommand)
}

// componentFlags are what every component takes (docs/architecture.md): its data
// directory (its identity lives there), its fabric address, a YAML config
// file that flags override, and the keys it admits as what (trust.go).
type componentFlags struct {
	DataDir string `json:"dataDir"`
	Listen  string `json:"listen"`
	// Operators may call every method of the component.
	Operators    []string `json:"operators,omitempty"`
	peerKeyFlags `json:",inline"`
	Verbose      bool `json:"verbose,omitempty"`
	// MetricsListen serves /metrics (Prometheus) when set.
	MetricsListen string `json:"metricsListen,omitempty"`
	// HTTP bounds the clients of the component's HTTP servers.
	HTTP httpserve.Limits `json:"http"`

	role    trust.Role   // the component's role in the trust graph (bindTrust)
	dialled []trust.Role // the configured peers it takes as KEY@HOST:PORT flags

	lock *datadir.Lock // the data dir's, taken by lockDataDir
}

// validateFile checks what only a config file sets: the http limits.
func (c *componentFlags) validateFile() error {
	if err := c.HTTP.Validate(); err != nil {
		return fmt.Errorf("http: %w", err)
	}
	return nil
}

// bind adds the flags every component has; role is its place in the trust
// graph and dialled the configured roles the command has dial flags of its
// own for (bindTrust).
func (c *componentFlags) bind(f *pflag.FlagSet, defListen string, role trust.Role, dialled ...trust.Role) {
	c.Listen = defListen
	f.StringVar(&c.DataDir, "data-dir", "", "the component's data directory (its fabric identity lives there)")
	f.StringVar(&c.Listen, "listen", c.Listen, "the fabric address to serve on (QUIC on UDP, fallback on TCP)")
	c.bindTrust(f, role, dialled...)
	f.BoolVarP(&c.Verbose, "verbose", "v", false, "log at info level")
	f.StringVar(&c.MetricsListen, "metrics-listen", "", "serve Prometheus metrics at http://ADDR/metrics")
}

// listenMetrics listens on the component's metrics address, if one is
// set, at once (a taken port fails the component at start, with the
// reason), and returns the func that serves reg at /metrics there until ctx
// ends; its caller runs it in the component's group.
func (c *componentFlags) listenMetrics(reg *prometheus.Registry) (serve func(context.Context) error, err error) {
	return metrics.Listen(c.MetricsListen, reg, c.HTTP)
}

// waitAll waits for g; its context ending (an interrupt) is no error.
func waitAll(g *errgroup.Group) error {
	if err := g.Wait(); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

func (a *app) componentLogger(verbose bool) *slog.Logger {
	level := slog.LevelWarn
	if verbose {
		level = slog.LevelInfo
	}
	return slog.New(slog.NewTextHandler(a.Stderr, &slog.HandlerOptions{Level: level}))
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
		return cli.UsageErrorf("--config: %v", err)
	}
	if err := yaml.UnmarshalStrict(b, cfg); err != nil {
		return cli.UsageErrorf("--config %s: %v", path, err)
	}
	if v, ok := cfg.(interface{ validateFile() error }); ok {
		if err := v.validateFile(); err != nil {
			return cli.UsageErrorf("--config %s: %v", path, err)
		}
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

func (a *app) printNode(n *fabric.Node) {
	fmt.Fprintf(a.Stdout, "%s %s@%s\n", "fabric", n.PublicKey(), n.Addr())
}

// ---- wrk-ork

// placementPolicyUsage is the --placement-policy flag's usage.
var placementPolicyUsage = "how the ork ranks nodes where a location's racks name no policy: " + cosmic.PolicyBestFit + " or " + cosmic.PolicyFGD +
	" (default " + ork.DefaultPlacementPolicy + "; docs/placement.md)"

type orkFileConfig struct {
	componentFlags `json:",inline"`
	Database       string          `json:"database,omitempty"`
	Ork            ork.Config      `json:"ork"`
	Lease          ork.LeaseConfig `json:"lease"`
	// Monitor, KEY@HOST:PORT, takes the ork's system records of jobs (its
	// autoscaler's decisions), as `cosmicac up` sends them.
	Monitor string `json:"monitor,omitempty"`
}

// orkAddrs is the form of every component's --ork.
const orkAddrs = "KEY@HOST:PORT[,HOST:PORT...] (orks sharing one database and key: each one's address, the leader found among them)"

// DefaultIsolationTimeout is wrk-ork's --isolation-timeout: three default
// lease TTLs, long enough that a network blip or a restarting app-node
// does not cost a takeover.
const DefaultIsolationTimeout = 30 * time.Second

func (a *app) wrkOrkCommand() *cobra.Command {
	cfg := orkFileConfig{Ork: ork.DefaultConfig(), Lease: ork.DefaultLeaseConfig()}
	// Orks as processes may share a database: a leader cut off from its
	// peers yields to a follower that reaches them.
	cfg.Ork.IsolationTimeout = config.Duration(DefaultIsolationTimeout)
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
			if cfg.Lease.Holder == "" {
				cfg.Lease.Holder = ork.DefaultHolder(cfg.DataDir)
			}
			if err := cfg.Lease.Validate(); err != nil {
				return cli.UsageErrorf("%v", err)
			}
			if err := cfg.Ork.Validate(); err != nil {
				return cli.UsageErrorf("ork config: %v", err)
			}
			// The data dir is locked first: it names the ork in the lease,
			// and two processes of one name would both lead.
			if err := cfg.lockDataDir("wrk-ork", log); err != nil {
				return err
			}
			defer cfg.unlock() // after the node and the store: the data dir is free once all is closed
			// Locked, the data dir says which ork started here before:
			// gone now, its term may be taken over at once.
			var err error
			if cfg.Lease.Instance, cfg.Lease.Succeeds, err = ork.ClaimInstance(cfg.DataDir); err != nil {
				return err
			}
			storeMetrics := store.NewMetrics()
			st, err := openDatabase(cmd.Context(), cfg.Database, filepath.Join(cfg.DataDir, "ork.db"), storeMetrics)
			if err != nil {
				return err
			}
			defer st.Close()
			lease, err := ork.NewLease(cfg.Lease, st, log.With("component", "wrk-ork"))
			if err != nil {
				return cli.UsageErrorf("%v", err)
			}
			reg := metrics.NewRegistry(lease.Collector(), storeMetrics)
			serveMetrics, err := cfg.listenMetrics(reg)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			g, ctx := errgroup.WithContext(ctx)
			g.Go(func() error { return serveMetrics(ctx) })
			g.Go(func() error { return a.leadOrk(ctx, &cfg, st, lease, reg, log) })
			return g.Wait()
		},
	}
	cfg.bind(cmd.Flags(), "0.0.0.0:7420", trust.Ork)
	cmd.Flags().StringVar(&configFile, "config", "", "a YAML config file (flags override it)")
	cmd.Flags().StringVar(&cfg.Database, "database", "", "the database: a SQLite file, or postgres://… for PostgreSQL (default DATA_DIR/ork.db)")
	cmd.Flags().StringVar(&cfg.Monitor, "monitor", "", "KEY@HOST:PORT of wrk-monitor, where the ork writes its system records of jobs (the autoscaler's decisions)")
	cmd.Flags().Var(&cfg.Ork.Heartbeat, "heartbeat", "how often each worker is checked")
	cmd.Flags().StringVar(&cfg.Ork.PlacementPolicy, "placement-policy", "", placementPolicyUsage)
	cmd.Flags().Var(&cfg.Lease.TTL, "lease-ttl", "how long the leader's lease lasts unless renewed (orks sharing a database elect one leader; docs/store.md)")
	cmd.Flags().Var(&cfg.Lease.Renew, "lease-renew", "how often the leader renews its lease and a follower tries to take it (at most half the ttl)")
	cmd.Flags().StringVar(&cfg.Lease.Holder, "lease-holder", "", "this ork's name in the lease, unique among the orks (default HOST:DATA_DIR)")
	cmd.Flags().Var(&cfg.Ork.IsolationTimeout, "isolation-timeout", "a leader that reached peers and then reaches none (no fabric connection, no rack's worker answering) this long yields its lease to a follower; 0: never")
	return cmd
}

// leadOrk runs the ork while it holds the lease (ork.Lead). A follower
// does not listen on the fabric: the orks share one identity and peers are
// given every ork's address, so they reach whichever leads. A deposed
// leader fails stop: if what is in flight does not end within a TTL (a
// database that does not answer), the process ends anyway, and its
// supervisor starts it again as a follower.
func (a *app) leadOrk(ctx context.Context, cfg *orkFileConfig, st store.Store, lease *ork.Lease, reg *prometheus.Registry, log *slog.Logger) error {
	// The racks' workers are bound as the ork registers them.
	var p peers
	var records joblog.Sink
	var fwd *joblog.Forwarder
	var n *fabric.Node
	var cur atomic.Pointer[fabric.Node] // n, for the forwarder's goroutine
	if cfg.Monitor != "" {
		monKey, err := p.one("monitor", trust.Monitor, cfg.Monitor)
		if err != nil {
			return err
		}
		fwd = joblog.NewForwarder(joblog.NodeFunc(cur.Load), monKey, 10000)
		records = fwd
		reg.MustRegister(monitor.ForwarderCollector("wrk-ork", fwd))
	}
	ring, err := cfg.keyring(p.keys)
	if err != nil {
		return err
	}
	defer func() {
		if n != nil {
			n.Close()
		}
	}()
	if fwd != nil {
		fctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); fwd.Run(fctx) }()
		defer func() { cancel(); <-done }()
	}
	err = ork.Lead(ctx, cfg.Ork, ork.LeaderDeps{
		Deps:  ork.Deps{Store: st, Keys: ring, Records: records, Log: log.With("component", "wrk-ork")},
		Lease: lease,
		Node: func() (*fabric.Node, error) {
			node, err := cfg.trustNode("wrk-ork", ring, log)
			if err == nil {
				for k, addrs := range p.addrs {
					node.AddAddrs(k, addrs...)
				}
				n = node
				cur.Store(node)
			}
			return node, err
		},
		Ready: func(_ context.Context, o *ork.Ork, n *fabric.Node) error {
			a.printNode(n)
			return reg.Register(o.Collector())
		},
		Lost: func(err error) {
			time.AfterFunc(cfg.Lease.TTL.D(), func() {
				fmt.Fprintln(a.Stderr, "error:", err)
				os.Exit(1)
			})
		},
	})
	return err // the config was checked before (a usage error)
}

// ---- app-node

type appNodeFileConfig struct {
	componentFlags `json:",inline"`
	Ork            string         `json:"ork"`
	Database       string         `json:"database,omitempty"`
	API            appnode.Config `json:"api"`
	// Directories are the agents' directories (wrk-directory), where the
	// app-node looks up the jobs' agents for shells.
	Directories []string `json:"directories,omitempty"`
	// ProxyInference, KEY@HOST:PORT, answers the model health of
	// managed-inference jobs (inference.modelHealth), as in `cosmicac up`.
	ProxyInference string `json:"proxyInference,omitempty"`
}

func (a *app) appNodeCommand() *cobra.Command {
	cfg := appNodeFileConfig{API: appnode.DefaultConfig()}
	var configFile string
	cmd := &cobra.Command{
		Use:   "app-node",
		Short: "Run cosmicac-app-node: the HTTP API, authentication and accounts",
		Args:  cobra.NoArgs,
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
			dirs, err := p.add("directory", trust.Directory, cfg.Directories...)
			if err != nil {
				return err
			}
			proxies, err := p.add("proxy-inference", trust.Proxy, given(cfg.ProxyInference)...)
			if err != nil {
				return err
			}
			// The jobs' agents dial the app-node (which opens shells back
			// over their connections): the keyring follows the ork's
			// binding of them.
			n, ring, err := cfg.dialNode("app-node", p, log)
			if err != nil {
				return err
			}
			defer cfg.unlock() // after the node: the data dir is free once all is closed
			defer n.Close()
			storeMetrics := store.NewMetrics()
			st, err := openDatabase(cmd.Context(), cfg.Database, filepath.Join(cfg.DataDir, "app.db"), storeMetrics)
			if err != nil {
				return err
			}
			defer st.Close()
			cfg.API.DataDir = cfg.DataDir
			apiCfg := cfg.API
			apiCfg.HTTP = cfg.HTTP
			ctx := cmd.Context()
			tokenFile, created, err := appnode.Bootstrap(ctx, st, cfg.DataDir)
			if err != nil {
				return err
			}
			if created {
				fmt.Fprintf(a.Stdout, "admin token written to %s\n", tokenFile)
			}
			ui, err := webui.New()
			if err != nil {
				return err
			}
			obs := metrics.NewAPIObserver()
			deps := appnode.Deps{
				Ork:      orkapi.NewClient(n, orkKey),
				Accounts: st,
				APIKeys:  st, // its database keeps the inference API keys too
				Usage:    st, // and the inference usage
				// and the datastores, their secrets sealed with the key in
				// the API's secretsKeyFile (every app-node of one database
				// is given the same file).
				Datastores: st,
				Log:        log.With("component", "app-node"),
				WebUI:      ui, // the gateway's default for every path outside the APIs
				Observer:   obs,
				// proxy-inference checks keys here (keyapi.ByHash; the trust
				// graph lets no one else call it).
				Fabric: n,
			}
			if len(dirs) > 0 {
				// Shells reach an agent found in the directories only if the
				// ork binds its key to the job's replica.
				deps.Shells = appnode.FabricShells{Node: n, Directories: dirs,
					Verify: func(jobID string, replica int, key fabric.PublicKey) bool {
						return ring.IsAgent(key, jobID, replica, 0)
					}}
			}
			if len(proxies) > 0 {
				deps.ModelHealth = proxyapi.HealthClient{Node: n, Proxy: proxies[0]}
			}
			s, err := appnode.New(apiCfg, deps)
			if err != nil {
				return cli.UsageErrorf("%v", err)
			}
			serveMetrics, err := cfg.listenMetrics(metrics.NewRegistry(obs, storeMetrics))
			if err != nil {
				return err
			}
			ln, err := net.Listen("tcp", cfg.API.Listen)
			if err != nil {
				return fmt.Errorf("listen for the API: %w", err)
			}
			a.printNode(n)
			fmt.Fprintf(a.Stdout, "api http://%s/api/v1\n", ln.Addr())
			g, gctx := errgroup.WithContext(ctx)
			g.Go(func() error {
				ring.Follow(gctx, orkapi.NewClient(n, orkKey), log.With("component", "trust"))
				return nil
			})
			g.Go(func() error { return serveMetrics(gctx) })
			g.Go(func() error { return s.Run(gctx, ln) })
			return waitAll(g)
		},
	}
	cfg.bind(cmd.Flags(), "0.0.0.0:7421", trust.AppNode, trust.Ork, trust.Directory)
	f := cmd.Flags()
	f.StringVar(&configFile, "config", "", "a YAML config file (flags override it)")
	f.StringVar(&cfg.Ork, "ork", "", "the ork: "+orkAddrs)
	f.StringVar(&cfg.Database, "database", "", "the accounts database: a SQLite file, or postgres://… for PostgreSQL (default DATA_DIR/app.db)")
	f.StringVar(&cfg.API.Listen, "api-listen", cfg.API.Listen, "the HTTP API's address")
	f.StringSliceVar(&cfg.Directories, "directory", nil, "the agents' directory (wrk-directory), KEY@HOST:PORT (repeatable): enables shells")
	f.StringVar(&cfg.ProxyInference, "proxy-inference", "", "proxy-inference, KEY@HOST:PORT: the model health of inference jobs (it is admitted as with --proxy-inference-key)")
	return cmd
}

// ---- wrk-server-sim

type simFileConfig struct {
	componentFlags `json:",inline"`
	Ork            string            `json:"ork"`
	Monitor        string            `json:"monitor,omitempty"`
	Rack           simcluster.Config `json:"rack"`
}

func (a *app) wrkServerSimCommand() *cobra.Command {
	cfg := simFileConfig{Rack: simcluster.DefaultConfig()}
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
			rack := cfg.Rack
			if err := rack.Validate(); err != nil {
				return cli.UsageErrorf("%v", err)
			}
			orkKey, orkAddrs, err := cli.ParsePeerFlag("ork", cfg.Ork)
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
			var (
				monKey   fabric.PublicKey
				monAddrs []string
			)
			dialled := map[trust.Role][]fabric.PublicKey{trust.Ork: {orkKey}}
			if cfg.Monitor != "" {
				if monKey, monAddrs, err = cli.ParsePeerFlag("monitor", cfg.Monitor); err != nil {
					return err
				}
				dialled[trust.Monitor] = []fabric.PublicKey{monKey}
			}
			// A standalone simulated rack runs no agents: its keyring holds
			// the ork, the monitor and the operators.
			ring, err := cfg.keyring(dialled)
			if err != nil {
				return err
			}
			reg := metrics.NewRegistry()
			serveMetrics, err := cfg.listenMetrics(reg)
			if err != nil {
				return err
			}
			srv, err := simcluster.NewServer(rack, simcluster.ServerDeps{
				Fabric: fabric.Config{Component: "wrk-server-sim", Identity: id, Listen: cfg.Listen,
					Policy: trust.NewPolicy(trust.Worker, ring, trust.OnRack(rack.Rack)), Logger: log},
				Ork: orkKey, OrkAddrs: orkAddrs, Monitor: monKey, MonitorAddrs: monAddrs,
				Log: log.With("component", "wrk-server-sim"),
			})
			if err != nil {
				return err
			}
			defer srv.Close()
			if fwd := srv.Forwarder(); fwd != nil {
				reg.MustRegister(monitor.ForwarderCollector("wrk-server-sim", fwd))
			}
			cfg.lockAddr(srv.Addr())
			a.printNode(srv.Node())
			g, ctx := errgroup.WithContext(cmd.Context())
			g.Go(func() error { return serveMetrics(ctx) })
			g.Go(func() error { return srv.Run(ctx) })
			return waitAll(g)
		},
	}
	cfg.bind(cmd.Flags(), "0.0.0.0:7423", trust.Worker, trust.Ork, trust.Monitor)
	f := cmd.Flags()
	f.StringVar(&configFile, "config", "", "a YAML config file (flags override it)")
	f.StringVar(&cfg.Ork, "ork", "", "the ork: "+orkAddrs)
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
	// Ork is followed for the racks' workers and the jobs' agents, the
	// producers of records.
	Ork        string         `json:"ork"`
	HTTPListen string         `json:"httpListen"`
	AppNodeURL string         `json:"appNodeURL"`
	Monitor    monitor.Config `json:"monitor"`
}

func (a *app) wrkMonitorCommand() *cobra.Command {
	cfg := monitorFileConfig{HTTPListen: "0.0.0.0:8082", Monitor: monitor.DefaultConfig("")}
	var configFile string
	cmd := &cobra.Command{
		Use:   "wrk-monitor",
		Short: "Run cosmicac-wrk-monitor: job log records in, live streams and Loki out",
		Long: "Takes log records from the racks' workers and the jobs' agents over the fabric, each only\n" +
			"for its own rack's or its own job's records (their keys are bound by the ork: --ork), and\n" +
			"streams them live under /monitor/v1/jobs/{id}/logs, forwards them to Loki when --loki-url is\n" +
			"set, and reads history back from it. Viewers authenticate with their CosmicAC token, which\n" +
			"the monitor checks against the app-node (--app-node-url).",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := loadConfigFile(cmd, configFile, &cfg); err != nil {
				return err
			}
			if cfg.AppNodeURL == "" {
				return cli.UsageErrorf("--app-node-url is required (viewers' tokens are checked there)")
			}
			var p peers
			orkKey, err := p.one("ork", trust.Ork, cfg.Ork)
			if err != nil {
				return err
			}
			log := a.componentLogger(cfg.Verbose)
			n, ring, err := cfg.dialNode("wrk-monitor", p, log)
			if err != nil {
				return err
			}
			defer cfg.unlock() // after the node: the data dir is free once all is closed
			defer n.Close()
			mcfg := cfg.Monitor
			if mcfg.DataDir == "" {
				mcfg.DataDir = filepath.Join(cfg.DataDir, "spool")
			}
			mcfg.HTTP = cfg.HTTP
			m, err := monitor.New(mcfg, monitor.Deps{Fabric: n, Producers: ring,
				Viewers: monitor.NewAPIAuthorizer(cfg.AppNodeURL, nil), Log: log.With("component", "wrk-monitor")})
			if err != nil {
				return cli.UsageErrorf("%v", err)
			}
			defer m.Close()
			ln, err := net.Listen("tcp", cfg.HTTPListen)
			if err != nil {
				return fmt.Errorf("listen: %w", err)
			}
			a.printNode(n)
			fmt.Fprintf(a.Stdout, "monitor http://%s/monitor/v1\n", ln.Addr())
			serveMetrics, err := cfg.listenMetrics(m.Registry())
			if err != nil {
				return err
			}
			g, ctx := errgroup.WithContext(cmd.Context())
			g.Go(func() error { return m.Run(ctx, ln) }) // the logs only: the metrics are on --metrics-listen
			g.Go(func() error {
				ring.Follow(ctx, orkapi.NewClient(n, orkKey), log.With("component", "trust"))
				return nil
			})
			g.Go(func() error { return serveMetrics(ctx) })
			return waitAll(g)
		},
	}
	cfg.bind(cmd.Flags(), "0.0.0.0:7422", trust.Monitor, trust.Ork)
	f := cmd.Flags()
	f.StringVar(&configFile, "config", "", "a YAML config file (flags override it)")
	f.StringVar(&cfg.Ork, "ork", "", "the ork, which binds the producers' keys: "+orkAddrs)
	f.StringVar(&cfg.HTTPListen, "http-listen", cfg.HTTPListen, "the address of /monitor/v1 (its metrics are on --metrics-listen)")
	f.StringVar(&cfg.AppNodeURL, "app-node-url", "", "the app-node's base URL, to check viewers' tokens")
	f.StringVar(&cfg.Monitor.Loki.URL, "loki-url", "", "forward records to this Loki (e.g. http://loki:3100)")
	f.StringVar(&cfg.Monitor.Loki.TenantID, "loki-tenant", "", "the Loki tenant (X-Scope-OrgID)")
	return cmd
}
