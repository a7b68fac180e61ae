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
		o.setProblem(rep.Rack, rep.Capacity.Problem)
		o.setNote(rep.Rack, rep.Capacity.Note, rep.Capacity.Catalogue)
		o.setVolumes(rep.Rack, rep.Capacity.Volumes)
		o.updateNodes(ctx, rep.Rack, *rep.Capacity)
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
	o.setProblem(id, capacity.Problem)
	o.setNote(id, capacity.Note, capacity.Catalogue)
	o.setVolumes(id, capacity.Volumes)
	o.updateNodes(ctx, id, capacity)
	seen := map[string]bool{}
	listed := map[worker.ReplicaRef]bool{}
	for _, jr := range jobs {
		seen[jr.JobID] = true
		for _, rr := range jr.Replicas {
			listed[worker.ReplicaRef{JobID: jr.JobID, Replica: rr.Replica}] = !rr.Gone
		}
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
		// The worker listed all it has: a replica being deleted that it
		// does not list is gone.
		var gone []worker.ReplicaReport
		for _, res := range rs {
			// So is a stopped job's replica whose VM powered off.
			if (beingDeleted(j, res.Replica) || j.Status.State == cosmic.StateStopped) && !listed[worker.ReplicaRef{JobID: jobID, Replica: res.Replica}] {
				gone = append(gone, worker.ReplicaReport{Replica: res.Replica, State: cosmic.StateStopped, Gone: true})
			}
		}
		if len(gone) > 0 {
			o.applyReport(ctx, id, worker.JobReport{JobID: jobID, Replicas: gone})
		}
		// A replica deleted on its own (or taken away by the autoscaler)
		// that the worker still runs: ask again (the first ask may not
		// have arrived).
		if j.Status.State != cosmic.StateDeleting {
			for _, res := range rs {
				if beingDeleted(j, res.Replica) && listed[worker.ReplicaRef{JobID: jobID, Replica: res.Replica}] {
					if err := o.onRacks(ctx, []string{id}, func(ctx context.Context, w worker.Worker) error {
						return w.Delete(ctx, worker.DeleteParams{JobID: jobID, Replica: res.Replica})
					}); err != nil {
						o.log.Warn("delete a replica on its worker", "job_id", jobID, "replica", res.Replica, "err", err)
					}
				}
			}
		}
		switch {
		case j.Status.State == cosmic.StateDeleting && len(gone) < len(rs):
			if err := o.requestDelete(ctx, j.ID, false); err != nil {
				o.log.Warn("delete on worker", "job_id", j.ID, "err", err)
			}
		case j.Status.State != cosmic.StateDeleting && j.Status.State.HoldsGPUs() && !seen[jobID]:
			// The worker does not run it: apply it again, but only the
			// reservations the job still holds now. A report applied since
			// the worker's list (a failure, pushed meanwhile) may have freed
			// them, and an Apply of a failed replica would start it again
			// on GPUs given to another job.
			o.mu.Lock()
			rs = slices.DeleteFunc(rs, func(res cosmic.Reservation) bool {
				cur, held := o.snap.Reserved(jobID, res.Replica)
				return beingDeleted(j, res.Replica) || !held || cur.Rack != id || !sameNodes(cur, res)
			})
			var done func()
			if len(rs) > 0 {
				done = o.inflight.start(jobID) // a kill waits for it
			}
			o.mu.Unlock()
			if len(rs) > 0 {
				err := o.applyOnWorker(ctx, applyWork{rack: id, p: worker.ApplyParams{Job: j, Reservations: rs}})
				done()
				if unanswered(err) && ctx.Err() == nil {
					// The worker went away mid-heartbeat: the rest would
					// each wait a workerTimeout, and hold the next
					// heartbeat (and the rack's reachability) up that long.
					o.markUnreachable(ctx, id, err)
					return
				}
			}
		}
	}
}

// unanswered says whether err is a worker's call that got no answer (the
// worker cannot be reached, or did not answer in time), not an answer: a
// worker that answers unavailable (its cluster is misconfigured, say) is
// reachable.
func unanswered(err error) bool {
	if err == nil || fabric.Remote(err) {
		return false
	}
	c := fabric.ErrorCode(err)
	return c == fabric.CodeUnavailable || c == fabric.CodeDeadlineExceeded || errors.Is(err, context.DeadlineExceeded)
}

// sameNodes says whether a and b reserve the same GPUs of the same nodes.
func sameNodes(a, b cosmic.Reservation) bool {
	return slices.EqualFunc(a.Nodes, b.Nodes, func(x, y cosmic.NodeAlloc) bool {
		return x.Node == y.Node && slices.Equal(x.GPUs, y.GPUs)
	})
}

// beingDeleted says whether replica i of j is being deleted: the job, or
// the replica alone.
func beingDeleted(j cosmic.Job, i int) bool {
	return j.Status.State == cosmic.StateDeleting || i < len(j.Status.Replicas) && j.Status.Replicas[i].State == cosmic.StateDeleting
}

func (o *Ork) markReachable(id string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if r := o.racks[id]; r != nil {
		r.reachable, r.seen = true, true
	}
}

// setProblem records what the rack's worker says stops the rack from
// taking jobs (nil: nothing), logging when it changes.
func (o *Ork) setProblem(id string, p *cosmic.Reason) {
	o.mu.Lock()
	defer o.mu.Unlock()
	r := o.racks[id]
	if r == nil {
		return
	}
	if (r.problem == nil) == (p == nil) && (p == nil || *r.problem == *p) {
		return
	}
	if p != nil {
		pp := *p
		p = &pp
		o.log.Warn("rack has a problem", "rack", id, "code", p.Code, "problem", p.Message)
	} else {
		o.log.Info("rack problem fixed", "rack", id)
	}
	r.problem = p
}

// setVolumes records the standalone volumes the rack keeps.
func (o *Ork) setVolumes(id string, vs []cosmic.StoredVolume) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if r := o.racks[id]; r != nil {
		listed := map[string]bool{}
		r.volumes = slices.DeleteFunc(slices.Clone(vs), func(v cosmic.StoredVolume) bool {
			k := cosmic.VolumeKey(v.Team, v.Name)
			listed[k] = true
			return r.volumesGone[k]
		})
		maps.DeleteFunc(r.volumesGone, func(k string, _ bool) bool { return !listed[k] })
	}
}

// setNote records the worker's note on the rack's capacity and its
// catalogue (nil: the worker reports none, and the ork keeps the last).
func (o *Ork) setNote(id, note string, c *cosmic.Catalogue) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if r := o.racks[id]; r != nil {
		r.note = note
		if c != nil {
			cc := *c
			r.catalogue = &cc
		}
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
			if j.Status.State == cosmic.StateDeleting || j.Status.State == cosmic.StateStopped {
				return nil // going, or stopped with its VMs powering off: only their end counts
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
func (o *Ork) updateNodes(ctx context.Context, id string, c worker.Capacity) {
	nodes, observedAt := c.Nodes, c.ObservedAt
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
	if r.Overhead == c.Overhead && slices.EqualFunc(r.Nodes, nodes, func(a, b cosmic.Node) bool { return a == b }) {
		return
	}
	next := r.StoredRack
	next.Nodes = slices.Clone(nodes)
	next.Overhead = c.Overhead
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

// applyReport takes one job's report from the worker of rack: the rules
// (reportRules) say what it changes, and it commits that in one
// transaction, then updates the snapshot and the bound keys.
func (o *Ork) applyReport(ctx context.Context, rack string, jr worker.JobReport) {
	o.mu.Lock()
	var (
		orphan bool
		out    reportOutcome
	)
	rs := o.racks[rack]
	var (
		applied  map[worker.ReplicaRef]worker.Observation
		deadline time.Duration
	)
	if rs != nil {
		applied, deadline = rs.observed, rs.Rack.AgentDeadlineOrDefault()
	}
	err := o.st.Update(ctx, func(tx Tx) error {
		out = reportOutcome{}
		j, err := tx.GetJob(ctx, jr.JobID)
		if errors.Is(err, cosmic.ErrNotFound) {
			orphan = true
			return nil
		}
		if err != nil {
			return err
		}
		out, err = reportRules(reportInput{Job: j, Rack: rack, Applied: applied, Report: jr, Now: o.now(), AgentDeadline: deadline,
			Held: func(replica int) (cosmic.Reservation, bool) { return o.snap.Reserved(j.ID, replica) }})
		if err != nil || !out.Changed {
			return err
		}
		for _, res := range out.Release {
			if err := tx.ReleaseGPUs(ctx, j.ID, res.Replica); err != nil {
				return err
			}
		}
		if out.Remove {
			return tx.DeleteJob(ctx, j.ID)
		}
		return tx.PutJob(ctx, out.Job)
	})
	if out.Ignored != nil {
		o.log.Warn("ignoring illegal aggregate transition", "job_id", jr.JobID, "from", out.Ignored.From, "to", out.Ignored.To)
	}
	if err != nil {
		if ctx.Err() == nil { // else the ork is stopping: the report is taken again after a restart
			o.log.Error("apply worker report", "rack", rack, "job_id", jr.JobID, "err", err)
		}
		o.mu.Unlock()
		return
	}
	for _, res := range out.Release {
		if err := o.snap.Release(res); err != nil {
			o.log.Error("release in snapshot", "job_id", res.JobID, "err", err)
		}
		o.releaseHeldLocked(res.JobID, res.Replica)
		o.boundReleasedLocked(res.JobID, res.Replica)
	}
	if _, off := o.poweringOff[jr.JobID]; off && len(out.Release) > 0 && len(o.heldLocked(jr.JobID)) == 0 {
		delete(o.poweringOff, jr.JobID)
	}
	if out.Remove {
		o.releaseHeldLocked(jr.JobID, -1)
		o.boundReleasedLocked(jr.JobID, -1)
		o.dequeueLocked(jr.JobID)
	}
	o.stoppedReportedLocked(rack, jr)
	if out.Requeue {
		o.enqueueLocked(out.Job)
	}
	if out.Changed && !out.Remove {
		o.noteDrainsLocked(out.Job)
	}
	for replica, ks := range out.AgentKeys {
		if _, held := o.snap.Reserved(out.Job.ID, replica); held {
			o.boundKeysLocked(out.Job, replica, ks)
		}
	}
	if rs != nil && len(out.Stamps) > 0 {
		if rs.observed == nil {
			rs.observed = map[worker.ReplicaRef]worker.Observation{}
		}
		maps.Copy(rs.observed, out.Stamps)
	}
	o.mu.Unlock()
	if len(out.Release) > 0 {
		o.poke()
	}
	if orphan && rs != nil {
		// The worker runs a job the store does not know (deleted while the
		// worker was away): remove it. The work outlives ctx, which a
		// pushed report's fabric handler cancels when it returns.
		o.goBackground(func() {
			cctx, cancel := o.workerCtx(context.WithoutCancel(ctx))
			defer cancel()
			if err := rs.w.Delete(cctx, worker.DeleteParams{JobID: jr.JobID, Replica: worker.AllReplicas, Force: true}); err != nil {
				o.log.Warn("delete orphan job on worker", "rack", rack, "job_id", jr.JobID, "err", err)
			}
		})
	}
}
