package platform

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/cosmicac/cosmicac/internal/agent"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/joblog"
	"github.com/cosmicac/cosmicac/internal/ork/orkapi"
	"github.com/cosmicac/cosmicac/internal/qemu"
	"github.com/cosmicac/cosmicac/internal/qemuworker"
	"github.com/cosmicac/cosmicac/internal/trust"
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
// node, and registers its rack with the ork.
func (p *Platform) startQEMUWorker(ctx, runCtx context.Context, qc QEMUConfig, orkKey, monKey fabric.PublicKey) error {
	rc := qc.Rack
	id, err := identity(p.cfg.DataDir, "qemu-"+rc.Rack)
	if err != nil {
		return err
	}
	ring := trust.NewKeyring()
	for role, k := range map[trust.Role]fabric.PublicKey{trust.Ork: orkKey, trust.Monitor: monKey} {
		if err := ring.Add(role, k); err != nil {
			return err
		}
	}
	if err := ring.Add(trust.Operator, p.cfg.OperatorKeys...); err != nil {
		return err
	}
	n, err := fabric.New(fabric.Config{Component: "wrk-server-qemu", Identity: id,
		Listen: net.JoinHostPort(p.cfg.FabricHost, "0"), Policy: trust.NewPolicy(trust.Worker, ring, trust.OnRack(rc.Rack)), Logger: p.log})
	if err != nil {
		return err
	}
	p.QEMUNode = n
	n.AddAddrs(orkKey, p.OrkNode.Addr())
	n.AddAddrs(monKey, p.MonitorNode.Addr())
	// The agents dial the directory (announce), the app-node (shells) and
	// the monitor (their records), each forwarded into the VM at
	// qemuworker.GuestIP; the worker adds itself.
	peers := []vmboot.Peer{
		{Role: agent.RoleDirectory, Key: p.DirectoryNode.PublicKey().String(), Addrs: []string{p.DirectoryNode.Addr()}},
		{Role: agent.RoleAppNode, Key: p.AppNode.PublicKey().String(), Addrs: []string{p.AppNode.Addr()}},
		{Role: agent.RoleMonitor, Key: monKey.String(), Addrs: []string{p.MonitorNode.Addr()}},
	}
	// The worker's records go to the monitor from its own node: the
	// monitor takes from a worker only records of jobs on its rack.
	fwd := joblog.NewForwarder(joblog.NodeFunc(func() *fabric.Node { return n }), monKey, 10000)
	p.goRun("wrk-server-qemu log forwarder", func() error { return fwd.Run(runCtx) })
	logs := joblog.Tee(p.Logs, fwd)
	w, err := qemuworker.New(rc, qemuworker.Options{Images: qc.Images, AgentBinary: qc.AgentBinary, Relay: qc.Relay, Node: n, Keys: ring,
		Peers: peers, Reporter: worker.NewReporterClient(n, orkKey), Logs: logs, Log: p.log.With("component", "wrk-server-qemu")})
	if err != nil {
		return err
	}
	p.QEMU = w
	worker.Serve(n, w)
	p.goRun("wrk-server-qemu", func() error { return w.Run(runCtx) })
	_, err = p.Ork.RegisterRack(ctx, orkapi.RegisterRackParams{
		Rack: cosmic.Rack{ID: rc.Rack, Type: cosmic.RackTypeServer, Location: rc.Location,
			GPUModel: rc.GPUModel, WorkerKey: id.PublicKey().String(), AgentDeadline: int(rc.AgentDeadline.D() / time.Second)},
		WorkerAddrs: []string{n.Addr()},
	})
	if err != nil {
		return fmt.Errorf("register the QEMU rack: %w", err)
	}
	return nil
}
