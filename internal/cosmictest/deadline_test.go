package cosmictest

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/apiv1"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/simcluster/simapi"
	"github.com/cosmicac/cosmicac/internal/waittest"
)

// A job with a short spec.timeout runs, then ends stopped with reason
// timeout and its GPUs free; the API showed when its run would end.
func TestTimeoutStopsTheJob(t *testing.T) {
	e := NewEnv(t)
	spec := Container("short", 1)
	spec.Timeout = 2
	j := e.Create(spec)
	j = e.WaitState(j.ID, cosmic.StateRunning, cosmic.StateStopped)
	if j.Status.State == cosmic.StateRunning {
		ran := j.Status.History[len(j.Status.History)-1].At
		if want := ran.Add(2 * time.Second); !j.Status.TimeoutAt.Equal(want) {
			t.Errorf("timeoutAt %v, want %v (running since %v)", j.Status.TimeoutAt, want, ran)
		}
	}
	j = e.WaitState(j.ID, cosmic.StateStopped)
	if j.Status.Reason == nil || j.Status.Reason.Code != cosmic.ReasonTimeout {
		t.Fatalf("stopped with reason %+v, want timeout", j.Status.Reason)
	}
	if !j.Status.TimeoutAt.IsZero() {
		t.Errorf("a stopped job shows timeoutAt %v", j.Status.TimeoutAt)
	}
	if got := e.FreeGPUs(); got != 16 {
		t.Errorf("free GPUs = %d after the timeout, want 16", got)
	}
}

// With timeoutAutoRestart the job is restarted at its timeout, keeping its
// GPUs, and runs again.
func TestTimeoutAutoRestartRunsAgain(t *testing.T) {
	e := NewEnv(t)
	spec := Container("again", 1)
	spec.Timeout, spec.TimeoutAutoRestart = 2, true
	j := e.Create(spec)
	e.WaitState(j.ID, cosmic.StateRestarting)
	j = e.WaitState(j.ID, cosmic.StateRunning)
	h := j.Status.History
	i := slices.IndexFunc(h, func(c cosmic.StatusChange) bool {
		return c.State == cosmic.StateRestarting && c.Reason == cosmic.ReasonTimeout
	})
	if i < 0 {
		t.Fatalf("history %+v: want restarting with reason timeout", h)
	}
	if !slices.ContainsFunc(h[i+1:], func(c cosmic.StatusChange) bool { return c.State == cosmic.StateRunning }) {
		t.Fatalf("history %+v: not running again after the restart", h)
	}
	if got := e.FreeGPUs(); got != 15 {
		t.Errorf("free GPUs = %d while it runs again, want 15", got)
	}
}

// A replica whose agent never connects (simHoldAgent, as a VM booted from
// an image without cloud-init) fails with agent_timeout once its rack's
// agent deadline has passed, naming the step it reached; the rack's
// registration sets that deadline.
func TestAgentTimeoutOnTheSimulatedRack(t *testing.T) {
	e := NewEnv(t)
	racks, err := e.Client.ListRacks(e.Ctx)
	if err != nil || len(racks) != 1 {
		t.Fatalf("list racks: %v %v", racks, err)
	}
	r := racks[0]
	if r.AgentDeadline != 60 {
		t.Errorf("the simulated rack's agent deadline is %ds, want 60", r.AgentDeadline)
	}
	r, err = e.Client.RegisterRack(e.Ctx, apiv1.RegisterRack{ID: r.ID, Location: r.Location, GPUModel: r.GPUModel,
		WorkerKey: r.WorkerKey, WorkerAddrs: r.WorkerAddrs, AgentDeadline: 1})
	if err != nil || r.AgentDeadline != 1 {
		t.Fatalf("register the rack with a deadline of 1s: %+v %v", r, err)
	}
	e.Fault(simapi.MethodHoldAgent, simapi.ReplicaParams{})
	j := e.Create(Container("held", 1))
	j = e.WaitState(j.ID, cosmic.StateFailed)
	if j.Status.Reason == nil || j.Status.Reason.Code != cosmic.ReasonAgentTimeout {
		t.Fatalf("failed with reason %+v, want agent_timeout", j.Status.Reason)
	}
	if msg := j.Status.Reason.Message; !strings.Contains(msg, `"boot VMI"`) {
		t.Errorf("reason message %q does not name the boot step", msg)
	}
	waittest.Within(t, 10*time.Second, func() bool { return e.FreeGPUs() == 16 }, "the held replica's GPUs to be free")
}
