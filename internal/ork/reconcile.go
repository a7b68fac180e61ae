package ork

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/worker"
)

// ReceiveReport implements worker.ReportReceiver: a worker pushes what it
// observes. Only the rack's own worker key may report for it.
func (o *Ork) ReceiveReport(ctx context.Context, from fabric.PublicKey, rep worker.Report) error {
	o.mu.Lock()
	r := o.racks[rep.Rack]
	o.mu.Unlock()
	if r == nil {
		return fabric.Errorf(fabric.CodeNotFound, "no rack %q", rep.Rack)
	}
	if r.Rack.WorkerKey != from.String() {
		return fabric.Errorf(fabric.CodeForbidden, "key %s is not the worker of rack %s", from.Short(), rep.Rack)
	}
	if rep.Capacity != nil {
		o.updateNodes(ctx, rep.Rack, rep.Capacity.Nodes, rep.Capacity.ObservedAt)
	}
	for _, jr := range rep.Jobs {
		o.applyReport(ctx, rep.Rack, jr)
	}
	return nil
}

// reconcileAll heartbeats every rack at once.
func (o *Ork) reconcileAll(ctx context.Context) {
	o.mu.Lock()
	ids := make([]string, 0, len(o.racks))
	for id := range o.racks {
		ids = append(ids, id)
	}
	o.mu.Unlock()
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o.reconcileRack(ctx, id)
		}()
	}
	wg.Wait()
}

// reconcileRack asks a worker for its capacity and every job it runs, takes
// what it reports, and tells it again what it lacks.
func (o *Ork) reconcileRack(ctx context.Context, id string) {
	o.mu.Lock()
	r := o.racks[id]
	o.mu.Unlock()
	if r == nil {
		return
	}
	cctx, cancel := o.workerCtx(ctx)
	defer cancel()
	capacity, err := r.w.Capacity(cctx)
	var jobs []worker.JobReport
	if err == nil {
		jobs, err = r.w.Jobs(cctx)
	}
	if err != nil {
		if ctx.Err() == nil {
			o.markUnreachable(ctx, id, err)
		}
		return
	}
	o.markReachable(id)
	o.updateNodes(ctx, id, capacity.Nodes, capacity.ObservedAt)
	seen := map[string]bool{}
	for _, jr := range jobs {
		seen[jr.JobID] = true
		o.applyReport(ctx, id, jr)
	}
	// Forget the stamps of jobs the worker no longer runs.
	o.mu.Lock()
	if r := o.racks[id]; r != nil {
		maps.DeleteFunc(r.observed, func(ref worker.ReplicaRef, _ worker.Observation) bool { return !seen[ref.JobID] })
	}
	o.mu.Unlock()
	// What the store says should run here but the worker does not report.
	o.mu.Lock()
	held := map[string][]cosmic.Reservation{}
	for _, res := range o.snap.Reservations() {
		if res.Rack == id {
			held[res.JobID] = append(held[res.JobID], res)
		}
	}
	o.mu.Unlock()
	for jobID, rs := range held {
		j, err := o.st.GetJob(ctx, jobID)
		if err != nil {
			continue
		}
		switch {
		case j.Status.State == cosmic.StateDeleting && !seen[jobID]:
			o.finalizeDelete(ctx, j.ID) // the worker has nothing left of it
		case j.Status.State == cosmic.StateDeleting:
			if err := o.requestDelete(ctx, j.ID, false); err != nil {
				o.log.Warn("delete on worker", "job_id", j.ID, "err", err)
			}
		case !seen[jobID]:
			o.applyOnWorker(ctx, applyWork{rack: id, p: worker.ApplyParams{Job: j, Reservations: rs}})
		}
	}
}

func (o *Ork) markReachable(id string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if r := o.racks[id]; r != nil {
		r.reachable, r.seen = true, true
	}
}

// markUnreachable makes the rack's jobs unknown: their VMIs may well still
// run, so they keep their GPUs.
func (o *Ork) markUnreachable(ctx context.Context, id string, cause error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	r := o.racks[id]
	if r == nil {
		return
	}
	if !r.reachable && r.seen {
		return // already marked
	}
	r.reachable, r.seen = false, true
	o.log.Warn("worker unreachable", "rack", id, "err", cause)
	reason := cosmic.NewReason(cosmic.ReasonWorkerUnreachable, "rack "+id)
	byJob := map[string][]int{}
	for _, res := range o.snap.Reservations() {
		if res.Rack == id {
			byJob[res.JobID] = append(byJob[res.JobID], res.Replica)
		}
	}
	for jobID, replicas := range byJob {
		_, err := o.updateJobLocked(ctx, jobID, func(_ Tx, j *cosmic.Job) error {
			if j.Status.State == cosmic.StateDeleting {
				return nil
			}
			for _, i := range replicas {
				setReplica(j, i, func(rs *cosmic.ReplicaStatus) { rs.State, rs.Reason = cosmic.StateUnknown, &reason })
			}
			return o.setAggregate(j)
		})
		if err != nil {
			o.log.Error("mark job unknown", "job_id", jobID, "err", err)
		}
	}
}

// updateNodes records a rack's nodes when they changed, and replans. A
// pushed report and a heartbeat's pull can cross on the way: the one the
// worker observed earlier (observedAt) never overwrites a later one, so a
// node lost a moment ago is not placed on again.
func (o *Ork) updateNodes(ctx context.Context, id string, nodes []cosmic.Node, observedAt time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	r := o.racks[id]
	if r == nil {
		return
	}
	if !observedAt.IsZero() {
		if observedAt.Before(r.observedAt) {
			return
		}
		r.observedAt = observedAt
	}
	if slices.EqualFunc(r.Nodes, nodes, func(a, b cosmic.Node) bool { return a == b }) {
		return
	}
	next := r.StoredRack
	next.Nodes = slices.Clone(nodes)
	if err := o.st.Update(ctx, func(tx Tx) error { return tx.PutRack(ctx, next) }); err != nil {
		o.log.Error("store rack nodes", "rack", id, "err", err)
		return
	}
	r.StoredRack = next
	if err := o.rebuildLocked(ctx); err != nil {
		o.log.Error("rebuild snapshot", "err", err)
	}
	o.poke()
}

// applyReport takes one job's report from the worker of rack.
func (o *Ork) applyReport(ctx context.Context, rack string, jr worker.JobReport) {
	o.mu.Lock()
	var (
		orphan   bool
		released []cosmic.Reservation
		deleting bool
		stamps   map[worker.ReplicaRef]worker.Observation // of the reports applied
		bound    cosmic.Job                               // the job, when agent keys were reported
		keysOf   map[int][]string                         // replica → the agent keys reported
	)
	rs := o.racks[rack]
	var applied map[worker.ReplicaRef]worker.Observation
	if rs != nil {
		applied = rs.observed
	}
	err := o.st.Update(ctx, func(tx Tx) error {
		released = released[:0]
		clear(stamps)
		keysOf = nil
		j, err := tx.GetJob(ctx, jr.JobID)
		if errors.Is(err, cosmic.ErrNotFound) {
			orphan = true
			return nil
		}
		if err != nil {
			return err
		}
		if j.Status.State == cosmic.StateDeleting {
			deleting = true
			return nil
		}
		changed := false
		for _, rr := range jr.Replicas {
			res, held := o.snap.Reserved(j.ID, rr.Replica)
			if !held || res.Rack != rack {
				continue // a late report of a replica released already
			}
			ref := worker.ReplicaRef{JobID: j.ID, Replica: rr.Replica}
			if last, ok := applied[ref]; ok && !rr.Observed.Supersedes(last) {
				continue // older than what was applied: a late answer
			}
			if rr.Observed.Process != "" {
				if stamps == nil {
					stamps = map[worker.ReplicaRef]worker.Observation{}
				}
				stamps[ref] = rr.Observed
			}
			cur := cosmic.StateQueued
			if rr.Replica < len(j.Status.Replicas) {
				cur = j.Status.Replicas[rr.Replica].State
			}
			switch {
			case cur == cosmic.StateDeleting && rr.Gone:
				// The deleted replica is gone: its GPUs are free.
				setReplica(&j, rr.Replica, func(rs *cosmic.ReplicaStatus) { rs.State, rs.Reason, rs.Nodes = cosmic.StateStopped, nil, nil })
				if err := tx.ReleaseGPUs(ctx, j.ID, rr.Replica); err != nil {
					return err
				}
				released = append(released, res)
				changed = true
				continue
			case commandEnded(cur, rr):
				// The job's command exited 0 (a gpu-container job): the
				// replica is stopped and its GPUs free. Kills release at
				// once, so a killed replica's report never gets here.
				setReplica(&j, rr.Replica, func(rs *cosmic.ReplicaStatus) { rs.State, rs.Reason, rs.Nodes = cosmic.StateStopped, rr.Reason, nil })
				code := *rr.ExitCode
				j.Status.ExitCode = &code
				if err := tx.ReleaseGPUs(ctx, j.ID, rr.Replica); err != nil {
					return err
				}
				released = append(released, res)
				changed = true
				continue
			case cur == cosmic.StateDeleting, rr.Gone, rr.State == cosmic.StateStopped:
				// Other stops are the ork's own doing (kill releases at
				// once), so a stopped or gone report of a replica that holds
				// GPUs is a late one from before it was placed again: ignore
				// it.
				continue
			}
			changed = true
			setReplica(&j, rr.Replica, func(rs *cosmic.ReplicaStatus) {
				rs.State, rs.Reason = rr.State, rr.Reason
				if len(rr.Nodes) > 0 {
					rs.Nodes = rr.Nodes
				}
				if len(rr.AgentKeys) > 0 {
					rs.AgentKeys = rr.AgentKeys
				}
			})
			if len(rr.AgentKeys) > 0 {
				if keysOf == nil {
					keysOf = map[int][]string{}
				}
				keysOf[rr.Replica] = rr.AgentKeys
			}
			if rr.ExitCode != nil {
				j.Status.ExitCode = rr.ExitCode
			}
			if rr.State == cosmic.StateStarting && rr.Progress != nil {
				p := *rr.Progress
				j.Status.Progress = &p
			}
			if rr.State == cosmic.StateFailed {
				if err := tx.ReleaseGPUs(ctx, j.ID, rr.Replica); err != nil {
					return err
				}
				released = append(released, res)
			}
		}
		if !changed {
			return nil
		}
		bound = j
		if err := o.setAggregate(&j); err != nil {
			return err
		}
		j.UpdatedAt = o.now()
		return tx.PutJob(ctx, j)
	})
	if err != nil {
		o.log.Error("apply worker report", "rack", rack, "job_id", jr.JobID, "err", err)
		o.mu.Unlock()
		return
	}
	for _, res := range released {
		if err := o.snap.Release(res); err != nil {
			o.log.Error("release in snapshot", "job_id", res.JobID, "err", err)
		}
		o.boundReleasedLocked(res.JobID, res.Replica)
	}
	for replica, ks := range keysOf {
		if _, held := o.snap.Reserved(bound.ID, replica); held {
			o.boundKeysLocked(bound, replica, ks)
		}
	}
	if rs != nil && len(stamps) > 0 {
		if rs.observed == nil {
			rs.observed = map[worker.ReplicaRef]worker.Observation{}
		}
		maps.Copy(rs.observed, stamps)
	}
	r := o.racks[rack]
	o.mu.Unlock()
	if len(released) > 0 {
		o.poke()
	}
	switch {
	case orphan && r != nil:
		// The worker runs a job the store does not know (deleted while the
		// worker was away): remove it. The work outlives ctx, which a
		// pushed report's fabric handler cancels when it returns.
		o.goBackground(func() {
			cctx, cancel := o.workerCtx(context.WithoutCancel(ctx))
			defer cancel()
			if err := r.w.Delete(cctx, worker.DeleteParams{JobID: jr.JobID, Replica: worker.AllReplicas, Force: true}); err != nil {
				o.log.Warn("delete orphan job on worker", "rack", rack, "job_id", jr.JobID, "err", err)
			}
		})
	case deleting:
		allGone := true
		for _, rr := range jr.Replicas {
			allGone = allGone && rr.Gone
		}
		if allGone {
			o.finalizeDelete(ctx, jr.JobID)
		}
	}
}

// commandEnded says whether rr reports the end of the job's command (a
// stopped replica with an exit code) for a replica the ork has seen
// running (or lost sight of since: unknown). Only a worker whose replica
// ran a command reports an exit code, and it reports running before the
// end; a replica placed again is pending or starting until the worker
// reports it running anew, so a late report of the previous run's end is
// ignored there.
func commandEnded(cur cosmic.State, rr worker.ReplicaReport) bool {
	if rr.State != cosmic.StateStopped || rr.Gone || rr.ExitCode == nil {
		return false
	}
	switch cur {
	case cosmic.StateRunning, cosmic.StateUnknown:
		return true
	}
	return false
}
