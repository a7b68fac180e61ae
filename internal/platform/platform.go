// Package platform assembles every CosmicAC component in one process, each
// on its own fabric node and talking to the others over the fabric exactly
// as separate processes would: wrk-ork, a rack worker (the simulated rack by
// default), and the app-node serving the HTTP API. `cosmicac up` runs it;
// the whole-system tests (internal/cosmictest) start it per test.
//
// Importers: internal/cli/components and internal/cosmictest.
package platform

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/cosmicac/cosmicac/internal/appnode"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/datadir"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/httpserve"
	"github.com/cosmicac/cosmicac/internal/inferproxy"
	"github.com/cosmicac/cosmicac/internal/inferproxy/proxyapi"
	"github.com/cosmicac/cosmicac/internal/joblog"
	"github.com/cosmicac/cosmicac/internal/metrics"
	"github.com/cosmicac/cosmicac/internal/monitor"
	"github.com/cosmicac/cosmicac/internal/ork"
	"github.com/cosmicac/cosmicac/internal/ork/orkapi"
	"github.com/cosmicac/cosmicac/internal/qemuworker"
	"github.com/cosmicac/cosmicac/internal/simcluster"
	"github.com/cosmicac/cosmicac/internal/simruntime"
	"github.com/cosmicac/cosmicac/internal/store"
	"github.com/cosmicac/cosmicac/internal/store/database"
	"github.com/cosmicac/cosmicac/internal/trust"
	"github.com/cosmicac/cosmicac/internal/webui"
)

// Config is the shape of a one-process platform.
type Config struct {
	// DataDir holds the database, each component's identity and the admin
	// token.
	DataDir string
	// Database, when set, is where the state is kept instead of
	// DataDir/cosmicac.db: another SQLite file, or a postgres:// URL for
	// PostgreSQL (store/database picks).
	Database string
	// Listen is the HTTP API's address; port 0 picks a free one.
	Listen string
	// MetricsListen serves /metrics and /monitor/metrics, apart from the
	// API (default DefaultMetricsListen, loopback; port 0 picks a free one;
	// "": none).
	MetricsListen string
	// HTTP bounds the clients of the API's and the metrics' servers (zero
	// fields: httpserve.DefaultLimits).
	HTTP httpserve.Limits
	// FabricHost is the host the components' fabric nodes listen on.
	FabricHost string
	// Sim is the simulated rack.
	Sim simcluster.Config
	// Kube, when set, drives a real cluster through wrk-server-k8s-nvidia
	// instead: its rack is registered and the simulated one is not.
	Kube *KubeConfig
	// QEMU, when set (and Kube is not), runs a rack of real VMs on this
	// machine through wrk-server-qemu instead of the simulated one.
	QEMU *QEMUConfig
	// Ork tunes the ork.
	Ork ork.Config
	// Lease elects the ork among those sharing the database, as for a
	// standalone wrk-ork (zero: ork.DefaultLeaseConfig; the holder
	// defaults to ork.DefaultHolder of DataDir).
	Lease ork.LeaseConfig
	// LlamaServer, when set, is the llama-server the rack runs its
	// llama.cpp replicas with (docs/inference.md, "llama.cpp"): the
	// simulated rack as a real process on this host per replica, the QEMU
	// rack inside each replica's VM, from an engine disk with the model.
	// Unset, the rack's catalogue has no llama.cpp and such jobs are
	// refused at create. ModelDir is its GGUF models' directory (default
	// DATA_DIR/models), where `up` installs the test models
	// (testmodel.Install).
	LlamaServer string
	ModelDir    string
	// SimRuntime is the simulated runtime of the simulated rack's
	// inference agents (time to first token, faults, …); zero takes
	// platform.SimRuntime.
	SimRuntime simruntime.Config
	// Proxy tunes proxy-inference (how long a request waits for a
	// starting replica, limits, …).
	Proxy inferproxy.Config
	// Monitor tunes wrk-monitor (Loki forwarding, buffers); its spool lives
	// under DataDir/wrk-monitor unless set.
	Monitor monitor.Config
	// JobCreatesPerMinute, when not zero, replaces the app-node's bound on
	// the jobs one team creates a minute (appnode.Config; negative: no
	// bound).
	JobCreatesPerMinute int
	// OperatorKeys are admitted to every component with full access (the
	// local CLI's key, for `cosmicac rpc`).
	OperatorKeys []fabric.PublicKey
	// AgentSSHPort, when set, is the host port of a real sshd that the
	// simulated rack's agents connect `jobs ssh` to (tests use a throwaway
	// one). The default, 0, gives each gpu-container replica an SSH server
	// of CosmicAC's own (internal/simsshd) admitting its spec's
	// sshPublicKeys: the host's port 22 is not the VM's.
	AgentSSHPort int
	// Front, when set, is the gateway in front of the components: the
	// platform serves the API, proxy-inference, wrk-monitor and the web
	// interface each on its own loopback listener and hands their
	// addresses to Front, which listens on Listen (`cosmicac up` starts
	// the embedded Caddy this way). Unset, one HTTP server on Listen
	// routes by path as the gateway does (tests run several platforms in
	// one process, and Caddy keeps one config a process).
	Front  func(Upstreams) (Front, error)
	Logger *slog.Logger
}

// Upstreams are the base URLs (http://host:port) of the components the
// gateway routes to.
type Upstreams struct {
	Listen                         string
	API, Inference, Monitor, WebUI string
}

// Front is a running gateway: its URL and how to stop it.
type Front interface {
	URL() string
	Close() error
}

// embeddedGateway is where the gateway of Front (the embedded Caddy)
// connects to the components from: loopback, as they listen there. The
// app-node and proxy-inference believe its X-Forwarded-For (Caddy
// replaces what a client sent with the client's address), so that each
// client is limited and audited as itself, not as the gateway.
var embeddedGateway = []string{"127.0.0.1", "::1"}

// DefaultConfig is `cosmicac up`'s: the API on 127.0.0.1:8080 and one
// simulated rack in us with 2 nodes × 8 GH100_H100_SXM5_80GB.
func DefaultConfig(dataDir string) Config {
	return Config{
		DataDir:    dataDir,
		Listen:     appnode.DefaultListen,
		FabricHost: "127.0.0.1",
		Sim:        simcluster.DefaultConfig(),
		Ork:        ork.DefaultConfig(),
		Monitor:    monitor.DefaultConfig(""),

		MetricsListen: DefaultMetricsListen,
	}
}

// Platform is a running one-process platform.
type Platform struct {
	cfg Config
	log *slog.Logger

	Store   database.DB
	OrkNode *fabric.Node
	Ork     *ork.Ork
	// Sim is the simulated rack's worker (its Cluster, Node and Addr).
	Sim *simcluster.Server
	// QEMUNode and QEMU are wrk-server-qemu's fabric node and worker when
	// Config.QEMU is set.
	QEMUNode *fabric.Node
	QEMU     *qemuworker.Worker
	// KubeNode is wrk-server-k8s-nvidia's fabric node when Config.Kube is set.
	KubeNode *fabric.Node
	AppNode  *fabric.Node
	// Keys is the keyring of the app-node's, the monitor's, the agents'
	// directory's and proxy-inference's policies: the platform's keys and
	// the bound keys as the ork lists them.
	Keys *trust.Keyring
	// DirectoryNode hosts the directory the agents announce themselves in
	// (agentapi.Topic, agentapi.InferenceTopic); the app-node and the proxy look them
	// up there.
	DirectoryNode *fabric.Node
	Directory     *fabric.Directory
	// ProxyNode is proxy-inference's fabric node; Proxy serves
	// /inference/v1 on the platform's HTTP server (docs/inference.md).
	ProxyNode   *fabric.Node
	Proxy       *inferproxy.Proxy
	Logs        *joblog.Ring
	Monitor     *monitor.Monitor
	MonitorNode *fabric.Node
	// Metrics holds the in-process components' metrics, served at /metrics
	// of MetricsURL (the monitor's own are at /monitor/metrics there).
	Metrics   *prometheus.Registry
	URL       string         // the HTTP API's base URL
	TokenFile string         // the bootstrap admin token's file
	servers   []*http.Server // the API's, or each component's behind a Front
	front     Front
	agents    *simAgents
	inference *simInference
	lock      *datadir.Lock // DataDir's, held until Close

	// MetricsURL is the metrics listener's base URL ("": none).
	MetricsURL  string
	metricsHTTP *http.Server

	// g runs every goroutine the platform starts: the first to fail ends
	// the others (its context), and Close waits for them all.
	g      *errgroup.Group
	cancel context.CancelFunc
	errs   chan error // the first failure, once
	// ids are the platform's components' identities, by role.
	ids map[trust.Role]*fabric.Identity
	// workerName, workerNode and workerFwd are the rack's worker, of
	// whichever kind: its component name, its current fabric node, and the
	// forwarder of its job log records to the monitor.
	workerName string
	workerNode func() *fabric.Node
	workerFwd  *joblog.Forwarder
	failed     sync.Once
}

// WorkerNode is the rack's worker's fabric node, whatever the rack's kind
// (nil while a simulated outage holds it down).
func (p *Platform) WorkerNode() *fabric.Node { return p.workerNode() }

// configured makes a keyring of the platform's own keys, each as its role,
// and the operators'.
func (p *Platform) configured() (*trust.Keyring, error) {
	ring := trust.NewKeyring()
	for role, id := range p.ids {
		if err := ring.Add(role, id.PublicKey()); err != nil {
			return nil, err
		}
	}
	return ring, ring.Add(trust.Operator, p.cfg.OperatorKeys...)
}

// identity loads (or makes) a component's key in DATA_DIR/NAME.
func identity(dataDir, name string) (*fabric.Identity, error) {
	return fabric.LoadOrCreateIdentity(filepath.Join(dataDir, name))
}

// Start brings every component up and returns once the API answers. Close
// stops it.
func Start(ctx context.Context, cfg Config) (_ *Platform, err error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := cfg.Sim.Validate(); err != nil {
		return nil, fmt.Errorf("simulated rack: %w", err)
	}
	if err := cfg.Proxy.Validate(); err != nil {
		return nil, fmt.Errorf("proxy-inference config: %w", err)
	}
	if err := cfg.HTTP.Validate(); err != nil {
		return nil, err
	}
	lock, err := datadir.Acquire(cfg.DataDir, "cosmicac up", log) // before anything touches it
	if err != nil {
		return nil, err
	}
	p := &Platform{cfg: cfg, log: log, Logs: joblog.NewRing(10000), errs: make(chan error, 1)}
	p.lock = lock
	defer func() {
		if err != nil {
			p.Close()
		}
	}()
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	p.cancel = cancel
	p.g, rctx = errgroup.WithContext(rctx)

	db := cfg.Database
	if db == "" {
		db = filepath.Join(cfg.DataDir, "cosmicac.db")
	}
	if p.Store, err = database.Open(ctx, db); err != nil {
		return nil, err
	}
	storeMetrics := store.NewMetrics()
	p.Store = database.Observe(p.Store, db, storeMetrics)
	orkID, err := identity(cfg.DataDir, "wrk-ork")
	if err != nil {
		return nil, err
	}
	appID, err := identity(cfg.DataDir, "app-node")
	if err != nil {
		return nil, err
	}
	listen := net.JoinHostPort(cfg.FabricHost, "0")

	// The trust graph (internal/trust): each component's node admits, and
	// lets call, what the declaration gives the class of each key. The
	// platform's own keys are configured here as a standalone component
	// is given them by flags; the racks' workers and the jobs' agents are
	// bound where they are issued: the ork binds its racks' workers in
	// its keyring, the simulated rack's worker its agents in its own, and
	// the other components follow the ork (platform.follow).
	ids := map[trust.Role]*fabric.Identity{trust.Ork: orkID, trust.AppNode: appID}
	for role, name := range map[trust.Role]string{trust.Monitor: "wrk-monitor", trust.Directory: "wrk-directory", trust.Proxy: "proxy-inference"} {
		if ids[role], err = identity(cfg.DataDir, name); err != nil {
			return nil, err
		}
	}
	dirID, proxyID := ids[trust.Directory], ids[trust.Proxy]
	p.ids = ids
	orkRing, err := p.configured()
	if err != nil {
		return nil, err
	}
	if p.Keys, err = p.configured(); err != nil {
		return nil, err
	}
	node := func(role trust.Role, ring *trust.Keyring, opts ...trust.PolicyOption) (*fabric.Node, error) {
		// The ork's node answers "starting" until the ork serves on it
		// (ork.Lead opens it).
		n, err := fabric.New(fabric.Config{Component: string(role), Identity: ids[role], Listen: listen, Policy: trust.NewPolicy(role, ring, opts...), Logger: log,
			Starting: role == trust.Ork})
		if err == nil {
			ring.OnRevoke(n.Revoke)
		}
		return n, err
	}

	// wrk-ork's node: its racks' workers are bound as they are
	// registered. The ork serves on it once it leads (below).
	if p.OrkNode, err = node(trust.Ork, orkRing); err != nil {
		return nil, err
	}
	lcfg := cfg.Lease
	if lcfg == (ork.LeaseConfig{}) {
		lcfg = ork.DefaultLeaseConfig()
	}
	if lcfg.Holder == "" {
		lcfg.Holder = ork.DefaultHolder(cfg.DataDir)
	}
	// The data dir is locked (above): the ork that started here before is
	// gone, and its term may be taken over at once.
	if lcfg.Instance, lcfg.Succeeds, err = ork.ClaimInstance(cfg.DataDir); err != nil {
		return nil, err
	}
	lease, err := ork.NewLease(lcfg, p.Store, log.With("component", "wrk-ork"))
	if err != nil {
		return nil, err
	}

	// The app-node's fabric node: a client of the ork, and the peer the
	// instance agents dial so that it can open their shells.
	if p.AppNode, err = node(trust.AppNode, p.Keys); err != nil {
		return nil, err
	}
	p.AppNode.AddAddrs(orkID.PublicKey(), p.OrkNode.Addr())

	// The agents' directory: the agents announce themselves there, each
	// under its own job's topic only; the app-node and the proxy look them
	// up.
	if p.DirectoryNode, err = node(trust.Directory, p.Keys); err != nil {
		return nil, err
	}
	p.Directory = trust.ServeAgentDirectory(p.DirectoryNode, p.Keys)
	p.AppNode.AddAddrs(dirID.PublicKey(), p.DirectoryNode.Addr())

	// proxy-inference: finds the inference agents in the agents' directory
	// and routes only to the keys the ork binds to the job's head agents;
	// the models come from the ork's job list.
	if p.ProxyNode, err = node(trust.Proxy, p.Keys); err != nil {
		return nil, err
	}
	p.ProxyNode.AddAddrs(dirID.PublicKey(), p.DirectoryNode.Addr())
	p.ProxyNode.AddAddrs(orkID.PublicKey(), p.OrkNode.Addr())
	p.AppNode.AddAddrs(proxyID.PublicKey(), p.ProxyNode.Addr())
	pcfg := cfg.Proxy
	if cfg.Front != nil && len(pcfg.TrustedProxies) == 0 {
		pcfg.TrustedProxies = embeddedGateway
	}
	// Its API keys come from the store, the app-node's, in this process (a
	// standalone proxy asks the app-node over the fabric: FabricKeys).
	if p.Proxy, err = inferproxy.New(pcfg, inferproxy.Deps{Node: p.ProxyNode, Directories: []fabric.PublicKey{dirID.PublicKey()},
		Catalog: inferproxy.OrkCatalog{Ork: orkapi.NewClient(p.ProxyNode, orkID.PublicKey())}, Keys: p.Store, Agents: p.Keys,
		Load: orkapi.NewClient(p.ProxyNode, orkID.PublicKey()), Usage: p.Store,
		Log: log.With("component", "proxy-inference")}); err != nil {
		return nil, err
	}

	// app-node: the HTTP API, on the same dependencies as a standalone
	// app-node's (cli/components), its HTTP served below. It answers API
	// key lookups on its node, and asks proxy-inference for model health.
	acfg := appnode.DefaultConfig()
	acfg.Listen, acfg.DataDir = cfg.Listen, cfg.DataDir
	if cfg.JobCreatesPerMinute != 0 {
		acfg.JobCreatesPerMinute = cfg.JobCreatesPerMinute
	}
	if cfg.Front != nil {
		acfg.TrustedProxies = embeddedGateway
	}
	apiObs := metrics.NewAPIObserver()
	api, err := appnode.New(acfg, appnode.Deps{
		Ork:        orkapi.NewClient(p.AppNode, orkID.PublicKey()),
		Accounts:   p.Store,
		APIKeys:    p.Store,
		Usage:      p.Store,
		Datastores: p.Store,
		Log:        log.With("component", "app-node"),
		Shells: appnode.FabricShells{Node: p.AppNode, Directories: []fabric.PublicKey{dirID.PublicKey()},
			Verify: func(jobID string, replica int, key fabric.PublicKey) bool {
				return p.Keys.IsAgent(key, jobID, replica, 0)
			}},
		ModelHealth: proxyapi.HealthClient{Node: p.AppNode, Proxy: proxyID.PublicKey()},
		Observer:    apiObs,
		Fabric:      p.AppNode,
	})
	if err != nil {
		return nil, err
	}

	// wrk-monitor: takes log records from the workers and agents over the
	// fabric, each confined to its own rack or job; its viewers' tokens are
	// checked with the app-node, in process.
	mcfg := cfg.Monitor
	if mcfg.DataDir == "" {
		mcfg.DataDir = filepath.Join(cfg.DataDir, "wrk-monitor")
	}
	if p.MonitorNode, err = node(trust.Monitor, p.Keys); err != nil {
		return nil, err
	}
	if p.Monitor, err = monitor.New(mcfg, monitor.Deps{Fabric: p.MonitorNode, Producers: p.Keys,
		Viewers: monitor.NewAPIAuthorizer("http://app-node", monitor.HandlerTransport(api.Handler())),
		Log:     log.With("component", "wrk-monitor")}); err != nil {
		return nil, err
	}
	// Their HTTP is served below, on one listener or behind the gateway.
	p.goRun("wrk-monitor", func() error { return p.Monitor.Run(rctx, nil) })
	p.goRun("proxy-inference", func() error { return p.Proxy.Run(rctx, nil) })

	// The rack, of the kind the config asks for (racks.go), registered
	// (or registered again, at its new address) with the ork.
	kind := cfg.rackKind()
	reg, err := kind.start(p, rctx)
	if err != nil {
		return nil, fmt.Errorf("%s rack: %w", kind.name, err)
	}
	// wrk-ork, as a standalone ork runs (ork.Lead): elected among the
	// orks sharing the database, its writes fenced by its term; it
	// registers the rack before it acts. With the database to itself it
	// leads at once; with another ork leading a shared one, `up` waits
	// (the lease logs who leads) rather than run a second leader.
	led := make(chan *ork.Ork, 1)
	// The ork's own records of jobs (its autoscaler's decisions) go to
	// wrk-monitor over the fabric, as a standalone ork's do.
	p.OrkNode.AddAddrs(p.MonitorNode.PublicKey(), p.MonitorNode.Addr())
	orkRecords := joblog.NewForwarder(joblog.NodeFunc(func() *fabric.Node { return p.OrkNode }), p.MonitorNode.PublicKey(), 10000)
	p.goRun("wrk-ork log forwarder", func() error { return orkRecords.Run(rctx) })
	p.goRun("wrk-ork", func() error {
		return ork.Lead(rctx, cfg.Ork, ork.LeaderDeps{
			Deps:  ork.Deps{Store: p.Store, Keys: orkRing, Records: orkRecords, Log: log.With("component", "wrk-ork")},
			Lease: lease,
			Node:  func() (*fabric.Node, error) { return p.OrkNode, nil },
			Ready: func(ctx context.Context, o *ork.Ork, _ *fabric.Node) error {
				if _, err := o.RegisterRack(ctx, reg); err != nil {
					return fmt.Errorf("register the %s rack %s: %w", kind.name, reg.Rack.ID, err)
				}
				led <- o
				return nil
			},
			Lost: func(err error) { p.fail(fmt.Errorf("wrk-ork: %w", err)) },
		})
	})
	select {
	case p.Ork = <-led:
	case err := <-p.errs:
		return nil, err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	// The bound keys follow the ork from here on (before it leads there is
	// none to follow: a follow then only logs that it cannot read them).
	p.goRun("trust", func() error {
		p.Keys.Follow(rctx, orkapi.NewClient(p.AppNode, orkID.PublicKey()), log.With("component", "trust"))
		return nil
	})
	// The first admin, once this process leads (orks sharing a database
	// bootstrap one at a time).
	if p.TokenFile, _, err = appnode.Bootstrap(ctx, p.Store, cfg.DataDir); err != nil {
		return nil, err
	}

	p.Metrics = metrics.NewRegistry(apiObs, p.Ork.Collector(), lease.Collector(), monitor.ForwarderCollector(p.workerName, p.workerFwd), p.Proxy.Collector(), metrics.DirectoryCollector(p.Directory), storeMetrics)
	ui, err := webui.New()
	if err != nil {
		return nil, err
	}
	monitorHTTP := p.Monitor.Handler()
	p.goRun("app-node", func() error { return api.Run(rctx, nil) }) // its HTTP is served below
	if cfg.Front == nil {
		// One HTTP server, routed as the Caddy gateway routes: /api to the
		// app-node, /monitor to wrk-monitor (which checks each viewer's
		// token with the app-node), /inference to proxy-inference, every
		// other path to the web interface. The metrics are on their own
		// listener (serveMetrics), not here.
		mux := http.NewServeMux()
		mux.Handle("/api/", api.Handler())
		mux.Handle("/monitor/", monitorHTTP)
		mux.Handle("/inference/", p.Proxy.Handler())
		mux.Handle("/", ui)
		if p.URL, err = p.serveHTTP("api", cfg.Listen, mux); err != nil {
			return nil, err
		}
	} else {
		up := Upstreams{Listen: cfg.Listen}
		for _, c := range []struct {
			name string
			h    http.Handler
			url  *string
		}{{"api", api.Handler(), &up.API}, {"proxy-inference", p.Proxy.Handler(), &up.Inference},
			{"wrk-monitor", monitorHTTP, &up.Monitor}, {"web interface", ui, &up.WebUI}} {
			if *c.url, err = p.serveHTTP(c.name, "127.0.0.1:0", c.h); err != nil {
				return nil, err
			}
		}
		if p.front, err = cfg.Front(up); err != nil {
			return nil, fmt.Errorf("start the gateway on %s: %w", cfg.Listen, err)
		}
		p.URL = p.front.URL()
	}
	_ = p.lock.SetAddr(p.URL) // only names the holder to a refused process
	if err := p.serveMetrics(cfg); err != nil {
		return nil, err
	}
	return p, nil
}

// serveHTTP serves h on addr under the API's limits (streams bound each
// write, not their length) until Close, and answers its URL.
func (p *Platform) serveHTTP(name, addr string, h http.Handler) (string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("listen for the %s on %s: %w", name, addr, err)
	}
	srv := httpserve.New(h, p.cfg.HTTP, p.log)
	srv.RegisterOnShutdown(p.Monitor.CloseStreams)
	p.servers = append(p.servers, srv)
	p.goRun(name, func() error {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
	return "http://" + ln.Addr().String(), nil
}

// goRun runs f in the platform's group: its failure is logged, ends the
// other components and is the platform's Err.
func (p *Platform) goRun(name string, f func() error) {
	p.g.Go(func() error {
		err := f()
		if err != nil {
			err = fmt.Errorf("%s: %w", name, err)
			p.log.Error("component stopped", "name", name, "err", err)
			p.fail(err)
		}
		return err
	})
}

// fail makes err the platform's Err, if it is the first failure.
func (p *Platform) fail(err error) { p.failed.Do(func() { p.errs <- err }) }

// Err delivers the first component failure; the platform stops the others
// when one fails (Close still has to be called).
func (p *Platform) Err() <-chan error { return p.errs }

// AdminToken reads the bootstrap admin token.
func (p *Platform) AdminToken() (string, error) {
	b, err := os.ReadFile(p.TokenFile)
	if err != nil {
		return "", err
	}
	return string(trimSpace(b)), nil
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == ' ' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}

// Close stops every component and waits for them.
func (p *Platform) Close() error {
	defer p.lock.Close() // last: the data dir is free once all is closed
	if p.front != nil {
		if err := p.front.Close(); err != nil {
			p.log.Warn("stop the gateway", "err", err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	for _, srv := range p.servers {
		srv.Shutdown(ctx)
	}
	cancel()
	if p.metricsHTTP != nil {
		p.metricsHTTP.Close()
	}
	if p.cancel != nil {
		p.cancel()
	}
	if p.g != nil {
		_ = p.g.Wait() // a failure was delivered by Err, and logged
	}
	if p.agents != nil {
		p.agents.Wait()
	}
	if p.inference != nil {
		p.inference.Wait()
	}
	if p.Proxy != nil {
		p.Proxy.Close()
	}
	for _, n := range []*fabric.Node{p.AppNode, p.OrkNode, p.MonitorNode, p.DirectoryNode, p.ProxyNode, p.KubeNode, p.QEMUNode} {
		if n != nil {
			n.Close()
		}
	}
	if p.Sim != nil {
		p.Sim.Close()
	}
	if p.Monitor != nil {
		p.Monitor.Close()
	}
	if p.Store != nil {
		return p.Store.Close()
	}
	return nil
}

// simAgentDeadline is the simulated rack's agent deadline, in seconds: its
// replicas run after about ten steps, so 120 steps, and at least a minute
// (a loaded test machine's steps of milliseconds run late), at most a
// rack's longest.
func simAgentDeadline(step time.Duration) int {
	return min(int(max(120*step, time.Minute)/time.Second), cosmic.MaxAgentDeadline)
}
