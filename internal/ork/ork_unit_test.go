package ork_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/ork/orkapi"
	"github.com/cosmicac/cosmicac/internal/worker"
)

// The ork's scenarios on the harness (harness_test.go): the real ork and
// store, fake workers, the bubble's time.

func gpus(rack, node string, idx ...int) []string {
	var out []string
	for _, i := range idx {
		out = append(out, (cosmic.GPURef{Rack: rack, Node: node, Index: i}).String())
	}
	slices.Sort(out)
	return out
}

var all8 = []int{0, 1, 2, 3, 4, 5, 6, 7}

func wantHeld(t *testing.T, e *env, id string, want []string) {
	t.Helper()
	if got := e.held(id); !slices.Equal(got, want) {
		t.Fatalf("job %s holds %v, want %v", id, got, want)
	}
}

func wantCalls(t *testing.T, w *fakeWorker, call string, want int) {
	t.Helper()
	if got := w.count(call); got != want {
		t.Fatalf("rack %s was called %q %d times, want %d", w.rack, call, got, want)
	}
}

// A job is placed on free GPUs, applied once on its rack's worker, and
// follows the replica's reports to running; the heartbeats then find the
// worker running it and apply nothing again.
func TestJobRunsFromItsReports(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorker(t, "r1", 8)
		e := newEnv(t, w)
		j := e.create(2)
		wantCalls(t, w, "apply "+j.ID, 1)
		e.wantState(j.ID, cosmic.StatePending, cosmic.StatePending)
		wantHeld(t, e, j.ID, gpus("r1", "n0", 0, 1))
		e.checkBooks()

		e.push(w, w.observe(j.ID, 0, cosmic.StateStarting))
		e.wantState(j.ID, cosmic.StateStarting, cosmic.StateStarting)
		e.push(w, w.observe(j.ID, 0, cosmic.StateRunning))
		got := e.wantState(j.ID, cosmic.StateRunning, cosmic.StateRunning)
		if !slices.Equal(got.Status.Replicas[0].Nodes, []string{"n0"}) {
			t.Fatalf("replica nodes %v, want [n0]", got.Status.Replicas[0].Nodes)
		}
		e.heartbeats(3)
		wantCalls(t, w, "apply "+j.ID, 1)
		e.wantState(j.ID, cosmic.StateRunning, cosmic.StateRunning)
		e.checkBooks()
	})
}

// Reports that must change nothing, against ones that must: each case
// starts from a running job holding all 8 GPUs of r1 (r2 is empty), pushes
// the case's last report and checks what the job is.
func TestWhichReportsCount(t *testing.T) {
	type setup struct {
		e      *env
		w1, w2 *fakeWorker
		id     string
	}
	for name, tc := range map[string]struct {
		// last makes the case's report, which w pushes.
		last     func(s setup) (w *fakeWorker, rep worker.Report)
		wantErr  string // the fabric code ReceiveReport answers
		want     cosmic.State
		released bool
	}{
		"an older observation of the same worker process": {
			last: func(s setup) (*fakeWorker, worker.Report) {
				old := s.w1.observe(s.id, 0, cosmic.StateFailed)
				s.e.push(s.w1, s.w1.observe(s.id, 0, cosmic.StateRunning))
				return s.w1, old
			},
			want: cosmic.StateRunning,
		},
		"the last observation again": {
			last: func(s setup) (*fakeWorker, worker.Report) { return s.w1, s.w1.current(s.id) },
			want: cosmic.StateRunning,
		},
		"a stop the ork did not ask for": {
			last: func(s setup) (*fakeWorker, worker.Report) { return s.w1, s.w1.observe(s.id, 0, cosmic.StateStopped) },
			want: cosmic.StateRunning,
		},
		"a replica gone that the ork did not delete": {
			last: func(s setup) (*fakeWorker, worker.Report) { return s.w1, s.w1.gone(s.id, 0) },
			want: cosmic.StateRunning,
		},
		"a failure from the worker of a rack that does not hold the replica": {
			last: func(s setup) (*fakeWorker, worker.Report) {
				rep := s.w1.observe(s.id, 0, cosmic.StateFailed)
				rep.Rack = "r2"
				return s.w2, rep
			},
			want: cosmic.StateRunning,
		},
		"a failure sent with another rack's worker key": {
			last:    func(s setup) (*fakeWorker, worker.Report) { return s.w2, s.w1.observe(s.id, 0, cosmic.StateFailed) },
			wantErr: fabric.CodeForbidden,
			want:    cosmic.StateRunning,
		},
		"a newer failure": {
			last:     func(s setup) (*fakeWorker, worker.Report) { return s.w1, s.w1.observe(s.id, 0, cosmic.StateFailed) },
			want:     cosmic.StateFailed,
			released: true,
		},
		"a failure observed by a restarted worker process": {
			last: func(s setup) (*fakeWorker, worker.Report) {
				s.w1.restartProcess()
				return s.w1, s.w1.observe(s.id, 0, cosmic.StateFailed)
			},
			want:     cosmic.StateFailed,
			released: true,
		},
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w1, w2 := newWorker(t, "r1", 8), newWorker(t, "r2", 8)
				e := newEnv(t, w1, w2)
				j := e.create(8)
				wantHeld(t, e, j.ID, gpus("r1", "n0", all8...))
				e.push(w1, w1.observe(j.ID, 0, cosmic.StateRunning))
				e.wantState(j.ID, cosmic.StateRunning, cosmic.StateRunning)

				from, rep := tc.last(setup{e: e, w1: w1, w2: w2, id: j.ID})
				err := e.o.ReceiveReport(e.ctx, from.key, rep)
				if fabric.ErrorCode(err) != tc.wantErr || (err != nil) != (tc.wantErr != "") {
					t.Fatalf("the report was answered %v, want code %q", err, tc.wantErr)
				}
				synctest.Wait()
				e.wantState(j.ID, tc.want, tc.want)
				want := gpus("r1", "n0", all8...)
				if tc.released {
					want = nil
				}
				wantHeld(t, e, j.ID, want)
				e.checkBooks()
			})
		})
	}
}

// A worker that stops answering the heartbeat makes its jobs unknown once
// a call to it fails: at once when it refuses, after the worker timeout
// when it hangs. They keep their GPUs (the VMIs may still run), so nothing
// else is placed there; when the worker answers again, what it reports
// restores the jobs' state.
func TestLostWorker(t *testing.T) {
	for name, tc := range map[string]struct {
		outage string
		// silent is how long after the outage's heartbeat the ork still
		// waits for the worker's answer.
		silent time.Duration
	}{
		"its process is gone":    {outage: "refused"},
		"the network cut it off": {outage: "hung", silent: workerTimeout},
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := newWorker(t, "r1", 8)
				e := newEnv(t, w)
				a := e.create(8)
				e.push(w, w.observe(a.ID, 0, cosmic.StateRunning))
				b := e.create(8)
				e.wantState(b.ID, cosmic.StateQueued, cosmic.StateQueued)

				w.setOutage(tc.outage)
				e.heartbeats(1)
				if tc.silent > 0 {
					// The ork still waits for the worker's answer.
					e.wantState(a.ID, cosmic.StateRunning, cosmic.StateRunning)
					time.Sleep(tc.silent)
					synctest.Wait()
				}
				got := e.wantState(a.ID, cosmic.StateUnknown, cosmic.StateUnknown)
				if got.Status.Reason == nil || got.Status.Reason.Code != cosmic.ReasonWorkerUnreachable {
					t.Fatalf("reason %+v, want %s", got.Status.Reason, cosmic.ReasonWorkerUnreachable)
				}
				if racks := e.o.ListRacks().Racks; racks[0].Reachable {
					t.Fatal("the rack is shown reachable")
				}
				e.heartbeats(5)
				e.wantState(a.ID, cosmic.StateUnknown, cosmic.StateUnknown)
				wantHeld(t, e, a.ID, gpus("r1", "n0", all8...))
				e.wantState(b.ID, cosmic.StateQueued, cosmic.StateQueued)
				e.checkBooks()

				w.setOutage("")
				time.Sleep(workerTimeout + heartbeat) // a call in flight ends, the next one answers
				synctest.Wait()
				if racks := e.o.ListRacks().Racks; !racks[0].Reachable {
					t.Fatal("the rack is shown unreachable")
				}
				e.wantState(a.ID, cosmic.StateRunning, cosmic.StateRunning)
				wantCalls(t, w, "apply "+a.ID, 1)
				e.wantState(b.ID, cosmic.StateQueued, cosmic.StateQueued)
				e.checkBooks()
			})
		})
	}
}

// A worker back without a job it ran (it lost its state) is told to apply
// it again, on the GPUs the job holds.
func TestWorkerBackWithoutItsJob(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorker(t, "r1", 8)
		e := newEnv(t, w)
		a := e.create(8)
		e.push(w, w.observe(a.ID, 0, cosmic.StateRunning))
		w.setOutage("refused")
		e.heartbeats(1)
		e.wantState(a.ID, cosmic.StateUnknown, cosmic.StateUnknown)

		w.forget(a.ID)
		w.restartProcess()
		w.setOutage("")
		e.heartbeats(1)
		wantCalls(t, w, "apply "+a.ID, 2)
		if !w.runs(a.ID) {
			t.Fatal("the worker was not given the job again")
		}
		wantHeld(t, e, a.ID, gpus("r1", "n0", all8...))
		e.heartbeats(1) // the worker reports it pending: the VMIs are built anew
		e.wantState(a.ID, cosmic.StateRestarting, cosmic.StatePending)
		e.push(w, w.observe(a.ID, 0, cosmic.StateRunning))
		e.wantState(a.ID, cosmic.StateRunning, cosmic.StateRunning)
		wantCalls(t, w, "apply "+a.ID, 2)
		e.checkBooks()
	})
}

// A kill stops the job on its worker and releases its GPUs once: the job
// queued behind it takes them, and neither a second kill nor the killed
// job's late reports take them back.
func TestKillReleasesGPUsOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorker(t, "r1", 8)
		e := newEnv(t, w)
		a := e.create(8)
		e.push(w, w.observe(a.ID, 0, cosmic.StateRunning))
		b := e.create(8)
		e.wantState(b.ID, cosmic.StateQueued, cosmic.StateQueued)

		k, err := e.o.KillJob(e.ctx, a.ID)
		if err != nil || k.Status.State != cosmic.StateStopped {
			t.Fatalf("kill: %s, %v", k.Status.State, err)
		}
		synctest.Wait()
		wantCalls(t, w, "stop "+a.ID+"/-1", 1)
		got := e.wantState(a.ID, cosmic.StateStopped, cosmic.StateStopped)
		if got.Status.Reason == nil || got.Status.Reason.Code != cosmic.ReasonKilled {
			t.Fatalf("reason %+v, want %s", got.Status.Reason, cosmic.ReasonKilled)
		}
		wantHeld(t, e, a.ID, nil)
		e.wantState(b.ID, cosmic.StatePending, cosmic.StatePending)
		wantHeld(t, e, b.ID, gpus("r1", "n0", all8...))
		wantCalls(t, w, "apply "+b.ID, 1)

		if k, err := e.o.KillJob(e.ctx, a.ID); err != nil || k.Status.State != cosmic.StateStopped {
			t.Fatalf("second kill: %s, %v", k.Status.State, err)
		}
		synctest.Wait()
		wantCalls(t, w, "stop "+a.ID+"/-1", 1)
		e.push(w, w.current(a.ID)) // the worker's report of the kill
		e.push(w, w.observe(a.ID, 0, cosmic.StateFailed))
		e.push(w, w.gone(a.ID, 0))
		e.heartbeats(2)
		e.wantState(a.ID, cosmic.StateStopped, cosmic.StateStopped)
		e.wantState(b.ID, cosmic.StatePending, cosmic.StatePending)
		wantHeld(t, e, b.ID, gpus("r1", "n0", all8...))
		e.checkBooks()
	})
}

// A kill the worker cannot carry out fails and keeps the GPUs, whose VMIs
// may still run; the kill asked again succeeds.
func TestKillTheWorkerRefusesKeepsTheGPUs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorker(t, "r1", 8)
		e := newEnv(t, w)
		a := e.create(8)
		e.push(w, w.observe(a.ID, 0, cosmic.StateRunning))
		b := e.create(8)
		w.mu.Lock()
		w.stopErr = fabric.Errorf(fabric.CodeUnavailable, "apiserver down")
		w.mu.Unlock()
		if _, err := e.o.KillJob(e.ctx, a.ID); fabric.ErrorCode(err) != fabric.CodeUnavailable {
			t.Fatalf("kill: %v, want unavailable", err)
		}
		synctest.Wait()
		e.wantState(a.ID, cosmic.StateRunning, cosmic.StateRunning)
		wantHeld(t, e, a.ID, gpus("r1", "n0", all8...))
		e.wantState(b.ID, cosmic.StateQueued, cosmic.StateQueued)
		e.checkBooks()

		w.mu.Lock()
		w.stopErr = nil
		w.mu.Unlock()
		if _, err := e.o.KillJob(e.ctx, a.ID); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		e.wantState(a.ID, cosmic.StateStopped, cosmic.StateStopped)
		e.wantState(b.ID, cosmic.StatePending, cosmic.StatePending)
		e.checkBooks()
	})
}

// A delete of a job holding GPUs asks its worker to delete it, and asks
// again on every heartbeat while the worker still has it; the GPUs are
// released, and the record removed, only once the worker says the job is
// gone, by a pushed report or by no longer listing it. A late Gone of the
// removed job changes nothing but has the worker delete what it holds.
func TestDeleteReleasesGPUsWhenTheWorkerConfirms(t *testing.T) {
	for name, confirm := range map[string]func(e *env, w *fakeWorker, id string){
		"a pushed report":      func(e *env, w *fakeWorker, id string) { e.push(w, w.gone(id, 0)) },
		"the heartbeat's pull": func(e *env, w *fakeWorker, id string) { w.forget(id); e.heartbeats(1) },
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := newWorker(t, "r1", 8)
				e := newEnv(t, w)
				a := e.create(8)
				e.push(w, w.observe(a.ID, 0, cosmic.StateRunning))
				b := e.create(8)

				if _, err := e.o.DeleteJob(e.ctx, orkapi.DeleteJobParams{ID: a.ID}); cosmic.CodeOf(err) != cosmic.CodeConflict {
					t.Fatalf("delete of a running job without force: %v, want a conflict", err)
				}
				e.wantState(a.ID, cosmic.StateRunning, cosmic.StateRunning)
				wantCalls(t, w, "delete "+a.ID+"/-1", 0)
				d, err := e.o.DeleteJob(e.ctx, orkapi.DeleteJobParams{ID: a.ID, Force: true})
				if err != nil || d.Status.State != cosmic.StateDeleting {
					t.Fatalf("delete: %s, %v", d.Status.State, err)
				}
				synctest.Wait()
				wantCalls(t, w, "delete "+a.ID+"/-1", 1)
				e.heartbeats(1)
				wantCalls(t, w, "delete "+a.ID+"/-1", 2)
				if got := e.job(a.ID); got.Status.State != cosmic.StateDeleting {
					t.Fatalf("job %s, want deleting", got.Status.State)
				}
				wantHeld(t, e, a.ID, gpus("r1", "n0", all8...))
				e.wantState(b.ID, cosmic.StateQueued, cosmic.StateQueued)
				e.checkBooks()

				late := w.gone(a.ID, 0)
				confirm(e, w, a.ID)
				e.wantGone(a.ID)
				wantHeld(t, e, a.ID, nil)
				e.wantState(b.ID, cosmic.StatePending, cosmic.StatePending)
				wantHeld(t, e, b.ID, gpus("r1", "n0", all8...))
				e.checkBooks()

				deletes := w.count("delete " + a.ID + "/-1")
				e.push(w, late)
				wantCalls(t, w, "delete "+a.ID+"/-1", deletes+1)
				e.wantGone(a.ID)
				wantHeld(t, e, b.ID, gpus("r1", "n0", all8...))
				e.checkBooks()
			})
		})
	}
}

// An Apply that does not reach the worker leaves the job pending on its
// GPUs, and the next heartbeat, which finds the worker without the job,
// applies it again; once the worker has it, it is applied no more.
func TestFailedApplyIsAppliedAgain(t *testing.T) {
	for name, fault := range map[string]error{
		"refused":                 fabric.Errorf(fabric.CodeUnavailable, "connection refused"),
		"hung until it timed out": errHang,
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := newWorker(t, "r1", 8)
				w.failApplies(fault)
				e := newEnv(t, w)
				j := e.create(8)
				wantCalls(t, w, "apply "+j.ID, 1)
				if w.runs(j.ID) {
					t.Fatal("the failed Apply was taken")
				}
				e.wantState(j.ID, cosmic.StatePending, cosmic.StatePending)
				wantHeld(t, e, j.ID, gpus("r1", "n0", all8...))

				e.heartbeats(1)
				wantCalls(t, w, "apply "+j.ID, 2)
				if !w.runs(j.ID) {
					t.Fatal("the job was not applied again")
				}
				time.Sleep(workerTimeout)
				e.heartbeats(3)
				wantCalls(t, w, "apply "+j.ID, 2)
				e.push(w, w.observe(j.ID, 0, cosmic.StateRunning))
				e.wantState(j.ID, cosmic.StateRunning, cosmic.StateRunning)
				wantHeld(t, e, j.ID, gpus("r1", "n0", all8...))
				e.checkBooks()
			})
		})
	}
}

// An ork started again on the same store has every job as it was (running,
// pending, deleting, queued and its place) and every reservation; it
// applies nothing the worker already runs, never places a job on GPUs
// still held, and places the queued job once GPUs are free.
func TestRestartOnTheSameStore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorker(t, "r1", 8, 8)
		e := newEnv(t, w)
		a := e.create(8) // n0
		e.push(w, w.observe(a.ID, 0, cosmic.StateRunning))
		b := e.create(4) // n1, applied, not reported yet
		d := e.create(4) // n1, running, then deleting
		e.push(w, w.observe(d.ID, 0, cosmic.StateRunning))
		if _, err := e.o.DeleteJob(e.ctx, orkapi.DeleteJobParams{ID: d.ID, Force: true}); err != nil {
			t.Fatal(err)
		}
		c := e.create(8) // queued
		synctest.Wait()
		before, err := e.st.Reservations(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]cosmic.State{a.ID: cosmic.StateRunning, b.ID: cosmic.StatePending, c.ID: cosmic.StateQueued, d.ID: cosmic.StateDeleting}
		check := func() {
			t.Helper()
			for id, s := range want {
				if got := e.job(id); got.Status.State != s {
					t.Fatalf("job %s is %s, want %s", id, got.Status.State, s)
				}
			}
			if got := e.job(c.ID); got.Status.QueuePosition != 1 {
				t.Fatalf("the queued job is at %d, want 1", got.Status.QueuePosition)
			}
			after, err := e.st.Reservations(e.ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.EqualFunc(before, after, func(x, y cosmic.Reservation) bool {
				return x.JobID == y.JobID && x.Replica == y.Replica && slices.Equal(x.GPUs(), y.GPUs())
			}) {
				t.Fatalf("reservations changed:\nbefore %+v\nafter  %+v", before, after)
			}
			e.checkBooks()
		}
		check()

		e.restart()
		check()
		e.heartbeats(2)
		check()
		wantCalls(t, w, "apply "+a.ID, 1)
		wantCalls(t, w, "apply "+b.ID, 1)
		if n := w.count("delete " + d.ID + "/-1"); n < 2 {
			t.Fatalf("the new ork did not ask for the deleting job's delete (%d calls)", n)
		}

		// Half of n1 frees; c, which needs a whole node, waits on.
		e.push(w, w.gone(d.ID, 0))
		e.wantGone(d.ID)
		e.wantState(c.ID, cosmic.StateQueued, cosmic.StateQueued)
		if _, err := e.o.KillJob(e.ctx, a.ID); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		e.wantState(c.ID, cosmic.StatePending, cosmic.StatePending)
		wantHeld(t, e, c.ID, gpus("r1", "n0", all8...))
		wantHeld(t, e, b.ID, gpus("r1", "n1", 0, 1, 2, 3))
		e.checkBooks()
	})
}

// How a worker tells that a replica is gone: it pushes a Gone report, or
// the heartbeat's pull no longer lists it.
var confirmations = map[string]func(e *env, w *fakeWorker, id string, replica int){
	"pushed": func(e *env, w *fakeWorker, id string, replica int) { e.push(w, w.gone(id, replica)) },
	"pulled": func(e *env, w *fakeWorker, id string, replica int) { w.gone(id, replica); e.heartbeats(1) },
}

// A deleting job whose replicas run on several racks, or go one at a
// time, is deleted replica by replica: each replica's GPUs are released
// when the worker holding it says it is gone, the others' stay held
// (their VMIs may still run), and the record goes with the last.
func TestDeleteReleasesEachReplicaWhenItIsGone(t *testing.T) {
	vllm := func(replicas, gpus int) cosmic.Spec {
		return cosmic.Spec{Type: cosmic.TypeManagedInference, Name: "m", Location: "eu",
			Inference: &cosmic.InferenceSpec{Runtime: cosmic.RuntimeVLLM, Model: "Qwen/Qwen3-32B", Replicas: replicas, GPUsPerReplica: gpus}}
	}
	for name, tc := range map[string]struct {
		racks [][]int // the GPUs of each rack's nodes
		spec  cosmic.Spec
		held  [][]string // what each replica holds
		// next is the GPUs of the job queued behind, which takes replica
		// 0's once they are free.
		next int
	}{
		"on two racks": {
			racks: [][]int{{8}, {8}}, spec: vllm(2, 8),
			held: [][]string{gpus("r1", "n0", all8...), gpus("r2", "n0", all8...)},
			next: 8,
		},
		"on one rack": {
			racks: [][]int{{8}}, spec: vllm(2, 4),
			held: [][]string{gpus("r1", "n0", 0, 1, 2, 3), gpus("r1", "n0", 4, 5, 6, 7)},
			next: 4,
		},
	} {
		for how, confirm := range confirmations {
			t.Run(name+", "+how, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					var ws []*fakeWorker
					for i, nodes := range tc.racks {
						ws = append(ws, newWorker(t, fmt.Sprintf("r%d", i+1), nodes...))
					}
					workerOf := func(replica int) *fakeWorker { return ws[min(replica, len(ws)-1)] }
					e := newEnv(t, ws...)
					j := e.createSpec(tc.spec)
					for i := range 2 {
						e.push(workerOf(i), workerOf(i).observe(j.ID, i, cosmic.StateRunning))
					}
					e.wantState(j.ID, cosmic.StateRunning, cosmic.StateRunning, cosmic.StateRunning)
					wantHeld(t, e, j.ID, slices.Sorted(slices.Values(slices.Concat(tc.held...))))
					next := e.create(tc.next)
					e.wantState(next.ID, cosmic.StateQueued, cosmic.StateQueued)

					if _, err := e.o.DeleteJob(e.ctx, orkapi.DeleteJobParams{ID: j.ID, Force: true}); err != nil {
						t.Fatal(err)
					}
					synctest.Wait()
					confirm(e, workerOf(0), j.ID, 0)
					e.wantState(j.ID, cosmic.StateDeleting, cosmic.StateStopped, cosmic.StateRunning)
					wantHeld(t, e, j.ID, tc.held[1])
					e.wantState(next.ID, cosmic.StatePending, cosmic.StatePending)
					wantHeld(t, e, next.ID, tc.held[0])
					e.checkBooks()
					e.heartbeats(2)
					wantHeld(t, e, j.ID, tc.held[1])

					confirm(e, workerOf(1), j.ID, 1)
					e.wantGone(j.ID)
					wantHeld(t, e, next.ID, tc.held[0])
					e.checkBooks()
				})
			})
		}
	}
}

// A replica deleted alone keeps its GPUs until its worker says it is gone;
// then its GPUs are free and it is placed afresh, while the job, still
// starting, keeps its other replica. Only a starting (queued, pending)
// replica of a Managed Inference Job may be deleted or restarted alone.
func TestDeleteOneReplica(t *testing.T) {
	for how, confirm := range confirmations {
		t.Run(how, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := newWorker(t, "r1", 8)
				e := newEnv(t, w)
				j := e.createSpec(cosmic.Spec{Type: cosmic.TypeManagedInference, Name: "m", Location: "eu",
					Inference: &cosmic.InferenceSpec{Runtime: cosmic.RuntimeVLLM, Model: "Qwen/Qwen3-32B", Replicas: 2, GPUsPerReplica: 4}})
				e.push(w, w.observe(j.ID, 0, cosmic.StateRunning))
				e.push(w, w.observe(j.ID, 1, cosmic.StateStarting))
				e.wantState(j.ID, cosmic.StateStarting, cosmic.StateRunning, cosmic.StateStarting)

				zero, one := 0, 1
				if _, err := e.o.DeleteJob(e.ctx, orkapi.DeleteJobParams{ID: j.ID, Replica: &zero}); cosmic.CodeOf(err) != cosmic.CodeConflict {
					t.Errorf("delete the running replica 0: %v, want a conflict", err)
				}
				if _, err := e.o.RestartJob(e.ctx, orkapi.RestartJobParams{ID: j.ID, Replica: &zero}); cosmic.CodeOf(err) != cosmic.CodeConflict {
					t.Errorf("restart the running replica 0: %v, want a conflict", err)
				}
				if _, err := e.o.DeleteJob(e.ctx, orkapi.DeleteJobParams{ID: j.ID, Replica: &one}); err != nil {
					t.Fatal(err)
				}
				synctest.Wait()
				wantCalls(t, w, "delete "+j.ID+"/1", 1)
				e.wantState(j.ID, cosmic.StateStarting, cosmic.StateRunning, cosmic.StateDeleting)
				wantHeld(t, e, j.ID, gpus("r1", "n0", all8...))
				e.checkBooks()

				confirm(e, w, j.ID, 1)
				synctest.Wait()
				// Placed again at once (its GPUs are the ones free) and applied.
				e.wantState(j.ID, cosmic.StateStarting, cosmic.StateRunning, cosmic.StatePending)
				wantHeld(t, e, j.ID, gpus("r1", "n0", all8...))
				wantCalls(t, w, "apply "+j.ID, 2)
				e.push(w, w.observe(j.ID, 1, cosmic.StateRunning))
				e.wantState(j.ID, cosmic.StateRunning, cosmic.StateRunning, cosmic.StateRunning)
				e.checkBooks()
			})
		})
	}
}

// A gpu-container job's replica is never deleted or restarted alone.
func TestReplicaActionsOfAGPUContainerJob(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorker(t, "r1", 8)
		e := newEnv(t, w)
		j := e.create(1)
		zero := 0
		if _, err := e.o.DeleteJob(e.ctx, orkapi.DeleteJobParams{ID: j.ID, Replica: &zero}); cosmic.CodeOf(err) != cosmic.CodeConflict {
			t.Errorf("delete replica 0: %v, want a conflict", err)
		}
		if _, err := e.o.RestartJob(e.ctx, orkapi.RestartJobParams{ID: j.ID, Replica: &zero}); cosmic.CodeOf(err) != cosmic.CodeConflict {
			t.Errorf("restart replica 0: %v, want a conflict", err)
		}
		e.wantState(j.ID, cosmic.StatePending, cosmic.StatePending)
	})
}

// Job names are unique within a team: a second job of the name is refused
// (409) while the first exists, another team may use it, and it is free
// again once the first is gone.
func TestJobNamesAreUniqueWithinATeam(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorker(t, "r1", 8)
		e := newEnv(t, w)
		spec := cosmic.Spec{Type: cosmic.TypeGPUContainer, Name: "train", Location: "eu", Image: "ubuntu:24.04", Resources: cosmic.Resources{GPU: 1}}
		create := func(team string) (cosmic.Job, error) {
			return e.o.CreateJob(e.ctx, orkapi.CreateJobParams{ID: cosmic.NewJobID(), User: "u", Team: team, Spec: spec})
		}
		first, err := create("t")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := create("t"); cosmic.CodeOf(err) != cosmic.CodeConflict || !strings.Contains(err.Error(), first.ID) {
			t.Fatalf("a second job named train in t: %v, want a conflict naming %s", err, first.ID)
		}
		if _, err := create("other"); err != nil {
			t.Fatalf("train in another team: %v", err)
		}
		synctest.Wait()
		if _, err := e.o.DeleteJob(e.ctx, orkapi.DeleteJobParams{ID: first.ID}); err != nil {
			t.Fatal(err)
		}
		e.push(w, w.gone(first.ID, 0))
		e.wantGone(first.ID)
		if _, err := create("t"); err != nil {
			t.Fatalf("train again once the first is gone: %v", err)
		}
	})
}

// watchJobs answers at once without a version, holds a call with the
// current one until a change is committed, and answers the same version
// when its wait ends with no change.
func TestWatchJobs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorker(t, "r1", 8)
		e := newEnv(t, w)
		v0, err := e.o.WatchJobs(e.ctx, orkapi.WatchJobsParams{})
		if err != nil || v0.Epoch == "" {
			t.Fatalf("at once: %+v, %v", v0, err)
		}
		got := make(chan orkapi.JobsVersion, 1)
		go func() {
			v, _ := e.o.WatchJobs(e.ctx, orkapi.WatchJobsParams{Epoch: v0.Epoch, Since: v0.Version, WaitMillis: 60_000})
			got <- v
		}()
		synctest.Wait()
		select {
		case v := <-got:
			t.Fatalf("answered %+v with nothing changed", v)
		default:
		}
		e.create(1)
		v1 := <-got
		if v1.Epoch != v0.Epoch || v1.Version <= v0.Version {
			t.Fatalf("after a create: %+v, want past %+v", v1, v0)
		}
		// Nothing changes: the wait (bounded by MaxWatchJobsWait) ends.
		e.heartbeats(1)
		synctest.Wait()
		v1, _ = e.o.WatchJobs(e.ctx, orkapi.WatchJobsParams{})
		start := time.Now()
		v2, err := e.o.WatchJobs(e.ctx, orkapi.WatchJobsParams{Epoch: v1.Epoch, Since: v1.Version, WaitMillis: 60_000})
		if err != nil || v2 != v1 {
			t.Fatalf("with nothing changed: %+v, %v; want %+v", v2, err, v1)
		}
		if waited := time.Since(start); waited != orkapi.MaxWatchJobsWait {
			t.Fatalf("held %v, want MaxWatchJobsWait (fake time)", waited)
		}
		// Another epoch (a new ork) is answered at once.
		if v, _ := e.o.WatchJobs(e.ctx, orkapi.WatchJobsParams{Epoch: "old", Since: 99, WaitMillis: 60_000}); v != v1 {
			t.Fatalf("another epoch: %+v", v)
		}
	})
}

// A kill waits for the job's Apply still on its way to the worker: the
// Stop follows it, so the Apply cannot land after the Stop and hold the
// GPUs the kill released (the next job's Apply would be refused then).
func TestKillWaitsForTheApplyInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorker(t, "r1", 8)
		e := newEnv(t, w)
		w.failApplies(errHang)
		a := e.create(8) // placed; its Apply hangs until the worker timeout
		killed := make(chan error, 1)
		go func() {
			_, err := e.o.KillJob(e.ctx, a.ID)
			killed <- err
		}()
		synctest.Wait()
		if n := w.count("stop " + a.ID + "/-1"); n != 0 {
			t.Fatalf("stopped %d times while its Apply was in flight", n)
		}
		time.Sleep(workerTimeout) // fake time: the hung Apply gives up
		if err := <-killed; err != nil {
			t.Fatal(err)
		}
		wantCalls(t, w, "stop "+a.ID+"/-1", 1)
		e.wantState(a.ID, cosmic.StateStopped, cosmic.StateStopped)
		e.checkBooks()
	})
}

// A worker that stops answering in the middle of a heartbeat's applies
// (the jobs it should run but does not report) is marked unreachable at
// the first that times out: the others are not tried one workerTimeout
// each, which would hold the next heartbeat, and the rack's reachability,
// up that long (issue 42: a leader cut off from its peers sees it late).
func TestHeartbeatStopsAtTheFirstApplyUnanswered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorker(t, "r1", 8)
		e := newEnv(t, w)
		var jobs []cosmic.Job
		for range 3 {
			jobs = append(jobs, e.create(1))
		}
		e.heartbeats(1)
		for _, j := range jobs {
			w.forget(j.ID)
		}
		w.failApplies(errHang)
		before := map[string]int{}
		for _, j := range jobs {
			before[j.ID] = w.count("apply " + j.ID)
		}
		e.heartbeats(1) // it answers the heartbeat; its first apply hangs
		w.setOutage("hung")
		time.Sleep(workerTimeout)
		synctest.Wait()
		again := 0
		for _, j := range jobs {
			again += w.count("apply "+j.ID) - before[j.ID]
		}
		if again != 1 {
			t.Errorf("the heartbeat applied %d jobs again to a worker whose first apply went unanswered; want 1", again)
		}
		if r := e.o.ListRacks().Racks; len(r) != 1 || r[0].Reachable {
			t.Errorf("racks %+v; want r1 unreachable", r)
		}
	})
}
