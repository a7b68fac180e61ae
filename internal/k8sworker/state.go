package k8sworker

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/worker"
)

// The replica's state as the worker keeps it on the cluster, so that a
// restarted worker rebuilds its view from the cluster alone. It lives on
// the replica's state carrier: the cloud-init Secret of its VMI 0
// (SecretName(job, replica, 0)), which is kept until the replica is
// deleted.
const (
	// AnnotationReservation is the replica's reservation (JSON).
	AnnotationReservation = "cosmicac.io/reservation"
	// AnnotationDesired is what the worker wants of the replica: run,
	// replace (a restart or a drift repair replacing its VMIs), stop or
	// failed.
	AnnotationDesired = "cosmicac.io/desired"
	// AnnotationReplacing lists the UIDs of VMIs being replaced
	// (comma-separated): they are deleted, and new VMIs are created once
	// they are gone.
	AnnotationReplacing = "cosmicac.io/replacing"
	// AnnotationFailure is the reason (JSON) of a replica the worker
	// failed; its VMIs are deleted, so the objects no longer show why.
	AnnotationFailure = "cosmicac.io/failure"
	// AnnotationExitCode is the exit code of the job's command, on a
	// replica the worker stopped (exit 0) or failed (any other code)
	// because its command ended (command.go).
	AnnotationExitCode = "cosmicac.io/exit-code"
	// AnnotationStateVersion orders the worker's writes of the state
	// (Unix nanoseconds), so it knows when its informer has caught up.
	AnnotationStateVersion = "cosmicac.io/state-version"
	// JobDataKey is the carrier's data key holding the job (JSON), from
	// which the worker rebuilds VMIs it recreates.
	JobDataKey = "cosmicac-job.json"
)

// desired is the value of AnnotationDesired.
type desired string

const (
	desiredRun     desired = "run"
	desiredReplace desired = "replace"
	desiredStop    desired = "stop"
	desiredFailed  desired = "failed"
)

// replicaState is the state kept on a replica's carrier.
type replicaState struct {
	Desired     desired
	Reservation cosmic.Reservation
	Replacing   []string
	Failure     *cosmic.Reason
	// AgentReady are the UIDs of the VMIs whose agents have reported ready
	// (AnnotationAgentReady).
	AgentReady []string
	// ExitCode is the command's exit code, once it ended the replica
	// (AnnotationExitCode).
	ExitCode *int
	Version  int64
}

// holdsGPUs reports whether the replica runs (or is being replaced) on its
// reservation.
func (s replicaState) holdsGPUs() bool { return s.Desired == desiredRun || s.Desired == desiredReplace }

// stateOf reads the state on a carrier Secret; ok is false if it has none.
func stateOf(s *corev1.Secret) (replicaState, bool) {
	if s == nil {
		return replicaState{}, false
	}
	a := s.Annotations
	d := desired(a[AnnotationDesired])
	if d == "" {
		return replicaState{}, false
	}
	st := replicaState{Desired: d}
	_ = json.Unmarshal([]byte(a[AnnotationReservation]), &st.Reservation)
	if r := a[AnnotationReplacing]; r != "" {
		st.Replacing = strings.Split(r, ",")
	}
	if f := a[AnnotationFailure]; f != "" {
		var r cosmic.Reason
		if json.Unmarshal([]byte(f), &r) == nil {
			st.Failure = &r
		}
	}
	if r := a[AnnotationAgentReady]; r != "" {
		st.AgentReady = strings.Split(r, ",")
	}
	// The exit code belongs to the stop or failure its command caused; a
	// replica applied again may still carry the annotation (server-side
	// apply leaves the worker's patches alone) until its next write.
	if c, err := strconv.Atoi(a[AnnotationExitCode]); err == nil && (d == desiredStop || d == desiredFailed) {
		st.ExitCode = &c
	}
	st.Version, _ = strconv.ParseInt(a[AnnotationStateVersion], 10, 64)
	return st, true
}

// annotations is s as the carrier's annotations; a nil value removes the
// annotation (merge patch).
func (s replicaState) annotations() map[string]*string {
	res, _ := json.Marshal(s.Reservation)
	out := map[string]*string{
		AnnotationDesired:      new(string(s.Desired)),
		AnnotationReservation:  new(string(res)),
		AnnotationStateVersion: new(strconv.FormatInt(s.Version, 10)),
		AnnotationReplacing:    nil,
		AnnotationFailure:      nil,
		AnnotationAgentReady:   nil,
		AnnotationExitCode:     nil,
	}
	if s.ExitCode != nil {
		out[AnnotationExitCode] = new(strconv.Itoa(*s.ExitCode))
	}
	if len(s.AgentReady) > 0 {
		out[AnnotationAgentReady] = new(strings.Join(s.AgentReady, ","))
	}
	if len(s.Replacing) > 0 {
		out[AnnotationReplacing] = new(strings.Join(s.Replacing, ","))
	}
	if s.Failure != nil {
		f, _ := json.Marshal(s.Failure)
		out[AnnotationFailure] = new(string(f))
	}
	return out
}

// setOn writes s into a carrier about to be applied.
func (s replicaState) setOn(secret *corev1.Secret) {
	for k, v := range s.annotations() {
		if v != nil {
			secret.Annotations[k] = *v
		}
	}
}

// replicaMem is what the worker keeps in memory of one replica.
type replicaMem struct {
	// mu serializes the worker's actions on the replica (Apply, Stop,
	// Restart, Delete) with its reconciliation.
	mu sync.Mutex
	// override is the state the worker last wrote, used until its
	// informer shows the carrier at that version or later.
	override *replicaState
	// seen is the UID of each VMI (by index) the worker saw while the
	// replica runs: a seen VMI that disappears was deleted behind the
	// worker's back (drift).
	seen map[int]string
	// deleting is set by Delete; deleteJob when the whole job goes (the
	// root too).
	deleting, deleteJob bool
	// last is the report last computed.
	last *worker.ReplicaReport
	// team is the job's team, for log records.
	team string
}

// current is the replica's state: the worker's own last write until the
// informer has caught up with it, else the carrier's.
func (m *replicaMem) current(carrier *replicaState) (replicaState, bool) {
	if m.override != nil {
		if carrier != nil && carrier.Version >= m.override.Version {
			m.override = nil
			return *carrier, true
		}
		return *m.override, true
	}
	if carrier != nil {
		return *carrier, true
	}
	return replicaState{}, false
}

func sameReservation(a, b cosmic.Reservation) bool {
	return a.Rack == b.Rack && a.JobID == b.JobID && a.Replica == b.Replica && slices.EqualFunc(a.Nodes, b.Nodes, func(x, y cosmic.NodeAlloc) bool {
		return x.Node == y.Node && slices.Equal(x.GPUs, y.GPUs)
	})
}

func nodeNames(r cosmic.Reservation) []string {
	out := make([]string, len(r.Nodes))
	for i, n := range r.Nodes {
		out[i] = n.Node
	}
	return out
}
