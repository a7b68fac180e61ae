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
// their replica exists.
//
// Importers: the CLI wiring.
package qemuworker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cosmicac/cosmicac/internal/agent"
	"github.com/cosmicac/cosmicac/internal/config"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/inferagent"
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
	// DebugSSH forwards a free port of the host's loopback to each VM's
	// port 22, named in the replica's log: for an operator debugging an
	// image. Users reach their VM's sshd with `cosmicac jobs ssh`.
	DebugSSH bool `json:"debugSSH,omitempty"`
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
	key   replicaKey
	job   cosmic.Job
	res   cosmic.Reservation
	dir   string
	id    *fabric.Identity
	vm    *qemu.VM
	gen   int // each boot's number: a VM's exit speaks only for its boot
	state cosmic.State
	// reason, exit and step: why it failed or stopped, the command's exit
	// code, the last system log step.
	reason *cosmic.Reason
	exit   *int
	step   string
	ready  bool
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
		replicas: map[replicaKey]*replica{}, agents: map[fabric.PublicKey]replicaKey{}}
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
	opts.Keys.OnRevoke(opts.Node.Revoke)
	handle := func(_ context.Context, peer fabric.PublicKey, r agentReport) (struct{}, error) {
		w.onAgentReport(peer, r)
		return struct{}{}, nil
	}
	fabric.HandleFunc(opts.Node, agent.MethodReport, handle)
	fabric.HandleFunc(opts.Node, inferagent.MethodReport, handle)
	return w, nil
}

// Accel is the accelerator the VMs run with.
func (w *Worker) Accel() string { return w.accel }

// Run delivers the worker's reports until ctx ends, then stops its VMs
// (their disks stay: a worker started again finds them).
func (w *Worker) Run(ctx context.Context) error {
	w.mu.Lock()
	w.ctx = ctx
	w.mu.Unlock()
	w.queue.SetCapacity()
	w.queue.Deliver(ctx, worker.Delivery{Rack: w.cfg.Rack, Reporter: w.opts.Reporter, Log: w.log, Capacity: w.Capacity})
	w.mu.Lock()
	vms := []*qemu.VM{}
	for _, r := range w.replicas {
		if r.vm != nil {
			vms = append(vms, r.vm)
		}
	}
	w.mu.Unlock()
	for _, vm := range vms {
		vm.Stop(0)
	}
	w.wg.Wait()
	return nil
}

// Capacity implements worker.Worker.
func (w *Worker) Capacity(context.Context) (worker.Capacity, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	used := map[string]int{}
	for _, r := range w.replicas {
		if holdsGPUs(r.state) {
			for _, n := range r.res.Nodes {
				used[n.Node] += len(n.GPUs)
			}
		}
	}
	c := worker.Capacity{Rack: w.cfg.Rack, ObservedAt: time.Now(), Overhead: w.overhead()}
	if w.PlacementOnly() {
		c.Note = fmt.Sprintf("real VMs under QEMU (%s); its %d × %s are declared for placement only: the VMs get no GPU", w.accel, w.cfg.Nodes*w.cfg.GPUsPerNode, w.cfg.GPUModel)
	}
	c.Catalogue = w.catalogue()
	for i := range w.cfg.Nodes {
		name := w.nodeName(i)
		c.Nodes = append(c.Nodes, cosmic.Node{Name: name, Rack: w.cfg.Rack, GPUModel: w.cfg.GPUModel, GPUs: w.cfg.GPUsPerNode,
			Schedulable: true, Ready: true, UsedGPUs: used[name], FreeGPUs: w.cfg.GPUsPerNode - used[name],
			CPUMilli: int64(w.cfg.CPUsPerNode) * 1000, MemoryMiB: int64(w.cfg.MemoryGiBPerNode) * 1024})
	}
	return c, nil
}

// catalogue is what the rack runs: gpu-container jobs on the images of its
// catalogue, in VMs of at most MaxCPUs and MaxMemoryMiB.
func (w *Worker) catalogue() *cosmic.Catalogue {
	return &cosmic.Catalogue{Images: w.opts.Images.Names(), JobTypes: []cosmic.JobType{cosmic.TypeGPUContainer},
		MaxVMCPUs: w.cfg.MaxCPUs, MaxVMMemoryMiB: int64(w.cfg.MaxMemoryMiB)}
}

// refusal says why the rack cannot run job ("": it can).
func (w *Worker) refusal(job cosmic.Job) string {
	if job.Spec.Type != cosmic.TypeGPUContainer {
		return fmt.Sprintf("the QEMU rack %s runs gpu-container jobs only, not %s (a managed-inference job needs a rack of GPU servers)", w.cfg.Rack, job.Spec.Type)
	}
	if _, err := w.opts.Images.Lookup(job.Spec.Image); err != nil {
		return err.Error()
	}
	return ""
}

// vmSize is the vCPUs and MiB of memory a replica's VM gets: the job's
// resources, capped by MaxCPUs and MaxMemoryMiB.
func (w *Worker) vmSize(job cosmic.Job) (cpus, memMiB int) {
	return clamp(job.Spec.Resources.CPU, 1, w.cfg.MaxCPUs), clamp(job.Spec.Resources.Memory*1024, 256, w.cfg.MaxMemoryMiB)
}

// given is what the rack gives a replica of job on res.
func (w *Worker) given(job cosmic.Job, res cosmic.Reservation) *cosmic.Given {
	cpus, mem := w.vmSize(job)
	g := &cosmic.Given{CPUs: cpus, MemoryMiB: int64(mem), GPUs: len(w.vfio(res))}
	var notes []string
	if cpus < job.Spec.Resources.CPU || int64(mem) < int64(job.Spec.Resources.Memory)*1024 {
		notes = append(notes, fmt.Sprintf("a VM of this rack gets at most %d vCPU and %d MiB (--qemu-max-cpus, --qemu-max-memory)", w.cfg.MaxCPUs, w.cfg.MaxMemoryMiB))
	}
	if w.PlacementOnly() && res.Count() > 0 {
		notes = append(notes, fmt.Sprintf("its %s GPUs are declared for placement only: the VM gets none", w.cfg.GPUModel))
	}
	g.Note = strings.Join(notes, "; ")
	return g
}

// overhead is a QEMU process's own memory beyond its guest's: about 64 MiB
// of its own, and under TCG the translation cache (qemu.Config's tb-size,
// 128 MiB).
func (w *Worker) overhead() cosmic.VMOverhead {
	o := cosmic.VMOverhead{MemoryMiB: 64}
	if w.accel != "kvm" {
		o.MemoryMiB += 128
	}
	return o
}

func (w *Worker) nodeName(i int) string { return fmt.Sprintf("%s-node-%d", w.cfg.Rack, i) }

// PlacementOnly says the rack's GPUs are declared, not passed through.
func (w *Worker) PlacementOnly() bool { return len(w.cfg.VFIO) == 0 }

func holdsGPUs(s cosmic.State) bool {
	switch s {
	case cosmic.StatePending, cosmic.StateStarting, cosmic.StateRunning, cosmic.StateRestarting:
		return true
	}
	return false
}

// Apply implements worker.Worker: each reserved replica without a VM gets
// one, booted in the background. A job the rack cannot run (refusal: a job
// type or image not in its catalogue) is not an error: each of its
// replicas is reported failed with reason rack_refused and a system log
// record, so that the ork releases its GPUs at once.
func (w *Worker) Apply(_ context.Context, p worker.ApplyParams) error {
	if err := worker.CheckApply(p, w.cfg.Rack); err != nil {
		return err
	}
	refused := w.refusal(p.Job)
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, res := range p.Reservations {
		if refused == "" && len(res.Nodes) != 1 {
			refused = fmt.Sprintf("a QEMU replica runs on one node, not %d", len(res.Nodes))
		}
		k := replicaKey{p.Job.ID, res.Replica}
		r := w.replicas[k]
		if r == nil {
			r = &replica{key: k, dir: filepath.Join(w.cfg.Dir, fmt.Sprintf("%s-r%d", p.Job.ID, res.Replica))}
			w.replicas[k] = r
		}
		if refused != "" {
			if r.vm != nil || holdsGPUs(r.state) {
				continue // booted before: leave it to Stop and Delete
			}
			r.job, r.res = p.Job, res
			rep := worker.Refused(res.Replica, refused)
			r.reason = rep.Reason
			w.log.Warn("job refused", "job_id", p.Job.ID, "replica", res.Replica, "why", refused)
			w.recordLocked(r, "refused", false, "the rack %s cannot run this job: %s", w.cfg.Rack, refused)
			w.setLocked(r, cosmic.StateFailed)
			continue
		}
		r.job, r.res = p.Job, res
		switch r.state {
		case "":
		case cosmic.StateFailed, cosmic.StateStopped:
			// Applied again after a failure or a kill: boot on the disk.
			r.reason, r.exit = nil, nil
		default:
			continue // it has a VM, or one on its way
		}
		w.bootLocked(r, cosmic.StatePending)
	}
	return nil
}

// bootLocked starts replica r's VM in the background, reporting state until
// the boot begins.
func (w *Worker) bootLocked(r *replica, state cosmic.State) {
	r.gen++
	r.ready = false
	w.setLocked(r, state)
	gen := r.gen
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		w.boot(r.key, gen)
	}()
}

// boot prepares the disk and seed of a replica's VM and starts it.
func (w *Worker) boot(k replicaKey, gen int) {
	w.boots <- struct{}{}
	defer func() { <-w.boots }()
	w.mu.Lock()
	r := w.replicas[k]
	if r == nil || r.gen != gen {
		w.mu.Unlock()
		return
	}
	ctx := cmp.Or(w.ctx, context.Background())
	job, res := r.job, r.res
	w.setLocked(r, cosmic.StateStarting)
	w.mu.Unlock()

	fail := func(code cosmic.ReasonCode, err error) {
		w.log.Warn("boot failed", "job_id", k.job, "replica", k.replica, "err", err)
		w.mu.Lock()
		defer w.mu.Unlock()
		if r.gen != gen {
			return
		}
		reason := cosmic.NewReason(code, err.Error())
		r.reason = &reason
		w.recordLocked(r, r.step, false, "%v", err)
		w.setLocked(r, cosmic.StateFailed)
		w.unbindLocked(r)
	}
	img, err := w.opts.Images.Lookup(job.Spec.Image)
	if err != nil {
		fail(cosmic.ReasonImportFailed, err)
		return
	}
	id, err := w.identity(r.dir)
	if err != nil {
		fail(cosmic.ReasonImportFailed, err)
		return
	}
	w.mu.Lock()
	r.id = id
	w.agents[id.PublicKey()] = k
	w.recordLocked(r, "prepare_disk", true, "overlay on image %s (%s, %s)", job.Spec.Image, filepath.Base(img.Disk), img.Format)
	w.mu.Unlock()
	w.opts.Keys.BindAgents(trust.Placement{Job: job.ID, Team: job.Team, Type: job.Spec.Type, Replica: k.replica, Rack: w.cfg.Rack}, []fabric.PublicKey{id.PublicKey()})

	pem, err := id.MarshalPEM()
	if err != nil {
		fail(cosmic.ReasonImportFailed, err)
		return
	}
	ai := vmboot.AgentIdentity{PrivateKeyPEM: string(pem), PublicKey: id.PublicKey().String()}
	peers, forwards, err := w.guestPeers()
	if err != nil {
		fail(cosmic.ReasonImportFailed, err)
		return
	}
	gpus := res.Count()
	ud, err := vmboot.UserData(vmboot.VM{Job: job, Replica: k.replica, Index: 0, Count: 1, GPUs: gpus,
		Boot: vmboot.Bootstrap{Agents: []vmboot.AgentIdentity{ai}, Peers: peers}})
	if err != nil {
		fail(cosmic.ReasonImportFailed, err)
		return
	}
	agentDisk, err := qemu.AgentDiskFor(ctx, filepath.Join(w.cfg.Dir, ".agent"), w.opts.AgentBinary)
	if err != nil {
		fail(cosmic.ReasonImportFailed, err)
		return
	}
	cpus, memMiB := w.vmSize(job)
	vc := qemu.Config{Dir: r.dir, Image: img, CPUs: cpus, MemoryMiB: memMiB, DiskGiB: job.Spec.DiskGB,
		UserData: ud, MetaData: vmboot.MetaData(fmt.Sprintf("%s-r%d", job.ID, k.replica), hostname(job, k.replica)),
		AgentDisk: agentDisk, Forwards: forwards, Relay: w.opts.Relay, MaxConns: w.cfg.MaxGuestConns,
		OnRefused: w.onRefused(k, gen), Accel: w.accel, VFIO: w.vfio(res)}
	if w.cfg.DebugSSH {
		if vc.SSHPort, err = freePort(); err != nil {
			fail(cosmic.ReasonImportFailed, err)
			return
		}
	}
	qemu.KillStale(r.dir)
	created, err := qemu.Prepare(ctx, vc)
	if err != nil {
		fail(cosmic.ReasonImportFailed, err)
		return
	}
	w.mu.Lock()
	if r.gen != gen {
		w.mu.Unlock()
		return
	}
	if created {
		w.recordLocked(r, "prepare_disk", true, "disk of %d GiB made", job.Spec.DiskGB)
	} else {
		w.recordLocked(r, "prepare_disk", true, "the replica's disk kept")
	}
	w.recordLocked(r, "write_seed", true, "cloud-init NoCloud seed written; the agent comes on a read-only disk (%s)", qemu.AgentDiskLabel)
	vm, err := qemu.Start(vc)
	if err != nil {
		w.mu.Unlock()
		fail(cosmic.ReasonVMICrashed, err)
		return
	}
	r.vm = vm
	gpuNote := fmt.Sprintf("%d GPUs passed through", len(vc.VFIO))
	if w.PlacementOnly() {
		gpuNote = fmt.Sprintf("no GPU: this rack declares %d × %s for placement only", gpus, w.cfg.GPUModel)
	}
	w.recordLocked(r, "boot", true, "QEMU (%s) started: %d vCPU, %d MiB; %s", w.accel, vc.CPUs, vc.MemoryMiB, gpuNote)
	if vc.SSHPort != 0 {
		w.recordLocked(r, "", true, "debug: the VM's port 22 is at 127.0.0.1:%d on the rack's host", vc.SSHPort)
	}
	w.mu.Unlock()
	w.wg.Add(2)
	go func() {
		defer w.wg.Done()
		<-vm.Done()
		w.vmExited(k, gen, vm)
	}()
	go func() {
		defer w.wg.Done()
		w.followConsole(k, gen, vm, vm.Done(), vc.Dir) // the boot's stages, from the serial console
	}()
}

// onRefused is a boot's hook for its VM's connections refused over
// MaxGuestConns: the first is logged and written in the replica's log.
func (w *Worker) onRefused(k replicaKey, gen int) func(string) {
	var once sync.Once
	return func(guest string) {
		once.Do(func() {
			w.log.Warn("guest connections refused", "job_id", k.job, "replica", k.replica, "guest_addr", guest, "max", w.cfg.MaxGuestConns)
			w.mu.Lock()
			defer w.mu.Unlock()
			if r := w.replicas[k]; r != nil && r.gen == gen {
				w.recordLocked(r, "", false, "the VM has %d connections open to the platform's ports, its cap: more (the first to %s) are reset", w.cfg.MaxGuestConns, guest)
			}
		})
	}
}

// vmExited takes a VM's end: expected after Stop, Restart or Delete; a
// crash otherwise.
func (w *Worker) vmExited(k replicaKey, gen int, vm *qemu.VM) {
	err := vm.Err()
	w.mu.Lock()
	defer w.mu.Unlock()
	r := w.replicas[k]
	if r == nil || r.gen != gen || r.vm != vm {
		return
	}
	r.vm = nil
	if r.state == cosmic.StateStopped || r.state == cosmic.StateFailed {
		return
	}
	detail := "the VM powered off"
	if err != nil {
		detail = err.Error()
	}
	if tail := qemu.ConsoleTail(r.dir, 400); tail != "" {
		detail += "; console: " + tail
	}
	reason := cosmic.NewReason(cosmic.ReasonVMICrashed, detail)
	r.reason = &reason
	w.recordLocked(r, "vm", false, "the VM ended: %s", detail)
	w.setLocked(r, cosmic.StateFailed)
	w.unbindLocked(r)
}

// identity is the replica's agent key, kept in its directory so that a
// restart of the replica or of the worker keeps it.
func (w *Worker) identity(dir string) (*fabric.Identity, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "agent.key")
	if b, err := os.ReadFile(path); err == nil {
		return fabric.ParseIdentityPEM(b)
	}
	id, err := fabric.GenerateIdentity()
	if err != nil {
		return nil, err
	}
	b, err := id.MarshalPEM()
	if err != nil {
		return nil, err
	}
	return id, os.WriteFile(path, b, 0o600)
}

// guestPeers are the platform's peers as a VM reaches them, and the
// forwards that make it so: each distinct host address (host:port on the
// worker's host) is forwarded from GuestIP at a port of its own, counted
// from GuestPortBase in the order the peers list them. The guest ports are
// not the host ports: those are the host's to pick, and two of them can
// be a pair libslirp refuses (qemu.CheckForwards).
func (w *Worker) guestPeers() ([]vmboot.Peer, []qemu.Forward, error) {
	self := vmboot.Peer{Role: agent.RoleWorker, Key: w.opts.Node.PublicKey().String(), Addrs: []string{w.opts.Node.Addr()}}
	var peers []vmboot.Peer
	var fwd []qemu.Forward
	guest := map[string]string{} // host address -> guest address
	for _, p := range append(slices.Clone(w.opts.Peers), self) {
		q := vmboot.Peer{Role: p.Role, Key: p.Key}
		for _, a := range p.Addrs {
			host, port, err := net.SplitHostPort(a)
			if err != nil {
				return nil, nil, fmt.Errorf("peer %s address %q: %w", p.Role, a, err)
			}
			if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
				host = "127.0.0.1"
			}
			h := net.JoinHostPort(host, port)
			g, ok := guest[h]
			if !ok {
				g = net.JoinHostPort(GuestIP, strconv.Itoa(GuestPortBase+len(fwd)))
				guest[h] = g
				fwd = append(fwd, qemu.Forward{GuestAddr: g, HostAddr: h})
			}
			q.Addrs = append(q.Addrs, g)
		}
		peers = append(peers, q)
	}
	return peers, fwd, qemu.CheckForwards(fwd)
}

func (w *Worker) vfio(res cosmic.Reservation) []string {
	if len(w.cfg.VFIO) == 0 {
		return nil
	}
	var out []string
	for _, n := range res.Nodes {
		for i := range w.cfg.Nodes {
			if w.nodeName(i) != n.Node {
				continue
			}
			for _, g := range n.GPUs {
				out = append(out, w.cfg.VFIO[i*w.cfg.GPUsPerNode+g])
			}
		}
	}
	return out
}

func hostname(job cosmic.Job, replica int) string {
	if job.Spec.Name != "" && len(job.Spec.Name) <= 50 {
		return fmt.Sprintf("%s-%d", sanitize(job.Spec.Name), replica)
	}
	return fmt.Sprintf("job-%s-%d", job.ID[:8], replica)
}

func sanitize(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			b[i] = '-'
		}
	}
	return string(b)
}

func clamp(v, lo, hi int) int { return max(lo, min(v, hi)) }

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// agentReport is what the worker reads of agent.Status and
// inferagent.Status (the same fields).
type agentReport struct {
	JobID    string               `json:"jobId"`
	Replica  int                  `json:"replica"`
	VMIIndex int                  `json:"vmiIndex"`
	Ready    bool                 `json:"ready"`
	Command  *agent.CommandStatus `json:"command,omitempty"`
}

// onAgentReport takes an agent's report: ready makes its replica running;
// the job's command ending stops it (exit 0) or fails it.
func (w *Worker) onAgentReport(peer fabric.PublicKey, a agentReport) {
	w.mu.Lock()
	defer w.mu.Unlock()
	k, ok := w.agents[peer]
	r := w.replicas[k]
	if !ok || r == nil || k.job != a.JobID || k.replica != a.Replica || a.VMIIndex != 0 {
		w.log.Warn("agent report for another VM dropped", "agent", peer.Short(), "job_id", a.JobID, "replica", a.Replica)
		return
	}
	if r.vm == nil || (r.state != cosmic.StateStarting && r.state != cosmic.StateRunning) {
		return
	}
	if a.Ready && !r.ready {
		r.ready = true
		w.recordLocked(r, "agent_connected", true, "the agent in the VM connected (key %s)", peer.Short())
		w.setLocked(r, cosmic.StateRunning)
	}
	if c := a.Command; c != nil && c.State == "exited" && c.ExitCode != nil && r.state == cosmic.StateRunning {
		code := *c.ExitCode
		r.exit = &code
		if code == 0 {
			w.recordLocked(r, "command", true, "the job's command exited 0")
			w.setLocked(r, cosmic.StateStopped)
		} else {
			reason := cosmic.NewReason(cosmic.ReasonCommandFailed, "exit code "+strconv.Itoa(code))
			r.reason = &reason
			w.recordLocked(r, "command", false, "the job's command exited %d", code)
			w.setLocked(r, cosmic.StateFailed)
		}
		w.stopVMLocked(r)
	}
}

// Stop implements worker.Worker: the VMs power off, the disks stay.
func (w *Worker) Stop(_ context.Context, ref worker.ReplicaRef) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, r := range w.matchLocked(ref) {
		r.gen++ // a boot in progress gives up
		if r.state != cosmic.StateFailed {
			reason := cosmic.NewReason(cosmic.ReasonKilled, "")
			r.reason = &reason
			w.setLocked(r, cosmic.StateStopped)
		}
		w.recordLocked(r, "stop", true, "the VM is powering off; its disk is kept")
		w.stopVMLocked(r)
	}
	return nil
}

// Restart implements worker.Worker: the VM powers off and boots again on
// the same disk.
func (w *Worker) Restart(_ context.Context, ref worker.ReplicaRef) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, r := range w.matchLocked(ref) {
		w.recordLocked(r, "restart", true, "the VM restarts on its disk")
		r.gen++ // the old VM's end and a boot in progress give up
		r.reason, r.exit, r.ready = nil, nil, false
		w.setLocked(r, cosmic.StateRestarting)
		old, gen := r.vm, r.gen
		r.vm = nil
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			if old != nil {
				old.Stop(w.cfg.StopGrace.D()) // the disk is free once it is gone
			}
			w.mu.Lock()
			defer w.mu.Unlock()
			if r.gen == gen && w.replicas[r.key] == r {
				w.bootLocked(r, cosmic.StateRestarting)
			}
		}()
	}
	return nil
}

// Delete implements worker.Worker: the VMs go, and their disks.
func (w *Worker) Delete(_ context.Context, p worker.DeleteParams) error {
	w.mu.Lock()
	rs := w.matchLocked(worker.ReplicaRef{JobID: p.JobID, Replica: p.Replica})
	var vms []*qemu.VM
	for _, r := range rs {
		r.gen++
		if r.vm != nil {
			vms = append(vms, r.vm)
			r.vm = nil
		}
		w.unbindLocked(r)
	}
	w.mu.Unlock()
	grace := w.cfg.StopGrace.D()
	if p.Force {
		grace = 0
	}
	for _, vm := range vms {
		vm.Stop(grace)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	var errs []error
	for _, r := range rs {
		qemu.KillStale(r.dir)
		if err := qemu.Remove(r.dir); err != nil {
			errs = append(errs, err)
			continue
		}
		delete(w.replicas, r.key)
		w.queue.SetGone(r.key.ref())
		w.queue.SetCapacity()
		w.queue.Push()
	}
	return errors.Join(errs...)
}

// Jobs implements worker.Worker.
func (w *Worker) Jobs(context.Context) ([]worker.JobReport, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	byJob := map[string][]worker.ReplicaReport{}
	for _, r := range w.replicas {
		byJob[r.key.job] = append(byJob[r.key.job], w.reportLocked(r))
	}
	var out []worker.JobReport
	for id, reps := range byJob {
		sort.Slice(reps, func(i, j int) bool { return reps[i].Replica < reps[j].Replica })
		out = append(out, worker.JobReport{JobID: id, Replicas: reps})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].JobID < out[j].JobID })
	return out, nil
}

func (w *Worker) matchLocked(ref worker.ReplicaRef) []*replica {
	var out []*replica
	for k, r := range w.replicas {
		if k.job == ref.JobID && (ref.Replica == worker.AllReplicas || ref.Replica == k.replica) {
			out = append(out, r)
		}
	}
	return out
}

func (w *Worker) stopVMLocked(r *replica) {
	if vm := r.vm; vm != nil {
		r.vm = nil
		grace := w.cfg.StopGrace.D()
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			vm.Stop(grace)
		}()
	}
}

func (w *Worker) unbindLocked(r *replica) {
	if r.id == nil {
		return
	}
	delete(w.agents, r.id.PublicKey())
	keys := []fabric.PublicKey{r.id.PublicKey()}
	go w.opts.Keys.UnbindAgents(r.key.job, r.key.replica, keys)
}

func (w *Worker) setLocked(r *replica, s cosmic.State) {
	r.state = s
	w.queue.Set(r.key.ref(), w.reportLocked(r))
	w.queue.SetCapacity()
	w.queue.Push()
}

func (w *Worker) reportLocked(r *replica) worker.ReplicaReport {
	rep := worker.ReplicaReport{Replica: r.key.replica, State: r.state, Reason: r.reason, ExitCode: r.exit, Observed: worker.Observe()}
	for _, n := range r.res.Nodes {
		rep.Nodes = append(rep.Nodes, n.Node)
	}
	if r.id != nil {
		rep.AgentKeys = []string{r.id.PublicKey().String()}
	}
	if r.job.ID != "" && holdsGPUs(r.state) {
		rep.Given = w.given(r.job, r.res)
	}
	if r.state == cosmic.StateStarting || r.state == cosmic.StateRestarting {
		if pct, ok := stepPercent[r.step]; ok {
			rep.Progress = &cosmic.Progress{Step: r.step, Percent: pct}
		}
	}
	return rep
}

// recordLocked writes a system record of the replica's log and keeps its
// step (the last one, which a deadline's reason names).
func (w *Worker) recordLocked(r *replica, step string, ok bool, format string, args ...any) {
	if step != "" && step != r.step {
		r.step = step
		if r.state == cosmic.StateStarting || r.state == cosmic.StateRestarting {
			w.queue.Set(r.key.ref(), w.reportLocked(r)) // the progress
			w.queue.Push()
		}
	}
	w.emitLocked(r, step, ok, fmt.Sprintf(format, args...))
}

// emitLocked writes a system record of the replica's log.
func (w *Worker) emitLocked(r *replica, step string, ok bool, line string) {
	if w.opts.Logs == nil {
		return
	}
	okv := ok
	w.opts.Logs.Emit(joblog.Record{Time: time.Now(), JobID: r.key.job, Team: r.job.Team, Replica: r.key.replica,
		Source: joblog.SourceSystem, Stream: "wrk-server-qemu", Step: step, OK: &okv, Line: line})
}
