package ork

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/ork/orkapi"
	"github.com/cosmicac/cosmicac/internal/ork/placement"
	"github.com/cosmicac/cosmicac/internal/store"
)

// Rolling updates (docs/inference.md, "Rolling updates"). UpdateJob takes
// a managed-inference job's new spec. A change of what the replicas run
// (model, args, adapters, image, environment) of a serving job starts a
// rollout: one more replica of the new spec (the surge) is placed first,
// like any replica; once it runs, each replica of an older generation is
// drained (proxy-inference sends it no new request; the ork waits until
// the proxies report none in flight there, or DrainTimeout) and deleted,
// and placed again with the new spec, one at a time; then the surge goes.
// The job serves on at least its count of replicas throughout. A replica
// of the new spec that fails rolls the job back to the spec before, the
// same way. The steps are taken by rolloutStep, on every AutoscaleEvery
// tick; its decisions are pure (rolloutRule). While a job rolls out, the
// autoscaler leaves it alone.

// UpdateJob changes a managed-inference job's spec. Fields that change no
// replica (routing, authorization, autoscaling, the replica count, labels)
// take effect at once; a change of what the replicas run is rolled out
// to a serving job (running or degraded), and is stored for the next
// start of one that is stopped, failed or queued. A job on its way up or
// down (creating, pending, starting, restarting, unknown, deleting), or
// rolling out an update, is a conflict; so is any other field.
func (o *Ork) UpdateJob(ctx context.Context, p orkapi.UpdateJobParams) (cosmic.Job, error) {
	next := p.Spec
	next.Default()
	if err := next.Validate(); err != nil {
		return cosmic.Job{}, err
	}
	o.mu.Lock()
	cur, err := o.st.GetJob(ctx, p.ID)
	if err != nil {
		o.mu.Unlock()
		return cur, err
	}
	if cur.Spec.Autoscaled() && next.Autoscaled() {
		// The scaler's count, within the new bounds.
		a := next.Inference.Autoscaling
		next.Inference.Replicas = min(max(cur.Spec.Replicas(), a.MinReplicas), a.MaxReplicas)
	}
	rollout, err := cosmic.UpdateFields(cur.Spec, next)
	if err != nil {
		o.mu.Unlock()
		return cur, err
	}
	if r := o.catalogueRefusalLocked(next, p.Asked); r != nil {
		o.mu.Unlock()
		return cur, &cosmic.FieldError{Field: r.Field, Reason: r.Reason.Code, Message: r.Reason.Message}
	}
	if cur.Status.Rollout != nil {
		o.mu.Unlock()
		return cur, conflictf("job %s is rolling out generation %d: update it once that ends", cur.ID, cur.Status.Generation)
	}
	serving := cur.Status.State == cosmic.StateRunning || cur.Status.State == cosmic.StateDegraded
	switch cur.Status.State {
	case cosmic.StateRunning, cosmic.StateDegraded, cosmic.StateStopped, cosmic.StateFailed, cosmic.StateQueued:
	default:
		o.mu.Unlock()
		return cur, conflictf("job %s is %s: update it once it runs (or stop it first)", cur.ID, cur.Status.State)
	}
	if n := cur.Spec.Replicas(); serving && n > 0 {
		// What the update needs the location to hold: one replica more
		// than the job runs while it rolls out, and the new count.
		want := next.Replicas()
		if rollout {
			want = max(want, n+1)
		}
		try := cur
		try.Spec = next
		in := *next.Inference
		in.Replicas = want
		try.Spec.Inference = &in
		if d, impossible := placement.Place(o.snap, try).(placement.Impossible); impossible {
			o.mu.Unlock()
			what := fmt.Sprintf("%d replicas", want)
			if rollout && want == n+1 {
				what = fmt.Sprintf("%d replicas (a rolling update runs one more than the job's %d)", want, n)
			}
			return cur, conflictf("the location cannot hold %s: %s; make room, or stop the job and update it", what, d.Reason.Message)
		}
	}
	var removed []cosmic.Reservation
	started := false
	j, err := o.updateJobLocked(ctx, p.ID, func(_ Tx, j *cosmic.Job) error {
		n := j.Spec.Replicas()
		target := next.Replicas()
		prev := j.Spec
		j.Spec.Labels = next.Labels
		if !rollout || !serving || n == 0 {
			if rollout {
				j.Status.Generation++
			}
			count := next.Inference.Replicas
			j.Spec = next
			j.Spec.Inference.Replicas = n
			if serving {
				removed = o.resizeLocked(j, count, cosmic.NewReason(cosmic.ReasonScaledDown, "the job was updated to fewer replicas"))
			} else {
				j.Spec.Inference.Replicas = count
				if j.Status.State == cosmic.StateQueued {
					// Not placed yet: its replicas are the new count.
					j.Status.Replicas = nil
					for i := range count {
						setReplica(j, i, func(*cosmic.ReplicaStatus) {})
					}
				}
			}
			return o.setAggregate(j)
		}
		// A rollout: the surge replica of the new spec first.
		started = true
		j.Status.Generation++
		j.Spec = next
		j.Spec.Inference.Replicas = n
		removed = o.resizeLocked(j, n+1, cosmic.Reason{})
		j.Status.Rollout = &cosmic.Rollout{Replicas: target, Previous: &prev, From: j.Status.Generation - 1, Started: o.now(), Progressed: o.now()}
		return o.setAggregate(j)
	})
	if err == nil {
		o.requeueLocked(j)
		if started {
			o.rolling[j.ID] = true
		}
		if j.Spec.Autoscaled() {
			o.autoscaled[j.ID] = true // autoscaled from now
		}
	}
	o.mu.Unlock()
	if err != nil {
		return j, err
	}
	o.deleteOnWorkers(ctx, j.ID, removed)
	if started {
		o.record(j, "rollout", fmt.Sprintf("rolling out generation %d to %d replicas: one replica of the new spec first, then each replica in turn", j.Status.Generation, j.Status.Rollout.Replicas))
	}
	o.poke()
	return o.annotate(j), nil
}

// rolloutAction is what a rollout does next (rolloutRule).
type rolloutAction int

const (
	rolloutWait     rolloutAction = iota
	rolloutDrain                  // drain Replica, to be deleted and placed again with the new spec (drain.go)
	rolloutReplace                // place Replica (which serves nothing) again with the new spec
	rolloutRollBack               // a replica of the new spec failed: back to the spec before
	rolloutShrink                 // every replica runs the new spec: the surge goes (drained first)
	rolloutFinish                 // the job is back to its count, every replica of the new spec
	rolloutAbandon                // the job stopped, or the rollback failed too
)

// rolloutDecision is rolloutRule's answer.
type rolloutDecision struct {
	Action  rolloutAction
	Replica int
	Reason  *cosmic.Reason
}

// rolloutInput is what rolloutRule decides on.
type rolloutInput struct {
	Job      cosmic.Job
	Now      time.Time
	Deadline time.Duration // the ork's RolloutDeadline
}

// rolloutRule decides a rollout's next step. A job that stopped, failed
// or is going ends it (abandoned). A replica of the current generation
// that failed rolls the job back (or, rolling back already, abandons).
// While a replica is on its way (being deleted, or of the current
// generation and not running yet, or draining), it waits: one replica at
// a time. Then the lowest replica of an older generation is drained
// (running: it is deleted once drained, and placed again) or replaced at
// once (it serves nothing). With none left, the surge goes (drained
// first); once it has gone, the rollout finishes.
func rolloutRule(in rolloutInput) rolloutDecision {
	j := in.Job
	ro := j.Status.Rollout
	switch j.Status.State {
	case cosmic.StateStopped, cosmic.StateFailed, cosmic.StateDeleting:
		r := cosmic.NewReason(cosmic.ReasonRolloutFailed, fmt.Sprintf("the job is %s", j.Status.State))
		return rolloutDecision{Action: rolloutAbandon, Reason: &r}
	case cosmic.StateRunning, cosmic.StateDegraded:
	default:
		return rolloutDecision{Action: rolloutWait}
	}
	g, n := j.Status.Generation, j.Spec.Replicas()
	replicas := j.Status.Replicas[:min(len(j.Status.Replicas), n)]
	for _, r := range replicas {
		if r.Generation == g && r.State == cosmic.StateFailed {
			why := fmt.Sprintf("replica %d of generation %d failed", r.Index, g)
			if r.Reason != nil {
				why += ": " + r.Reason.Message
			}
			reason := cosmic.NewReason(cosmic.ReasonRolloutFailed, why)
			if ro.RollingBack {
				return rolloutDecision{Action: rolloutAbandon, Reason: &reason}
			}
			return rolloutDecision{Action: rolloutRollBack, Replica: r.Index, Reason: &reason}
		}
	}
	for _, r := range replicas {
		switch {
		case r.State == cosmic.StateDeleting, r.Drain != nil,
			r.Generation == g && r.State != cosmic.StateRunning && r.State != cosmic.StateFailed:
			if in.Now.Sub(ro.Progressed) < in.Deadline {
				return rolloutDecision{Action: rolloutWait}
			}
			why := fmt.Sprintf("no step for %s: replica %d is %s", in.Deadline, r.Index, r.State)
			if r.Drain != nil {
				why = fmt.Sprintf("no step for %s: replica %d drains", in.Deadline, r.Index)
			}
			if r.Reason != nil {
				why += " (" + r.Reason.Message + ")"
			}
			if r.State == cosmic.StateQueued && j.Status.WaitingFor != "" {
				why += ": " + j.Status.WaitingFor
			}
			reason := cosmic.NewReason(cosmic.ReasonRolloutFailed, why)
			if ro.RollingBack {
				return rolloutDecision{Action: rolloutAbandon, Reason: &reason}
			}
			return rolloutDecision{Action: rolloutRollBack, Replica: r.Index, Reason: &reason}
		}
	}
	// The replicas the job keeps (the surge beyond them goes at the end,
	// whatever its generation: a rollback does not replace it).
	for _, r := range replicas[:min(len(replicas), ro.Replicas)] {
		if r.Generation == g {
			continue
		}
		if r.State == cosmic.StateRunning {
			return rolloutDecision{Action: rolloutDrain, Replica: r.Index}
		}
		return rolloutDecision{Action: rolloutReplace, Replica: r.Index}
	}
	switch {
	case n > ro.Replicas:
		return rolloutDecision{Action: rolloutShrink}
	case len(j.Status.Replicas) > n:
		return rolloutDecision{Action: rolloutWait} // the surge still goes
	}
	return rolloutDecision{Action: rolloutFinish}
}

// advanceRollouts takes the next step of every rollout.
func (o *Ork) advanceRollouts(ctx context.Context) {
	o.mu.Lock()
	ids := slices.Sorted(maps.Keys(o.rolling))
	o.mu.Unlock()
	for _, id := range ids {
		j, err := o.st.GetJob(ctx, id)
		if errors.Is(err, cosmic.ErrNotFound) || err == nil && j.Status.Rollout == nil {
			o.mu.Lock()
			delete(o.rolling, id)
			o.mu.Unlock()
			continue
		}
		if err != nil {
			continue // the store's trouble: the next tick reads it again
		}
		o.rolloutStep(ctx, j)
	}
}

// rolloutStep takes job j's next rollout step (rolloutRule) and records
// it. It decides on j (read without a transaction) whether there is a
// step to take, and decides again, on the job as the transaction reads it,
// which.
func (o *Ork) rolloutStep(ctx context.Context, j cosmic.Job) {
	o.mu.Lock()
	now := o.now()
	in := rolloutInput{Job: j, Now: now, Deadline: o.cfg.RolloutDeadline.D()}
	if rolloutRule(in).Action == rolloutWait {
		o.mu.Unlock()
		return
	}
	var (
		removed []cosmic.Reservation
		line    string
		ended   bool
		d       rolloutDecision
	)
	j, err := o.updateJobLocked(ctx, j.ID, func(_ Tx, j *cosmic.Job) error {
		ro := j.Status.Rollout
		if ro == nil {
			return errUnchanged // ended meanwhile
		}
		in.Job = *j
		if d = rolloutRule(in); d.Action == rolloutWait {
			return errUnchanged
		}
		ro.Progressed = now
		switch d.Action {
		case rolloutDrain:
			o.drainReplica(j, d.Replica, cosmic.NewReason(cosmic.ReasonReplaced, fmt.Sprintf("by generation %d", j.Status.Generation)))
			line = fmt.Sprintf("draining replica %d (generation %d): no new requests; it is replaced once those in flight end", d.Replica, replicaGeneration(*j, d.Replica))
		case rolloutReplace:
			i := d.Replica
			if res, held := o.snap.Reserved(j.ID, i); held {
				removed = append(removed, res)
				reason := cosmic.NewReason(cosmic.ReasonReplaced, fmt.Sprintf("by generation %d", j.Status.Generation))
				setReplica(j, i, func(rs *cosmic.ReplicaStatus) { rs.State, rs.Reason = cosmic.StateDeleting, &reason })
			} else {
				setReplica(j, i, func(rs *cosmic.ReplicaStatus) {
					rs.State, rs.Reason, rs.Nodes, rs.AgentKeys, rs.Progress = cosmic.StateQueued, nil, nil, nil, nil
					rs.Generation = j.Status.Generation
				})
			}
			line = fmt.Sprintf("replacing replica %d with one of generation %d", i, j.Status.Generation)
		case rolloutRollBack:
			n, labels := j.Spec.Replicas(), j.Spec.Labels
			j.Spec = *ro.Previous
			in := *ro.Previous.Inference
			j.Spec.Inference, j.Spec.Labels = &in, labels
			j.Spec.Inference.Replicas = n
			j.Status.Generation++
			for i := range j.Status.Replicas {
				if r := &j.Status.Replicas[i]; r.Generation == ro.From {
					r.Generation = j.Status.Generation // they run the spec gone back to
				}
			}
			for i := range j.Status.Replicas {
				j.Status.Replicas[i].Drain = nil // a replica of the spec gone back to serves on
			}
			ro.RollingBack, ro.Reason = true, d.Reason
			line = fmt.Sprintf("%s: rolling back to the spec before, as generation %d", d.Reason.Message, j.Status.Generation)
		case rolloutShrink:
			removed = o.resizeLocked(j, ro.Replicas, cosmic.NewReason(cosmic.ReasonReplaced, "the surge replica of the rollout"))
			line = fmt.Sprintf("every replica runs generation %d: the surge replica goes once drained", j.Status.Generation)
		case rolloutFinish, rolloutAbandon:
			outcome, reason := cosmic.RolloutDone, d.Reason
			switch {
			case d.Action == rolloutAbandon:
				outcome = cosmic.RolloutAbandoned
			case ro.RollingBack:
				outcome, reason = cosmic.RolloutRolledBack, ro.Reason
			}
			j.Status.LastRollout = &cosmic.RolloutResult{Generation: j.Status.Generation, Outcome: outcome, Reason: reason, Started: ro.Started, Ended: now}
			j.Status.Rollout = nil
			if j.Status.State == cosmic.StateRunning || j.Status.State == cosmic.StateDegraded {
				removed = o.resizeLocked(j, ro.Replicas, cosmic.NewReason(cosmic.ReasonReplaced, "the surge replica of the rollout"))
			} else if j.Status.State != cosmic.StateDeleting {
				j.Spec.Inference.Replicas = ro.Replicas
				trimReplicas(j, func(i int) bool { _, held := o.snap.Reserved(j.ID, i); return held })
			}
			ended = true
			line = fmt.Sprintf("rollout of generation %d %s after %s", j.Status.Generation, outcome, now.Sub(ro.Started).Round(time.Second))
			if reason != nil {
				line += ": " + reason.Message
			}
		}
		if j.Status.State == cosmic.StateDeleting {
			return nil
		}
		return o.setAggregate(j)
	})
	if err != nil {
		o.mu.Unlock()
		if !errors.Is(err, errUnchanged) {
			o.log.Warn("rollout step", "job_id", j.ID, "err", err)
		}
		return
	}
	if ended {
		delete(o.rolling, j.ID)
	}
	o.requeueLocked(j)
	o.mu.Unlock()
	o.deleteOnWorkers(ctx, j.ID, removed)
	o.record(j, "rollout", line)
	o.log.Info("rollout", "job_id", j.ID, "step", line)
	o.poke()
}

// replicaGeneration is the generation replica i of j was placed with.
func replicaGeneration(j cosmic.Job, i int) int {
	if i < len(j.Status.Replicas) {
		return j.Status.Replicas[i].Generation
	}
	return 0
}

// loadRollingLocked fills o.rolling from the store at start.
func (o *Ork) loadRollingLocked(ctx context.Context) error {
	jobs, err := listAll(ctx, o.st, store.ListJobsQuery{States: []cosmic.State{cosmic.StateRunning, cosmic.StateDegraded,
		cosmic.StatePending, cosmic.StateStarting, cosmic.StateRestarting, cosmic.StateUnknown, cosmic.StateStopped, cosmic.StateFailed}})
	if err != nil {
		return fmt.Errorf("load rollouts: %w", err)
	}
	for _, j := range jobs {
		if j.Status.Rollout != nil {
			o.rolling[j.ID] = true
		}
	}
	o.loadDrainsLocked(jobs)
	return nil
}
