package platform

import (
	"context"
	"net"
	"path/filepath"

	"github.com/cosmicac/cosmicac/internal/agent"
	"github.com/cosmicac/cosmicac/internal/agent/agentapi"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/inferagent"
	"github.com/cosmicac/cosmicac/internal/joblog"
	"github.com/cosmicac/cosmicac/internal/ork/orkapi"
	"github.com/cosmicac/cosmicac/internal/simcluster"
	"github.com/cosmicac/cosmicac/internal/trust"
)

// A rackKind is a kind of rack `cosmicac up` runs: its worker, in this
// process on a fabric node of its own, beside the platform's components.
// A new kind is a line of rackKinds, its start, and its section of Config
// (docs/architecture.md, "Where a change goes").
type rackKind struct {
	name string
	// on says whether a config asks for this kind (its section is set).
	on func(Config) bool
	// start runs the rack's worker until runCtx ends (in the platform's
	// group), sets the platform's workerName, workerNode and workerFwd,
	// and answers the rack's registration with the ork.
	start func(p *Platform, runCtx context.Context) (orkapi.RegisterRackParams, error)
}

// rackKinds are the kinds, the first whose section a config sets winning;
// the simulated rack, last, is the default.
var rackKinds = []rackKind{
	{name: RackKube, on: func(c Config) bool { return c.Kube != nil }, start: (*Platform).startKubeWorker},
	{name: RackQEMU, on: func(c Config) bool { return c.QEMU != nil }, start: (*Platform).startQEMUWorker},
	{name: RackSim, on: func(Config) bool { return true }, start: (*Platform).startSimWorker},
}

// The rack kinds' names, as `cosmicac up --rack` takes them.
const (
	RackSim  = "sim"
	RackQEMU = "qemu"
	RackKube = "k8s"
)

// RackKinds names every kind of rack, default first.
func RackKinds() []string {
	out := []string{}
	for i := len(rackKinds) - 1; i >= 0; i-- {
		out = append(out, rackKinds[i].name)
	}
	return out
}

// rackKind is the kind of rack c asks for.
func (c Config) rackKind() rackKind {
	for _, k := range rackKinds {
		if k.on(c) {
			return k
		}
	}
	panic("platform: no rack kind") // the last is always on
}

// RackKind names the kind of rack c asks for.
func (c Config) RackKind() string { return c.rackKind().name }

// startSimWorker runs the simulated rack's worker, as `cosmicac
// wrk-server-sim` runs it (simcluster.NewServer), with its replicas'
// agents in this process: it admits the platform's components, the
// operators and the agents it issued keys to; its job log records go to
// the monitor and to the platform's ring (p.Logs).
func (p *Platform) startSimWorker(runCtx context.Context) (orkapi.RegisterRackParams, error) {
	cfg := p.cfg
	id, err := identity(cfg.DataDir, "sim-"+cfg.Sim.Rack)
	if err != nil {
		return orkapi.RegisterRackParams{}, err
	}
	ring, err := p.configured()
	if err != nil {
		return orkapi.RegisterRackParams{}, err
	}
	mon := p.ids[trust.Monitor].PublicKey()
	// The agents of the replicas, with the bootstrap a VMI gets: the
	// directory (announce), the worker (reports; the rack names itself,
	// simcluster.Boot), the app-node (shells) or proxy-inference
	// (requests), and the monitor (named, not dialled: their records go
	// into the rack's sink, as its own do). Each starts once the platform
	// has bound the key the rack issued it.
	dir := agent.Peer{Role: agentapi.RoleDirectory, Key: p.DirectoryNode.PublicKey(), Addrs: []string{p.DirectoryNode.Addr()}}
	runner := agentRunner{log: p.log, rack: cfg.Sim.Rack, local: ring, bound: p.Keys}
	p.agents = &simAgents{agentRunner: runner, dataDir: cfg.DataDir, sshPort: cfg.AgentSSHPort, noHostShells: cfg.Sim.NoHostShells,
		peers: []agent.Peer{dir,
			{Role: agentapi.RoleAppNode, Key: p.AppNode.PublicKey(), Addrs: []string{p.AppNode.Addr()}},
			{Role: agentapi.RoleMonitor, Key: mon},
		},
		ids: map[agentSlot]*fabric.Identity{},
	}
	sim := cfg.Sim
	if cfg.LlamaServer != "" {
		sim.LlamaCPP = true
	}
	sim.VolumesDir = filepath.Join(cfg.DataDir, "volumes", sim.Rack)
	p.inference = &simInference{agentRunner: runner, runtime: cfg.simRuntime(), llamaServer: cfg.LlamaServer, modelDir: cfg.modelDir(),
		modelCache: filepath.Join(cfg.DataDir, "cache", "models"),
		peers: []agent.Peer{dir,
			{Role: agentapi.RoleProxy, Key: p.ProxyNode.PublicKey(), Addrs: []string{p.ProxyNode.Addr()}},
			// The app-node signs a model's requests (inference.modelSource).
			{Role: agentapi.RoleAppNode, Key: p.AppNode.PublicKey(), Addrs: []string{p.AppNode.Addr()}},
			{Role: agentapi.RoleMonitor, Key: mon},
		},
		agents: map[string][]*inferagent.Agent{},
	}
	if p.Sim, err = simcluster.NewServer(sim, simcluster.ServerDeps{
		Fabric: fabric.Config{Component: "wrk-server-sim", Identity: id, Listen: net.JoinHostPort(cfg.FabricHost, "0"),
			Policy: trust.NewPolicy(trust.Worker, ring, trust.OnRack(cfg.Sim.Rack)), Logger: p.log},
		Ork: p.OrkNode.PublicKey(), OrkAddrs: []string{p.OrkNode.Addr()},
		Monitor: mon, MonitorAddrs: []string{p.MonitorNode.Addr()},
		Logs: p.Logs, Log: p.log.With("component", "wrk-server-sim"),
		Agents: p.agents, Inference: p.inference,
	}); err != nil {
		return orkapi.RegisterRackParams{}, err
	}
	ring.OnRevoke(func(k fabric.PublicKey) {
		if n := p.Sim.Node(); n != nil {
			n.Revoke(k)
		}
	})
	p.workerName, p.workerNode, p.workerFwd = "wrk-server-sim", p.Sim.Node, p.Sim.Forwarder()
	p.goRun("simulated rack", func() error { return p.Sim.Run(runCtx) })
	return orkapi.RegisterRackParams{
		Rack: cosmic.Rack{ID: cfg.Sim.Rack, Type: cosmic.RackTypeServer, Location: cfg.Sim.Location,
			GPUModel: cfg.Sim.GPUModel, WorkerKey: id.PublicKey().String(),
			AgentDeadline: simAgentDeadline(cfg.Sim.Step.D())},
		WorkerAddrs: []string{p.Sim.Addr()},
	}, nil
}

// startWorkerNode starts the fabric node of a rack's worker that runs its
// agents in VMs (wrk-server-k8s-nvidia, wrk-server-qemu), with its identity
// in DATA_DIR/idName: it admits the ork, the monitor and the operators,
// and the agents the worker binds in ring as it issues their keys. Its job
// log records go to the monitor from this node (the monitor takes from a
// worker only records of jobs on its rack), through logs, which feeds the
// platform's ring too; the forwarder runs in the platform's group.
func (p *Platform) startWorkerNode(runCtx context.Context, component, idName, rack string) (n *fabric.Node, id *fabric.Identity, ring *trust.Keyring, logs joblog.Sink, err error) {
	if id, err = identity(p.cfg.DataDir, idName); err != nil {
		return nil, nil, nil, nil, err
	}
	orkKey, monKey := p.OrkNode.PublicKey(), p.MonitorNode.PublicKey()
	ring = trust.NewKeyring()
	for role, k := range map[trust.Role]fabric.PublicKey{trust.Ork: orkKey, trust.Monitor: monKey} {
		if err := ring.Add(role, k); err != nil {
			return nil, nil, nil, nil, err
		}
	}
	if err := ring.Add(trust.Operator, p.cfg.OperatorKeys...); err != nil {
		return nil, nil, nil, nil, err
	}
	if n, err = fabric.New(fabric.Config{Component: component, Identity: id,
		Listen: net.JoinHostPort(p.cfg.FabricHost, "0"), Policy: trust.NewPolicy(trust.Worker, ring, trust.OnRack(rack)), Logger: p.log}); err != nil {
		return nil, nil, nil, nil, err
	}
	n.AddAddrs(orkKey, p.OrkNode.Addr())
	n.AddAddrs(monKey, p.MonitorNode.Addr())
	fwd := joblog.NewForwarder(joblog.NodeFunc(func() *fabric.Node { return n }), monKey, 10000)
	p.goRun(component+" log forwarder", func() error { return fwd.Run(runCtx) })
	p.workerName, p.workerNode, p.workerFwd = component, func() *fabric.Node { return n }, fwd
	return n, id, ring, joblog.Tee(p.Logs, fwd), nil
}

func (p *Platform) registration(id *fabric.Identity, n *fabric.Node, r cosmic.Rack) orkapi.RegisterRackParams {
	r.Type, r.WorkerKey = cosmic.RackTypeServer, id.PublicKey().String()
	return orkapi.RegisterRackParams{Rack: r, WorkerAddrs: []string{n.Addr()}}
}
