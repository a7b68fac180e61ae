package platform

import (
	"context"
	"time"

	"github.com/cosmicac/cosmicac/internal/agent/agentapi"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/ork/orkapi"
	"github.com/cosmicac/cosmicac/internal/qemu"
	"github.com/cosmicac/cosmicac/internal/qemuworker"
	"github.com/cosmicac/cosmicac/internal/vmboot"
	"github.com/cosmicac/cosmicac/internal/worker"
)

// QEMUConfig makes `cosmicac up --rack qemu` run a rack of real VMs on
// this machine (wrk-server-qemu) instead of the simulated rack.
type QEMUConfig struct {
	Rack qemuworker.Config
	// Images is the image catalogue; AgentBinary the static cosmicac put
	// on the VMs' agent disk.
	Images      qemu.Catalogue
	AgentBinary string
	// Relay is the command a VM's forwarded connection runs
	// (qemu.Config.Relay): `cosmicac qemu-relay`.
	Relay []string
}

// startQEMUWorker runs wrk-server-qemu in this process, on its own fabric
// node.
func (p *Platform) startQEMUWorker(runCtx context.Context) (orkapi.RegisterRackParams, error) {
	qc := *p.cfg.QEMU
	rc := qc.Rack
	n, id, ring, logs, err := p.startWorkerNode(runCtx, "wrk-server-qemu", "qemu-"+rc.Rack, rc.Rack)
	if err != nil {
		return orkapi.RegisterRackParams{}, err
	}
	p.QEMUNode = n
	// The agents dial the directory (announce), the app-node (shells) and
	// the monitor (their records), and the inference agents
	// proxy-inference (requests), each forwarded into the VM at
	// qemuworker.GuestIP; the worker adds itself.
	peers := []vmboot.Peer{
		{Role: agentapi.RoleDirectory, Key: p.DirectoryNode.PublicKey().String(), Addrs: []string{p.DirectoryNode.Addr()}},
		{Role: agentapi.RoleAppNode, Key: p.AppNode.PublicKey().String(), Addrs: []string{p.AppNode.Addr()}},
		{Role: agentapi.RoleMonitor, Key: p.MonitorNode.PublicKey().String(), Addrs: []string{p.MonitorNode.Addr()}},
		{Role: agentapi.RoleProxy, Key: p.ProxyNode.PublicKey().String(), Addrs: []string{p.ProxyNode.Addr()}},
	}
	w, err := qemuworker.New(rc, qemuworker.Options{Images: qc.Images, AgentBinary: qc.AgentBinary, Relay: qc.Relay, Node: n, Keys: ring,
		Peers: peers, Reporter: worker.NewReporterClient(n, p.OrkNode.PublicKey()), Logs: logs, Log: p.log.With("component", "wrk-server-qemu"),
		LlamaServer: p.cfg.LlamaServer, ModelDir: p.cfg.modelDir()})
	if err != nil {
		return orkapi.RegisterRackParams{}, err
	}
	p.QEMU = w
	worker.Serve(n, w)
	p.goRun("wrk-server-qemu", func() error { return w.Run(runCtx) })
	return p.registration(id, n, cosmic.Rack{ID: rc.Rack, Location: rc.Location, GPUModel: rc.GPUModel,
		AgentDeadline: int(rc.AgentDeadline.D() / time.Second)}), nil
}
