package ork_test

import (
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/ork/orkapi"
)

// autoscaled is a vLLM job of 4-GPU replicas that the autoscaler sizes
// between min and max, 2 requests per replica, with a 30 s cool-down.
func autoscaled(min, max int) cosmic.Spec {
	return cosmic.Spec{Type: cosmic.TypeManagedInference, Name: "auto", Location: "eu",
		Inference: &cosmic.InferenceSpec{Runtime: cosmic.RuntimeVLLM, Model: "Qwen/Qwen3-32B", GPUsPerReplica: 4,
			Autoscaling: &cosmic.Autoscaling{MinReplicas: min, MaxReplicas: max, TargetInFlight: 2, ScaleDownDelay: 30}}}
}

// proxyKey is a new proxy's key.
func proxyKey(t *testing.T) fabric.PublicKey {
	id, err := fabric.GenerateIdentity()
	if err != nil {
		t.Fatal(err)
	}
	return id.PublicKey()
}

// report is one proxy's load report of one job.
func (e *env) report(from fabric.PublicKey, id string, inFlight, waiting int) {
	e.t.Helper()
	if err := e.o.ReportLoad(from, orkapi.LoadReport{Jobs: []orkapi.JobLoad{{ID: id, InFlight: inFlight, Waiting: waiting}}}); err != nil {
		e.t.Fatal(err)
	}
}

// idleFor reports no load of job id from proxy p every second for secs
// seconds, as a proxy with nothing in flight does: a drained replica goes.
func (e *env) idleFor(p fabric.PublicKey, id string, secs int) {
	e.t.Helper()
	for range secs {
		e.report(p, id, 0, 0)
		time.Sleep(time.Second)
	}
	synctest.Wait()
}

// scaleRecords are the autoscaler's system records of the job.
func (e *env) scaleRecords(id string) []string { return e.stepRecords(id, "autoscale") }

// stepRecords are the ork's system records of the job of one step.
func (e *env) stepRecords(id, step string) []string {
	var out []string
	for _, r := range e.records.Job(id) {
		if r.Step == step {
			out = append(out, r.Line)
		}
	}
	return out
}

// An autoscaled job grows with its load at once, holds through a lull
// shorter than its cool-down, shrinks (highest replicas first, each
// freed when its worker says it is gone) after it, goes to zero replicas
// and no GPU when idle, and wakes for a request waiting. Two proxies'
// reports add up; a proxy that stops reporting stops counting.
func TestAutoscaleUpDownToZeroAndBack(t *testing.T) {
	for how, confirm := range confirmations {
		t.Run(how, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := newWorker(t, "r1", 8, 8)
				e := newEnv(t, w)
				p1, p2 := proxyKey(t), proxyKey(t)
				j := e.createSpec(autoscaled(0, 3))
				if j.Spec.Inference.Replicas != 1 {
					t.Fatalf("an autoscaled job with minReplicas 0 starts with %d replicas, want 1", j.Spec.Inference.Replicas)
				}
				e.push(w, w.observe(j.ID, 0, cosmic.StateRunning))
				e.wantState(j.ID, cosmic.StateRunning, cosmic.StateRunning)

				// 3 + 2 requests at two proxies, 2 per replica: 3 replicas,
				// within a second; the job serves on throughout.
				e.report(p1, j.ID, 3, 0)
				e.report(p2, j.ID, 2, 0)
				time.Sleep(time.Second)
				synctest.Wait()
				e.wantState(j.ID, cosmic.StateRunning, cosmic.StateRunning, cosmic.StatePending, cosmic.StatePending)
				e.push(w, w.observe(j.ID, 1, cosmic.StateStarting))
				e.wantState(j.ID, cosmic.StateRunning, cosmic.StateRunning, cosmic.StateStarting, cosmic.StatePending)
				e.push(w, w.observe(j.ID, 1, cosmic.StateRunning))
				e.push(w, w.observe(j.ID, 2, cosmic.StateRunning))
				e.checkBooks()

				// A lull of 20 s (shorter than the cool-down) changes nothing.
				for range 20 {
					e.report(p1, j.ID, 1, 0)
					e.report(p2, j.ID, 0, 0)
					time.Sleep(time.Second)
				}
				synctest.Wait()
				if n := e.job(j.ID).Spec.Inference.Replicas; n != 3 {
					t.Fatalf("after a 20 s lull the job has %d replicas, want 3 (cool-down 30 s)", n)
				}
				// Load back up, then down for good: the cool-down counts
				// from then, and the most the load wanted in it (1 request:
				// 1 replica) is what stays.
				e.report(p1, j.ID, 6, 0)
				time.Sleep(time.Second)
				// The one request in flight is at replica 2.
				for range 34 {
					if err := e.o.ReportLoad(p1, orkapi.LoadReport{Jobs: []orkapi.JobLoad{{ID: j.ID, InFlight: 1, Replicas: map[int]int{2: 1}}}}); err != nil {
						t.Fatal(err)
					}
					e.report(p2, j.ID, 0, 0)
					time.Sleep(time.Second)
				}
				synctest.Wait()
				// Drained first: a replica being taken away takes no new
				// request and goes once the proxies report none in flight
				// there: replica 1 is gone, replica 2 still drains.
				got := e.wantState(j.ID, cosmic.StateRunning, cosmic.StateRunning, cosmic.StateDeleting, cosmic.StateRunning)
				if got.Spec.Inference.Replicas != 1 || got.Status.Replicas[2].Drain == nil || !slices.Equal(e.draining(j.ID), []int{1, 2}) {
					t.Fatalf("scaling down: replicas %d, %+v", got.Spec.Inference.Replicas, got.Status.Replicas)
				}
				e.idleFor(p1, j.ID, 3)
				got = e.wantState(j.ID, cosmic.StateRunning, cosmic.StateRunning, cosmic.StateDeleting, cosmic.StateDeleting)
				if got.Spec.Inference.Replicas != 1 || got.Status.Replicas[2].Reason == nil || got.Status.Replicas[2].Reason.Code != cosmic.ReasonScaledDown {
					t.Fatalf("scaled down: replicas %d, replica 2 %+v; want 1 replica, replica 2 going (scaled_down)", got.Spec.Inference.Replicas, got.Status.Replicas[2])
				}
				// Asked, and asked again each heartbeat while the worker
				// still lists them.
				if w.count("delete "+j.ID+"/2") == 0 || w.count("delete "+j.ID+"/1") == 0 || w.count("delete "+j.ID+"/0") != 0 {
					t.Fatalf("worker calls: %v; want replicas 2 and 1 deleted, not 0", w.calls)
				}
				e.checkBooks()
				confirm(e, w, j.ID, 2)
				e.wantState(j.ID, cosmic.StateRunning, cosmic.StateRunning, cosmic.StateDeleting)
				confirm(e, w, j.ID, 1)
				e.wantState(j.ID, cosmic.StateRunning, cosmic.StateRunning)
				wantHeld(t, e, j.ID, gpus("r1", "n0", 0, 1, 2, 3))
				e.checkBooks()

				// Idle for the cool-down (p2 stopped reporting): zero
				// replicas, no GPU, and the status says so.
				e.idleFor(p1, j.ID, 35)
				confirm(e, w, j.ID, 0)
				got = e.wantState(j.ID, cosmic.StateRunning)
				if got.Status.Reason == nil || got.Status.Reason.Code != cosmic.ReasonScaledToZero || got.Spec.Inference.Replicas != 0 {
					t.Fatalf("idle job: reason %+v, replicas %d; want scaled_to_zero, 0", got.Status.Reason, got.Spec.Inference.Replicas)
				}
				wantHeld(t, e, j.ID, nil)
				e.checkBooks()

				// A request waits at a proxy: a replica is placed at once
				// (no tick needed), and the job says it is waking.
				e.report(p2, j.ID, 0, 1)
				synctest.Wait()
				got = e.wantState(j.ID, cosmic.StateRunning, cosmic.StatePending)
				if got.Status.Reason == nil || got.Status.Reason.Code != cosmic.ReasonScalingUp {
					t.Fatalf("waking job: reason %+v, want scaling_up", got.Status.Reason)
				}
				e.push(w, w.observe(j.ID, 0, cosmic.StateRunning))
				got = e.wantState(j.ID, cosmic.StateRunning, cosmic.StateRunning)
				if got.Status.Reason != nil {
					t.Errorf("a woken job keeps reason %+v", got.Status.Reason)
				}
				e.checkBooks()

				recs := e.scaleRecords(j.ID)
				want := []string{"scaled up from 1 to 3", "scaled down from 3 to 1", "scaled down from 1 to 0", "scaled up from 0 to 1"}
				if len(recs) != len(want) {
					t.Fatalf("autoscale records:\n%s\nwant %d", strings.Join(recs, "\n"), len(want))
				}
				for i, r := range recs {
					if !strings.HasPrefix(r, want[i]) {
						t.Errorf("record %d: %q, want it to start %q", i, r, want[i])
					}
				}
			})
		})
	}
}

// With no proxy's report fresh, the autoscaler takes nothing away: it
// does not know the load.
func TestAutoscaleWithoutReportsKeepsReplicas(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorker(t, "r1", 8, 8)
		e := newEnv(t, w)
		spec := autoscaled(1, 3)
		spec.Inference.Replicas = 2
		j := e.createSpec(spec)
		e.push(w, w.observe(j.ID, 0, cosmic.StateRunning))
		e.push(w, w.observe(j.ID, 1, cosmic.StateRunning))
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		e.wantState(j.ID, cosmic.StateRunning, cosmic.StateRunning, cosmic.StateRunning)
		// A report, then silence past its freshness: still nothing goes.
		e.report(proxyKey(t), j.ID, 0, 0)
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		e.wantState(j.ID, cosmic.StateRunning, cosmic.StateRunning, cosmic.StateRunning)
	})
}

// A scale-up beyond what the location could ever hold is taken back to
// what it can: the job keeps serving, is never failed, and the record
// says why.
func TestAutoscaleBeyondTheLocation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorker(t, "r1", 8, 8) // 4 replicas of 4 GPUs at most
		e := newEnv(t, w)
		j := e.createSpec(autoscaled(1, 10))
		e.push(w, w.observe(j.ID, 0, cosmic.StateRunning))
		e.report(proxyKey(t), j.ID, 100, 0)
		time.Sleep(time.Second)
		synctest.Wait()
		got := e.job(j.ID)
		if got.Status.State != cosmic.StateRunning || got.Spec.Inference.Replicas != 4 {
			t.Fatalf("job %s with %d replicas; want running with 4 (the location's 16 GPUs)", got.Status.State, got.Spec.Inference.Replicas)
		}
		recs := e.scaleRecords(j.ID)
		if !slices.ContainsFunc(recs, func(r string) bool { return strings.HasPrefix(r, "cannot scale to 10 replicas, only to 4") }) {
			t.Errorf("records %q: want the cap explained", recs)
		}
		// Still asked for 10 a second later: no flapping, no new record.
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if n := len(e.scaleRecords(j.ID)); n != len(recs) {
			t.Errorf("records grew from %d to %d under the same load", len(recs), n)
		}
		e.checkBooks()
	})
}

// A proxy's report is checked: negative loads and oversized reports are
// refused, and a job that is not autoscaled is never scaled by one.
func TestReportLoadIsChecked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorker(t, "r1", 8)
		e := newEnv(t, w)
		p := proxyKey(t)
		if err := e.o.ReportLoad(p, orkapi.LoadReport{Jobs: []orkapi.JobLoad{{ID: "x", InFlight: -1}}}); err == nil {
			t.Error("a negative load was taken")
		}
		if err := e.o.ReportLoad(p, orkapi.LoadReport{Jobs: []orkapi.JobLoad{{ID: "x", Replicas: map[int]int{0: -1}}}}); err == nil {
			t.Error("a negative load at a replica was taken")
		}
		if err := e.o.ReportLoad(p, orkapi.LoadReport{Jobs: []orkapi.JobLoad{{ID: "x", Replicas: map[int]int{cosmic.MaxReplicas + 1: 1}}}}); err == nil {
			t.Error("a load at a replica no job has was taken")
		}
		if err := e.o.ReportLoad(p, orkapi.LoadReport{Jobs: make([]orkapi.JobLoad, orkapi.MaxLoadJobs+1)}); err == nil {
			t.Error("an oversized report was taken")
		}
		j := e.createSpec(cosmic.Spec{Type: cosmic.TypeManagedInference, Name: "fixed", Location: "eu",
			Inference: &cosmic.InferenceSpec{Runtime: cosmic.RuntimeVLLM, Model: "Qwen/Qwen3-32B", GPUsPerReplica: 4}})
		e.push(w, w.observe(j.ID, 0, cosmic.StateRunning))
		e.report(p, j.ID, 100, 100)
		time.Sleep(3 * time.Second)
		synctest.Wait()
		e.wantState(j.ID, cosmic.StateRunning, cosmic.StateRunning)
	})
}

// A job killed at zero replicas starts again, on restart, with the
// scaler's first count; a restart of a serving job at zero changes
// nothing (a request wakes it).
func TestRestartAtZeroReplicas(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorker(t, "r1", 8)
		e := newEnv(t, w)
		p := proxyKey(t)
		j := e.createSpec(autoscaled(0, 2))
		e.push(w, w.observe(j.ID, 0, cosmic.StateRunning))
		e.idleFor(p, j.ID, 35)
		e.push(w, w.gone(j.ID, 0))
		e.wantState(j.ID, cosmic.StateRunning)
		if _, err := e.o.RestartJob(e.ctx, orkapi.RestartJobParams{ID: j.ID}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		e.wantState(j.ID, cosmic.StateRunning)
		if _, err := e.o.KillJob(e.ctx, j.ID); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		e.wantState(j.ID, cosmic.StateStopped)
		if _, err := e.o.RestartJob(e.ctx, orkapi.RestartJobParams{ID: j.ID}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		got := e.wantState(j.ID, cosmic.StatePending, cosmic.StatePending)
		if got.Spec.Inference.Replicas != 1 {
			t.Fatalf("restarted with %d replicas, want 1", got.Spec.Inference.Replicas)
		}
		e.push(w, w.observe(j.ID, 0, cosmic.StateRunning))
		e.wantState(j.ID, cosmic.StateRunning, cosmic.StateRunning)
		e.checkBooks()
	})
}

// A job updated to be autoscaled is scaled from then on (not only after
// the autoscaler's next read of the store's list).
func TestUpdateToAutoscaled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorker(t, "r1", 8)
		e := newEnv(t, w)
		p := proxyKey(t)
		spec := autoscaled(0, 2)
		spec.Inference.Autoscaling = nil
		j := e.createSpec(spec)
		e.push(w, w.observe(j.ID, 0, cosmic.StateRunning))
		next := j.Spec
		in := *next.Inference
		in.Autoscaling = &cosmic.Autoscaling{MinReplicas: 0, MaxReplicas: 2, ScaleDownDelay: 10}
		next.Inference = &in
		if _, err := e.o.UpdateJob(e.ctx, orkapi.UpdateJobParams{ID: j.ID, Spec: next}); err != nil {
			t.Fatal(err)
		}
		e.idleFor(p, j.ID, 14)
		if got := e.job(j.ID); got.Spec.Inference.Replicas != 0 {
			t.Fatalf("14 s idle after the update: %d replicas, want 0 (cool-down 10 s)", got.Spec.Inference.Replicas)
		}
	})
}
