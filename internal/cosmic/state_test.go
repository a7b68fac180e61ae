package cosmic

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// legal is the state machine written out again, by hand, as from → to
// pairs; the test checks every one of the 11 × 11 pairs against it.
var legal = map[[2]State]bool{
	{StateCreating, StateQueued}: true, {StateCreating, StateFailed}: true, {StateCreating, StateStopped}: true,
	{StateCreating, StateDeleting}: true,

	{StateQueued, StatePending}: true, {StateQueued, StateFailed}: true, {StateQueued, StateStopped}: true,
	{StateQueued, StateDeleting}: true,

	{StatePending, StateQueued}: true, {StatePending, StateStarting}: true, {StatePending, StateRunning}: true,
	{StatePending, StateDegraded}: true, {StatePending, StateRestarting}: true, {StatePending, StateFailed}: true,
	{StatePending, StateUnknown}: true, {StatePending, StateStopped}: true, {StatePending, StateDeleting}: true,

	{StateStarting, StateRunning}: true, {StateStarting, StateDegraded}: true, {StateStarting, StateRestarting}: true,
	{StateStarting, StateFailed}: true, {StateStarting, StateUnknown}: true, {StateStarting, StateStopped}: true,
	{StateStarting, StateDeleting}: true,

	{StateRunning, StateDegraded}: true, {StateRunning, StateRestarting}: true, {StateRunning, StateFailed}: true,
	{StateRunning, StateUnknown}: true, {StateRunning, StateStopped}: true, {StateRunning, StateDeleting}: true,

	{StateDegraded, StateStarting}: true, {StateDegraded, StateRunning}: true, {StateDegraded, StateRestarting}: true,
	{StateDegraded, StateFailed}: true, {StateDegraded, StateUnknown}: true, {StateDegraded, StateStopped}: true,
	{StateDegraded, StateDeleting}: true,

	{StateRestarting, StatePending}: true, {StateRestarting, StateStarting}: true, {StateRestarting, StateRunning}: true,
	{StateRestarting, StateDegraded}: true, {StateRestarting, StateFailed}: true, {StateRestarting, StateUnknown}: true,
	{StateRestarting, StateStopped}: true, {StateRestarting, StateDeleting}: true,

	{StateUnknown, StatePending}: true, {StateUnknown, StateStarting}: true, {StateUnknown, StateRunning}: true,
	{StateUnknown, StateDegraded}: true, {StateUnknown, StateRestarting}: true, {StateUnknown, StateFailed}: true,
	{StateUnknown, StateStopped}: true, {StateUnknown, StateDeleting}: true,

	{StateFailed, StateQueued}: true, {StateFailed, StateDeleting}: true,

	{StateStopped, StateQueued}: true, {StateStopped, StateDeleting}: true,
}

func TestTransitionsExhaustive(t *testing.T) {
	all := append(slices.Clone(States), "", "bogus")
	for _, from := range all {
		for _, to := range all {
			want := legal[[2]State{from, to}]
			if got := CanTransition(from, to); got != want {
				t.Errorf("CanTransition(%q, %q) = %v, want %v", from, to, got, want)
			}
		}
	}
	if len(transitions) != len(States) {
		t.Errorf("transition table has %d states, States lists %d", len(transitions), len(States))
	}
}

func TestStateProperties(t *testing.T) {
	holds := map[State]bool{StatePending: true, StateStarting: true, StateRunning: true, StateDegraded: true,
		StateRestarting: true, StateUnknown: true, StateDeleting: true}
	for _, s := range States {
		if !s.Valid() {
			t.Errorf("%s not Valid", s)
		}
		if s.HoldsGPUs() != holds[s] {
			t.Errorf("%s.HoldsGPUs() = %v", s, s.HoldsGPUs())
		}
		if s.Terminal() != (s == StateFailed || s == StateStopped) {
			t.Errorf("%s.Terminal() = %v", s, s.Terminal())
		}
		runs := s == StateStarting || s == StateRunning || s == StateDegraded || s == StateRestarting || s == StateUnknown
		if s.RunsVMs() != runs {
			t.Errorf("%s.RunsVMs() = %v", s, s.RunsVMs())
		}
		// A job whose VMIs may run holds their GPUs.
		if s.RunsVMs() && !s.HoldsGPUs() {
			t.Errorf("%s runs VMs without holding GPUs", s)
		}
		// Every state but deleting can be left, and every state can be deleted.
		if s != StateDeleting && (len(Next(s)) == 0 || !CanTransition(s, StateDeleting)) {
			t.Errorf("%s: cannot be left or deleted", s)
		}
		// Every state is reachable from creating.
		if s != StateCreating && !reachable(StateCreating, s) {
			t.Errorf("%s is not reachable from creating", s)
		}
	}
	if State("bogus").Valid() || State("").Valid() {
		t.Error("bogus state Valid")
	}
	// Moving from a state that releases GPUs to one that holds them must go
	// through queued or pending (where the ork reserves).
	for pair := range legal {
		from, to := pair[0], pair[1]
		if !from.HoldsGPUs() && to.HoldsGPUs() && to != StatePending && to != StateDeleting {
			t.Errorf("%s → %s takes GPUs without a reservation step", from, to)
		}
	}
}

func reachable(from, to State) bool {
	seen := map[State]bool{from: true}
	queue := []State{from}
	for len(queue) > 0 {
		s := queue[0]
		queue = queue[1:]
		for _, n := range transitions[s] {
			if n == to {
				return true
			}
			if !seen[n] {
				seen[n] = true
				queue = append(queue, n)
			}
		}
	}
	return false
}

func TestSetState(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	at := func(i int) time.Time { return t0.Add(time.Duration(i) * time.Second) }
	j := NewJob("id-1", "alice", "ml", containerSpec(), t0)
	if j.Status.State != StateCreating || len(j.Status.History) != 1 || !j.UpdatedAt.Equal(t0) {
		t.Fatalf("NewJob status = %+v", j.Status)
	}
	must := func(to State, r *Reason, now time.Time) {
		t.Helper()
		if err := j.SetState(to, r, now); err != nil {
			t.Fatalf("SetState(%s) = %v", to, err)
		}
	}
	wait := NewReason(ReasonNoCapacity, "8 × GH100 in us")
	must(StateQueued, &wait, at(1))
	j.Status.QueuePosition, j.Status.WaitingFor = 3, "8 × GH100 in us"
	must(StateQueued, &wait, at(2)) // same state, same reason: no history entry
	must(StatePending, nil, at(3))
	if j.Status.QueuePosition != 0 || j.Status.WaitingFor != "" || j.Status.Reason != nil || j.Status.Message != "" {
		t.Errorf("leaving queued kept %+v", j.Status)
	}
	must(StateStarting, nil, at(4))
	j.Status.Progress = &Progress{Step: "import", Percent: 50}
	must(StateRunning, nil, at(5))
	if j.Status.Progress != nil {
		t.Error("leaving starting kept progress")
	}
	crash := NewReason(ReasonVMICrashed, "")
	must(StateFailed, &crash, at(6))
	if j.Status.Reason == nil || j.Status.Reason.Code != ReasonVMICrashed || j.Status.Message != crash.Message {
		t.Errorf("failed status = %+v", j.Status)
	}
	err := j.SetState(StateRunning, nil, at(7))
	if !errors.Is(err, ErrIllegalTransition) {
		t.Fatalf("failed → running = %v, want ErrIllegalTransition", err)
	}
	if j.Status.State != StateFailed || !j.UpdatedAt.Equal(at(6)) {
		t.Error("illegal transition changed the job")
	}
	want := []StatusChange{
		{State: StateCreating, At: at(0)},
		{State: StateQueued, Reason: ReasonNoCapacity, Message: wait.Message, At: at(1)},
		{State: StatePending, At: at(3)},
		{State: StateStarting, At: at(4)},
		{State: StateRunning, At: at(5)},
		{State: StateFailed, Reason: ReasonVMICrashed, Message: crash.Message, At: at(6)},
	}
	if diff := cmp.Diff(want, j.Status.History); diff != "" {
		t.Errorf("history (-want +got):\n%s", diff)
	}
	// A new reason on the same state is recorded.
	other := NewReason(ReasonTimeout, "")
	must(StateFailed, &other, at(8))
	if n := len(j.Status.History); n != 7 || j.Status.History[6].Reason != ReasonTimeout {
		t.Errorf("history after reason change: %+v", j.Status.History)
	}
	// A job without state may only start at creating.
	var empty Job
	if err := empty.SetState(StateRunning, nil, t0); !errors.Is(err, ErrIllegalTransition) {
		t.Errorf("\"\" → running = %v", err)
	}
}

func TestAggregateState(t *testing.T) {
	const (
		C  = StateCreating
		Q  = StateQueued
		P  = StatePending
		S  = StateStarting
		R  = StateRunning
		D  = StateDegraded
		RS = StateRestarting
		F  = StateFailed
		U  = StateUnknown
		X  = StateStopped
		DL = StateDeleting
	)
	tests := []struct {
		name     string
		replicas []State
		single   bool
		want     State
	}{
		{"no replicas", nil, false, U},
		{"single running", []State{R}, true, R},
		{"single failed", []State{F}, true, F},
		{"single starting", []State{S}, true, S},
		{"all running", []State{R, R, R}, false, R},
		{"all failed", []State{F, F}, false, F},
		{"all pending", []State{P, P}, false, P},
		{"one failed one running", []State{F, R}, false, D},
		{"one failed one starting", []State{S, F}, false, D},
		{"one failed one pending", []State{F, P}, false, D},
		{"one failed one queued", []State{F, Q}, false, D},
		{"one failed one restarting", []State{F, RS}, false, D},
		{"failed running unknown", []State{F, R, U}, false, D},
		{"failed and unknown only", []State{F, U}, false, U},
		{"failed counted single", []State{F, R}, true, F},
		{"any restarting", []State{R, RS, R}, false, RS},
		{"unknown beats restarting", []State{RS, U}, false, U},
		{"unknown with running", []State{R, U}, false, U},
		{"degraded replica", []State{R, D}, false, D},
		{"running and starting", []State{R, S}, false, S},
		{"running and pending", []State{R, P, S}, false, P},
		{"queued and creating", []State{Q, C}, false, C},
		{"stopped left out", []State{X, R}, false, R},
		{"failed and stopped", []State{X, F}, false, F},
		{"all stopped", []State{X, X}, false, X},
		{"stopped and deleting", []State{X, DL}, false, DL},
		{"deleting left out", []State{DL, S}, false, S},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := AggregateState(tt.replicas, tt.single); got != tt.want {
				t.Errorf("AggregateState(%v, %v) = %s, want %s", tt.replicas, tt.single, got, tt.want)
			}
		})
	}
}

// TestReplicaActionAllowed: a managed-inference replica is restarted or
// deleted on its own only while queued, pending, starting or failed (a
// replica past the status list is queued); a GPU container job's never.
func TestReplicaActionAllowed(t *testing.T) {
	inf := Job{ID: "j", Spec: Spec{Type: TypeManagedInference}}
	for _, s := range States {
		j := inf
		j.Status.Replicas = []ReplicaStatus{{State: s}}
		err := j.ReplicaActionAllowed(0, "restarted")
		want := s == StateQueued || s == StatePending || s == StateStarting || s == StateFailed
		if (err == nil) != want {
			t.Errorf("replica %s: %v, want allowed %v", s, err, want)
		}
		if err != nil && (!errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "replica 0 of job j is "+string(s)+": a replica can be restarted")) {
			t.Errorf("replica %s: %v", s, err)
		}
	}
	if err := inf.ReplicaActionAllowed(3, "deleted"); err != nil {
		t.Errorf("a replica not yet listed is queued: %v", err)
	}
	gc := Job{ID: "g", Spec: Spec{Type: TypeGPUContainer}, Status: Status{Replicas: []ReplicaStatus{{State: StateFailed}}}}
	if err := gc.ReplicaActionAllowed(0, "deleted"); !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "only a managed-inference job's replicas can be deleted") {
		t.Errorf("a gpu-container replica: %v", err)
	}
}

// TestActions: the actions each state allows, one row per state, and that
// they agree with KillAllowed, RestartAllowed and DeleteAllowed (which the
// ork enforces): an action answered is never refused.
func TestActions(t *testing.T) {
	want := map[State][]Action{
		StateCreating:   {ActionKill, ActionDelete},
		StateQueued:     {ActionKill, ActionDelete},
		StatePending:    {ActionRestart, ActionKill, ActionDelete},
		StateStarting:   {ActionRestart, ActionKill, ActionForceDelete},
		StateRunning:    {ActionRestart, ActionKill, ActionForceDelete},
		StateDegraded:   {ActionRestart, ActionKill, ActionForceDelete},
		StateRestarting: {ActionRestart, ActionKill, ActionForceDelete},
		StateUnknown:    {ActionRestart, ActionKill, ActionForceDelete},
		StateStopped:    {ActionRestart, ActionDelete},
		StateFailed:     {ActionRestart, ActionDelete},
		StateDeleting:   {},
	}
	for _, s := range States {
		w, ok := want[s]
		if !ok {
			t.Errorf("state %s has no row", s)
			continue
		}
		j := Job{ID: "j", Status: Status{State: s}}
		got := j.Actions()
		if !slices.Equal(got, w) {
			t.Errorf("%s: actions %v, want %v", s, got, w)
		}
		for _, a := range got {
			var err error
			switch a {
			case ActionRestart:
				err = j.RestartAllowed()
			case ActionKill:
				err = j.KillAllowed()
			case ActionDelete:
				err = j.DeleteAllowed(false)
			case ActionForceDelete:
				err = j.DeleteAllowed(true)
			}
			if err != nil {
				t.Errorf("%s: %s is answered but refused: %v", s, a, err)
			}
		}
	}
	// A replica's: restart and delete while ReplicaActionAllowed, in a job
	// that may be restarted.
	inf := Job{ID: "j", Spec: Spec{Type: TypeManagedInference}, Status: Status{State: StateDegraded,
		Replicas: []ReplicaStatus{{Index: 0, State: StateRunning}, {Index: 1, State: StateFailed}}}}
	if got := inf.ReplicaActions(0); len(got) != 0 {
		t.Errorf("a running replica: %v", got)
	}
	if got := inf.ReplicaActions(1); !slices.Equal(got, []Action{ActionRestart, ActionDelete}) {
		t.Errorf("a failed replica: %v", got)
	}
	inf.Status.State = StateDeleting
	if got := inf.ReplicaActions(1); len(got) != 0 {
		t.Errorf("a failed replica of a job being deleted: %v", got)
	}
}
