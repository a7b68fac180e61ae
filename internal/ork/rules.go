package ork

import (
	"slices"
	"time"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/worker"
)

// The rules of a job's state, as pure functions: what a worker's report does
// to a job (reportRules) and what its replicas make of the job's own state
// (aggregate). They read no store, no snapshot and no clock of their own;
// the ork's handlers lock, call them, commit what they say in one
// transaction, and then update the snapshot. rules_test.go has their
// tables.

// reportInput is what the rules know when a rack's worker reports a job.
type reportInput struct {
	Job  cosmic.Job // as stored
	Rack string     // whose worker reports
	// Held is the placement snapshot's reservation of a replica of the job.
	Held func(replica int) (cosmic.Reservation, bool)
	// Applied are the stamps of the last reports applied from this rack.
	Applied map[worker.ReplicaRef]worker.Observation
	Report  worker.JobReport
	Now     time.Time
	// AgentDeadline is the rack's agent deadline: a replica reported
	// starting anew (its VMIs recreated) without one gets Now plus it.
	AgentDeadline time.Duration
}

// reportOutcome is what a report does.
type reportOutcome struct {
	// Job is the job to store, when Changed.
	Job     cosmic.Job
	Changed bool
	// Release are the reservations whose GPUs the report frees.
	Release []cosmic.Reservation
	// Stamps are the stamps of the replica reports applied.
	Stamps map[worker.ReplicaRef]worker.Observation
	// AgentKeys are the agents' keys the report gives, by replica.
	AgentKeys map[int][]string
	// Remove says the job is deleted and the report releases the last
	// GPUs it held: its record goes.
	Remove bool
	// Requeue says a replica deleted on its own is gone and queued: the
	// job goes back in the queue to place it.
	Requeue bool
	// Ignored is an illegal aggregate transition the rules did not make
	// (for the log), or nil.
	Ignored *transition
}

// transition is a job state change.
type transition struct{ From, To cosmic.State }

// reportRules applies one job's report. A replica report counts only for a
// replica the rack holds and only when newer than the last applied from
// the same worker process (design 0002), or the same as that one for a
// replica made unknown since (its worker answers again, unchanged). Then:
// a replica deleted on its own and reported gone is freed and queued
// again (Requeue); a command that ended (an exit code after running)
// stops and frees its replica; other stops and gones are late (the ork's
// own kills release at once) and ignored; a failure frees; any other
// report sets the replica's state, nodes, agent keys and progress.
// The job's state is then aggregated from its replicas. A deleting job is
// deleted replica by replica: a replica reported gone by the rack holding
// it is stopped and freed, nothing else of its reports counts, and the
// job is removed with the last GPUs it held (Remove).
func reportRules(in reportInput) (reportOutcome, error) {
	out := reportOutcome{Job: in.Job}
	j := &out.Job
	deleting := j.Status.State == cosmic.StateDeleting
	for _, rr := range in.Report.Replicas {
		res, held := in.Held(rr.Replica)
		if !held || res.Rack != in.Rack {
			continue // a late report of a replica released already
		}
		if j.Status.State == cosmic.StateStopped {
			// A killed job that kept the replica's GPUs while its VM
			// powers off (poweroff.go): off (stopped, failed or gone),
			// they are free; until then only that end counts. Taken
			// whatever its stamp: the report of a replica stopped at
			// once may have come before the kill was stored, and been
			// passed over then as a late one.
			if rr.Gone || rr.State == cosmic.StateStopped || rr.State == cosmic.StateFailed {
				out.Release = append(out.Release, res)
				out.Changed = true
			}
			continue
		}
		cur := cosmic.StateQueued
		if rr.Replica < len(j.Status.Replicas) {
			cur = j.Status.Replicas[rr.Replica].State
		}
		ref := worker.ReplicaRef{JobID: j.ID, Replica: rr.Replica}
		if last, ok := in.Applied[ref]; ok && !rr.Observed.Supersedes(last) &&
			(cur != cosmic.StateUnknown || rr.Observed != last) {
			// Older than what was applied: a late answer. The last one
			// applied, again, still counts for a replica the ork made
			// unknown since (its worker was unreachable): nothing newer
			// has happened to it.
			continue
		}
		if rr.Observed.Process != "" {
			if out.Stamps == nil {
				out.Stamps = map[worker.ReplicaRef]worker.Observation{}
			}
			out.Stamps[ref] = rr.Observed
		}
		switch {
		case deleting && rr.Gone:
			// The deleted job's replica is gone: its GPUs are free.
			setReplica(j, rr.Replica, func(rs *cosmic.ReplicaStatus) { rs.State, rs.Reason, rs.Nodes = cosmic.StateStopped, nil, nil })
			out.Release = append(out.Release, res)
			out.Changed = true
			continue
		case cur == cosmic.StateDeleting && rr.Gone && rr.Replica >= j.Spec.Replicas():
			// The autoscaler took the replica away: it is gone, its GPUs
			// are free, and its entry goes.
			setReplica(j, rr.Replica, func(rs *cosmic.ReplicaStatus) {
				rs.State, rs.Nodes, rs.AgentKeys = cosmic.StateStopped, nil, nil
			})
			out.Release = append(out.Release, res)
			out.Changed = true
			continue
		case cur == cosmic.StateDeleting && rr.Gone:
			// A replica deleted on its own is gone: its GPUs are free and
			// it is placed afresh.
			setReplica(j, rr.Replica, func(rs *cosmic.ReplicaStatus) {
				rs.State, rs.Nodes, rs.AgentKeys = cosmic.StateQueued, nil, nil
				rs.Generation = j.Status.Generation // what it will be placed with
			})
			out.Release = append(out.Release, res)
			out.Requeue = true
			out.Changed = true
			continue
		case deleting:
			continue // its VMIs are going: only their end counts
		case commandEnded(cur, rr):
			// The job's command exited 0 (a gpu-container job): the
			// replica is stopped and its GPUs free. Kills release at
			// once, so a killed replica's report never gets here.
			setReplica(j, rr.Replica, func(rs *cosmic.ReplicaStatus) { rs.State, rs.Reason, rs.Nodes = cosmic.StateStopped, rr.Reason, nil })
			code := *rr.ExitCode
			j.Status.ExitCode = &code
			out.Release = append(out.Release, res)
			out.Changed = true
			continue
		case cur == cosmic.StateDeleting, rr.Gone, rr.State == cosmic.StateStopped:
			// Other stops are the ork's own doing (kill releases at
			// once), so a stopped or gone report of a replica that holds
			// GPUs is a late one from before it was placed again: ignore
			// it.
			continue
		}
		out.Changed = true
		setReplica(j, rr.Replica, func(rs *cosmic.ReplicaStatus) {
			rs.State, rs.Reason = rr.State, rr.Reason
			if len(rr.Nodes) > 0 {
				rs.Nodes = rr.Nodes
			}
			if len(rr.AgentKeys) > 0 {
				rs.AgentKeys = rr.AgentKeys
			}
			if rr.Given != nil {
				g := *rr.Given
				rs.Given = &g
			}
			if rr.Progress != nil {
				p := *rr.Progress
				rs.Progress = &p
			}
			switch rr.State {
			case cosmic.StatePending, cosmic.StateStarting, cosmic.StateRestarting:
				if rs.AgentDeadline.IsZero() && in.AgentDeadline > 0 {
					rs.AgentDeadline = in.Now.Add(in.AgentDeadline)
				}
			}
		})
		if len(rr.AgentKeys) > 0 {
			if out.AgentKeys == nil {
				out.AgentKeys = map[int][]string{}
			}
			out.AgentKeys[rr.Replica] = rr.AgentKeys
		}
		if rr.ExitCode != nil {
			j.Status.ExitCode = rr.ExitCode
		}
		if rr.State == cosmic.StateStarting && rr.Progress != nil {
			p := *rr.Progress
			j.Status.Progress = &p
		}
		if rr.State == cosmic.StateFailed {
			out.Release = append(out.Release, res)
		}
	}
	if !out.Changed {
		return out, nil
	}
	j.SyncAgentDeadlines()
	j.SyncDrains()
	if deleting {
		out.Remove = true
		for i := range max(j.Spec.Replicas(), len(j.Status.Replicas)) {
			if _, held := in.Held(i); held && !slices.ContainsFunc(out.Release, func(r cosmic.Reservation) bool { return r.Replica == i }) {
				out.Remove = false // another replica's VMIs may still run
			}
		}
		j.UpdatedAt = in.Now
		return out, nil
	}
	trimReplicas(j, func(i int) bool {
		_, held := in.Held(i)
		return held && !slices.ContainsFunc(out.Release, func(r cosmic.Reservation) bool { return r.Replica == i })
	})
	ignored, err := aggregate(j, in.Now)
	if err != nil {
		return out, err
	}
	out.Ignored = ignored
	j.UpdatedAt = in.Now
	return out, nil
}

// aggregate sets the job's state from its replicas' (cosmic.AggregateState)
// with the reason that explains it: a failed replica's first, a degraded
// job's as replica_failed; a job whose replicas are being built anew is
// restarting, not going back to pending. A transition the state machine
// does not allow is not made: it is returned instead.
func aggregate(j *cosmic.Job, now time.Time) (*transition, error) {
	// Entries past the replica count are replicas the autoscaler took
	// away, going: they are not the job's any more.
	replicas := j.Status.Replicas[:min(len(j.Status.Replicas), j.Spec.Replicas())]
	if to, reason, ok := scaledState(*j, replicas); ok {
		if to == j.Status.State && reasonCode(j.Status.Reason) == reasonCode(reason) {
			return nil, nil
		}
		return nil, j.SetState(to, reason, now)
	}
	states := make([]cosmic.State, len(replicas))
	var reason *cosmic.Reason
	for i, r := range replicas {
		states[i] = r.State
		if r.State == cosmic.StateDeleting && j.Status.State != cosmic.StateDeleting {
			// Deleted on its own: it is placed again, so it counts as
			// queued, not as gone.
			states[i] = cosmic.StateQueued
		}
		if r.Reason != nil && (r.State == cosmic.StateFailed || reason == nil) {
			rr := *r.Reason
			reason = &rr
		}
	}
	to := cosmic.AggregateState(states, j.Spec.Replicas() == 1)
	// A pending job keeps the reason its rack could not apply it for (the
	// rack's problem, e.g. its namespace is missing), until it can.
	blocked := to == cosmic.StatePending && reason != nil && reason.Code == cosmic.ReasonRackMisconfigured
	if to == j.Status.State {
		if reason != nil && (to == cosmic.StateFailed || to == cosmic.StateUnknown || to == cosmic.StateDegraded || blocked) {
			return nil, j.SetState(to, reason, now)
		}
		if to == cosmic.StatePending && !blocked && j.Status.Reason != nil && j.Status.Reason.Code == cosmic.ReasonRackMisconfigured {
			return nil, j.SetState(to, nil, now) // the rack is fixed
		}
		return nil, nil
	}
	if (to == cosmic.StatePending || to == cosmic.StateQueued) && j.Status.State == cosmic.StateStarting {
		// A replica of a starting job is placed again (deleted on its own,
		// or its VMIs lost): the job is still starting.
		return nil, nil
	}
	if (to == cosmic.StatePending || to == cosmic.StateQueued) && cosmic.CanTransition(j.Status.State, cosmic.StateRestarting) {
		// The worker is building the VMIs anew (it restarted and lost them,
		// or replaced them): the job is restarting, not going backwards.
		// Nobody asked for it: the reason says what happened.
		r := cosmic.NewReason(cosmic.ReasonVMIsRecreated, "")
		return nil, j.SetState(cosmic.StateRestarting, &r, now)
	}
	if !cosmic.CanTransition(j.Status.State, to) {
		return &transition{From: j.Status.State, To: to}, nil
	}
	if to == cosmic.StateDegraded && reason != nil {
		r := cosmic.NewReason(cosmic.ReasonReplicaFailed, reason.Message)
		reason = &r
	}
	if to == cosmic.StateRunning || (to == cosmic.StatePending && !blocked) || to == cosmic.StateStarting {
		reason = nil
	}
	return nil, j.SetState(to, reason, now)
}

// scaledState is the state of an autoscaled job, or one rolling out an
// update, that serves (running or degraded) while its replicas come and
// go: running while a replica
// runs and the others are on their way up (queued, pending, starting);
// running with reason scaled_to_zero when it has no replica; running with
// reason scaling_up when none is ready yet and one is on its way (requests
// wait for it at the proxy). Otherwise ok is false and the job's state is
// aggregated as any other's.
func scaledState(j cosmic.Job, replicas []cosmic.ReplicaStatus) (cosmic.State, *cosmic.Reason, bool) {
	if !j.Spec.Autoscaled() && j.Status.Rollout == nil || (j.Status.State != cosmic.StateRunning && j.Status.State != cosmic.StateDegraded) {
		return "", nil, false
	}
	if len(replicas) == 0 {
		r := cosmic.NewReason(cosmic.ReasonScaledToZero, "")
		return cosmic.StateRunning, &r, true
	}
	running := 0
	for _, r := range replicas {
		switch r.State {
		case cosmic.StateRunning:
			running++
		case cosmic.StateQueued, cosmic.StatePending, cosmic.StateStarting, cosmic.StateDeleting:
		default:
			return "", nil, false
		}
	}
	if running > 0 {
		return cosmic.StateRunning, nil, true
	}
	r := cosmic.NewReason(cosmic.ReasonScalingUp, "")
	return cosmic.StateRunning, &r, true
}

// reasonCode is r's code, or "" for none.
func reasonCode(r *cosmic.Reason) cosmic.ReasonCode {
	if r == nil {
		return ""
	}
	return r.Code
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
