package ork_test

import (
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/ork/orkapi"
	"github.com/cosmicac/cosmicac/internal/worker"
)

// startingAt is the report of w seeing the replica starting at step.
func startingAt(w *fakeWorker, job string, replica int, step string, percent int) worker.Report {
	rep := w.observe(job, replica, cosmic.StateStarting)
	rep.Jobs[0].Replicas[0].Progress = &cosmic.Progress{Step: step, Percent: percent}
	return rep
}

// wantReason fails unless the job's reason is code and its message holds
// every one of parts.
func wantReason(t *testing.T, j cosmic.Job, code cosmic.ReasonCode, parts ...string) {
	t.Helper()
	if j.Status.Reason == nil || j.Status.Reason.Code != code {
		t.Fatalf("job %s is %s with reason %+v, want %s", j.ID, j.Status.State, j.Status.Reason, code)
	}
	for _, p := range parts {
		if !strings.Contains(j.Status.Reason.Message, p) {
			t.Fatalf("reason message %q lacks %q", j.Status.Reason.Message, p)
		}
	}
}

// A replica whose agent has not connected within its rack's agent deadline
// of its placement fails with agent_timeout, naming the last step it
// reached; its worker stops its VMIs and its GPUs are released. One that
// runs in time has no deadline left. An ork that restarts in between
// enforces the deadline from the stored status.
func TestAgentDeadline(t *testing.T) {
	for name, restart := range map[string]bool{"one ork": false, "the ork restarted meanwhile": true} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := newWorker(t, "r1", 8)
				e := newEnv(t, w)
				placed := time.Now()
				j := e.create(2)
				late, ok := e.create(1), e.create(1)
				got := e.wantState(j.ID, cosmic.StatePending, cosmic.StatePending)
				want := placed.Add(cosmic.DefaultAgentDeadline)
				if !got.Status.AgentDeadline.Equal(want) || !got.Status.Replicas[0].AgentDeadline.Equal(want) {
					t.Fatalf("agent deadline %v (replica %v), want %v", got.Status.AgentDeadline, got.Status.Replicas[0].AgentDeadline, want)
				}
				e.push(w, startingAt(w, j.ID, 0, "boot VMI", 100))
				e.push(w, w.observe(ok.ID, 0, cosmic.StateRunning))
				if got := e.wantState(ok.ID, cosmic.StateRunning, cosmic.StateRunning); !got.Status.AgentDeadline.IsZero() {
					t.Fatalf("a running job keeps an agent deadline: %v", got.Status.AgentDeadline)
				}
				if restart {
					e.restart()
				}

				time.Sleep(cosmic.DefaultAgentDeadline - 5*time.Second)
				synctest.Wait()
				e.wantState(j.ID, cosmic.StateStarting, cosmic.StateStarting)
				wantCalls(t, w, "stop "+j.ID+"/0", 0)

				time.Sleep(5*time.Second + heartbeat)
				synctest.Wait()
				got = e.wantState(j.ID, cosmic.StateFailed, cosmic.StateFailed)
				wantReason(t, got, cosmic.ReasonAgentTimeout, "replica 0", "10m0s", `"boot VMI" (100%)`)
				wantCalls(t, w, "stop "+j.ID+"/0", 1)
				wantHeld(t, e, j.ID, nil)
				got = e.wantState(late.ID, cosmic.StateFailed, cosmic.StateFailed)
				wantReason(t, got, cosmic.ReasonAgentTimeout, "no step reported (the replica stayed pending)")
				e.wantState(ok.ID, cosmic.StateRunning, cosmic.StateRunning)
				e.checkBooks()

				// The failure is final: more heartbeats stop nothing more.
				e.heartbeats(3)
				wantCalls(t, w, "stop "+j.ID+"/0", 1)
				e.checkBooks()
			})
		})
	}
}

// A rack's agent deadline is its registration's; a replica restarted in
// place gets it again from its restart.
func TestAgentDeadlineOfTheRack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorker(t, "r1", 8)
		e := newEnv(t, w)
		if _, err := e.o.RegisterRack(e.ctx, orkapi.RegisterRackParams{Rack: cosmic.Rack{ID: "r1", Location: "eu", GPUModel: "H100",
			WorkerKey: w.key.String(), AgentDeadline: 60}}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		j := e.create(1)
		e.push(w, w.observe(j.ID, 0, cosmic.StateRunning))
		time.Sleep(5 * time.Minute)
		synctest.Wait()
		e.wantState(j.ID, cosmic.StateRunning, cosmic.StateRunning)

		restarted := time.Now()
		if _, err := e.o.RestartJob(e.ctx, orkapi.RestartJobParams{ID: j.ID}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		got := e.wantState(j.ID, cosmic.StateRestarting, cosmic.StateRestarting)
		if want := restarted.Add(time.Minute); !got.Status.AgentDeadline.Equal(want) {
			t.Fatalf("agent deadline %v after a restart, want %v", got.Status.AgentDeadline, want)
		}
		time.Sleep(time.Minute + heartbeat)
		synctest.Wait()
		got = e.wantState(j.ID, cosmic.StateFailed, cosmic.StateFailed)
		wantReason(t, got, cosmic.ReasonAgentTimeout, "1m0s", "stayed restarting")
		e.checkBooks()
	})
}

// A worker that cannot be told to stop the replica's VMIs keeps the
// replica's GPUs: the deadline is enforced once it answers.
func TestAgentDeadlineWaitsForTheStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorker(t, "r1", 8)
		e := newEnv(t, w)
		j := e.create(1)
		w.mu.Lock()
		w.stopErr = errHang // any error
		w.mu.Unlock()
		time.Sleep(cosmic.DefaultAgentDeadline + heartbeat)
		synctest.Wait()
		e.wantState(j.ID, cosmic.StatePending, cosmic.StatePending)
		wantHeld(t, e, j.ID, gpus("r1", "n0", 0))
		w.mu.Lock()
		w.stopErr = nil
		w.mu.Unlock()
		e.heartbeats(1)
		e.wantState(j.ID, cosmic.StateFailed, cosmic.StateFailed)
		wantHeld(t, e, j.ID, nil)
		e.checkBooks()
	})
}

// spec.timeout stops a job when its run passes it: stopped, reason
// timeout, its VMIs stopped and its GPUs released; the clock starts when
// the job runs, and an ork restart does not reset it.
func TestTimeoutStopsTheJob(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorker(t, "r1", 8)
		e := newEnv(t, w)
		j := e.createSpec(cosmic.Spec{Type: cosmic.TypeGPUContainer, Name: "t", Location: "eu", Image: "ubuntu:24.04",
			Resources: cosmic.Resources{GPU: 1}, Timeout: 60})
		if got := e.job(j.ID); !got.Status.TimeoutAt.IsZero() {
			t.Fatalf("the clock runs before the job does: %v", got.Status.TimeoutAt)
		}
		time.Sleep(time.Minute) // starting takes its time: it does not count
		e.push(w, w.observe(j.ID, 0, cosmic.StateRunning))
		ran := time.Now()
		got := e.wantState(j.ID, cosmic.StateRunning, cosmic.StateRunning)
		if want := ran.Add(time.Minute); !got.Status.TimeoutAt.Equal(want) {
			t.Fatalf("timeoutAt %v, want %v", got.Status.TimeoutAt, want)
		}
		// Restart between two heartbeats (one under way when its ork
		// stops may log the store's refusal of its cancelled context).
		time.Sleep(30*time.Second - heartbeat/2)
		e.restart()
		time.Sleep(25 * time.Second)
		synctest.Wait()
		e.wantState(j.ID, cosmic.StateRunning, cosmic.StateRunning)

		time.Sleep(5*time.Second + heartbeat)
		synctest.Wait()
		got = e.wantState(j.ID, cosmic.StateStopped, cosmic.StateStopped)
		wantReason(t, got, cosmic.ReasonTimeout, "ran 1m0s")
		if !got.Status.TimeoutAt.IsZero() {
			t.Fatalf("a stopped job keeps timeoutAt %v", got.Status.TimeoutAt)
		}
		wantCalls(t, w, "stop "+j.ID+"/-1", 1)
		wantHeld(t, e, j.ID, nil)
		e.checkBooks()
	})
}

// With timeoutAutoRestart the job is restarted in place at its timeout
// (its storage and GPUs kept: a restart, no delete), and its clock starts
// again when it runs again.
func TestTimeoutAutoRestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorker(t, "r1", 8)
		e := newEnv(t, w)
		j := e.createSpec(cosmic.Spec{Type: cosmic.TypeGPUContainer, Name: "t", Location: "eu", Image: "ubuntu:24.04",
			Resources: cosmic.Resources{GPU: 2}, Timeout: 60, TimeoutAutoRestart: true})
		held := e.held(j.ID)
		for run := 1; run <= 2; run++ {
			e.push(w, w.observe(j.ID, 0, cosmic.StateRunning))
			ran := time.Now()
			got := e.wantState(j.ID, cosmic.StateRunning, cosmic.StateRunning)
			if want := ran.Add(time.Minute); !got.Status.TimeoutAt.Equal(want) {
				t.Fatalf("run %d: timeoutAt %v, want %v", run, got.Status.TimeoutAt, want)
			}
			time.Sleep(time.Minute + heartbeat)
			synctest.Wait()
			got = e.wantState(j.ID, cosmic.StateRestarting, cosmic.StateRestarting)
			wantReason(t, got, cosmic.ReasonTimeout, "restarting it (timeoutAutoRestart)")
			wantCalls(t, w, "restart "+j.ID+"/0", run)
			wantHeld(t, e, j.ID, held)
			e.push(w, w.observe(j.ID, 0, cosmic.StateRestarting))
		}
		wantCalls(t, w, "delete "+j.ID+"/-1", 0)
		wantCalls(t, w, "stop "+j.ID+"/-1", 0)
		e.checkBooks()
	})
}
