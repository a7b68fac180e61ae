package cosmic

import (
	"strings"
	"testing"
	"time"
)

// The clock of spec.timeout starts when a job runs and ends with its run:
// unknown and degraded keep it, a restart or a stop ends it, and the next
// run starts it afresh.
func TestTimeoutClock(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 19, 0, 0, 0, time.UTC)
	j := NewJob("j", "u", "t", Spec{Type: TypeGPUContainer, Timeout: 60}, t0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	steps := []struct {
		to   State
		at   time.Duration
		want time.Duration // -1: none
	}{
		{StateQueued, 0, -1},
		{StatePending, time.Second, -1},
		{StateStarting, 2 * time.Second, -1},
		{StateRunning, 10 * time.Second, 70 * time.Second},
		{StateUnknown, 20 * time.Second, 70 * time.Second},
		{StateRunning, 30 * time.Second, 70 * time.Second},
		{StateDegraded, 40 * time.Second, 70 * time.Second},
		{StateRestarting, 70 * time.Second, -1},
		{StateRunning, 80 * time.Second, 140 * time.Second},
		{StateStopped, 140 * time.Second, -1},
		{StateQueued, 200 * time.Second, -1},
	}
	for _, s := range steps {
		if err := j.SetState(s.to, nil, at(s.at)); err != nil {
			t.Fatal(err)
		}
		want := time.Time{}
		if s.want >= 0 {
			want = at(s.want)
		}
		if !j.Status.TimeoutAt.Equal(want) {
			t.Fatalf("after %s at +%s: timeoutAt %v, want %v", s.to, s.at, j.Status.TimeoutAt, want)
		}
	}
	none := NewJob("n", "u", "t", Spec{Type: TypeGPUContainer}, t0)
	for _, s := range []State{StateQueued, StatePending, StateRunning} {
		if err := none.SetState(s, nil, t0); err != nil {
			t.Fatal(err)
		}
	}
	if !none.Status.TimeoutAt.IsZero() {
		t.Fatalf("a job without a timeout has timeoutAt %v", none.Status.TimeoutAt)
	}
}

// An agent deadline holds while its replica starts (or is out of sight)
// and goes once it runs or holds no GPUs; the job's is the earliest.
func TestSyncAgentDeadlines(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 19, 0, 0, 0, time.UTC)
	p := &Progress{Step: "boot VMI", Percent: 100}
	j := Job{Status: Status{Replicas: []ReplicaStatus{
		{Index: 0, State: StateStarting, AgentDeadline: t0.Add(2 * time.Minute), Progress: p},
		{Index: 1, State: StateUnknown, AgentDeadline: t0.Add(time.Minute)},
		{Index: 2, State: StateRunning, AgentDeadline: t0, Progress: p},
		{Index: 3, State: StateFailed, AgentDeadline: t0},
	}}}
	j.SyncAgentDeadlines()
	if !j.Status.AgentDeadline.Equal(t0.Add(time.Minute)) {
		t.Fatalf("job's agent deadline %v, want %v", j.Status.AgentDeadline, t0.Add(time.Minute))
	}
	r := j.Status.Replicas
	if r[0].AgentDeadline.IsZero() || r[0].Progress == nil || r[1].AgentDeadline.IsZero() {
		t.Fatalf("a starting or unknown replica lost its deadline: %+v", r[:2])
	}
	if !r[2].AgentDeadline.IsZero() || r[2].Progress != nil || !r[3].AgentDeadline.IsZero() {
		t.Fatalf("a running or failed replica keeps its deadline: %+v", r[2:])
	}
}

func TestRackAgentDeadline(t *testing.T) {
	r := Rack{ID: "r1", Type: RackTypeServer, Location: "us", GPUModel: "H100", WorkerKey: strings.Repeat("ab", 32)}
	if err := r.Validate(); err != nil || r.AgentDeadlineOrDefault() != DefaultAgentDeadline {
		t.Fatalf("no deadline: %v, %s", err, r.AgentDeadlineOrDefault())
	}
	r.AgentDeadline = 90
	if err := r.Validate(); err != nil || r.AgentDeadlineOrDefault() != 90*time.Second {
		t.Fatalf("90 s: %v, %s", err, r.AgentDeadlineOrDefault())
	}
	for _, bad := range []int{-1, MaxAgentDeadline + 1} {
		r.AgentDeadline = bad
		if fields := FieldErrors(r.Validate()); len(fields) != 1 || fields[0].Field != "agentDeadline" {
			t.Errorf("agentDeadline %d: %v, want one error on agentDeadline", bad, fields)
		}
	}
}
