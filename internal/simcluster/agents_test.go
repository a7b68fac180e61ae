package simcluster

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/joblog"
	"github.com/cosmicac/cosmicac/internal/worker"
)

// fakeAgents is an AgentRunner whose agents the test drives.
type fakeAgents struct {
	mu     sync.Mutex
	agents []*fakeAgent
	// exits gives each agent an Exited channel, closed by the test: the
	// rack then waits for it at a kill.
	exits bool
}

type fakeAgent struct {
	job     string
	replica int
	id      *fabric.Identity
	ready   chan struct{}
	done    chan CommandOutcome
	stopped atomic.Bool
	exited  chan struct{}
	boot    Boot
}

func (f *fakeAgents) Start(_ context.Context, job cosmic.Job, replica int, id *fabric.Identity, boot Boot) AgentHandle {
	a := &fakeAgent{job: job.ID, replica: replica, id: id, ready: make(chan struct{}), done: make(chan CommandOutcome, 1), boot: boot}
	f.mu.Lock()
	f.agents = append(f.agents, a)
	h := AgentHandle{Ready: a.ready, Done: a.done, Stop: func() { a.stopped.Store(true) }}
	if f.exits {
		a.exited = make(chan struct{})
		h.Exited = a.exited
	}
	f.mu.Unlock()
	return h
}

func (f *fakeAgents) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.agents)
}

func (f *fakeAgents) get(i int) *fakeAgent {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.agents[i]
}

func startWithAgents(t *testing.T) (*env, *fakeAgents) {
	f := &fakeAgents{}
	return startAgents(t, f), f
}

func exitCode(n int) *int { return &n }

// runWithoutAgent applies a managed-inference job, which gets no agent
// (the cluster has no InferenceRunner), and waits for it to run: a whole
// lifecycle's steps pass meanwhile.
func (e *env) runWithoutAgent(t *testing.T, id string, r cosmic.Reservation) {
	t.Helper()
	j := testJob(id)
	j.Spec.Type = cosmic.TypeManagedInference
	if err := e.c.Apply(context.Background(), worker.ApplyParams{Job: j, Reservations: []cosmic.Reservation{r}}); err != nil {
		t.Fatal(err)
	}
	e.waitState(t, id, 0, cosmic.StateRunning)
}

func TestAgentGatesRunning(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, f := startWithAgents(t)
		e.apply(t, jobA, resv(jobA, 0, on(0, 0)))
		waitFor(t, "the agent to start", func() bool { return f.count() == 1 })
		a := f.get(0)
		if a.job != jobA || a.replica != 0 {
			t.Fatalf("agent of %s/%d", a.job, a.replica)
		}
		// A job that is not a gpu-container job gets no agent, and runs:
		// its whole lifecycle, begun after the agent started, gives the
		// replica the steps to go running had it not waited for its agent.
		e.runWithoutAgent(t, jobB, resv(jobB, 0, on(0, 1)))
		if n := f.count(); n != 1 {
			t.Fatalf("%d agents, want 1", n)
		}
		if !slices.ContainsFunc(e.logs.Job(jobA), func(r joblog.Record) bool {
			return r.Step == "agent" && strings.HasPrefix(r.Line, "waiting for the instance agent")
		}) {
			t.Fatalf("records %+v: want one saying the replica waits for its agent", e.logs.Job(jobA))
		}
		if st := e.rep.states(jobA, 0); slices.Contains(st, cosmic.StateRunning) {
			t.Fatalf("running before the agent is ready: %v", st)
		}
		close(a.ready)
		got := e.waitState(t, jobA, 0, cosmic.StateRunning)
		if a.stopped.Load() {
			t.Fatal("the running replica's agent was stopped")
		}
		// The replica reports the key of the identity its agent was given.
		if a.id == nil || !slices.Equal(got.AgentKeys, []string{a.id.PublicKey().String()}) {
			t.Fatalf("agent keys %v, want the agent's", got.AgentKeys)
		}
	})
}

func TestCommandEndStopsOrFailsReplica(t *testing.T) {
	e, f := startWithAgents(t)
	// Exit 0 before the agent is even ready: running is reported first,
	// then stopped with exit code 0, and the GPUs are free.
	e.apply(t, jobA, resv(jobA, 0, on(0, 0, 1)))
	waitFor(t, "the agent to start", func() bool { return f.count() == 1 })
	a := f.get(0)
	a.done <- CommandOutcome{State: cosmic.StateStopped, ExitCode: exitCode(0)}
	close(a.ready)
	got := e.waitState(t, jobA, 0, cosmic.StateStopped)
	if got.ExitCode == nil || *got.ExitCode != 0 || got.Reason != nil || len(got.Nodes) != 0 {
		t.Fatalf("stopped report %+v: want exit code 0, no reason, no nodes", got)
	}
	if st := e.rep.states(jobA, 0); !slices.Equal(st[len(st)-2:], []cosmic.State{cosmic.StateRunning, cosmic.StateStopped}) {
		t.Fatalf("states %v: want running, then stopped", st)
	}
	waitFor(t, "the agent to stop", a.stopped.Load)
	// The GPUs are free: another job takes them.
	e.apply(t, jobB, resv(jobB, 0, on(0, 0, 1)))
	waitFor(t, "job B's agent", func() bool { return f.count() == 2 })
	close(f.get(1).ready)
	e.waitState(t, jobB, 0, cosmic.StateRunning)

	// A failing command fails the replica with its reason and exit code.
	b := f.get(1)
	r := cosmic.NewReason(cosmic.ReasonCommandFailed, "exit code 3")
	b.done <- CommandOutcome{State: cosmic.StateFailed, Reason: &r, ExitCode: exitCode(3)}
	got = e.waitState(t, jobB, 0, cosmic.StateFailed)
	if got.ExitCode == nil || *got.ExitCode != 3 || reasonCode(got) != cosmic.ReasonCommandFailed {
		t.Fatalf("failed report %+v: want exit code 3, command_failed", got)
	}

	// Applied again, the replica boots a new agent and reports no exit code.
	e.apply(t, jobA, resv(jobA, 0, on(1, 0)))
	waitFor(t, "job A's new agent", func() bool { return f.count() == 3 })
	close(f.get(2).ready)
	if got := e.waitState(t, jobA, 0, cosmic.StateRunning); got.ExitCode != nil {
		t.Fatalf("running again with exit code %d", *got.ExitCode)
	}
}

func TestKilledReplicaIgnoresItsAgentsEnd(t *testing.T) {
	synctest.Test(t, testKilledReplicaIgnoresItsAgentsEnd)
}

func testKilledReplicaIgnoresItsAgentsEnd(t *testing.T) {
	e, f := startWithAgents(t)
	e.apply(t, jobA, resv(jobA, 0, on(0, 0)))
	waitFor(t, "the agent to start", func() bool { return f.count() == 1 })
	a := f.get(0)
	close(a.ready)
	e.waitState(t, jobA, 0, cosmic.StateRunning)
	if err := e.c.Stop(context.Background(), worker.ReplicaRef{JobID: jobA, Replica: worker.AllReplicas}); err != nil {
		t.Fatal(err)
	}
	if !a.stopped.Load() {
		t.Fatal("kill did not stop the agent")
	}
	// The agent's command ends on SIGTERM: no news. Another job's whole
	// lifecycle, begun once the cluster has taken the outcome (the bubble
	// is idle), gives the replica the steps to end with it, had the
	// cluster not ignored it.
	a.done <- CommandOutcome{State: cosmic.StateFailed, ExitCode: exitCode(143)}
	synctest.Wait()
	e.runWithoutAgent(t, jobB, resv(jobB, 0, on(1, 0)))
	got := e.waitState(t, jobA, 0, cosmic.StateStopped)
	if got.ExitCode != nil || reasonCode(got) != cosmic.ReasonKilled {
		t.Fatalf("killed replica %+v: want killed, no exit code", got)
	}
	// A restart stops the agent and boots a new one.
	e.apply(t, jobA, resv(jobA, 0, on(0, 0)))
	waitFor(t, "a new agent", func() bool { return f.count() == 2 })
	close(f.get(1).ready)
	e.waitState(t, jobA, 0, cosmic.StateRunning)
	if err := e.c.Restart(context.Background(), worker.ReplicaRef{JobID: jobA, Replica: 0}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the restarted replica's agent", func() bool { return f.count() == 3 })
	if !f.get(1).stopped.Load() {
		t.Fatal("restart did not stop the old agent")
	}
}

// TestHeldAgentNeverStarts: simHoldAgent is a VM whose agent never
// connects, so nothing of the replica runs: the next replica's agent is
// never started (a started one would serve requests, and have them cut
// when the ork's deadline fails the replica), while its key is reported
// from the scheduling on, as a real worker's is; and holding a replica
// whose agent started, not ready yet, stops that agent.
func TestHeldAgentNeverStarts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, f := startWithAgents(t)
		if _, err := e.c.HoldAgent("", 0); err != nil {
			t.Fatal(err)
		}
		e.apply(t, jobA, resv(jobA, 0, on(0, 0)))
		waitFor(t, "the held agent's record", func() bool {
			return slices.ContainsFunc(e.logs.Job(jobA), func(r joblog.Record) bool {
				return r.Step == "agent" && strings.Contains(r.Line, "does not connect")
			})
		})
		synctest.Wait()
		if n := f.count(); n != 0 {
			t.Fatalf("%d agents started for a held replica", n)
		}
		got, _ := e.rep.Last(jobA, 0)
		if got.State == cosmic.StateRunning || len(got.AgentKeys) != 1 {
			t.Fatalf("held replica reported %+v: want it starting, with its agent's key", got)
		}

		e.apply(t, jobB, resv(jobB, 0, on(0, 1)))
		waitFor(t, "job B's agent to start", func() bool { return f.count() == 1 })
		if _, err := e.c.HoldAgent(jobB, 0); err != nil {
			t.Fatal(err)
		}
		if a := f.get(0); a.job != jobB || !a.stopped.Load() {
			t.Fatalf("agent of %s/%d: stopped %v, want job B's stopped by the hold", a.job, a.replica, a.stopped.Load())
		}
	})
}

// TestKillPowersOffUntilTheAgentEnds: a kill of a replica whose agent
// pushes the job's RW volume keeps the replica running (its VMIs, its
// agent's key) until the agent has ended, its GPUs released at once as
// the ork releases them; then the replica is stopped. An agent that
// never ends is given StopGrace, then the replica is stopped all the
// same, its log saying so. A job with nothing to push stops at once.
func TestKillPowersOffUntilTheAgentEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeAgents{exits: true}
		e := startAgents(t, f)
		rw := []cosmic.Volume{{MountPath: "/out", Permission: "RW", Source: cosmic.VolumeSource{DataStore: &cosmic.DataStoreSource{Alias: "s3", Container: "bucket"}}}}
		run := func(id string, i int, r cosmic.Reservation) *fakeAgent {
			j := testJob(id)
			if id != jobC {
				j.Spec.Volumes = rw
			}
			if err := e.c.Apply(context.Background(), worker.ApplyParams{Job: j, Reservations: []cosmic.Reservation{r}}); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the agent to start", func() bool { return f.count() == i+1 })
			a := f.get(i)
			close(a.ready)
			e.waitState(t, id, 0, cosmic.StateRunning)
			return a
		}
		a := run(jobA, 0, resv(jobA, 0, on(0, 0)))
		if err := e.c.Stop(context.Background(), worker.ReplicaRef{JobID: jobA, Replica: 0}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the agent to be told to stop", a.stopped.Load)
		time.Sleep(20 * step)
		synctest.Wait()
		if st := e.rep.states(jobA, 0); st[len(st)-1] != cosmic.StateRunning {
			t.Fatalf("states %v before the agent ended: want still running", st)
		}
		// The GPU stays claimed until the VM is off, as a rack that passes
		// it through must (the ork keeps it reserved until then): a job
		// placed on it does not schedule.
		d := testJob(jobD)
		if err := e.c.Apply(context.Background(), worker.ApplyParams{Job: d, Reservations: []cosmic.Reservation{resv(jobD, 0, on(0, 0))}}); err != nil {
			t.Fatal(err)
		}
		if got := e.waitState(t, jobD, 0, cosmic.StateFailed); got.Reason == nil || got.Reason.Code != cosmic.ReasonVMIUnschedulable || !strings.Contains(got.Reason.Message, "held by replica 0 of job "+jobA) {
			t.Fatalf("a job placed on the GPU of a VM powering off: %+v, want unschedulable, held by %s", got, jobA)
		}
		// Another GPU is free: a job there runs, with nothing to push, and
		// stops at once when killed.
		c := run(jobC, 1, resv(jobC, 0, on(0, 2)))
		if err := e.c.Stop(context.Background(), worker.ReplicaRef{JobID: jobC, Replica: 0}); err != nil {
			t.Fatal(err)
		}
		e.waitState(t, jobC, 0, cosmic.StateStopped)
		if !c.stopped.Load() {
			t.Fatal("the stopped replica's agent was not told to stop")
		}
		close(a.exited)
		if got := e.waitState(t, jobA, 0, cosmic.StateStopped); len(got.Nodes) != 0 {
			t.Fatalf("stopped report %+v: want no nodes", got)
		}

		b := run(jobB, 2, resv(jobB, 0, on(0, 1)))
		if err := e.c.Stop(context.Background(), worker.ReplicaRef{JobID: jobB, Replica: 0}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the agent to be told to stop", b.stopped.Load)
		time.Sleep(DefaultStopGrace + 2*step)
		e.waitState(t, jobB, 0, cosmic.StateStopped)
		if !slices.ContainsFunc(e.logs.Job(jobB), func(r joblog.Record) bool {
			return r.Step == "stop" && strings.Contains(r.Line, "did not power off")
		}) {
			t.Errorf("records %+v: want one saying the VM did not power off in time", e.logs.Job(jobB))
		}
	})
}

// TestAgentProgressWhileStarting: what a starting replica's agent says it
// does (its volumes coming in) is the replica's progress until it runs.
func TestAgentProgressWhileStarting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, f := startWithAgents(t)
		e.apply(t, jobA, resv(jobA, 0, on(0, 0)))
		waitFor(t, "the agent to start", func() bool { return f.count() == 1 })
		a := f.get(0)
		p := &cosmic.Progress{Step: cosmic.StepCopyVolumes, Percent: 40, Bytes: 40, TotalBytes: 100, Objects: 1, TotalObjects: 3}
		a.boot.Progress(jobA, 0, p)
		waitFor(t, "the agent's progress in a report", func() bool {
			h := e.rep.History(jobA, 0)
			got := h[len(h)-1]
			return got.State == cosmic.StateStarting && got.Progress != nil && *got.Progress == *p
		})
		close(a.ready)
		if got := e.waitState(t, jobA, 0, cosmic.StateRunning); got.Progress != nil {
			t.Fatalf("running with progress %+v", got.Progress)
		}
	})
}
