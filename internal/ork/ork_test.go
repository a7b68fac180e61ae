package ork_test

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/ork/orkapi"
	"github.com/cosmicac/cosmicac/internal/trust"
	"github.com/cosmicac/cosmicac/internal/worker"
)

func report(job string, rr worker.ReplicaReport) worker.Report {
	return worker.Report{Rack: "r1", Jobs: []worker.JobReport{{JobID: job, Replicas: []worker.ReplicaReport{rr}}}}
}

// oneJob starts an ork over a fresh store with one rack, r1, of one 8-GPU
// node, and one gpu-container job applied there. Call it inside a synctest
// bubble.
func oneJob(t *testing.T) (*env, *fakeWorker, cosmic.Job) {
	t.Helper()
	w := newWorker(t, "r1", 8)
	e := newEnv(t, w)
	j := e.create(1)
	if n := w.count("apply " + j.ID); n != 1 {
		t.Fatalf("the job was applied %d times on the rack, want once", n)
	}
	return e, w, j
}

// TestLateReportsAreDropped: a replica's report stamped older than one the
// ork applied from the same worker process (a pulled answer overtaken by a
// push, a failure reported again after a restart) changes nothing; a later
// one, an unstamped one and one from a restarted worker process apply.
func TestLateReportsAreDropped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, w, j := oneJob(t)
		push := func(rr worker.ReplicaReport) cosmic.State {
			t.Helper()
			if err := e.o.ReceiveReport(e.ctx, w.key, report(j.ID, rr)); err != nil {
				t.Fatal(err)
			}
			return e.job(j.ID).Status.Replicas[0].State
		}
		at := func(p string, seq uint64) worker.Observation { return worker.Observation{Process: p, Seq: seq} }
		steps := []struct {
			rr   worker.ReplicaReport
			want cosmic.State
		}{
			{worker.ReplicaReport{State: cosmic.StateStarting, Observed: at("p1", 5)}, cosmic.StateStarting},
			{worker.ReplicaReport{State: cosmic.StateRunning, Observed: at("p1", 7)}, cosmic.StateRunning},
			{worker.ReplicaReport{State: cosmic.StateStarting, Observed: at("p1", 6)}, cosmic.StateRunning},  // overtaken
			{worker.ReplicaReport{State: cosmic.StateStarting, Observed: at("p1", 7)}, cosmic.StateRunning},  // not newer
			{worker.ReplicaReport{State: cosmic.StateStarting, Observed: at("p2", 1)}, cosmic.StateStarting}, // a restarted worker
			{worker.ReplicaReport{State: cosmic.StateRunning}, cosmic.StateRunning},                          // unstamped
		}
		for i, s := range steps {
			s.rr.Nodes = []string{"n0"}
			if got := push(s.rr); got != s.want {
				t.Fatalf("step %d (%s stamped %+v): replica %s, want %s", i, s.rr.State, s.rr.Observed, got, s.want)
			}
		}
	})
}

// watchPeers tells the bound keys: the rack's worker, the placed replica
// with no agent key until its worker reports one, then that key; a watcher
// waiting on the last version wakes at the change; a kill unbinds the
// replica; the ork's keyring binds the rack's worker.
func TestWatchPeers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, w, j := oneJob(t)
		ctx, o := e.ctx, e.o
		ring := e.ring
		if p, ok := ring.Principal(w.key); !ok || p.Role != trust.Worker || p.Rack != "r1" {
			t.Fatalf("the ork's keyring has the worker as %+v, %v", p, ok)
		}
		p0, err := o.WatchPeers(ctx, orkapi.WatchPeersParams{})
		if err != nil {
			t.Fatal(err)
		}
		want := orkapi.Peers{Epoch: p0.Epoch, Version: p0.Version, Racks: []orkapi.RackPeer{{Rack: "r1", WorkerKey: w.key.String()}},
			Placements: []orkapi.Placement{{Job: j.ID, Team: "t", Type: cosmic.TypeGPUContainer, Replica: 0, Rack: "r1"}}}
		if diff := cmp.Diff(want, p0); diff != "" {
			t.Fatalf("peers (-want +got):\n%s", diff)
		}
		agent, _ := fabric.GenerateIdentity()
		woke := make(chan orkapi.Peers, 1)
		go func() {
			p, _ := o.WatchPeers(ctx, orkapi.WatchPeersParams{Epoch: p0.Epoch, Since: p0.Version, WaitMillis: 20000})
			woke <- p
		}()
		synctest.Wait()
		select {
		case p := <-woke:
			t.Fatalf("the watcher woke before any change: %+v", p)
		default:
		}
		if err := o.ReceiveReport(ctx, w.key, report(j.ID, worker.ReplicaReport{State: cosmic.StateStarting, Nodes: []string{"n0"}, AgentKeys: []string{agent.PublicKey().String()}})); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		select {
		case p := <-woke:
			if p.Version <= p0.Version || len(p.Placements) != 1 || !slices.Equal(p.Placements[0].AgentKeys, []string{agent.PublicKey().String()}) {
				t.Fatalf("after the report: %+v", p)
			}
		default:
			t.Fatal("the watcher did not wake at the report")
		}
		if _, err := o.KillJob(ctx, j.ID); err != nil {
			t.Fatal(err)
		}
		p, err := o.WatchPeers(ctx, orkapi.WatchPeersParams{})
		if err != nil || len(p.Placements) != 0 {
			t.Fatalf("after the kill: %+v, %v", p, err)
		}
		// A restart places it anew, without the last run's key.
		if _, err := o.RestartJob(ctx, orkapi.RestartJobParams{ID: j.ID}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		p, err = o.WatchPeers(ctx, orkapi.WatchPeersParams{})
		if err != nil || len(p.Placements) != 1 || len(p.Placements[0].AgentKeys) != 0 {
			t.Fatalf("the restarted job is not placed anew without agent keys: %+v, %v", p, err)
		}
		got := e.job(j.ID)
		if len(got.Status.Replicas) == 0 || len(got.Status.Replicas[0].AgentKeys) != 0 {
			t.Fatalf("the new placement's status lists the last run's keys: %+v", got.Status.Replicas)
		}
	})
}

// A pushed report of a job the store does not know (deleted while the
// worker was away) has the worker delete it, though the fabric handler
// that took the push, and its context, ended at once.
func TestOrphanOfAPushedReportIsDeleted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, w, _ := oneJob(t)
		w.mu.Lock()
		w.deleteGate = make(chan struct{})
		w.mu.Unlock()
		orphan := cosmic.NewJobID()
		hctx, handlerDone := context.WithCancel(e.ctx)
		if err := e.o.ReceiveReport(hctx, w.key, report(orphan, worker.ReplicaReport{State: cosmic.StateRunning, Nodes: []string{"n0"}})); err != nil {
			t.Fatal(err)
		}
		handlerDone()
		close(w.deleteGate)
		synctest.Wait()
		if !w.wasDeleted(orphan) {
			t.Fatal("the orphan was not deleted on its worker")
		}
	})
}

// TestStoppedAgentsBoundToPush: a killed job with an RW volume keeps its
// agents bound, as stopping, while its rack powers its VMs off (they push
// the volume): until the rack reports the replica stopped, or, when it
// never does, until StopPushWait has passed. A job with nothing to push
// is unbound at the kill.
func TestStoppedAgentsBoundToPush(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorker(t, "r1", 8)
		e := newEnv(t, w)
		agentKey := func() string { id, _ := fabric.GenerateIdentity(); return id.PublicKey().String() }
		rw := []cosmic.Volume{{MountPath: "/out", Permission: "RW", Source: cosmic.VolumeSource{DataStore: &cosmic.DataStoreSource{Alias: "s3", Container: "bucket"}}}}
		start := func(name string, vols []cosmic.Volume) (cosmic.Job, string) {
			j := e.createSpec(cosmic.Spec{Type: cosmic.TypeGPUContainer, Name: name, Location: "eu", Image: "ubuntu:24.04", Resources: cosmic.Resources{GPU: 1}, Volumes: vols})
			k := agentKey()
			e.push(w, report(j.ID, worker.ReplicaReport{State: cosmic.StateRunning, Nodes: []string{"n0"}, AgentKeys: []string{k}}))
			return j, k
		}
		placements := func() map[string]orkapi.Placement {
			p, err := e.o.WatchPeers(e.ctx, orkapi.WatchPeersParams{})
			if err != nil {
				t.Fatal(err)
			}
			out := map[string]orkapi.Placement{}
			for _, pl := range p.Placements {
				out[pl.Job] = pl
			}
			return out
		}
		pushing, pk := start("pushing", rw)
		plain, _ := start("plain", nil)
		expiring, ek := start("expiring", rw)
		for _, j := range []cosmic.Job{pushing, plain, expiring} {
			if _, err := e.o.KillJob(e.ctx, j.ID); err != nil {
				t.Fatal(err)
			}
		}
		got := placements()
		if pl, ok := got[pushing.ID]; !ok || !pl.Stopping || !slices.Equal(pl.AgentKeys, []string{pk}) || pl.Rack != "r1" {
			t.Errorf("the killed job with an RW volume: %+v, %v; want its agent bound as stopping", pl, ok)
		}
		if pl, ok := got[plain.ID]; ok {
			t.Errorf("the killed job with nothing to push is still bound: %+v", pl)
		}
		if pl := got[expiring.ID]; !pl.Stopping || !slices.Equal(pl.AgentKeys, []string{ek}) {
			t.Errorf("the second job with an RW volume: %+v", pl)
		}
		e.push(w, report(pushing.ID, worker.ReplicaReport{State: cosmic.StateStopped, Nodes: []string{"n0"}}))
		got = placements()
		if pl, ok := got[pushing.ID]; ok {
			t.Errorf("the job whose rack reported it stopped is still bound: %+v", pl)
		}
		if _, ok := got[expiring.ID]; !ok {
			t.Error("the job whose rack said nothing yet was unbound")
		}
		time.Sleep(orkapi.StopPushWait + time.Second)
		synctest.Wait()
		if pl, ok := placements()[expiring.ID]; ok {
			t.Errorf("the stopping job is still bound past StopPushWait: %+v", pl)
		}
	})
}

// TestKillKeepsGPUsWhileTheVMPowersOff: a killed job whose agent pushes
// its RW volume is stopped at once but keeps its GPUs while its VM powers
// off, for a rack that passes GPUs through cannot give them to another VM
// before: another job waits for them, a restart is refused, and they go
// when the rack reports the replica stopped. A rack that never says so
// has them back after powerOffWait, also across a new ork, which binds
// the agent as stopping again. A job with nothing to push frees them at
// the kill.
func TestKillKeepsGPUsWhileTheVMPowersOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorker(t, "r1", 1)
		w.powersOff = true
		e := newEnv(t, w)
		rw := []cosmic.Volume{{MountPath: "/out", Permission: "RW", Source: cosmic.VolumeSource{DataStore: &cosmic.DataStoreSource{Alias: "s3", Container: "bucket"}}}}
		start := func(name string) (cosmic.Job, string) {
			j := e.createSpec(cosmic.Spec{Type: cosmic.TypeGPUContainer, Name: name, Location: "eu", Image: "ubuntu:24.04", Resources: cosmic.Resources{GPU: 1}, Volumes: rw})
			id, _ := fabric.GenerateIdentity()
			k := id.PublicKey().String()
			e.push(w, report(j.ID, worker.ReplicaReport{State: cosmic.StateRunning, Nodes: []string{"n0"}, AgentKeys: []string{k}}))
			e.wantState(j.ID, cosmic.StateRunning, cosmic.StateRunning)
			return j, k
		}
		kill := func(id string) {
			t.Helper()
			if _, err := e.o.KillJob(e.ctx, id); err != nil {
				t.Fatal(err)
			}
			e.wantState(id, cosmic.StateStopped, cosmic.StateStopped)
		}
		stopping := func(id string) orkapi.Placement {
			t.Helper()
			p, err := e.o.WatchPeers(e.ctx, orkapi.WatchPeersParams{})
			if err != nil {
				t.Fatal(err)
			}
			var out []orkapi.Placement
			for _, pl := range p.Placements {
				if pl.Job == id {
					out = append(out, pl)
				}
			}
			if len(out) != 1 || !out[0].Stopping {
				t.Fatalf("placements of %s: %+v; want one, stopping", id, out)
			}
			return out[0]
		}

		pushing, _ := start("pushing")
		kill(pushing.ID)
		if got := e.held(pushing.ID); len(got) != 1 {
			t.Fatalf("the killed job's VM powers off: it holds %v, want its GPU", got)
		}
		stopping(pushing.ID)
		next := e.create(1)
		e.heartbeats(3)
		if j := e.job(next.ID); j.Status.State != cosmic.StateQueued {
			t.Fatalf("the next job is %s while the only GPU's VM powers off; want queued", j.Status.State)
		}
		e.checkBooks()
		if _, err := e.o.RestartJob(e.ctx, orkapi.RestartJobParams{ID: pushing.ID}); fabric.ErrorCode(err) != orkapi.CodeConflict {
			t.Fatalf("restart while the VM powers off: %v, want a conflict", err)
		}
		// The VM still up, its agent pushing: nothing changes.
		e.push(w, report(pushing.ID, worker.ReplicaReport{State: cosmic.StateRunning, Nodes: []string{"n0"}}))
		e.wantState(pushing.ID, cosmic.StateStopped, cosmic.StateStopped)
		// Off: the GPU goes to the next job.
		e.push(w, w.observe(pushing.ID, 0, cosmic.StateStopped))
		if got := e.held(pushing.ID); len(got) != 0 {
			t.Fatalf("the rack reported the VM off, yet the job holds %v", got)
		}
		e.heartbeats(1)
		if got := e.held(next.ID); len(got) != 1 {
			t.Fatalf("the next job holds %v once the GPU is free; want it placed", got)
		}
		e.checkBooks()
		kill(next.ID) // nothing to push: freed at once
		if got := e.held(next.ID); len(got) != 0 {
			t.Fatalf("a job with nothing to push holds %v after its kill", got)
		}

		// A delete meanwhile follows the power-off: the record goes with
		// the VM.
		deleted, dkey := start("deleted")
		kill(deleted.ID)
		if _, err := e.o.DeleteJob(e.ctx, orkapi.DeleteJobParams{ID: deleted.ID}); err != nil {
			t.Fatal(err)
		}
		e.wantState(deleted.ID, cosmic.StateDeleting, cosmic.StateStopped)
		if !w.wasDeleted(deleted.ID) {
			t.Fatal("the rack was not asked to delete the job (it does so once the VM is off)")
		}
		e.checkBooks()
		// A new ork binds its agent as stopping still, not as running.
		e.restart()
		if pl := stopping(deleted.ID); !slices.Equal(pl.AgentKeys, []string{dkey}) {
			t.Fatalf("after a new ork, the deleted job's stopping agent has keys %v, want %v", pl.AgentKeys, dkey)
		}
		e.push(w, w.gone(deleted.ID, 0))
		e.wantGone(deleted.ID)

		// A forced delete of a running job that pushes is a kill first: its
		// VM powers off, pushing, and the delete follows; not forced on
		// the rack.
		forced, _ := start("forced")
		if _, err := e.o.DeleteJob(e.ctx, orkapi.DeleteJobParams{ID: forced.ID, Force: true}); err != nil {
			t.Fatal(err)
		}
		if j := e.wantState(forced.ID, cosmic.StateDeleting, cosmic.StateStopped); !slices.ContainsFunc(j.Status.History, func(c cosmic.StatusChange) bool { return c.State == cosmic.StateStopped }) {
			t.Fatalf("the forced delete of a pushing job did not stop it first: %+v", j.Status.History)
		}
		if w.count("stop "+forced.ID+"/-1") != 1 || len(e.held(forced.ID)) != 1 {
			t.Fatalf("the forced delete: %d stops, holds %v; want one stop and its GPU until the VM is off", w.count("stop "+forced.ID+"/-1"), e.held(forced.ID))
		}
		w.mu.Lock()
		cut := slices.Contains(w.forced, forced.ID)
		w.mu.Unlock()
		if !w.wasDeleted(forced.ID) || cut {
			t.Fatalf("the rack was asked to delete the job: %v, with force: %v; want asked, without force", w.wasDeleted(forced.ID), cut)
		}
		e.push(w, w.gone(forced.ID, 0))
		e.wantGone(forced.ID)

		silent, key := start("silent")
		kill(silent.ID)
		e.restart()
		if got := e.held(silent.ID); len(got) != 1 {
			t.Fatalf("after a new ork, the powering-off job holds %v, want its GPU", got)
		}
		if pl := stopping(silent.ID); !slices.Equal(pl.AgentKeys, []string{key}) {
			t.Fatalf("after a new ork, the stopping agent's keys are %v, want %v", pl.AgentKeys, key)
		}
		e.checkBooks()
		time.Sleep(orkapi.StopPushWait)
		synctest.Wait()
		if got := e.held(silent.ID); len(got) != 1 {
			t.Fatalf("before the wait's end, the job holds %v, want its GPU", got)
		}
		time.Sleep(time.Minute + 2*heartbeat)
		synctest.Wait()
		if got := e.held(silent.ID); len(got) != 0 {
			t.Fatalf("the rack never reported the VM off: the job still holds %v", got)
		}
		e.checkBooks()
	})
}
