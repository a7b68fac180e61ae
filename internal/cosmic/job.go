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
}

// Progress is how far a starting job is ("import root disk", 42).
type Progress struct {
	Step    string `json:"step"`
	Percent int    `json:"percent"`
}

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
}
