package qemuworker

// A replica's VM: its disk, seed, forwards and boot, and its end.

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"

	"github.com/cosmicac/cosmicac/internal/agent/agentapi"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/ork/orkapi"
	"github.com/cosmicac/cosmicac/internal/qemu"
	"github.com/cosmicac/cosmicac/internal/vmboot"
	"github.com/cosmicac/cosmicac/internal/worker"
)

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
	w.mu.Lock()
	var halted <-chan struct{}
	if r := w.replicas[k]; r != nil {
		halted = r.halted
	}
	w.mu.Unlock()
	if halted != nil {
		<-halted // the VM stopped before powers off first (StopGrace at most)
	}
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

	fail := func(step bootStep, err error) {
		w.log.Warn("boot failed", "job_id", k.job, "replica", k.replica, "err", err)
		w.mu.Lock()
		defer w.mu.Unlock()
		if r.gen != gen {
			return
		}
		reason := judgeBootFailure(step, err)
		r.reason = &reason
		w.recordLocked(r, r.step, false, "%v", err)
		w.setLocked(r, cosmic.StateFailed)
		w.unbindLocked(r)
	}
	imgName, img, err := w.imageOf(job)
	if err != nil {
		fail(stepImage, err)
		return
	}
	id, err := w.identity(r.dir)
	if err != nil {
		fail(stepIdentity, err)
		return
	}
	w.mu.Lock()
	r.id = id
	w.agents[id.PublicKey()] = k
	w.recordLocked(r, "prepare_disk", true, "overlay on image %s (%s, %s)", imgName, filepath.Base(img.Disk), img.Format)
	w.mu.Unlock()
	w.opts.Keys.BindAgents(orkapi.Placement{Job: job.ID, Team: job.Team, Type: job.Spec.Type, Replica: k.replica, Rack: w.cfg.Rack}, []fabric.PublicKey{id.PublicKey()})

	pem, err := id.MarshalPEM()
	if err != nil {
		fail(stepSeed, err)
		return
	}
	ai := vmboot.AgentIdentity{PrivateKeyPEM: string(pem), PublicKey: id.PublicKey().String()}
	peers, forwards, err := w.guestPeers()
	if err != nil {
		fail(stepSeed, err)
		return
	}
	gpus := res.Count()
	// A llama.cpp replica brings its engine and its model on a disk of its
	// own (vmboot.EngineDisk).
	var engineDisk string
	if in := job.Spec.Inference; job.Spec.Type == cosmic.TypeManagedInference && in != nil && in.Runtime == cosmic.RuntimeLlamaCPP {
		files := []qemu.EngineModel{{Rel: in.Model + ".gguf", Path: agentapi.ModelFile(w.opts.ModelDir, in.Model)}}
		for _, a := range in.Adapters {
			files = append(files, qemu.EngineModel{Rel: a.Source + ".gguf", Path: agentapi.ModelFile(w.opts.ModelDir, a.Source)})
		}
		engineDisk, err = qemu.EngineDiskFor(ctx, filepath.Join(w.cfg.Dir, ".engine"), w.opts.LlamaServer, files...)
		if err != nil {
			fail(stepAgentDisk, err)
			return
		}
	}
	// A job with datastore volumes reaches them through the rack's egress
	// proxy, forwarded in at GuestEgressPort.
	var dataProxy string
	if job.Spec.Type == cosmic.TypeGPUContainer && vmboot.NeedsDataProxy(job.Spec) {
		if w.egress != nil {
			g := net.JoinHostPort(GuestIP, strconv.Itoa(GuestEgressPort))
			forwards = append(forwards, qemu.Forward{GuestAddr: g, HostAddr: w.egress.Addr()})
			dataProxy = "http://" + g
			if err := qemu.CheckForwards(forwards); err != nil {
				fail(stepSeed, err)
				return
			}
		} else {
			w.mu.Lock()
			w.recordLocked(r, "prepare_disk", false, "the job has datastore volumes, but this rack's VMs reach no datastore: its operator lists the endpoints in the rack's egress")
			w.mu.Unlock()
		}
	}
	// Its standalone volumes: the rack's disks, made the first time.
	var volumes []qemu.Volume
	for _, v := range vmboot.Volumes(job.Spec) {
		if v.Standalone == "" || job.Spec.Type != cosmic.TypeGPUContainer {
			continue
		}
		path, err := worker.VolumePath(w.volumesDir(), job.Team, v.Standalone, VolumeSuffix)
		var made bool
		if err == nil {
			made, err = qemu.MakeVolume(ctx, path, vmboot.StandaloneVolumeGiB)
		}
		if err != nil {
			fail(stepDisk, fmt.Errorf("standalone volume %s: %w", v.Standalone, err))
			return
		}
		w.mu.Lock()
		if made {
			w.recordLocked(r, "prepare_disk", true, "standalone volume %s: a new disk of %d GiB made, kept by the rack for team %s", v.Standalone, vmboot.StandaloneVolumeGiB, job.Team)
		} else {
			w.recordLocked(r, "prepare_disk", true, "standalone volume %s: the rack's disk attached as the last job left it", v.Standalone)
		}
		w.mu.Unlock()
		volumes = append(volumes, qemu.Volume{Path: path, Serial: v.Disk, ReadOnly: v.ReadOnly})
	}
	ud, err := vmboot.UserData(vmboot.VM{Job: job, Replica: k.replica, Index: 0, Count: 1, GPUs: gpus,
		Boot: vmboot.Bootstrap{Agents: []vmboot.AgentIdentity{ai}, Peers: peers}, Engine: engineDisk != "", DataProxy: dataProxy})
	if err != nil {
		fail(stepAgentDisk, err)
		return
	}
	agentDisk, err := qemu.AgentDiskFor(ctx, filepath.Join(w.cfg.Dir, ".agent"), w.opts.AgentBinary)
	if err != nil {
		fail(stepSeed, err)
		return
	}
	cpus, memMiB := w.vmSize(job)
	vc := qemu.Config{Dir: r.dir, Image: img, CPUs: cpus, MemoryMiB: memMiB, DiskGiB: job.Spec.DiskGB,
		UserData: ud, MetaData: vmboot.MetaData(fmt.Sprintf("%s-r%d", job.ID, k.replica), hostname(job, k.replica)),
		AgentDisk: agentDisk, EngineDisk: engineDisk, Volumes: volumes, Forwards: forwards, Relay: w.opts.Relay, MaxConns: w.cfg.MaxGuestConns,
		OnRefused: w.onRefused(k, gen), Accel: w.accel, VFIO: w.vfio(res)}
	if w.cfg.DebugSSH {
		if vc.SSHPort, err = freePort(); err != nil {
			fail(stepDisk, err)
			return
		}
	}
	qemu.KillStale(r.dir)
	created, err := qemu.Prepare(ctx, vc)
	if err != nil {
		fail(stepDisk, err)
		return
	}
	w.mu.Lock()
	if r.gen != gen || w.closing {
		w.mu.Unlock()
		return
	}
	if created {
		w.recordLocked(r, "prepare_disk", true, "disk of %d GiB made", job.Spec.DiskGB)
	} else {
		w.recordLocked(r, "prepare_disk", true, "the replica's disk kept")
	}
	w.recordLocked(r, "write_seed", true, "cloud-init NoCloud seed written; the agent comes on a read-only disk (%s)", qemu.AgentDiskLabel)
	r.rec = &record{Job: job, Reservation: res, Peers: peers, Forwards: forwards}
	w.writeRecordLocked(r)
	vc.Detach = !w.cfg.StopVMsOnExit
	vm, err := qemu.Start(vc)
	if err != nil {
		w.mu.Unlock()
		fail(stepStart, err)
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
	w.watchLocked(r, gen, true)
	w.mu.Unlock()
}

// watchLocked watches replica r's VM of boot gen until it ends or the
// worker leaves it: its end (vmExited) and, when follow, what its serial
// console says of its boot.
func (w *Worker) watchLocked(r *replica, gen int, follow bool) {
	k, vm := r.key, r.vm
	watching := make(chan struct{}) // closed when the VM ends or the worker leaves it
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		select {
		case <-vm.Done():
			close(watching)
			w.vmExited(k, gen, vm)
		case <-w.leaving:
			close(watching)
		}
	}()
	if follow {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			w.followConsole(k, gen, vm, watching, r.dir) // the boot's stages
		}()
	}
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
	v := judgeVMExit(r.state, err, func() string { return qemu.ConsoleTail(r.dir, 400) })
	if !v.crashed {
		return
	}
	r.reason = &v.reason
	w.recordLocked(r, "vm", false, "the VM ended: %s", v.detail)
	w.setLocked(r, cosmic.StateFailed)
	w.unbindLocked(r)
}

// bootStep is a step of a boot that can fail.
type bootStep int

const (
	stepImage     bootStep = iota // the image, looked up in the catalogue
	stepIdentity                  // the agent's key, in the replica's directory
	stepSeed                      // the cloud-init seed: the agent's peers, the user data, a debug port
	stepAgentDisk                 // the read-only disk that brings the agent
	stepDisk                      // the replica's disk: its overlay, prepared
	stepStart                     // QEMU, started
)

// judgeBootFailure is the rule of a boot's failure, pure: the reason its
// replica fails with when step fails with err. An image gone from the
// catalogue since Apply admitted it is not_in_catalogue (the job cannot
// run here until it is back); what the rack could not make on its disk
// (key, seed, agent disk, the replica's disk) is import_failed, as a
// Kubernetes rack's failed disk import is; a QEMU that would not start is
// vmi_crashed.
func judgeBootFailure(step bootStep, err error) cosmic.Reason {
	code := cosmic.ReasonImportFailed
	switch step {
	case stepImage:
		code = cosmic.ReasonNotInCatalogue
	case stepStart:
		code = cosmic.ReasonVMICrashed
	}
	return cosmic.NewReason(code, err.Error())
}

// judgeVMExit is the rule of a VM's end, pure: expected when its replica
// was stopped or had failed (Stop, Delete, a command's exit, a refusal;
// Restart boots anew and so never sees its old VM's end); otherwise a
// crash (vmi_crashed), saying how QEMU ended (err: its exit status; nil:
// the guest powered off) and the console's last lines (consoleTail, read
// only then).
func judgeVMExit(state cosmic.State, err error, consoleTail func() string) vmExitVerdict {
	if state == cosmic.StateStopped || state == cosmic.StateFailed {
		return vmExitVerdict{}
	}
	detail := "the VM powered off"
	if err != nil {
		detail = err.Error()
	}
	if tail := consoleTail(); tail != "" {
		detail += "; console: " + tail
	}
	return vmExitVerdict{crashed: true, detail: detail, reason: cosmic.NewReason(cosmic.ReasonVMICrashed, detail)}
}

// vmExitVerdict is what a VM's end does to its replica: crashed, it fails
// with reason; detail is how it ended, for the replica's log.
type vmExitVerdict struct {
	crashed bool
	detail  string
	reason  cosmic.Reason
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
	var peers []vmboot.Peer
	var fwd []qemu.Forward
	guest := map[string]string{} // host address -> guest address
	for _, p := range w.peers() {
		q := vmboot.Peer{Role: p.Role, Key: p.Key}
		for _, a := range p.Addrs {
			h, err := hostAddr(a)
			if err != nil {
				return nil, nil, fmt.Errorf("peer %s address %q: %w", p.Role, a, err)
			}
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

// peers are the platform's peers the agents dial, the worker last.
func (w *Worker) peers() []vmboot.Peer {
	self := vmboot.Peer{Role: agentapi.RoleWorker, Key: w.opts.Node.PublicKey().String(), Addrs: []string{w.opts.Node.Addr()}}
	return append(slices.Clone(w.opts.Peers), self)
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
