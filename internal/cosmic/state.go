package cosmic

import (
	"fmt"
	"time"
)

// State is a job's (or a replica's) status, as the API spells it.
type State string

// The states (docs/jobs.md, "Statuses").
const (
	StateCreating   State = "creating"   // validating the configuration and GPU requirements
	StateQueued     State = "queued"     // waiting for GPUs; holds none
	StatePending    State = "pending"    // GPUs reserved; no VMI running yet
	StateStarting   State = "starting"   // VMI scheduled, disk import, boot, image pull, weights
	StateRunning    State = "running"    // shell reachable / endpoint accepts requests ("Active")
	StateDegraded   State = "degraded"   // some replicas failed, at least one is alive
	StateRestarting State = "restarting" // VMI being replaced; storage and reservation kept
	StateFailed     State = "failed"     // failed to start or crashed; GPUs released
	StateUnknown    State = "unknown"    // the platform cannot learn the state now
	StateStopped    State = "stopped"    // killed; GPUs released, storage kept
	StateDeleting   State = "deleting"   // being removed; the record goes when the worker confirms
)

// States lists every state, in lifecycle order.
var States = []State{StateCreating, StateQueued, StatePending, StateStarting, StateRunning,
	StateDegraded, StateRestarting, StateFailed, StateUnknown, StateStopped, StateDeleting}

// Valid reports whether s is a known state.
func (s State) Valid() bool { _, ok := transitions[s]; return ok }

// Terminal reports whether a job in s stays there until a user acts
// (restart or delete): failed and stopped.
func (s State) Terminal() bool { return s == StateFailed || s == StateStopped }

// HoldsGPUs reports whether a job in s holds a GPU reservation: pending,
// starting, running, degraded, restarting, unknown and deleting. Creating,
// queued, failed and stopped do not. Unknown keeps its GPUs because the VMI
// may still run; deleting keeps them until the worker confirms the VMIs are
// gone (a job that holds none is deleted at once, without this state).
// Failed releases them: restarting a failed job queues it again. (A
// stopped job whose VMs power off, their agents pushing its volumes, keeps
// their GPUs until they are off: the ork's, internal/ork/poweroff.go.)
func (s State) HoldsGPUs() bool {
	switch s {
	case StatePending, StateStarting, StateRunning, StateDegraded, StateRestarting, StateUnknown, StateDeleting:
		return true
	}
	return false
}

// RunsVMs reports whether a job in s has VMIs that run, or may (unknown):
// starting, running, degraded, restarting and unknown. Deleting such a job
// kills them, which takes force; a model of such a job may serve.
func (s State) RunsVMs() bool {
	switch s {
	case StateStarting, StateRunning, StateDegraded, StateRestarting, StateUnknown:
		return true
	}
	return false
}

// ReplicaActionAllowed says whether replica n of j may be restarted or
// deleted on its own (verb: "restarted", "deleted"): only a Managed
// Inference Job's, and only while it is queued, pending or starting (the
// jobs seed's "Job actions"), or failed (to recover a degraded job without
// touching the replicas that serve). A replica that runs is part of the
// endpoint; the job is restarted or deleted as a whole. The error wraps
// ErrConflict and says why.
func (j Job) ReplicaActionAllowed(n int, verb string) error {
	if j.Spec.Type != TypeManagedInference {
		return fmt.Errorf("%w: job %s is a %s job: only a managed-inference job's replicas can be %s one by one", ErrConflict, j.ID, j.Spec.Type, verb)
	}
	st := StateQueued
	if n < len(j.Status.Replicas) {
		st = j.Status.Replicas[n].State
	}
	if ReplicaActionStates[st] {
		return nil
	}
	return fmt.Errorf("%w: replica %d of job %s is %s: a replica can be %s on its own only while queued, pending, starting or failed", ErrConflict, n, j.ID, st, verb)
}

// ReplicaActionStates are the states in which a managed-inference
// replica may be restarted or deleted on its own (Job.ReplicaActionAllowed).
var ReplicaActionStates = map[State]bool{StateQueued: true, StatePending: true, StateStarting: true, StateFailed: true}

// KillAllowed says whether j may be killed: not once it failed or is being
// deleted. A stopped job's kill does nothing (and is no error). The error
// wraps ErrConflict.
func (j Job) KillAllowed() error {
	switch j.Status.State {
	case StateFailed, StateDeleting:
		return fmt.Errorf("%w: job %s is %s; only a live job can be killed", ErrConflict, j.ID, j.Status.State)
	}
	return nil
}

// RestartAllowed says whether j may be restarted: not while it is being
// created or deleted. A queued job's restart does nothing (and is no
// error). The error wraps ErrConflict.
func (j Job) RestartAllowed() error {
	switch j.Status.State {
	case StateDeleting, StateCreating:
		return fmt.Errorf("%w: job %s is %s", ErrConflict, j.ID, j.Status.State)
	}
	return nil
}

// DeleteAllowed says whether j may be deleted, with force or without: a
// job whose VMIs run (RunsVMs) only with force, which kills them. The
// error wraps ErrConflict.
func (j Job) DeleteAllowed(force bool) error {
	if j.Status.State.RunsVMs() && !force {
		return fmt.Errorf("%w: job %s is %s: kill it first, or delete it with force", ErrConflict, j.ID, j.Status.State)
	}
	return nil
}

// Action is something that can be done to a job, or to one of its
// replicas, as the API answers them in status.actions and
// status.replicas[].actions: the actions the caller may take now.
type Action string

// The actions. ActionDelete is a delete without force; ActionForceDelete
// one with force (its VMIs are killed first), the only delete of a job
// whose VMIs run.
const (
	ActionRestart     Action = "restart"
	ActionKill        Action = "kill"
	ActionDelete      Action = "delete"
	ActionForceDelete Action = "forceDelete"
)

// Actions are the actions j's state allows that change something: those
// KillAllowed, RestartAllowed and DeleteAllowed admit, less the ones that
// would do nothing (kill a stopped job, restart a queued one, delete one
// already being deleted).
func (j Job) Actions() []Action {
	st := j.Status.State
	out := []Action{}
	if j.RestartAllowed() == nil && st != StateQueued {
		out = append(out, ActionRestart)
	}
	if j.KillAllowed() == nil && st != StateStopped {
		out = append(out, ActionKill)
	}
	switch {
	case st == StateDeleting:
	case j.DeleteAllowed(false) == nil:
		out = append(out, ActionDelete)
	default:
		out = append(out, ActionForceDelete)
	}
	return out
}

// ReplicaActions are the actions replica n of j allows on its own
// (ReplicaActionAllowed, in a job that RestartAllowed: not one being
// created or deleted): restart and delete, or none.
func (j Job) ReplicaActions(n int) []Action {
	if j.RestartAllowed() != nil || j.ReplicaActionAllowed(n, "restarted") != nil {
		return []Action{}
	}
	return []Action{ActionRestart, ActionDelete}
}

// transitions is the state machine: the only legal moves. Observed states
// (what workers report) may skip forward, e.g. pending→running when a
// starting phase was too quick to see.
var transitions = map[State][]State{
	StateCreating:   {StateQueued, StateFailed, StateStopped, StateDeleting},
	StateQueued:     {StatePending, StateFailed, StateStopped, StateDeleting},
	StatePending:    {StateQueued, StateStarting, StateRunning, StateDegraded, StateRestarting, StateFailed, StateUnknown, StateStopped, StateDeleting},
	StateStarting:   {StateRunning, StateDegraded, StateRestarting, StateFailed, StateUnknown, StateStopped, StateDeleting},
	StateRunning:    {StateDegraded, StateRestarting, StateFailed, StateUnknown, StateStopped, StateDeleting},
	StateDegraded:   {StateStarting, StateRunning, StateRestarting, StateFailed, StateUnknown, StateStopped, StateDeleting},
	StateRestarting: {StatePending, StateStarting, StateRunning, StateDegraded, StateFailed, StateUnknown, StateStopped, StateDeleting},
	StateUnknown:    {StatePending, StateStarting, StateRunning, StateDegraded, StateRestarting, StateFailed, StateStopped, StateDeleting},
	StateFailed:     {StateQueued, StateDeleting},
	StateStopped:    {StateQueued, StateDeleting},
	StateDeleting:   {},
}

// CanTransition reports whether from→to is a legal move. Staying in the
// same state is not a transition.
func CanTransition(from, to State) bool {
	for _, s := range transitions[from] {
		if s == to {
			return true
		}
	}
	return false
}

// Next lists the states reachable from s in one move.
func Next(s State) []State { return append([]State(nil), transitions[s]...) }

// StatusChange is one entry of a job's status history.
type StatusChange struct {
	State   State      `json:"state"`
	Reason  ReasonCode `json:"reason,omitempty"`
	Message string     `json:"message,omitempty"`
	At      time.Time  `json:"at"`
}

// SetState moves the job to state to at time now, with an optional reason,
// recording the change in Status.History and setting UpdatedAt. An illegal
// move returns an error wrapping ErrIllegalTransition and changes nothing.
// A job with no state yet may only move to creating. Setting the current
// state again is not a transition: it only replaces the reason and message
// (recording a history entry if the reason code changed).
// Leaving queued clears QueuePosition and WaitingFor; leaving starting or
// restarting clears Progress. Entering running starts the clock of
// spec.timeout (Status.TimeoutAt), entering any state but running,
// degraded and unknown stops it.
func (j *Job) SetState(to State, reason *Reason, now time.Time) error {
	from := j.Status.State
	switch {
	case from == to:
		old := j.Status.Reason
		j.setReason(reason)
		j.UpdatedAt = now
		if code(old) != code(reason) {
			j.record(to, reason, now)
		}
		return nil
	case from == "" && to == StateCreating:
	case !CanTransition(from, to):
		return fmt.Errorf("job %s: %s to %s: %w", j.ID, stateName(from), to, ErrIllegalTransition)
	}
	if from == StateQueued {
		j.Status.QueuePosition = 0
		j.Status.WaitingFor = ""
	}
	if from == StateStarting || from == StateRestarting {
		j.Status.Progress = nil
	}
	j.Status.State = to
	j.setReason(reason)
	j.UpdatedAt = now
	j.record(to, reason, now)
	j.runClock(to, now)
	return nil
}

// runClock starts and ends the clock of spec.timeout as the job enters to:
// a run starts when the job enters running without a run under way, and
// ends when it leaves the running states for any but unknown and
// degraded (its VMs may run on there). So a restart, in place or from the
// queue, starts the clock again.
func (j *Job) runClock(to State, now time.Time) {
	switch to {
	case StateRunning:
		if j.Spec.Timeout > 0 && j.Status.TimeoutAt.IsZero() {
			j.Status.TimeoutAt = now.Add(time.Duration(j.Spec.Timeout) * time.Second)
		}
	case StateDegraded, StateUnknown:
	default:
		j.Status.TimeoutAt = time.Time{}
	}
}

func (j *Job) setReason(r *Reason) {
	if r == nil {
		j.Status.Reason, j.Status.Message = nil, ""
		return
	}
	c := *r
	j.Status.Reason, j.Status.Message = &c, c.Message
}

// EnteredAt is when j last entered state s, by its history; false when
// it never did.
func (j Job) EnteredAt(s State) (time.Time, bool) {
	for i := len(j.Status.History) - 1; i >= 0; i-- {
		if j.Status.History[i].State == s {
			return j.Status.History[i].At, true
		}
	}
	return time.Time{}, false
}

func (j *Job) record(s State, r *Reason, now time.Time) {
	c := StatusChange{State: s, At: now}
	if r != nil {
		c.Reason, c.Message = r.Code, r.Message
	}
	j.Status.History = append(j.Status.History, c)
}

func code(r *Reason) ReasonCode {
	if r == nil {
		return ""
	}
	return r.Code
}

func stateName(s State) string {
	if s == "" {
		return "(none)"
	}
	return string(s)
}

// AggregateState derives a job's state from its replicas' states (docs/jobs.md, "Statuses").
// single says the job runs one replica. Stopped and deleting replicas are
// left out unless every replica is in one of them. Then:
//   - every replica in one state: that state;
//   - some failed: failed if single or if all remaining failed; unknown if
//     the rest are unknown; else degraded (the endpoint stays up on the
//     replicas that are queued, pending, starting, running or restarting);
//   - none failed: unknown if any is unknown; else restarting if any is
//     restarting; else degraded if any is degraded; else the least advanced
//     of creating < queued < pending < starting < running.
//
// No replicas: unknown.
func AggregateState(replicas []State, single bool) State {
	if len(replicas) == 0 {
		return StateUnknown
	}
	var live []State
	for _, s := range replicas {
		if s != StateStopped && s != StateDeleting {
			live = append(live, s)
		}
	}
	if len(live) == 0 {
		for _, s := range replicas {
			if s == StateDeleting {
				return StateDeleting
			}
		}
		return StateStopped
	}
	n := map[State]int{}
	for _, s := range live {
		n[s]++
	}
	if len(n) == 1 {
		return live[0]
	}
	if f := n[StateFailed]; f > 0 {
		switch {
		case single || f == len(live):
			return StateFailed
		case f+n[StateUnknown] == len(live):
			return StateUnknown
		}
		return StateDegraded
	}
	switch {
	case n[StateUnknown] > 0:
		return StateUnknown
	case n[StateRestarting] > 0:
		return StateRestarting
	case n[StateDegraded] > 0:
		return StateDegraded
	}
	for _, s := range []State{StateCreating, StateQueued, StatePending, StateStarting, StateRunning} {
		if n[s] > 0 {
			return s
		}
	}
	return StateUnknown
}
