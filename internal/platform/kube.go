package platform

import (
	"context"
	"fmt"
	"net"
	"slices"

	"github.com/go-logr/logr"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/cosmicac/cosmicac/internal/agent"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/inferagent"
	"github.com/cosmicac/cosmicac/internal/joblog"
	"github.com/cosmicac/cosmicac/internal/k8sworker"
	"github.com/cosmicac/cosmicac/internal/ork/orkapi"
	"github.com/cosmicac/cosmicac/internal/trust"
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
func (p *Platform) startKubeWorker(ctx, runCtx context.Context, kc KubeConfig, orkKey, monKey fabric.PublicKey) error {
	rc := kc.Rack
	if err := rc.Validate(); err != nil {
		return fmt.Errorf("rack config: %w", err)
	}
	restCfg, err := clientcmd.BuildConfigFromFlags("", kc.Kubeconfig)
	if err != nil {
		return fmt.Errorf("kubeconfig %s: %w", kc.Kubeconfig, err)
	}
	ctrllog.SetLogger(logr.FromSlogHandler(p.log.Handler()))
	klog.SetSlogLogger(p.log) // client-go logs through klog: into the component's log too
	id, err := identity(p.cfg.DataDir, "k8s-"+rc.Rack)
	if err != nil {
		return err
	}
	// The worker's keyring: the platform's keys, and its agents as it
	// issues their keys (ServeAgents).
	ring := trust.NewKeyring()
	for role, k := range map[trust.Role]fabric.PublicKey{trust.Ork: orkKey, trust.Monitor: monKey} {
		if err := ring.Add(role, k); err != nil {
			return err
		}
	}
	if err := ring.Add(trust.Operator, p.cfg.OperatorKeys...); err != nil {
		return err
	}
	n, err := fabric.New(fabric.Config{Component: "wrk-server-k8s-nvidia", Identity: id,
		Listen: net.JoinHostPort(p.cfg.FabricHost, "0"), Policy: trust.NewPolicy(trust.Worker, ring, trust.OnRack(rc.Rack)), Logger: p.log})
	if err != nil {
		return err
	}
	p.KubeNode = n
	n.AddAddrs(orkKey, p.OrkNode.Addr())
	n.AddAddrs(monKey, p.MonitorNode.Addr())
	// The agents' peers: this platform's agents' directory, app-node and
	// proxy-inference, at the addresses they listen on (Config.FabricHost,
	// which must be reachable from the pods), and the monitor, named but not
	// dialled (as on the simulated rack, the agents' records go into the
	// platform's sink here). The worker adds itself. proxy-inference reaches
	// an inference agent only over the connection the agent opens to it.
	// Each of them admits an agent's key once the ork binds it, from the
	// worker's report.
	rc.Peers = append(slices.Clone(rc.Peers),
		k8sworker.Peer{Role: agent.RoleDirectory, Key: p.DirectoryNode.PublicKey().String(), Addrs: []string{p.DirectoryNode.Addr()}},
		k8sworker.Peer{Role: agent.RoleAppNode, Key: p.AppNode.PublicKey().String(), Addrs: []string{p.AppNode.Addr()}},
		k8sworker.Peer{Role: inferagent.RoleProxy, Key: p.ProxyNode.PublicKey().String(), Addrs: []string{p.ProxyNode.Addr()}},
		k8sworker.Peer{Role: agent.RoleMonitor, Key: monKey.String()},
	)
	// The worker's records go to the monitor from its own node: the
	// monitor takes from a worker only records of jobs on its rack.
	fwd := joblog.NewForwarder(joblog.NodeFunc(func() *fabric.Node { return n }), monKey, 10000)
	p.goRun("wrk-server-k8s-nvidia log forwarder", func() error { return fwd.Run(runCtx) })
	w, err := k8sworker.New(rc, restCfg, worker.NewReporterClient(n, orkKey), joblog.Tee(p.Logs, fwd), p.log.With("component", "wrk-server-k8s-nvidia"))
	if err != nil {
		return err
	}
	if err := w.ServeAgents(k8sworker.AgentOptions{Node: n, Keys: ring}); err != nil {
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
