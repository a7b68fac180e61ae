package ork

import (
	"context"
	"fmt"
	"time"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/ork/orkapi"
	"github.com/cosmicac/cosmicac/internal/store"
	"github.com/cosmicac/cosmicac/internal/worker"
)

// Deadlines (docs/scheduling.md, "Deadlines"). Both are timestamps in the
// job's stored status, written in the same transaction as the state they
// belong to: a replica's agent deadline when it is placed or restarted
// (ReplicaStatus.AgentDeadline, its rack's cosmic.Rack.AgentDeadline from
// then), the end of a run's spec.timeout when the job enters running
// (Status.TimeoutAt, cosmic.Job.SetState). enforceDeadlines compares them
// with the ork's clock on every heartbeat, so an ork that restarts
// enforces what the one before it set, and no timer lives in memory.

// agentDeadlineLocked is the agent deadline of a rack (the default for a
// rack no longer listed).
func (o *Ork) agentDeadlineLocked(rack string) time.Duration {
	if r := o.racks[rack]; r != nil {
		return r.Rack.AgentDeadlineOrDefault()
	}
	return cosmic.DefaultAgentDeadline
}

// enforceDeadlines fails the replicas whose agents have not connected by
// their deadlines (agent_timeout), and stops the jobs that ran past their
// timeout (timeout), or restarts them with timeoutAutoRestart. A worker
// that cannot be told to stop the VMIs leaves the job as it is, for the
// next heartbeat: GPUs are released only once their VMIs are stopped.
func (o *Ork) enforceDeadlines(ctx context.Context) {
	jobs, err := listAll(ctx, o.st, store.ListJobsQuery{States: []cosmic.State{cosmic.StatePending, cosmic.StateStarting,
		cosmic.StateRunning, cosmic.StateDegraded, cosmic.StateRestarting}, Sort: store.SortCreatedAt, Order: store.OrderAsc})
	if err != nil {
		if ctx.Err() == nil {
			o.log.Error("list jobs for deadlines", "err", err)
		}
		return
	}
	now := o.now()
	for _, j := range jobs {
		if ctx.Err() != nil {
			return
		}
		if timedOut(j, now) {
			o.timeOut(ctx, j)
			continue
		}
		for _, r := range j.Status.Replicas {
			if agentLate(r, now) {
				o.agentTimeout(ctx, j, r)
			}
		}
	}
}

// timedOut says whether j runs past its timeout: it is running or degraded
// (an unknown job is checked once its worker answers again) at or after
// Status.TimeoutAt.
func timedOut(j cosmic.Job, now time.Time) bool {
	switch j.Status.State {
	case cosmic.StateRunning, cosmic.StateDegraded:
		return !j.Status.TimeoutAt.IsZero() && !now.Before(j.Status.TimeoutAt)
	}
	return false
}

// agentLate says whether replica r is past its agent deadline without its
// agent connected: it still starts (pending, starting, restarting).
func agentLate(r cosmic.ReplicaStatus, now time.Time) bool {
	switch r.State {
	case cosmic.StatePending, cosmic.StateStarting, cosmic.StateRestarting:
		return !r.AgentDeadline.IsZero() && !now.Before(r.AgentDeadline)
	}
	return false
}

// timeOut ends a job's run at its timeout: stopped with reason timeout,
// or, with timeoutAutoRestart, restarted in place (storage and GPUs kept;
// the clock starts again when it runs again).
func (o *Ork) timeOut(ctx context.Context, j cosmic.Job) {
	d := time.Duration(j.Spec.Timeout) * time.Second
	if j.Spec.TimeoutAutoRestart {
		reason := cosmic.NewReason(cosmic.ReasonTimeout, fmt.Sprintf("ran %s; restarting it (timeoutAutoRestart)", d))
		reason.Fix = ""
		if _, err := o.restartJob(ctx, orkapi.RestartJobParams{ID: j.ID}, reason); err != nil {
			o.log.Warn("restart job at its timeout; retried next heartbeat", "job_id", j.ID, "err", err)
			return
		}
		o.log.Info("job restarted at its timeout", "job_id", j.ID, "timeout", d)
		return
	}
	if _, err := o.stopJob(ctx, j.ID, cosmic.NewReason(cosmic.ReasonTimeout, fmt.Sprintf("ran %s", d))); err != nil {
		o.log.Warn("stop job at its timeout; retried next heartbeat", "job_id", j.ID, "err", err)
		return
	}
	o.log.Info("job stopped at its timeout", "job_id", j.ID, "timeout", d)
}

// agentTimeout fails replica r of j, whose agent did not connect in time:
// its worker stops its VMIs (the disk is kept, as for a kill), then its
// GPUs are released and it is failed with agent_timeout, naming the last
// step it reached, in one transaction.
func (o *Ork) agentTimeout(ctx context.Context, j cosmic.Job, r cosmic.ReplicaStatus) {
	o.mu.Lock()
	res, held := o.snap.Reserved(j.ID, r.Index)
	o.mu.Unlock()
	if !held {
		return
	}
	// An Apply still on its way would start the VMIs after the Stop.
	o.inflight.wait(j.ID)
	ref := worker.ReplicaRef{JobID: j.ID, Replica: r.Index}
	if err := o.onRacks(ctx, []string{res.Rack}, func(ctx context.Context, w worker.Worker) error { return w.Stop(ctx, ref) }); err != nil {
		o.log.Warn("stop replica past its agent deadline; retried next heartbeat", "job_id", j.ID, "replica", r.Index, "err", err)
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	reason := cosmic.NewReason(cosmic.ReasonAgentTimeout, agentTimeoutDetail(r, o.agentDeadlineLocked(res.Rack)))
	released := false
	_, err := o.updateJobLocked(ctx, j.ID, func(tx Tx, j *cosmic.Job) error {
		cur, ok := o.snap.Reserved(j.ID, r.Index)
		if !ok || cur.Rack != res.Rack || !sameNodes(cur, res) || beingDeleted(*j, r.Index) {
			return nil // released or replaced meanwhile
		}
		if err := tx.ReleaseGPUs(ctx, j.ID, r.Index); err != nil {
			return err
		}
		released = true
		setReplica(j, r.Index, func(rs *cosmic.ReplicaStatus) { rs.State, rs.Reason = cosmic.StateFailed, &reason })
		return o.setAggregate(j)
	})
	if err != nil {
		o.log.Error("fail replica past its agent deadline", "job_id", j.ID, "replica", r.Index, "err", err)
		return
	}
	if !released {
		return
	}
	if err := o.snap.Release(res); err != nil {
		o.log.Error("release in snapshot", "job_id", j.ID, "err", err)
	}
	o.releaseHeldLocked(j.ID, r.Index)
	o.boundReleasedLocked(j.ID, r.Index)
	o.log.Info("replica failed: agent deadline passed", "job_id", j.ID, "replica", r.Index, "rack", res.Rack)
	o.poke()
}

// agentTimeoutDetail is the message of an agent_timeout: the replica, the
// deadline, and the last step its worker reported (its system log has
// every step).
func agentTimeoutDetail(r cosmic.ReplicaStatus, d time.Duration) string {
	last := fmt.Sprintf("no step reported (the replica stayed %s)", r.State)
	if p := r.Progress; p != nil && p.Step != "" {
		last = fmt.Sprintf("the last step reached was %q (%d%%)", p.Step, p.Percent)
	}
	return fmt.Sprintf("replica %d: no agent within %s of its start; %s", r.Index, d, last)
}
