package platform

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sync"

	"github.com/go-logr/logr"
	"k8s.io/client-go/tools/clientcmd"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/cosmicac/cosmicac/internal/agent"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/inferagent"
	"github.com/cosmicac/cosmicac/internal/joblog"
	"github.com/cosmicac/cosmicac/internal/k8sworker"
	"github.com/cosmicac/cosmicac/internal/ork/orkapi"
	"github.com/cosmicac/cosmicac/internal/worker"
)

// KubeConfig makes `cosmicac up` drive a real cluster instead of the
// simulated rack.
type KubeConfig struct {
	// Kubeconfig is the cluster's kubeconfig file.
	Kubeconfig string
	// Rack is the rack's configuration (k8sworker.DefaultRackConfig when
	// zero).
	Rack k8sworker.RackConfig
}

// startKubeWorker runs wrk-server-k8s-nvidia in this process, on its own
// fabric node, and registers its rack with the ork.
func (p *Platform) startKubeWorker(ctx, runCtx context.Context, kc KubeConfig, orkKey, monKey fabric.PublicKey, logs joblog.Sink) error {
	rc := kc.Rack
	if err := rc.Validate(); err != nil {
		return fmt.Errorf("rack config: %w", err)
	}
	restCfg, err := clientcmd.BuildConfigFromFlags("", kc.Kubeconfig)
	if err != nil {
		return fmt.Errorf("kubeconfig %s: %w", kc.Kubeconfig, err)
	}
	ctrllog.SetLogger(logr.FromSlogHandler(p.log.Handler()))
	id, err := identity(p.cfg.DataDir, "k8s-"+rc.Rack)
	if err != nil {
		return err
	}
	allow := fabric.NewAllowList(orkKey)
	allow.Allow(p.cfg.OperatorKeys...)
	n, err := fabric.New(fabric.Config{Component: "wrk-server-k8s-nvidia", Identity: id,
		Listen: net.JoinHostPort(p.cfg.FabricHost, "0"), Policy: allow, Logger: p.log})
	if err != nil {
		return err
	}
	p.KubeNode = n
	n.AddAddrs(orkKey, p.OrkNode.Addr())
	n.AddAddrs(monKey, p.MonitorNode.Addr())
	// The agents' peers: this platform's agents' directory, app-node and
	// proxy-inference, at the addresses they listen on (Config.FabricHost,
	// which must be reachable from the pods), and the monitor, admitted but
	// not dialled (agents' keys are not admitted there, as on the simulated
	// rack). The worker adds itself. proxy-inference reaches an inference
	// agent only over the connection the agent opens to it, so without it
	// the proxy could not route to the cluster's replicas (it admits any key
	// read-only; the instance agents dial it too, and may call only its
	// read-only methods).
	rc.Peers = append(slices.Clone(rc.Peers),
		k8sworker.Peer{Role: agent.RoleDirectory, Key: p.DirectoryNode.PublicKey().String(), Addrs: []string{p.DirectoryNode.Addr()}},
		k8sworker.Peer{Role: agent.RoleAppNode, Key: p.AppNode.PublicKey().String(), Addrs: []string{p.AppNode.Addr()}},
		k8sworker.Peer{Role: inferagent.RoleProxy, Key: p.ProxyNode.PublicKey().String(), Addrs: []string{p.ProxyNode.Addr()}},
		k8sworker.Peer{Role: agent.RoleMonitor, Key: monKey.String()},
	)
	w, err := k8sworker.New(rc, restCfg, worker.NewReporterClient(n, orkKey), logs, p.log.With("component", "wrk-server-k8s-nvidia"))
	if err != nil {
		return err
	}
	ka := &kubeAgents{p: p, keys: map[agentSlot][]fabric.PublicKey{}}
	if err := w.ServeAgents(k8sworker.AgentOptions{Node: n, Allow: allow, OnAgents: ka.set}); err != nil {
		return err
	}
	worker.Serve(n, w)
	p.goRun("wrk-server-k8s-nvidia", func() error { return w.Run(runCtx) })
	_, err = p.Ork.RegisterRack(ctx, orkapi.RegisterRackParams{
		Rack: cosmic.Rack{ID: rc.Rack, Type: cosmic.RackTypeServer, Location: rc.Location,
			GPUModel: rc.GPUModel, WorkerKey: id.PublicKey().String()},
		WorkerAddrs: []string{n.Addr()},
	})
	if err != nil {
		return fmt.Errorf("register the cluster's rack: %w", err)
	}
	return nil
}

// kubeAgents admits the agents of the cluster's VMIs where they need it,
// with the same least privilege as the simulated rack's (simAgents): full
// access on the agents' directory, read-only on the app-node (the worker
// admits them read-only on its own node). The key of each replica's VMI 0
// is the one the app-node's Verify accepts for that replica (shells go to
// VMI 0); the app-node also checks it against the keys the job's status
// lists (appnode.JobAgentKey). Keys are taken off and revoked when their
// replica is gone.
type kubeAgents struct {
	p *Platform

	mu   sync.Mutex
	keys map[agentSlot][]fabric.PublicKey
}

// set is k8sworker.AgentOptions.OnAgents.
func (k *kubeAgents) set(jobID string, replica int, keys []fabric.PublicKey) {
	s := k.p.agents
	slot := agentSlot{jobID, replica}
	k.mu.Lock()
	old := k.keys[slot]
	if len(keys) == 0 {
		delete(k.keys, slot)
	} else {
		k.keys[slot] = slices.Clone(keys)
	}
	k.mu.Unlock()
	for _, key := range old {
		if !slices.Contains(keys, key) {
			s.remove(jobID, replica, key)
		}
	}
	for i, key := range keys {
		if i == 0 {
			s.admit(jobID, replica, key)
			continue
		}
		for _, l := range s.full {
			l.Allow(key)
		}
		for _, l := range s.readOnly {
			l.AllowReadOnly(key)
		}
	}
}
