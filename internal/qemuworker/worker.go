// Package qemuworker is wrk-server-qemu: a rack of real virtual machines on
// the local machine. Each replica of a job is one QEMU VM (internal/qemu)
// booted from a copy-on-write overlay on a base image of the rack's image
// catalogue, with the cloud-init user data every VM rack shares
// (internal/vmboot) and the agent binary on a read-only disk, so that any
// cloud image with cloud-init runs the job: the agent inside it connects
// to the worker over the fabric and the replica is running only then.
//
// It implements the worker contract (internal/worker) as the simulated and
// Kubernetes racks do, and reports its boot's steps in the system log and
// as progress: prepare_disk, write_seed, boot, then what the guest's
// serial console says (bootloader, kernel, systemd, cloud_init,
// agent_started, cloud_init_done: console.go), and agent_connected. Stop
// keeps a replica's disk, Restart boots it again on the same disk, Delete
// removes it. Its agents' keys are bound in the worker's keyring while
// their replica exists. The VMs outlive the worker: one started on the
// same directory adopts those still running (adopt.go).
//
// Importers: the CLI wiring.
package qemuworker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/cosmicac/cosmicac/internal/agent/agentapi"
	"github.com/cosmicac/cosmicac/internal/config"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/joblog"
	"github.com/cosmicac/cosmicac/internal/qemu"
	"github.com/cosmicac/cosmicac/internal/trust"
	"github.com/cosmicac/cosmicac/internal/vmboot"
	"github.com/cosmicac/cosmicac/internal/worker"
)

// GuestIP is the address in a VM's user network at which the guest reaches
// the platform's peers: each peer address is forwarded from a port there
// to the host (qemu.Forward), and nothing else is reachable.
const GuestIP = "10.0.2.100"

// maxSocketPath is the longest path of a unix socket (Linux's sun_path,
// less its terminating NUL).
const maxSocketPath = 107

// GuestPortBase is the first guest port of the forwards (guestPeers).
const GuestPortBase = 7001

// Config is a QEMU rack.
type Config struct {
	Rack     string `json:"rack"`
	Location string `json:"location"`
	GPUModel string `json:"gpuModel"`
	// Nodes and GPUsPerNode are the capacity the rack declares. With no
	// GPUs passed through (VFIO empty) it is for placement only: the VMs
	// get no GPU, and racks list and the jobs' log say so.
	Nodes       int `json:"nodes"`
	GPUsPerNode int `json:"gpusPerNode"`
	// VFIO are the host PCI addresses of the GPUs, by node then GPU index
	// (Nodes × GPUsPerNode of them), passed through to the VM holding them.
	VFIO []string `json:"vfio,omitempty"`
	// Dir holds each replica's VM directory (overlay, seed, console).
	Dir string `json:"dir"`
	// Accel is kvm, tcg or "" (detect: qemu.Detect).
	Accel string `json:"accel,omitempty"`
	// MaxCPUs and MaxMemoryMiB cap a VM's vCPUs and memory, which are the
	// job's resources.cpu and resources.memory (GiB) otherwise (defaults:
	// 1 and 512 under TCG, 4 and 8192 under KVM).
	MaxCPUs      int `json:"maxCPUs,omitempty"`
	MaxMemoryMiB int `json:"maxMemoryMiB,omitempty"`
	// CPUsPerNode and MemoryGiBPerNode are the CPU and memory each node
	// declares for placement, like its GPUs (default: the platform's share
	// per GPU, cosmic.DefaultCPUPerGPU and cosmic.DefaultMemoryPerGPU, for
	// each GPU, plus 2 of each for the VMs' overhead). A VM itself gets
	// its job's share capped by MaxCPUs and MaxMemoryMiB.
	CPUsPerNode      int `json:"cpusPerNode,omitempty"`
	MemoryGiBPerNode int `json:"memoryGiBPerNode,omitempty"`
	// MaxBoots bounds the VMs booting at once (default 2): under TCG a
	// boot takes a core for about a minute.
	MaxBoots int `json:"maxBoots,omitempty"`
	// MaxGuestConns caps each VM's connections to the platform's ports
	// relayed at once (default qemu.DefaultMaxConns, 64; the agent holds
	// a few): one more is reset at once, counted, and the replica's log
	// says so at the first.
	MaxGuestConns int `json:"maxGuestConns,omitempty"`
	// StopGrace is how long a VM has to power off before it is killed
	// (default 20s).
	StopGrace config.Duration `json:"stopGrace,omitempty"`
	// AgentDeadline is how long a replica's agent may take to connect
	// after its VM is placed, registered with the rack (the ork fails the
	// replica with agent_timeout past it); 0: cosmic.DefaultAgentDeadline,
	// 10 minutes, which a boot under TCG (about a minute) fits.
	AgentDeadline config.Duration `json:"agentDeadline,omitempty"`
	// StopVMsOnExit stops the rack's VMs when the worker stops (their
	// disks stay), and has them killed if it dies. By default they run on
	// without it: a worker started again on the same Dir (an upgrade, a
	// crash, a host service's restart) adopts each VM still running, its
	// state, its agent and its guest's connections, and the jobs in them
	// never notice but for their connections to the platform, which
	// their agents make again (docs/qemu-rack.md, "A worker's restart").
	StopVMsOnExit bool `json:"stopVMsOnExit,omitempty"`
	// DebugSSH forwards a free port of the host's loopback to each VM's
	// port 22, named in the replica's log: for an operator debugging an
	// image. Users reach their VM's sshd with `cosmicac jobs ssh`.
	DebugSSH bool `json:"debugSSH,omitempty"`
	// Egress are the datastores' endpoints the rack's VMs may reach
	// (http(s)://HOST[:PORT] or HOST:PORT), through an HTTP proxy of the
	// worker's forwarded into each VM whose job has datastore volumes
	// (docs/data.md). Nothing else is reachable from a VM; without it,
	// no datastore is.
	Egress []string `json:"egress,omitempty"`
}

// Options are what the worker runs with besides its config.
type Options struct {
	// Images is the image catalogue: a spec's image name to its base image.
	Images qemu.Catalogue
	// AgentBinary is the agent put on every VM's agent disk: a static
	// (CGO_ENABLED=0) linux/amd64 cosmicac.
	AgentBinary string
	// Relay is the command each of a VM's connections to a platform port
	// runs (qemu.Config.Relay), e.g. {"/usr/bin/cosmicac", "qemu-relay"}:
	// it hands the connection to the worker, which relays it.
	Relay []string
	// Node is the worker's fabric node; its agents dial it. Keys is its
	// keyring, where their keys are bound.
	Node *fabric.Node
	Keys *trust.Keyring
	// Peers are the platform's peers the agents dial (directory, app-node,
	// monitor, proxy-inference), with their host addresses: each is
	// forwarded into the VM at a port of GuestIP's (guestPeers).
	Peers    []vmboot.Peer
	Reporter worker.Reporter
	Logs     joblog.Sink
	Log      *slog.Logger
	// LlamaServer and ModelDir make the rack serve managed-inference jobs
	// of the llama.cpp runtime (none else): each such replica's VM gets an
	// engine disk with this llama-server (a static linux/amd64 build,
	// hack/build-llama.sh) and the job's model, ModelDir/ORG/NAME.gguf
	// (docs/qemu-rack.md). Empty: the rack runs gpu-container jobs only.
	LlamaServer, ModelDir string
}

type replicaKey struct {
	job     string
	replica int
}

func (k replicaKey) ref() worker.ReplicaRef {
	return worker.ReplicaRef{JobID: k.job, Replica: k.replica}
}

// replica is one replica's VM and what the worker reports of it.
type replica struct {
	key replicaKey
	job cosmic.Job
	res cosmic.Reservation
	dir string
	id  *fabric.Identity
	vm  *qemu.VM
	// halted is closed once the VM that Stop powers off has gone (nil:
	// none): a boot on the same disk waits for it, or it would kill a
	// guest that is still writing its disk.
	halted <-chan struct{}
	gen    int // each boot's number: a VM's exit speaks only for its boot
	state  cosmic.State
	// reason, exit and step: why it failed or stopped, the command's exit
	// code, the last system log step.
	reason *cosmic.Reason
	exit   *int
	step   string
	// poweringOff: the VM powers off while its agent pushes the job's
	// volumes (a kill); it boots again only once it is off.
	poweringOff bool
	// copying is the progress of the volumes the agent copies in, from
	// its last report (nil: none is).
	copying *cosmic.Progress
	ready   bool
	// rec is what the replica's directory keeps of it for the next worker
	// (nil: no boot of this worker's wrote it yet); adopted: its VM was
	// left running by the worker before this one, and heard: its agent
	// has reported to this one since.
	rec     *record
	adopted bool
	heard   bool
}

// Worker is a QEMU rack.
type Worker struct {
	cfg   Config
	opts  Options
	log   *slog.Logger
	accel string
	boots chan struct{}

	mu       sync.Mutex
	replicas map[replicaKey]*replica
	agents   map[fabric.PublicKey]replicaKey
	queue    *worker.ReportQueue
	ctx      context.Context
	wg       sync.WaitGroup
	// closing: Run is ending, and no VM starts any more; leaving is
	// closed then, once the VMs are stopped or released, so that what
	// watches them ends.
	closing bool
	leaving chan struct{}
	left    int // the VMs Run's end left running

	egress *egressProxy // nil: Config.Egress is empty
}

// New makes the worker; Run starts it.
func New(cfg Config, opts Options) (*Worker, error) {
	if cfg.Rack == "" || cfg.Location == "" || cfg.GPUModel == "" || cfg.Dir == "" {
		return nil, errors.New("qemuworker: rack, location, gpuModel and dir are required")
	}
	if cfg.Nodes <= 0 || cfg.GPUsPerNode <= 0 {
		return nil, errors.New("qemuworker: nodes and gpusPerNode must be at least 1")
	}
	if len(cfg.VFIO) != 0 && len(cfg.VFIO) != cfg.Nodes*cfg.GPUsPerNode {
		return nil, fmt.Errorf("qemuworker: %d VFIO devices for %d nodes × %d GPUs", len(cfg.VFIO), cfg.Nodes, cfg.GPUsPerNode)
	}
	// A VM's unix sockets (its monitor, its relay) live in its replica's
	// directory, Dir/<job id>-r<replica>/: a path of a unix socket has at
	// most 107 bytes.
	if abs, err := filepath.Abs(cfg.Dir); err != nil {
		return nil, fmt.Errorf("qemuworker: dir: %w", err)
	} else if n := len(filepath.Join(abs, cosmic.NewJobID()+"-r99", qemu.MonitorFile)); n > maxSocketPath {
		return nil, fmt.Errorf("qemuworker: dir %s is too long by %d bytes for its VMs' unix sockets (%d bytes at most)", abs, n-maxSocketPath, maxSocketPath)
	}
	if len(opts.Relay) == 0 {
		return nil, errors.New("qemuworker: the relay command (cosmicac qemu-relay) is required")
	}
	if opts.Node == nil || opts.Keys == nil || opts.Reporter == nil {
		return nil, errors.New("qemuworker: a fabric node, its keyring and a reporter are required")
	}
	if _, err := os.Stat(opts.AgentBinary); err != nil {
		return nil, fmt.Errorf("qemuworker: the agent binary: %w", err)
	}
	w := &Worker{cfg: cfg, opts: opts, log: cmp.Or(opts.Log, slog.New(slog.DiscardHandler)),
		replicas: map[replicaKey]*replica{}, agents: map[fabric.PublicKey]replicaKey{}, leaving: make(chan struct{})}
	w.accel = cfg.Accel
	if w.accel == "" {
		w.accel = qemu.Detect()
	}
	if w.cfg.MaxCPUs <= 0 {
		w.cfg.MaxCPUs = map[bool]int{true: 4, false: 1}[w.accel == "kvm"]
	}
	if w.cfg.MaxMemoryMiB <= 0 {
		w.cfg.MaxMemoryMiB = map[bool]int{true: 8192, false: 512}[w.accel == "kvm"]
	}
	if w.cfg.CPUsPerNode < 0 || w.cfg.MemoryGiBPerNode < 0 || w.cfg.MaxGuestConns < 0 {
		return nil, errors.New("qemuworker: cpusPerNode, memoryGiBPerNode and maxGuestConns must not be negative")
	}
	w.cfg.MaxGuestConns = cmp.Or(w.cfg.MaxGuestConns, qemu.DefaultMaxConns)
	w.cfg.CPUsPerNode = cmp.Or(w.cfg.CPUsPerNode, cosmic.DefaultCPUPerGPU*cfg.GPUsPerNode+2)
	w.cfg.MemoryGiBPerNode = cmp.Or(w.cfg.MemoryGiBPerNode, cosmic.DefaultMemoryPerGPU*cfg.GPUsPerNode+2)
	w.cfg.MaxBoots = cmp.Or(w.cfg.MaxBoots, 2)
	w.cfg.StopGrace = cmp.Or(w.cfg.StopGrace, config.Duration(20*time.Second))
	w.boots = make(chan struct{}, w.cfg.MaxBoots)
	w.queue = worker.NewReportQueue(&w.mu)
	if len(cfg.Egress) > 0 {
		var err error
		if w.egress, err = startEgress(cfg.Egress, w.log); err != nil {
			return nil, err
		}
	}
	opts.Keys.OnRevoke(opts.Node.Revoke)
	w.adoptAll()
	agentapi.ServeWorkerReports(opts.Node, w.onAgentReport)
	return w, nil
}

// LeftRunning is how many VMs the worker left running when its Run ended
// (0 before, and with StopVMsOnExit).
func (w *Worker) LeftRunning() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.left
}

// Dir is where the rack's VMs live.
func (w *Worker) Dir() string { return w.cfg.Dir }

// Accel is the accelerator the VMs run with.
func (w *Worker) Accel() string { return w.accel }

// Run delivers the worker's reports until ctx ends. Then its VMs run on,
// for the next worker to adopt, or, with StopVMsOnExit, stop (their disks
// stay: a worker started again finds them).
func (w *Worker) Run(ctx context.Context) error {
	w.mu.Lock()
	w.ctx = ctx
	w.queue.SetCapacity() // the queue is guarded by w.mu
	w.mu.Unlock()
	w.queue.Deliver(ctx, worker.Delivery{Rack: w.cfg.Rack, Reporter: w.opts.Reporter, Log: w.log, Capacity: w.Capacity})
	w.mu.Lock()
	w.closing = true
	vms := []*qemu.VM{}
	for _, r := range w.replicas {
		if r.vm != nil {
			vms = append(vms, r.vm)
		}
	}
	w.mu.Unlock()
	for _, vm := range vms {
		if w.cfg.StopVMsOnExit {
			vm.Stop(0)
		} else {
			vm.Release()
		}
	}
	if len(vms) > 0 && !w.cfg.StopVMsOnExit {
		w.log.Info("the rack's VMs run on: a worker started again adopts them", "vms", len(vms), "dir", w.cfg.Dir)
		w.mu.Lock()
		w.left = len(vms)
		w.mu.Unlock()
	}
	close(w.leaving)
	w.wg.Wait()
	if w.egress != nil {
		w.egress.Close()
	}
	return nil
}
