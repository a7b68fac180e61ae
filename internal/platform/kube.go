package platform

import (
	"context"
	"fmt"
	"slices"

	"github.com/go-logr/logr"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/cosmicac/cosmicac/internal/agent/agentapi"
	"github.com/cosmicac/cosmicac/internal/cosmic"
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
// fabric node.
func (p *Platform) startKubeWorker(runCtx context.Context) (orkapi.RegisterRackParams, error) {
	kc := *p.cfg.Kube
	rc := kc.Rack
	if err := rc.Validate(); err != nil {
		return orkapi.RegisterRackParams{}, fmt.Errorf("rack config: %w", err)
	}
	restCfg, err := clientcmd.BuildConfigFromFlags("", kc.Kubeconfig)
	if err != nil {
		return orkapi.RegisterRackParams{}, fmt.Errorf("kubeconfig %s: %w", kc.Kubeconfig, err)
	}
	ctrllog.SetLogger(logr.FromSlogHandler(p.log.Handler()))
	klog.SetSlogLogger(p.log) // client-go logs through klog: into the component's log too
	n, id, ring, logs, err := p.startWorkerNode(runCtx, "wrk-server-k8s-nvidia", "k8s-"+rc.Rack, rc.Rack)
	if err != nil {
		return orkapi.RegisterRackParams{}, err
	}
	p.KubeNode = n
	// The agents' peers: this platform's agents' directory, app-node and
	// proxy-inference, at the addresses they listen on (Config.FabricHost,
	// which must be reachable from the pods), and the monitor, named but not
	// dialled (as on the simulated rack, the agents' records go into the
	// platform's sink here). The worker adds itself. proxy-inference reaches
	// an inference agent only over the connection the agent opens to it.
	// Each of them admits an agent's key once the ork binds it, from the
	// worker's report.
	rc.Peers = append(slices.Clone(rc.Peers),
		k8sworker.Peer{Role: agentapi.RoleDirectory, Key: p.DirectoryNode.PublicKey().String(), Addrs: []string{p.DirectoryNode.Addr()}},
		k8sworker.Peer{Role: agentapi.RoleAppNode, Key: p.AppNode.PublicKey().String(), Addrs: []string{p.AppNode.Addr()}},
		k8sworker.Peer{Role: agentapi.RoleProxy, Key: p.ProxyNode.PublicKey().String(), Addrs: []string{p.ProxyNode.Addr()}},
		k8sworker.Peer{Role: agentapi.RoleMonitor, Key: p.MonitorNode.PublicKey().String()},
	)
	w, err := k8sworker.New(rc, restCfg, worker.NewReporterClient(n, p.OrkNode.PublicKey()), logs, p.log.With("component", "wrk-server-k8s-nvidia"))
	if err != nil {
		return orkapi.RegisterRackParams{}, err
	}
	if err := w.ServeAgents(k8sworker.AgentOptions{Node: n, Keys: ring}); err != nil {
		return orkapi.RegisterRackParams{}, err
	}
	worker.Serve(n, w)
	p.goRun("wrk-server-k8s-nvidia", func() error { return w.Run(runCtx) })
	return p.registration(id, n, cosmic.Rack{ID: rc.Rack, Location: rc.Location, GPUModel: rc.GPUModel}), nil
}
