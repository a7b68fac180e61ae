package ork_test

import (
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/ork/orkapi"
)

// served is a vLLM job of two 4-GPU replicas.
func served() cosmic.Spec {
	return cosmic.Spec{Type: cosmic.TypeManagedInference, Name: "served", Location: "eu",
		Inference: &cosmic.InferenceSpec{Runtime: cosmic.RuntimeVLLM, Model: "Qwen/Qwen3-32B", Replicas: 2, GPUsPerReplica: 4}}
}

// generations are the job's replicas' generations.
func generations(j cosmic.Job) []int {
	var out []int
	for _, r := range j.Status.Replicas {
		out = append(out, r.Generation)
	}
	return out
}

// draining are the replicas of job id the ork's peers mark draining
// (drained, or being deleted: no new request goes there).
func (e *env) draining(id string) []int {
	e.t.Helper()
	p, err := e.o.WatchPeers(e.ctx, orkapi.WatchPeersParams{})
	if err != nil {
		e.t.Fatal(err)
	}
	var out []int
	for _, pl := range p.Placements {
		if pl.Job == id && pl.Draining {
			out = append(out, pl.Replica)
		}
	}
	slices.Sort(out)
	return out
}

// rolloutRecords are the rollout's system records of the job.
func (e *env) rolloutRecords(id string) []string { return e.stepRecords(id, "rollout") }

// servingWithArgs is a served job running both its replicas, and its spec
// with args changed (what an update that rolls out sends).
func (e *env) servingWithArgs(w *fakeWorker) (cosmic.Job, cosmic.Spec) {
	e.t.Helper()
	j := e.createSpec(served())
	e.push(w, w.observe(j.ID, 0, cosmic.StateRunning))
	e.push(w, w.observe(j.ID, 1, cosmic.StateRunning))
	next := j.Spec
	in := *next.Inference
	in.Args = map[string]string{"max-model-len": "8192"}
	next.Inference = &in
	return j, next
}

// A rolling update of a serving job: one replica of the new spec first,
// then each old replica drained (routed around; replaced once the proxies
// report nothing in flight there) and placed again with the new spec, one
// at a time, then the surge goes. The job serves on throughout.
func TestRollingUpdate(t *testing.T) {
	for how, confirm := range confirmations {
		t.Run(how, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := newWorker(t, "r1", 8, 8)
				e := newEnv(t, w)
				p := proxyKey(t)
				j, next := e.servingWithArgs(w)
				got, err := e.o.UpdateJob(e.ctx, orkapi.UpdateJobParams{ID: j.ID, Spec: next})
				if err != nil {
					t.Fatal(err)
				}
				if got.Status.Rollout == nil || got.Status.Generation != 1 || got.Spec.Inference.Replicas != 3 || got.Spec.Inference.Args["max-model-len"] != "8192" {
					t.Fatalf("after the update: rollout %+v, generation %d, replicas %d, args %v", got.Status.Rollout, got.Status.Generation, got.Spec.Inference.Replicas, got.Spec.Inference.Args)
				}
				synctest.Wait()
				got = e.wantState(j.ID, cosmic.StateRunning, cosmic.StateRunning, cosmic.StateRunning, cosmic.StatePending)
				if g := generations(got); !slices.Equal(g, []int{0, 0, 1}) {
					t.Fatalf("generations %v, want the surge of generation 1", g)
				}
				// Nothing is drained until the surge runs.
				time.Sleep(3 * time.Second)
				synctest.Wait()
				if d := e.draining(j.ID); len(d) != 0 {
					t.Fatalf("replicas %v drained before the surge runs", d)
				}
				e.push(w, w.observe(j.ID, 2, cosmic.StateRunning))
				for i := range 2 {
					time.Sleep(time.Second)
					synctest.Wait()
					if d := e.draining(j.ID); !slices.Equal(d, []int{i}) {
						t.Fatalf("draining %v, want replica %d", d, i)
					}
					// A request in flight there holds it.
					e.report(p, j.ID, 1, 0)
					if err := e.o.ReportLoad(p, orkapi.LoadReport{Jobs: []orkapi.JobLoad{{ID: j.ID, InFlight: 1, Replicas: map[int]int{i: 1}}}}); err != nil {
						t.Fatal(err)
					}
					time.Sleep(3 * time.Second)
					synctest.Wait()
					e.wantState(j.ID, cosmic.StateRunning, cosmic.StateRunning, cosmic.StateRunning, cosmic.StateRunning)
					// It ends: replaced.
					e.report(p, j.ID, 0, 0)
					time.Sleep(time.Second)
					synctest.Wait()
					want := []cosmic.State{cosmic.StateRunning, cosmic.StateRunning, cosmic.StateRunning}
					want[i] = cosmic.StateDeleting
					got = e.wantState(j.ID, cosmic.StateRunning, want...)
					if r := got.Status.Replicas[i].Reason; r == nil || r.Code != cosmic.ReasonReplaced {
						t.Fatalf("replica %d going with reason %+v, want replaced", i, r)
					}
					confirm(e, w, j.ID, i)
					want[i] = cosmic.StatePending
					got = e.wantState(j.ID, cosmic.StateRunning, want...)
					if got.Status.Replicas[i].Generation != 1 {
						t.Fatalf("replica %d placed again with generation %d", i, got.Status.Replicas[i].Generation)
					}
					e.push(w, w.observe(j.ID, i, cosmic.StateRunning))
					e.checkBooks()
				}
				// Every replica is of generation 1: the surge is drained,
				// then goes.
				time.Sleep(time.Second)
				synctest.Wait()
				if d := e.draining(j.ID); !slices.Equal(d, []int{2}) {
					t.Fatalf("draining %v, want the surge, 2", d)
				}
				e.idleFor(p, j.ID, 3)
				e.wantState(j.ID, cosmic.StateRunning, cosmic.StateRunning, cosmic.StateRunning, cosmic.StateDeleting)
				confirm(e, w, j.ID, 2)
				time.Sleep(time.Second)
				synctest.Wait()
				got = e.wantState(j.ID, cosmic.StateRunning, cosmic.StateRunning, cosmic.StateRunning)
				if got.Status.Rollout != nil || got.Status.LastRollout == nil || got.Status.LastRollout.Outcome != cosmic.RolloutDone || got.Spec.Inference.Replicas != 2 {
					t.Fatalf("after the rollout: %+v, last %+v, replicas %d", got.Status.Rollout, got.Status.LastRollout, got.Spec.Inference.Replicas)
				}
				if g := generations(got); !slices.Equal(g, []int{1, 1}) {
					t.Fatalf("generations %v", g)
				}
				e.checkBooks()
				recs := e.rolloutRecords(j.ID)
				if len(recs) != 5 || !strings.Contains(recs[len(recs)-1], "rolled_out") || !strings.HasPrefix(recs[1], "draining replica 0") {
					t.Fatalf("rollout records:\n%s", strings.Join(recs, "\n"))
				}
			})
		})
	}
}

// A replica of the new spec that fails rolls the job back: the spec
// before is restored, the replicas that still run it are kept, and the
// failed surge goes; the last rollout says why.
func TestRollbackOnAFailedReplica(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorker(t, "r1", 8, 8)
		e := newEnv(t, w)
		j := e.createSpec(served())
		e.push(w, w.observe(j.ID, 0, cosmic.StateRunning))
		e.push(w, w.observe(j.ID, 1, cosmic.StateRunning))
		next := j.Spec
		in := *next.Inference
		in.Model = "Qwen/Qwen3-8B"
		next.Inference = &in
		if _, err := e.o.UpdateJob(e.ctx, orkapi.UpdateJobParams{ID: j.ID, Spec: next}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		e.push(w, w.observe(j.ID, 2, cosmic.StateFailed))
		time.Sleep(time.Second)
		synctest.Wait()
		got := e.job(j.ID)
		if got.Spec.Inference.Model != "Qwen/Qwen3-32B" || got.Status.Rollout == nil || !got.Status.Rollout.RollingBack || got.Status.Generation != 2 {
			t.Fatalf("after the failure: model %s, rollout %+v, generation %d", got.Spec.Inference.Model, got.Status.Rollout, got.Status.Generation)
		}
		if g := generations(got); !slices.Equal(g, []int{2, 2, 1}) {
			t.Fatalf("generations %v, want the old replicas kept as generation 2", g)
		}
		// The failed surge (it holds no GPU) just goes: nothing of the
		// spec before needs replacing.
		time.Sleep(2 * time.Second)
		synctest.Wait()
		got = e.wantState(j.ID, cosmic.StateRunning, cosmic.StateRunning, cosmic.StateRunning)
		lr := got.Status.LastRollout
		if got.Status.Rollout != nil || lr == nil || lr.Outcome != cosmic.RolloutRolledBack || lr.Reason == nil || lr.Reason.Code != cosmic.ReasonRolloutFailed ||
			!strings.Contains(lr.Reason.Message, "replica 2 of generation 1 failed") {
			t.Fatalf("last rollout %+v", lr)
		}
		if w.count("delete "+j.ID+"/0") != 0 || w.count("delete "+j.ID+"/1") != 0 {
			t.Error("a replica of the spec before was replaced")
		}
		e.checkBooks()
	})
}

// What an update may change: a field fixed at create is refused naming
// it; a job on its way up is a conflict; a stopped job takes the new spec
// for its next start; a change that replaces nothing (routing) takes
// effect at once, without a rollout.
func TestUpdateRules(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorker(t, "r1", 8, 8)
		e := newEnv(t, w)
		j := e.createSpec(served())
		fixed := j.Spec
		fixed.Location = "us"
		if _, err := e.o.UpdateJob(e.ctx, orkapi.UpdateJobParams{ID: j.ID, Spec: fixed}); err == nil || !strings.Contains(err.Error(), "location") {
			t.Errorf("a new location: %v", err)
		}
		next := j.Spec
		in := *next.Inference
		in.Model = "Qwen/Qwen3-8B"
		next.Inference = &in
		if _, err := e.o.UpdateJob(e.ctx, orkapi.UpdateJobParams{ID: j.ID, Spec: next}); cosmic.CodeOf(err) != cosmic.CodeConflict {
			t.Errorf("an update of a pending job: %v, want a conflict", err)
		}
		e.push(w, w.observe(j.ID, 0, cosmic.StateRunning))
		e.push(w, w.observe(j.ID, 1, cosmic.StateRunning))
		routed := j.Spec
		rin := *routed.Inference
		rin.Routing = cosmic.RoutingLeastOutstanding
		routed.Inference = &rin
		got, err := e.o.UpdateJob(e.ctx, orkapi.UpdateJobParams{ID: j.ID, Spec: routed})
		if err != nil || got.Status.Rollout != nil || got.Spec.Inference.Routing != cosmic.RoutingLeastOutstanding || got.Status.Generation != 0 {
			t.Fatalf("a routing change: %v, rollout %+v, generation %d", err, got.Status.Rollout, got.Status.Generation)
		}
		if _, err := e.o.KillJob(e.ctx, j.ID); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		got, err = e.o.UpdateJob(e.ctx, orkapi.UpdateJobParams{ID: j.ID, Spec: next})
		if err != nil || got.Status.Rollout != nil || got.Spec.Inference.Model != "Qwen/Qwen3-8B" || got.Status.Generation != 1 {
			t.Fatalf("an update of a stopped job: %v, rollout %+v, model %s", err, got.Status.Rollout, got.Spec.Inference.Model)
		}
		if _, err := e.o.RestartJob(e.ctx, orkapi.RestartJobParams{ID: j.ID}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		got = e.job(j.ID)
		if g := generations(got); !slices.Equal(g, []int{1, 1}) {
			t.Fatalf("restarted with generations %v, want 1, 1", g)
		}
	})
}

// An update the location can never hold (a rollout's one more replica on
// a full rack) is refused, and changes nothing; a job whose rollout's
// replica cannot be placed any more (its rack lost GPUs meanwhile) is
// never failed: the replica alone fails, and the rollout rolls back.
func TestUpdateTheLocationCannotHold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorker(t, "r1", 8) // the job's two replicas of 4 GPUs fill it
		e := newEnv(t, w)
		j, next := e.servingWithArgs(w)
		_, err := e.o.UpdateJob(e.ctx, orkapi.UpdateJobParams{ID: j.ID, Spec: next})
		if cosmic.CodeOf(err) != cosmic.CodeConflict || !strings.Contains(err.Error(), "one more than the job's 2") {
			t.Fatalf("a rollout on a full rack: %v, want a conflict saying why", err)
		}
		got := e.wantState(j.ID, cosmic.StateRunning, cosmic.StateRunning, cosmic.StateRunning)
		if got.Status.Generation != 0 || got.Spec.Inference.Args != nil {
			t.Fatalf("a refused update changed the job: generation %d, args %v", got.Status.Generation, got.Spec.Inference.Args)
		}
		e.checkBooks()
	})
}

// A scale-down while a replica of the scale-up still waits for GPUs:
// that replica is never placed, even once GPUs free up.
func TestScaleDownOfAQueuedReplica(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorker(t, "r1", 8)
		e := newEnv(t, w)
		p := proxyKey(t)
		other := e.create(4) // holds half the rack
		e.push(w, w.observe(other.ID, 0, cosmic.StateRunning))
		j := e.createSpec(autoscaled(1, 2))
		e.push(w, w.observe(j.ID, 0, cosmic.StateRunning))
		e.report(p, j.ID, 4, 0)
		time.Sleep(time.Second)
		synctest.Wait()
		e.wantState(j.ID, cosmic.StateRunning, cosmic.StateRunning, cosmic.StateQueued)
		e.idleFor(p, j.ID, 34) // the cool-down (30 s): back to one
		e.wantState(j.ID, cosmic.StateRunning, cosmic.StateRunning)
		if _, err := e.o.KillJob(e.ctx, other.ID); err != nil {
			t.Fatal(err)
		}
		e.idleFor(p, j.ID, 3)
		got := e.wantState(j.ID, cosmic.StateRunning, cosmic.StateRunning)
		if got.Spec.Inference.Replicas != 1 {
			t.Fatalf("%d replicas", got.Spec.Inference.Replicas)
		}
		wantHeld(t, e, j.ID, gpus("r1", "n0", 4, 5, 6, 7))
		e.checkBooks()
	})
}

// A rollout whose surge waits for GPUs that never come rolls back after
// the rollout deadline, with no replica of the job replaced; the job
// serves throughout and never fails.
func TestRolloutDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorker(t, "r1", 8, 8)
		e := newEnv(t, w)
		j, next := e.servingWithArgs(w)
		other := e.create(8) // the other node: no room for a surge
		e.push(w, w.observe(other.ID, 0, cosmic.StateRunning))
		if _, err := e.o.UpdateJob(e.ctx, orkapi.UpdateJobParams{ID: j.ID, Spec: next}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		e.wantState(j.ID, cosmic.StateRunning, cosmic.StateRunning, cosmic.StateRunning, cosmic.StateQueued)
		time.Sleep(9 * time.Minute)
		synctest.Wait()
		if got := e.job(j.ID); got.Status.Rollout == nil || got.Status.Rollout.RollingBack {
			t.Fatalf("9 minutes in: rollout %+v, want it still waiting", got.Status.Rollout)
		}
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		got := e.wantState(j.ID, cosmic.StateRunning, cosmic.StateRunning, cosmic.StateRunning)
		lr := got.Status.LastRollout
		if got.Status.Rollout != nil || lr == nil || lr.Outcome != cosmic.RolloutRolledBack || !strings.Contains(lr.Reason.Message, "no step for 10m0s: replica 2 is queued") {
			t.Fatalf("after the deadline: rollout %+v, last %+v", got.Status.Rollout, lr)
		}
		if got.Spec.Inference.Args != nil || got.Spec.Inference.Replicas != 2 {
			t.Fatalf("rolled back to args %v, %d replicas", got.Spec.Inference.Args, got.Spec.Inference.Replicas)
		}
		if w.count("delete "+j.ID+"/0") != 0 || w.count("delete "+j.ID+"/1") != 0 {
			t.Error("a replica was replaced")
		}
		e.checkBooks()
	})
}
