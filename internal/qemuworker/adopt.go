package qemuworker

// A worker's restart: what a replica's directory keeps of it, and the
// adoption of the VMs the worker before this one left running.

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/ork/orkapi"
	"github.com/cosmicac/cosmicac/internal/qemu"
	"github.com/cosmicac/cosmicac/internal/vmboot"
)

// RecordFile is the file of a replica's directory that keeps what the
// worker knows of its VM (record), for the worker after it.
const RecordFile = "replica.json"

// record is what a replica's directory keeps of it: written at each boot
// and at each change a worker could not learn again from the VM.
type record struct {
	Job         cosmic.Job         `json:"job"`
	Reservation cosmic.Reservation `json:"reservation"`
	// Peers are the platform's peers as the guest was told them (at its
	// guest addresses), and Forwards the host address each guest address
	// was forwarded to.
	Peers    []vmboot.Peer  `json:"peers"`
	Forwards []qemu.Forward `json:"forwards"`
	// Ready: the agent had connected, so the replica ran. Stopping: the
	// VM was told to power off (a stop, a restart, its command's end),
	// and the next worker finishes that rather than adopt it.
	Ready    bool `json:"ready,omitempty"`
	Stopping bool `json:"stopping,omitempty"`
}

// writeRecordLocked writes r's record to its directory, atomically. A
// failure costs only the adoption of the VM by a next worker (which then
// boots it again on its disk), so it is logged, not fatal.
func (w *Worker) writeRecordLocked(r *replica) {
	if r.rec == nil {
		return
	}
	b, err := json.Marshal(r.rec)
	if err == nil {
		tmp := filepath.Join(r.dir, RecordFile+".tmp")
		if err = os.WriteFile(tmp, b, 0o600); err == nil {
			err = os.Rename(tmp, filepath.Join(r.dir, RecordFile))
		}
	}
	if err != nil {
		w.log.Warn("replica record not written: a next worker would not adopt its VM", "job_id", r.key.job, "replica", r.key.replica, "err", err)
	}
}

// markStoppingLocked records that r's VM is powering off.
func (w *Worker) markStoppingLocked(r *replica) {
	if r.rec != nil && !r.rec.Stopping {
		r.rec.Stopping = true
		w.writeRecordLocked(r)
	}
}

// adoptAll takes over the VMs of Dir that a worker before this one left
// running, each with its record: the replica is running (its agent had
// connected) or starting, as it was; its agent's key is bound again; its
// guest's connections to the platform are relayed to the peers' host
// addresses of now; and it is watched as a VM of this worker's own boot.
// A VM that was powering off is killed (its stop finished). A directory
// without a running VM is left as it is: the ork applies its replica
// again if it is to run, which boots it on its disk.
func (w *Worker) adoptAll() {
	ents, err := os.ReadDir(w.cfg.Dir)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			w.log.Warn("VMs to adopt not listed", "dir", w.cfg.Dir, "err", err)
		}
		return
	}
	for _, e := range ents {
		job, n, ok := parseReplicaDir(e.Name())
		if !ok || !e.IsDir() {
			continue
		}
		if err := w.adopt(replicaKey{job, n}); err != nil {
			w.log.Warn("VM not adopted", "job_id", job, "replica", n, "err", err)
		}
	}
}

// parseReplicaDir reads a replica directory's name (replicaDir).
func parseReplicaDir(name string) (job string, replica int, ok bool) {
	i := strings.LastIndex(name, "-r")
	if i < 0 {
		return "", 0, false
	}
	n, err := strconv.Atoi(name[i+2:])
	if _, perr := cosmic.ParseJobID(name[:i]); err != nil || perr != nil || n < 0 {
		return "", 0, false
	}
	return name[:i], n, true
}

// adopt takes over replica k's VM, if it runs (adoptAll).
func (w *Worker) adopt(k replicaKey) error {
	dir := w.replicaDir(k.job, k.replica)
	b, err := os.ReadFile(filepath.Join(dir, RecordFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil // never booted, or by a worker that kept no record
	}
	if err != nil {
		return err
	}
	var rec record
	if err := json.Unmarshal(b, &rec); err != nil {
		return fmt.Errorf("%s: %w", RecordFile, err)
	}
	if rec.Job.ID != k.job || rec.Reservation.Replica != k.replica {
		return fmt.Errorf("%s names replica %d of %s", RecordFile, rec.Reservation.Replica, rec.Job.ID)
	}
	if rec.Stopping {
		qemu.KillStale(dir)
		return nil
	}
	id, err := w.identity(dir)
	if err != nil {
		return err
	}
	const gen = 1
	vm, err := qemu.Adopt(qemu.Config{Dir: dir, Forwards: w.adoptedForwards(rec), Relay: w.opts.Relay,
		MaxConns: w.cfg.MaxGuestConns, OnRefused: w.onRefused(k, gen)})
	if errors.Is(err, qemu.ErrNotRunning) {
		return nil
	}
	if err != nil {
		return err
	}
	w.opts.Keys.BindAgents(orkapi.Placement{Job: rec.Job.ID, Team: rec.Job.Team, Type: rec.Job.Spec.Type, Replica: k.replica, Rack: w.cfg.Rack},
		[]fabric.PublicKey{id.PublicKey()})
	w.mu.Lock()
	defer w.mu.Unlock()
	r := &replica{key: k, job: rec.Job, res: rec.Reservation, dir: dir, id: id, vm: vm, gen: gen, ready: rec.Ready, rec: &rec, adopted: true}
	w.replicas[k] = r
	w.agents[id.PublicKey()] = k
	w.log.Info("VM adopted", "job_id", k.job, "replica", k.replica, "pid", vm.Pid(), "ready", rec.Ready)
	w.emitLocked(r, "", true, fmt.Sprintf("the worker restarted; it adopted the VM, which ran on (QEMU pid %d)", vm.Pid()))
	if rec.Ready {
		w.setLocked(r, cosmic.StateRunning)
	} else {
		r.step = "boot"
		w.setLocked(r, cosmic.StateStarting)
	}
	w.watchLocked(r, gen, !rec.Ready)
	return nil
}

// adoptedForwards are the forwards of an adopted VM: the guest addresses
// it was started with, each to the host address its peer (by role and
// key) has now, or had then where the worker no longer knows the peer.
func (w *Worker) adoptedForwards(rec record) []qemu.Forward {
	now := map[string][]string{} // role and key -> host addresses
	for _, p := range w.peers() {
		for _, a := range p.Addrs {
			if h, err := hostAddr(a); err == nil {
				now[p.Role+" "+p.Key] = append(now[p.Role+" "+p.Key], h)
			}
		}
	}
	out := make([]qemu.Forward, 0, len(rec.Forwards))
	egress := net.JoinHostPort(GuestIP, strconv.Itoa(GuestEgressPort))
	for _, f := range rec.Forwards {
		if f.GuestAddr == egress && w.egress != nil {
			f.HostAddr = w.egress.Addr() // this worker's proxy
		}
	peers:
		for _, p := range rec.Peers {
			for i, g := range p.Addrs {
				if hs := now[p.Role+" "+p.Key]; g == f.GuestAddr && i < len(hs) {
					f.HostAddr = hs[i]
					break peers
				}
			}
		}
		out = append(out, f)
	}
	return out
}

// hostAddr is a peer's address as the worker's host dials it: an
// unspecified IP (a listener on all interfaces) is the loopback.
func hostAddr(a string) (string, error) {
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return "", err
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port), nil
}
