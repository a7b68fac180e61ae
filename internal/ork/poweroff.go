package ork

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/ork/orkapi"
	"github.com/cosmicac/cosmicac/internal/store"
)

// A kill is a power-off (docs/data.md): the agent of a job with RW
// volumes pushes them back while its VM powers off, which may take
// orkapi.StopPushWait. A rack that passes GPUs through to its VMs (QEMU
// with VFIO, Kubernetes) cannot give them to another VM until that VM is
// off, so the job, stopped at once, keeps the GPUs of each such replica
// until its rack reports the replica stopped, failed or gone
// (reportRules), no longer lists it, or powerOffWait passes. Meanwhile
// they count against the team and are not placed on, and the replica's
// agent is bound as stopping (boundStoppingLocked): it may push and log,
// nothing else.

// powerOffWait bounds a power-off the rack never reports: the agent's
// push and a heartbeat's margin.
const powerOffWait = orkapi.StopPushWait + time.Minute

// poweringOffLocked are the replicas of j, being stopped, whose VMs keep
// their GPUs while they power off: a job that pushes its volumes at the
// end, each replica holding GPUs whose agent has connected and whose VMs
// run.
func (o *Ork) poweringOffLocked(j cosmic.Job) map[int]bool {
	if !j.Spec.PushesVolumes() {
		return nil
	}
	var out map[int]bool
	for _, rs := range j.Status.Replicas {
		if _, held := o.snap.Reserved(j.ID, rs.Index); held && len(rs.AgentKeys) > 0 && rs.State.RunsVMs() {
			if out == nil {
				out = map[int]bool{}
			}
			out[rs.Index] = true
		}
	}
	return out
}

// poweringOff says whether j, found holding GPUs at start, was killed and
// its VMs power off: it is stopped, or it is being deleted after a kill
// (each replica that holds GPUs stopped). Its agents are then bound as
// stopping, never as running.
func poweringOff(j cosmic.Job, held func(replica int) bool) bool {
	switch j.Status.State {
	case cosmic.StateStopped:
		return true
	case cosmic.StateDeleting:
		holds := false
		for _, rs := range j.Status.Replicas {
			if held(rs.Index) {
				if rs.State != cosmic.StateStopped {
					return false
				}
				holds = true
			}
		}
		return holds
	}
	return false
}

// stoppedAt is when j last became stopped.
func stoppedAt(j cosmic.Job) time.Time {
	if at, ok := j.EnteredAt(cosmic.StateStopped); ok {
		return at
	}
	return j.UpdatedAt
}

// loadPoweringOffLocked takes a stopped job that holds GPUs, found at
// start (the last leader stopped it while its VMs powered off): its
// replicas' agents stay bound as stopping, and its GPUs are released
// when the racks report the VMs off or powerOffWait has passed since the
// stop.
func (o *Ork) loadPoweringOffLocked(j cosmic.Job) {
	until := stoppedAt(j).Add(powerOffWait)
	o.poweringOff[j.ID] = until
	s := stoppingJob{bound: boundJob{team: j.Team, typ: j.Spec.Type, keys: map[int][]string{}}, racks: map[int]string{},
		until: until, placedAt: o.book.version}
	for _, rs := range j.Status.Replicas {
		if res, held := o.snap.Reserved(j.ID, rs.Index); held && len(rs.AgentKeys) > 0 {
			s.bound.keys[rs.Index], s.racks[rs.Index] = slices.Clone(rs.AgentKeys), res.Rack
		}
	}
	if len(s.racks) > 0 {
		o.book.stopping[j.ID] = s
	}
}

// releasePoweredOff releases the GPUs of each stopped job whose VMs were
// not reported off within powerOffWait, and forgets those that hold
// none.
func (o *Ork) releasePoweredOff(ctx context.Context) {
	o.mu.Lock()
	now := o.now()
	var due []string
	for _, id := range slices.Sorted(maps.Keys(o.poweringOff)) {
		switch {
		case len(o.heldLocked(id)) == 0:
			delete(o.poweringOff, id)
		case !now.Before(o.poweringOff[id]):
			due = append(due, id)
		}
	}
	o.mu.Unlock()
	for _, id := range due {
		if ctx.Err() != nil {
			return
		}
		o.releaseStopped(ctx, id)
	}
}

// releaseStopped releases every GPU a stopped job still holds: its racks
// did not report its VMs off in time. A job no longer stopped (deleted,
// or being deleted: that has its own end) is left alone.
func (o *Ork) releaseStopped(ctx context.Context, id string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	released := false
	err := o.st.Update(ctx, func(tx Tx) error {
		released = false
		j, err := tx.GetJob(ctx, id)
		if err != nil || j.Status.State != cosmic.StateStopped {
			return err
		}
		released = true
		return tx.ReleaseGPUs(ctx, id, store.AllReplicas)
	})
	if err != nil {
		if ctx.Err() == nil {
			o.log.Error("release a stopped job's GPUs; tried again at the next heartbeat", "job_id", id, "err", err)
		}
		return
	}
	delete(o.poweringOff, id)
	if !released {
		return
	}
	o.log.Warn("a killed job's VMs were not reported off in time: its GPUs are released", "job_id", id, "wait", powerOffWait)
	o.snap.ReleaseJob(id)
	o.releaseHeldLocked(id, store.AllReplicas)
	if _, ok := o.book.stopping[id]; ok {
		delete(o.book.stopping, id)
		o.peersChangedLocked()
	}
	o.poke()
}
