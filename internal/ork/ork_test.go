package ork_test

import (
	"context"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/cosmicac/cosmicac/internal/config"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/ork"
	"github.com/cosmicac/cosmicac/internal/ork/orkapi"
	"github.com/cosmicac/cosmicac/internal/store/sqlite"
	"github.com/cosmicac/cosmicac/internal/trust"
	"github.com/cosmicac/cosmicac/internal/worker"
)

// quietWorker is a rack of one 8-GPU node that does what it is told and
// reports nothing by itself: the test pushes its reports.
type quietWorker struct {
	mu      sync.Mutex
	applied []worker.ApplyParams
	deleted []string // the jobs Delete was called for with a live context
	// gate, when set, holds Delete until it is closed.
	gate chan struct{}
}

func (w *quietWorker) Capacity(context.Context) (worker.Capacity, error) {
	return worker.Capacity{Rack: "r1", ObservedAt: time.Now(), Nodes: []cosmic.Node{
		{Name: "n0", Rack: "r1", GPUModel: "H100", GPUs: 8, Schedulable: true, Ready: true}}}, nil
}

func (w *quietWorker) Apply(_ context.Context, p worker.ApplyParams) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.applied = append(w.applied, p)
	return nil
}

func (w *quietWorker) Stop(context.Context, worker.ReplicaRef) error    { return nil }
func (w *quietWorker) Restart(context.Context, worker.ReplicaRef) error { return nil }
func (w *quietWorker) Delete(ctx context.Context, p worker.DeleteParams) error {
	w.mu.Lock()
	gate := w.gate
	w.mu.Unlock()
	if gate != nil {
		<-gate
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.deleted = append(w.deleted, p.JobID)
	return nil
}

func (w *quietWorker) wasDeleted(id string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Contains(w.deleted, id)
}
func (w *quietWorker) Jobs(context.Context) ([]worker.JobReport, error) {
	return []worker.JobReport{}, nil
}
func (w *quietWorker) appliedCount() int { w.mu.Lock(); defer w.mu.Unlock(); return len(w.applied) }

func report(job string, rr worker.ReplicaReport) worker.Report {
	return worker.Report{Rack: "r1", Jobs: []worker.JobReport{{JobID: job, Replicas: []worker.ReplicaReport{rr}}}}
}

// oneJob starts an ork over a fresh store with one rack, r1, of the
// quietWorker w, and one gpu-container job applied there.
func oneJob(t *testing.T, w *quietWorker) (context.Context, *ork.Ork, fabric.PublicKey, cosmic.Job) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	o, err := ork.New(ork.Config{Heartbeat: config.Duration(time.Hour), WorkerTimeout: config.Duration(5 * time.Second)}, st,
		func(fabric.PublicKey, []string) worker.Worker { return w }, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Start(ctx); err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- o.Run(rctx) }()
	t.Cleanup(func() { stop(); <-done })

	id, _ := fabric.GenerateIdentity()
	wkey := id.PublicKey()
	if _, err := o.RegisterRack(ctx, orkapi.RegisterRackParams{Rack: cosmic.Rack{ID: "r1", Location: "eu", GPUModel: "H100", WorkerKey: wkey.String()}}); err != nil {
		t.Fatal(err)
	}
	var j cosmic.Job
	for deadline := time.Now().Add(10 * time.Second); ; {
		// The rack's capacity arrives with the first heartbeat.
		j, err = o.CreateJob(ctx, orkapi.CreateJobParams{ID: cosmic.NewJobID(), User: "u", Team: "t",
			Spec: cosmic.Spec{Type: cosmic.TypeGPUContainer, Name: "j", Location: "eu", Image: "ubuntu:24.04", Resources: cosmic.Resources{GPU: 1}}})
		if err != nil {
			t.Fatal(err)
		}
		if waitFor(func() bool { return w.appliedCount() > 0 }, 2*time.Second) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the job was never applied on the rack")
		}
	}
	return ctx, o, wkey, j
}

// TestLateReportsAreDropped: a replica's report stamped older than one the
// ork applied from the same worker process (a pulled answer overtaken by a
// push, a failure reported again after a restart) changes nothing; a later
// one, an unstamped one and one from a restarted worker process apply.
func TestLateReportsAreDropped(t *testing.T) {
	w := &quietWorker{}
	ctx, o, wkey, j := oneJob(t, w)

	push := func(rr worker.ReplicaReport) cosmic.State {
		t.Helper()
		if err := o.ReceiveReport(ctx, wkey, report(j.ID, rr)); err != nil {
			t.Fatal(err)
		}
		got, err := o.GetJob(ctx, j.ID)
		if err != nil {
			t.Fatal(err)
		}
		return got.Status.Replicas[0].State
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
}

func waitFor(cond func() bool, d time.Duration) bool {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

// watchPeers tells the bound keys: the rack's worker, the placed replica
// with no agent key until its worker reports one, then that key; a watcher
// waiting on the last version wakes at the change; a kill unbinds the
// replica; the ork's keyring binds the rack's worker.
func TestWatchPeers(t *testing.T) {
	w := &quietWorker{}
	ctx, o, wkey, j := oneJob(t, w)
	ring := trust.NewKeyring()
	o.SetKeyring(ring)
	if p, ok := ring.Principal(wkey); !ok || p.Role != trust.Worker || p.Rack != "r1" {
		t.Fatalf("the ork's keyring has the worker as %+v, %v", p, ok)
	}
	p0, err := o.WatchPeers(ctx, trust.WatchPeersParams{})
	if err != nil {
		t.Fatal(err)
	}
	want := trust.Peers{Epoch: p0.Epoch, Version: p0.Version, Racks: []trust.RackPeer{{Rack: "r1", WorkerKey: wkey.String()}},
		Placements: []trust.Placement{{Job: j.ID, Team: "t", Type: cosmic.TypeGPUContainer, Replica: 0, Rack: "r1"}}}
	if diff := cmp.Diff(want, p0); diff != "" {
		t.Fatalf("peers (-want +got):\n%s", diff)
	}
	agent, _ := fabric.GenerateIdentity()
	woke := make(chan trust.Peers, 1)
	go func() {
		p, _ := o.WatchPeers(ctx, trust.WatchPeersParams{Epoch: p0.Epoch, Since: p0.Version, WaitMillis: 20000})
		woke <- p
	}()
	if err := o.ReceiveReport(ctx, wkey, report(j.ID, worker.ReplicaReport{State: cosmic.StateStarting, Nodes: []string{"n0"}, AgentKeys: []string{agent.PublicKey().String()}})); err != nil {
		t.Fatal(err)
	}
	select {
	case p := <-woke:
		if p.Version <= p0.Version || len(p.Placements) != 1 || !slices.Equal(p.Placements[0].AgentKeys, []string{agent.PublicKey().String()}) {
			t.Fatalf("after the report: %+v", p)
		}
	case <-ctx.Done():
		t.Fatal("the watcher never woke")
	}
	if _, err := o.KillJob(ctx, j.ID); err != nil {
		t.Fatal(err)
	}
	p, err := o.WatchPeers(ctx, trust.WatchPeersParams{})
	if err != nil || len(p.Placements) != 0 {
		t.Fatalf("after the kill: %+v, %v", p, err)
	}
	// A restart places it anew, without the last run's key.
	if _, err := o.RestartJob(ctx, orkapi.RestartJobParams{ID: j.ID}); err != nil {
		t.Fatal(err)
	}
	if !waitFor(func() bool {
		p, _ := o.WatchPeers(ctx, trust.WatchPeersParams{})
		return len(p.Placements) == 1 && len(p.Placements[0].AgentKeys) == 0
	}, 10*time.Second) {
		t.Fatal("the restarted job was not placed anew without agent keys")
	}
	got, _ := o.GetJob(ctx, j.ID)
	if len(got.Status.Replicas) == 0 || len(got.Status.Replicas[0].AgentKeys) != 0 {
		t.Fatalf("the new placement's status lists the last run's keys: %+v", got.Status.Replicas)
	}
}

// A pushed report of a job the store does not know (deleted while the
// worker was away) has the worker delete it, though the fabric handler
// that took the push, and its context, ended at once.
func TestOrphanOfAPushedReportIsDeleted(t *testing.T) {
	w := &quietWorker{gate: make(chan struct{})}
	ctx, o, wkey, _ := oneJob(t, w)
	orphan := cosmic.NewJobID()
	hctx, handlerDone := context.WithCancel(ctx)
	if err := o.ReceiveReport(hctx, wkey, report(orphan, worker.ReplicaReport{State: cosmic.StateRunning, Nodes: []string{"n0"}})); err != nil {
		t.Fatal(err)
	}
	handlerDone()
	close(w.gate)
	if !waitFor(func() bool { return w.wasDeleted(orphan) }, 10*time.Second) {
		t.Fatal("the orphan was not deleted on its worker")
	}
}
