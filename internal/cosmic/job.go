package cosmic

import (
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
)

// Job is one workload: what was asked (Spec) and what is (Status).
type Job struct {
	ID        string    `json:"id"`
	CreatedAt time.Time `json:"createdAt"`
	UpdatedAt time.Time `json:"updatedAt"`
	User      string    `json:"user"`
	Team      string    `json:"team"`
	Spec      Spec      `json:"spec"`
	Status    Status    `json:"status"`
}

// NewJob returns a job in state creating, with that first change in its
// history. It neither defaults nor validates spec.
func NewJob(id, user, team string, spec Spec, now time.Time) Job {
	j := Job{ID: id, CreatedAt: now, User: user, Team: team, Spec: spec}
	_ = j.SetState(StateCreating, nil, now) // from "" to creating is always legal
	return j
}

// NewJobID returns a fresh random job ID (a lowercase UUID).
func NewJobID() string { return uuid.NewString() }

// ParseJobID checks that s is a job ID in the canonical UUID form
// (xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx) and returns it in lowercase. Its
// error is a *FieldError (an ErrInvalid) for field "id".
func ParseJobID(s string) (string, error) {
	if _, err := uuid.Parse(s); err != nil || len(s) != 36 {
		return "", &FieldError{Field: "id", Message: fmt.Sprintf("%q is not a job ID (a UUID)", s)}
	}
	return strings.ToLower(s), nil
}

// ModelHealth is how well an inference job's replicas answer, reported
// apart from the job's status.
type ModelHealth string

// The model health values.
const (
	ModelHealthy   ModelHealth = "healthy"
	ModelDegraded  ModelHealth = "degraded"
	ModelUnhealthy ModelHealth = "unhealthy"
	ModelUnknown   ModelHealth = "unknown"
)

// Status is what a job is doing now and how it got there.
type Status struct {
	State   State          `json:"state"`
	Reason  *Reason        `json:"reason,omitempty"`
	Message string         `json:"message,omitempty"`
	History []StatusChange `json:"history,omitempty"`
	// QueuePosition is the 1-based place in its queue while queued (0 otherwise).
	QueuePosition int `json:"queuePosition,omitempty"`
	// WaitingFor says what a queued job waits for ("8 × GH100_H100_SXM5_80GB in us").
	WaitingFor  string          `json:"waitingFor,omitempty"`
	Progress    *Progress       `json:"progress,omitempty"`
	ExitCode    *int            `json:"exitCode,omitempty"`
	Replicas    []ReplicaStatus `json:"replicas,omitempty"`
	ModelHealth ModelHealth     `json:"modelHealth,omitempty"` // managed-inference only
	// Actions are what the caller may do to the job now (Job.Actions, less
	// what its permissions withhold): filled by the app-node for each
	// answer, never stored.
	Actions []Action `json:"actions,omitempty"`
	// TimeoutAt is when spec.timeout ends the job's current run (stopped
	// with reason timeout, or restarted with timeoutAutoRestart): set when
	// the job enters running with a timeout, cleared when the run ends
	// (SetState). Zero: no timeout runs.
	TimeoutAt time.Time `json:"timeoutAt,omitzero"`
	// AgentDeadline is the earliest of the replicas' agent deadlines
	// (ReplicaStatus.AgentDeadline); zero when none is set.
	AgentDeadline time.Time `json:"agentDeadline,omitzero"`
	// Generation counts the updates of the spec that change what the
	// replicas run (0 as created); each replica says the one it was
	// placed with (ReplicaStatus.Generation).
	Generation int `json:"generation,omitempty"`
	// Rollout is the update being rolled out to the replicas, one at a
	// time; nil when none is (docs/inference.md, "Rolling updates").
	Rollout *Rollout `json:"rollout,omitempty"`
	// LastRollout is how the last rollout ended.
	LastRollout *RolloutResult `json:"lastRollout,omitempty"`
}

// The outcomes of a rollout.
const (
	RolloutDone       = "rolled_out"  // every replica runs the new spec
	RolloutRolledBack = "rolled_back" // a replica of the new spec failed: every replica runs the spec before
	RolloutAbandoned  = "abandoned"   // it could not end either way (the rollback failed too, or the job stopped)
)

// RolloutResult is how a rollout ended: RolloutDone, RolloutRolledBack
// or RolloutAbandoned, why (a rollback's failed replica), and when.
type RolloutResult struct {
	Generation int       `json:"generation"`
	Outcome    string    `json:"outcome"`
	Reason     *Reason   `json:"reason,omitempty"`
	Started    time.Time `json:"started"`
	Ended      time.Time `json:"ended"`
}

// Rollout is a rolling update of a serving job's replicas: one more
// replica of the new spec (the surge) starts first; then each replica of
// an older generation is drained (no new requests; those in flight end)
// and placed again with the new spec, one at a time; then the surge goes.
// A replica of the new spec that fails rolls the job back to the spec
// before, the same way.
type Rollout struct {
	// Replicas is the count the job serves with once it ends; the surge
	// runs beyond it meanwhile.
	Replicas int `json:"replicas"`
	// Previous is the spec before the update: what a failed rollout goes
	// back to.
	Previous *Spec `json:"previous,omitempty"`
	// From is the generation before the update: its replicas run
	// Previous.
	From int `json:"from"`
	// RollingBack says a replica of the new spec failed and the job goes
	// back to Previous (Reason says why).
	RollingBack bool      `json:"rollingBack,omitempty"`
	Reason      *Reason   `json:"reason,omitempty"`
	Started     time.Time `json:"started"`
	// Progressed is when the rollout last took a step: one that takes
	// none for the ork's rollout deadline (a replica that cannot be
	// placed, say) rolls back.
	Progressed time.Time `json:"progressed"`
}

// Progress is how far a starting job is ("import root disk", 42).
type Progress struct {
	Step    string `json:"step"`
	Percent int    `json:"percent"`
	// Objects and Bytes, of TotalObjects and TotalBytes, are what a step
	// that moves data has moved so far (copy_volumes: the job's volumes
	// coming in, docs/data.md).
	Objects      int64 `json:"objects,omitempty"`
	TotalObjects int64 `json:"totalObjects,omitempty"`
	Bytes        int64 `json:"bytes,omitempty"`
	TotalBytes   int64 `json:"totalBytes,omitempty"`
}

// StepCopyVolumes is the progress step of a replica whose agent copies
// the job's volumes in, before it runs.
const StepCopyVolumes = "copy_volumes"

// ReplicaStatus is one replica's state and where it runs.
type ReplicaStatus struct {
	Index  int      `json:"index"`
	State  State    `json:"state"`
	Reason *Reason  `json:"reason,omitempty"`
	Nodes  []string `json:"nodes,omitempty"`
	// AgentKeys are the public keys of the replica's in-VM agents (by VMI
	// index), as the rack's worker issued them; empty where the worker
	// reports none (the simulated rack keeps its agents in process).
	AgentKeys []string `json:"agentKeys,omitempty"`
	// AgentDeadline is when the replica fails with agent_timeout unless
	// its agent has connected (the replica is running) by then: its
	// placement or restart plus its rack's agent deadline. Zero once it
	// runs, and while it holds no GPUs.
	AgentDeadline time.Time `json:"agentDeadline,omitzero"`
	// Progress is the replica's last step reported while it starts (the
	// job's Progress is the last of any replica's).
	Progress *Progress `json:"progress,omitempty"`
	// Given is what the rack gave the replica (its VMs' vCPUs, memory and
	// GPUs), as its worker reports it: it can be less than the spec's
	// resources ask (a QEMU rack caps a VM). Nil: not reported.
	Given *Given `json:"given,omitempty"`
	// Actions are what the caller may do to this replica on its own now
	// (Job.ReplicaActions): filled by the app-node, never stored.
	Actions []Action `json:"actions,omitempty"`
	// Generation is the spec's generation the replica was placed with
	// (Status.Generation then).
	Generation int `json:"generation,omitempty"`
	// Drain, while set, says the replica is being drained: it runs and
	// answers the requests it has, but takes no new ones; once those end
	// (or the ork's drain timeout passes) it is deleted, with Drain.Then
	// as the reason. A replica the autoscaler takes away, and one a
	// rollout replaces, is drained first.
	Drain *Drain `json:"drain,omitempty"`
}

// Drain is a replica's drain: since when, and the reason it is deleted
// with once drained.
type Drain struct {
	Since time.Time `json:"since"`
	Then  Reason    `json:"then"`
}

// SyncDrains ends the drain of every replica that no longer runs (a
// drain holds only while the replica answers requests).
func (j *Job) SyncDrains() {
	for i := range j.Status.Replicas {
		if r := &j.Status.Replicas[i]; r.State != StateRunning && r.State != StateUnknown {
			r.Drain = nil
		}
	}
}

// SyncAgentDeadlines keeps the agent deadlines consistent with the
// replicas' states: a deadline holds only while its replica is pending,
// starting, restarting or unknown (a replica whose worker cannot be
// reached keeps it, to be checked when the worker answers again); the
// job's AgentDeadline is the earliest that holds. A replica that runs, or
// no longer holds GPUs, forgets its progress too.
func (j *Job) SyncAgentDeadlines() {
	j.Status.AgentDeadline = time.Time{}
	for i := range j.Status.Replicas {
		r := &j.Status.Replicas[i]
		switch r.State {
		case StatePending, StateStarting, StateRestarting, StateUnknown:
		default:
			r.AgentDeadline, r.Progress = time.Time{}, nil
		}
		if d := r.AgentDeadline; !d.IsZero() && (j.Status.AgentDeadline.IsZero() || d.Before(j.Status.AgentDeadline)) {
			j.Status.AgentDeadline = d
		}
	}
}
