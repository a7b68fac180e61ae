// Package platform assembles every CosmicAC component in one process, each
// on its own fabric node and talking to the others over the fabric exactly
// as separate processes would: wrk-ork, a rack worker (the simulated rack by
// default), and the app-node serving the HTTP API. `cosmicac up` runs it;
// the whole-system tests (internal/cosmictest) start it per test.
//
// Importers: internal/cli and internal/cosmictest.
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

	"github.com/cosmicac/cosmicac/internal/agent"
	"github.com/cosmicac/cosmicac/internal/appnode"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/datadir"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/inferagent"
	"github.com/cosmicac/cosmicac/internal/inferproxy"
	"github.com/cosmicac/cosmicac/internal/joblog"
	"github.com/cosmicac/cosmicac/internal/metrics"
	"github.com/cosmicac/cosmicac/internal/monitor"
	"github.com/cosmicac/cosmicac/internal/ork"
	"github.com/cosmicac/cosmicac/internal/ork/orkapi"
	"github.com/cosmicac/cosmicac/internal/simcluster"
	"github.com/cosmicac/cosmicac/internal/simruntime"
	"github.com/cosmicac/cosmicac/internal/store/sqlite"
	"github.com/cosmicac/cosmicac/internal/worker"
)

// Config is the shape of a one-process platform.
type Config struct {
	// DataDir holds the database, each component's identity and the admin
	// token.
	DataDir string
	// Listen is the HTTP API's address; port 0 picks a free one.
	Listen string
	// FabricHost is the host the components' fabric nodes listen on.
	FabricHost string
	// Sim is the simulated rack.
	Sim simcluster.Config
	// Kube, when set, drives a real cluster through wrk-server-k8s-nvidia
	// instead: its rack is registered and the simulated one is not.
	Kube *KubeConfig
	// Ork tunes the ork.
	Ork ork.Config
	// SimRuntime is the simulated runtime of the simulated rack's
	// inference agents (time to first token, faults, …); zero takes
	// platform.SimRuntime.
	SimRuntime simruntime.Config
	// Monitor tunes wrk-monitor (Loki forwarding, buffers); its spool lives
	// under DataDir/wrk-monitor unless set.
	Monitor monitor.Config
	// OperatorKeys are admitted to every component with full access (the
	// local CLI's key, for `cosmicac rpc`).
	OperatorKeys []fabric.PublicKey
	// AgentSSHPort is the host port the simulated rack's agents connect
	// `jobs ssh` to (their VM's port 22 is the host's; default 22).
	AgentSSHPort int
	Logger       *slog.Logger
}

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
	}
}

// Platform is a running one-process platform.
type Platform struct {
	cfg Config
	log *slog.Logger

	Store   *sqlite.Store
	OrkNode *fabric.Node
	Ork     *ork.Ork
	Sim     *simcluster.Cluster
	SimLink *simcluster.Endpoint
	// KubeNode is wrk-server-k8s-nvidia's fabric node when Config.Kube is set.
	KubeNode *fabric.Node
	AppNode  *fabric.Node
	// DirectoryNode hosts the directory the instance agents announce
	// themselves in (agent.Topic); the app-node looks them up there.
	DirectoryNode *fabric.Node
	// ProxyNode is proxy-inference's fabric node; Proxy serves
	// /inference/v1 on the platform's HTTP server (docs/inference.md).
	ProxyNode   *fabric.Node
	Proxy       *inferproxy.Proxy
	Logs        *joblog.Ring
	Monitor     *monitor.Monitor
	MonitorNode *fabric.Node
	LogFwd      *joblog.Forwarder
	// Metrics holds the in-process components' metrics, served at /metrics
	// (the monitor's own are at /monitor/metrics).
	Metrics   *prometheus.Registry
	URL       string // the HTTP API's base URL
	TokenFile string // the bootstrap admin token's file
	http      *http.Server
	agents    *simAgents
	inference *simInference
	lock      *datadir.Lock // DataDir's, held until Close

	cancel context.CancelFunc
	wg     sync.WaitGroup
	errs   chan error
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
	lock, err := datadir.Acquire(cfg.DataDir, "cosmicac up", log) // before anything touches it
	if err != nil {
		return nil, err
	}
	p := &Platform{cfg: cfg, log: log, Logs: joblog.NewRing(10000), errs: make(chan error, 8)}
	p.lock = lock
	defer func() {
		if err != nil {
			p.Close()
		}
	}()
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	p.cancel = cancel

	if p.Store, err = sqlite.Open(filepath.Join(cfg.DataDir, "cosmicac.db")); err != nil {
		return nil, err
	}
	orkID, err := identity(cfg.DataDir, "wrk-ork")
	if err != nil {
		return nil, err
	}
	simID, err := identity(cfg.DataDir, "sim-"+cfg.Sim.Rack)
	if err != nil {
		return nil, err
	}
	appID, err := identity(cfg.DataDir, "app-node")
	if err != nil {
		return nil, err
	}
	listen := net.JoinHostPort(cfg.FabricHost, "0")

	// wrk-ork: admits the app-node, the operator, and (through the dialer)
	// each registered rack's worker.
	orkAllow := fabric.NewAllowList(appID.PublicKey())
	orkAllow.Allow(cfg.OperatorKeys...)
	if p.OrkNode, err = fabric.New(fabric.Config{Component: "wrk-ork", Identity: orkID, Listen: listen, Policy: orkAllow, Logger: log}); err != nil {
		return nil, err
	}
	if p.Ork, err = ork.New(cfg.Ork, p.Store, ork.FabricDialer(p.OrkNode, orkAllow), log.With("component", "wrk-ork")); err != nil {
		return nil, err
	}
	fabric.NewDirectory(nil).Register(p.OrkNode)
	p.Ork.Serve(p.OrkNode)
	if err := p.Ork.Start(ctx); err != nil {
		return nil, err
	}

	// wrk-monitor: takes log records from the workers over the fabric.
	monID, err := identity(cfg.DataDir, "wrk-monitor")
	if err != nil {
		return nil, err
	}
	mcfg := cfg.Monitor
	if mcfg.DataDir == "" {
		mcfg.DataDir = filepath.Join(cfg.DataDir, "wrk-monitor")
	}
	if p.Monitor, err = monitor.New(mcfg, log.With("component", "wrk-monitor")); err != nil {
		return nil, err
	}
	monAllow := fabric.NewAllowList(simID.PublicKey())
	monAllow.Allow(cfg.OperatorKeys...)
	if p.MonitorNode, err = fabric.New(fabric.Config{Component: "wrk-monitor", Identity: monID, Listen: listen, Policy: monAllow, Logger: log}); err != nil {
		return nil, err
	}
	p.Monitor.Serve(p.MonitorNode)
	p.goRun("wrk-monitor", func() error { return p.Monitor.Run(rctx) })

	// The app-node's fabric node: a client of the ork, and the peer the
	// instance agents dial so that it can open their shells.
	appAllow := fabric.NewAllowList(append([]fabric.PublicKey{orkID.PublicKey()}, cfg.OperatorKeys...)...)
	if p.AppNode, err = fabric.New(fabric.Config{Component: "app-node", Identity: appID, Listen: listen,
		Policy: appAllow, Logger: log}); err != nil {
		return nil, err
	}
	p.AppNode.AddAddrs(orkID.PublicKey(), p.OrkNode.Addr())

	// The agents' directory: the instance agents announce themselves there
	// (full access to it is all they get), the app-node looks them up.
	dirID, err := identity(cfg.DataDir, "wrk-directory")
	if err != nil {
		return nil, err
	}
	dirAllow := fabric.NewAllowList(appID.PublicKey())
	dirAllow.Allow(cfg.OperatorKeys...)
	if p.DirectoryNode, err = fabric.New(fabric.Config{Component: "wrk-directory", Identity: dirID, Listen: listen, Policy: dirAllow, Logger: log}); err != nil {
		return nil, err
	}
	fabric.NewDirectory(nil).Register(p.DirectoryNode)
	p.AppNode.AddAddrs(dirID.PublicKey(), p.DirectoryNode.Addr())

	// proxy-inference: finds the inference agents in the agents' directory
	// (read-only there: lookups) and the models in the ork's job list
	// (read-only there: listJobs); any key may connect read-only (the
	// agents dial it; it trusts them because the directory lists them).
	proxyID, err := identity(cfg.DataDir, "proxy-inference")
	if err != nil {
		return nil, err
	}
	if p.ProxyNode, err = fabric.New(fabric.Config{Component: "proxy-inference", Identity: proxyID, Listen: listen,
		Policy: inferproxy.AgentPolicy(cfg.OperatorKeys...), Logger: log}); err != nil {
		return nil, err
	}
	dirAllow.AllowReadOnly(proxyID.PublicKey())
	orkAllow.AllowReadOnly(proxyID.PublicKey())
	p.ProxyNode.AddAddrs(dirID.PublicKey(), p.DirectoryNode.Addr())
	p.ProxyNode.AddAddrs(orkID.PublicKey(), p.OrkNode.Addr())
	p.Proxy = inferproxy.New(inferproxy.Config{}, p.ProxyNode, []fabric.PublicKey{dirID.PublicKey()},
		inferproxy.OrkCatalog{Ork: orkapi.NewClient(p.ProxyNode, orkID.PublicKey())}, p.Store, log.With("component", "proxy-inference"))
	p.Proxy.Serve(p.ProxyNode)

	// The simulated rack's worker: admits the ork and the operator.
	simAllow := fabric.NewAllowList(orkID.PublicKey())
	simAllow.Allow(cfg.OperatorKeys...)
	simLog := log.With("component", "wrk-server-sim")
	p.SimLink = simcluster.NewEndpoint(fabric.Config{Component: "wrk-server-sim", Identity: simID, Listen: listen, Policy: simAllow, Logger: log}, func(n *fabric.Node) {
		worker.Serve(n, p.Sim)
		p.Sim.RegisterFaults(n)
		// The agents' status events: the rack follows its agents in
		// process, so they are only logged.
		fabric.HandleFunc(n, agent.MethodReport, func(_ context.Context, peer fabric.PublicKey, st agent.Status) (struct{}, error) {
			simLog.Debug("agent report", "agent", peer.Short(), "job_id", st.JobID, "replica", st.Replica, "ready", st.Ready, "sessions", len(st.Sessions))
			return struct{}{}, nil
		}, fabric.ReadOnly())
		fabric.HandleFunc(n, inferagent.MethodReport, func(_ context.Context, peer fabric.PublicKey, st inferagent.Status) (struct{}, error) {
			simLog.Debug("inference agent report", "agent", peer.Short(), "job_id", st.JobID, "replica", st.Replica, "vmi", st.VMIIndex, "ready", st.Ready)
			return struct{}{}, nil
		}, fabric.ReadOnly())
		n.AddAddrs(orkID.PublicKey(), p.OrkNode.Addr())
		n.AddAddrs(monID.PublicKey(), p.MonitorNode.Addr())
	})
	p.LogFwd = joblog.NewForwarder(joblog.NodeFunc(p.SimLink.Node), monID.PublicKey(), 10000)
	p.goRun("log forwarder", func() error { return p.LogFwd.Run(rctx) })
	jobLogs := joblog.Tee(p.Logs, p.LogFwd)
	p.Sim = simcluster.New(cfg.Sim, p.SimLink.Reporter(orkID.PublicKey()), jobLogs, simLog)
	p.Sim.SetLink(p.SimLink)
	if err := p.SimLink.Up(); err != nil {
		return nil, err
	}
	// The instance agents of gpu-container replicas, with the bootstrap a
	// VMI gets: the directory (announce), the worker (reports), the
	// app-node (shells) and the monitor (admitted, not dialled: their
	// records go into the platform's sink here).
	p.agents = &simAgents{
		log: log.With("component", agent.Component), logs: jobLogs, dataDir: cfg.DataDir, sshPort: cfg.AgentSSHPort,
		peers: []agent.Peer{
			{Role: agent.RoleDirectory, Key: dirID.PublicKey(), Addrs: []string{p.DirectoryNode.Addr()}},
			{Role: agent.RoleWorker, Key: simID.PublicKey(), Addrs: []string{p.SimLink.Addr()}},
			{Role: agent.RoleAppNode, Key: appID.PublicKey(), Addrs: []string{p.AppNode.Addr()}},
			{Role: agent.RoleMonitor, Key: monID.PublicKey()},
		},
		full:     []*fabric.AllowList{dirAllow},
		readOnly: []*fabric.AllowList{simAllow, appAllow},
		nodes:    func() []*fabric.Node { return []*fabric.Node{p.DirectoryNode, p.AppNode, p.SimLink.Node()} },
		keys:     map[agentSlot]fabric.PublicKey{},
	}
	p.Sim.SetAgents(p.agents)
	// The inference agents of managed-inference replicas, one per VMI,
	// each with the simulated runtime.
	p.inference = &simInference{
		log: log.With("component", inferagent.Component), logs: jobLogs, runtime: cfg.simRuntime(),
		peers: []agent.Peer{
			{Role: agent.RoleDirectory, Key: dirID.PublicKey(), Addrs: []string{p.DirectoryNode.Addr()}},
			{Role: agent.RoleProxy, Key: proxyID.PublicKey(), Addrs: []string{p.ProxyNode.Addr()}},
			{Role: agent.RoleWorker, Key: simID.PublicKey(), Addrs: []string{p.SimLink.Addr()}},
		},
		full:     []*fabric.AllowList{dirAllow},
		readOnly: []*fabric.AllowList{simAllow},
		nodes:    func() []*fabric.Node { return []*fabric.Node{p.DirectoryNode, p.ProxyNode, p.SimLink.Node()} },
		agents:   map[string][]*inferagent.Agent{},
	}
	p.Sim.SetInference(p.inference)
	p.goRun("simulated rack", func() error { return p.Sim.Run(rctx) })

	if cfg.Kube != nil {
		if err := p.startKubeWorker(ctx, rctx, *cfg.Kube, orkID.PublicKey(), monID.PublicKey(), jobLogs); err != nil {
			return nil, err
		}
	} else if _, err := p.Ork.RegisterRack(ctx, orkapi.RegisterRackParams{
		// Register (or re-register, with its new address) the simulated rack.
		Rack: cosmic.Rack{ID: cfg.Sim.Rack, Type: cosmic.RackTypeServer, Location: cfg.Sim.Location,
			GPUModel: cfg.Sim.GPUModel, WorkerKey: simID.PublicKey().String()},
		WorkerAddrs: []string{p.SimLink.Addr()},
	}); err != nil {
		return nil, fmt.Errorf("register the simulated rack: %w", err)
	}
	p.goRun("wrk-ork", func() error { return p.Ork.Run(rctx) })

	// app-node: the HTTP API.
	if p.TokenFile, _, err = appnode.Bootstrap(ctx, p.Store, cfg.DataDir); err != nil {
		return nil, err
	}
	acfg := appnode.DefaultConfig()
	acfg.Listen, acfg.DataDir = cfg.Listen, cfg.DataDir
	api, err := appnode.New(acfg, orkapi.NewClient(p.AppNode, orkID.PublicKey()), p.Store, log.With("component", "app-node"))
	if err != nil {
		return nil, err
	}
	api.SetShells(appnode.FabricShells{Node: p.AppNode, Directories: []fabric.PublicKey{dirID.PublicKey()}, Verify: p.agents.Verify})
	api.SetAPIKeys(p.Store)
	api.SetModelHealth(proxyHealth{p.Proxy})
	apiObs := metrics.NewAPIObserver()
	api.SetObserver(apiObs)
	p.Metrics = metrics.NewRegistry(apiObs, p.Ork.Collector(), monitor.ForwarderCollector("wrk-server-sim", p.LogFwd), p.Proxy.Collector())
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("listen for the API on %s: %w", cfg.Listen, err)
	}
	p.URL = "http://" + ln.Addr().String()
	_ = p.lock.SetAddr(p.URL) // only names the holder to a refused process
	// One HTTP server, routed as the Caddy gateway routes: /monitor to
	// wrk-monitor (which checks each viewer's token with the app-node),
	// everything else to the app-node.
	mux := http.NewServeMux()
	mux.Handle("/monitor/metrics", p.Monitor.MetricsHandler())
	mux.Handle("/metrics", metrics.Handler(p.Metrics))
	mux.Handle("/monitor/", p.Monitor.Handler(monitor.NewAPIAuthorizer("http://app-node", monitor.HandlerTransport(api.Handler()))))
	mux.Handle("/inference/", p.Proxy.Handler())
	mux.Handle("/", api.Handler())
	p.http = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second} // no write timeout: SSE streams
	p.http.RegisterOnShutdown(p.Monitor.CloseStreams)
	p.goRun("api", func() error {
		if err := p.http.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
	return p, nil
}

func (p *Platform) goRun(name string, f func() error) {
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		if err := f(); err != nil {
			p.log.Error("component stopped", "name", name, "err", err)
			select {
			case p.errs <- fmt.Errorf("%s: %w", name, err):
			default:
			}
		}
	}()
}

// Err delivers the first component failure.
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
	if p.http != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		p.http.Shutdown(ctx)
		cancel()
	}
	if p.cancel != nil {
		p.cancel()
	}
	p.wg.Wait()
	if p.agents != nil {
		p.agents.Wait()
	}
	if p.inference != nil {
		p.inference.Wait()
	}
	if p.Proxy != nil {
		p.Proxy.Close()
	}
	for _, n := range []*fabric.Node{p.AppNode, p.OrkNode, p.MonitorNode, p.DirectoryNode, p.ProxyNode, p.KubeNode} {
		if n != nil {
			n.Close()
		}
	}
	if p.SimLink != nil {
		p.SimLink.Close()
	}
	if p.Monitor != nil {
		p.Monitor.Close()
	}
	if p.Store != nil {
		return p.Store.Close()
	}
	return nil
}
