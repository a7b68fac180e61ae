package qemuworker

// The worker contract's actions: Apply, Stop, Restart, Delete, Jobs.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/qemu"
	"github.com/cosmicac/cosmicac/internal/vmboot"
	"github.com/cosmicac/cosmicac/internal/worker"
)

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
	var errs []error
	for _, res := range p.Reservations {
		if refused == "" && len(res.Nodes) != 1 {
			refused = fmt.Sprintf("a QEMU replica runs on one node, not %d", len(res.Nodes))
		}
		k := replicaKey{p.Job.ID, res.Replica}
		r := w.replicas[k]
		if r == nil {
			r = &replica{key: k, dir: w.replicaDir(p.Job.ID, res.Replica)}
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
		if r.poweringOff {
			errs = append(errs, fmt.Errorf("replica %d is powering off (its agent pushes the job's volumes); apply it again once it has stopped", res.Replica))
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
	return errors.Join(errs...)
}

// Stop implements worker.Worker: the VMs power off, the disks stay.
func (w *Worker) Stop(_ context.Context, ref worker.ReplicaRef) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, r := range w.matchLocked(ref) {
		r.gen++ // a boot in progress gives up
		// A VM whose agent pushes the job's volumes is reported stopped
		// once it is off: its agent's key stays bound until then.
		push := r.vm != nil && r.rec != nil && r.rec.Job.Spec.PushesVolumes()
		if r.state != cosmic.StateFailed {
			reason := cosmic.NewReason(cosmic.ReasonKilled, "")
			r.reason = &reason
			if !push {
				w.setLocked(r, cosmic.StateStopped)
			}
		}
		if push {
			w.recordLocked(r, "stop", true, "the VM is powering off, its agent pushing the job's RW volumes first (up to %v); its disk is kept", vmboot.StopPushWait)
		} else {
			w.recordLocked(r, "stop", true, "the VM is powering off; its disk is kept")
		}
		w.stopVMLocked(r)
	}
	return nil
}

// Restart implements worker.Worker: the VM powers off and boots again on
// the same disk.
func (w *Worker) Restart(_ context.Context, ref worker.ReplicaRef) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	rs := w.matchLocked(ref)
	if len(rs) == 0 {
		// As every rack kind answers (workertest): the ork then knows the
		// replica is not here, rather than waiting for a restart that
		// never comes.
		if ref.Replica == worker.AllReplicas {
			return fabric.Errorf(fabric.CodeNotFound, "restart: no job %s on rack %s", ref.JobID, w.cfg.Rack)
		}
		return fabric.Errorf(fabric.CodeNotFound, "restart: job %s has no replica %d on rack %s", ref.JobID, ref.Replica, w.cfg.Rack)
	}
	for _, r := range rs {
		w.recordLocked(r, "restart", true, "the VM restarts on its disk")
		w.markStoppingLocked(r)
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
	var poweringOff []<-chan struct{}
	for _, r := range rs {
		if r.poweringOff && r.halted != nil {
			// A kill's power-off under way: its agent pushes the job's
			// volumes; the delete follows it rather than cutting it.
			poweringOff = append(poweringOff, r.halted)
		}
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
	for _, h := range poweringOff {
		<-h
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
	if _, err := cosmic.ParseJobID(p.JobID); len(rs) == 0 && err == nil && p.Replica >= worker.AllReplicas {
		// Replicas this worker does not hold (never applied here, or left on
		// disk by a worker before this one): their directories go too, and
		// each is reported gone, as every rack kind does (workertest), so
		// that the ork need not wait for a report that never comes.
		refs, err := w.onDiskLocked(p.JobID, p.Replica)
		errs = append(errs, err)
		for _, ref := range refs {
			dir := w.replicaDir(ref.JobID, ref.Replica)
			qemu.KillStale(dir)
			if err := qemu.Remove(dir); err != nil {
				errs = append(errs, err)
				continue
			}
			w.queue.SetGone(ref)
		}
		w.queue.Push()
	}
	return errors.Join(errs...)
}

// replicaDir is where replica's VM lives: its disk, seed, sockets, console.
func (w *Worker) replicaDir(job string, replica int) string {
	return filepath.Join(w.cfg.Dir, fmt.Sprintf("%s-r%d", job, replica))
}

// onDiskLocked names the replicas of job the worker does not hold: the one
// named (whether or not it has a directory), or, for AllReplicas, those
// whose directories are in Dir.
func (w *Worker) onDiskLocked(job string, replica int) ([]worker.ReplicaRef, error) {
	if replica != worker.AllReplicas {
		return []worker.ReplicaRef{{JobID: job, Replica: replica}}, nil
	}
	ents, err := os.ReadDir(w.cfg.Dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	var out []worker.ReplicaRef
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), job+"-r")
		if n, err := strconv.Atoi(rest); ok && err == nil && e.IsDir() {
			out = append(out, worker.ReplicaRef{JobID: job, Replica: n})
		}
	}
	return out, nil
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
	w.markStoppingLocked(r)
	if vm := r.vm; vm != nil {
		r.vm = nil
		grace := w.cfg.StopGrace.D()
		push := r.rec != nil && r.rec.Job.Spec.PushesVolumes()
		if push {
			grace = max(grace, vmboot.StopPushWait)
			r.poweringOff = true
		}
		halted := make(chan struct{})
		r.halted = halted
		gen := r.gen
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			defer close(halted)
			vm.Stop(grace)
			if !push {
				return
			}
			w.mu.Lock()
			defer w.mu.Unlock()
			r.poweringOff = false
			if r.gen == gen && r.state != cosmic.StateFailed && r.state != cosmic.StateStopped {
				w.recordLocked(r, "stop", true, "the VM is off")
				w.setLocked(r, cosmic.StateStopped)
			}
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
