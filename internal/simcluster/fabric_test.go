package simcluster

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/cosmicac/cosmicac/internal/config"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/joblog"
	"github.com/cosmicac/cosmicac/internal/simcluster/simapi"
	"github.com/cosmicac/cosmicac/internal/worker"
)

func newIdentity(t *testing.T) *fabric.Identity {
	t.Helper()
	id, err := fabric.GenerateIdentity()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func newNode(t *testing.T, component string, id *fabric.Identity, policy fabric.Policy) *fabric.Node {
	t.Helper()
	n, err := fabric.New(fabric.Config{Component: component, Identity: id, Listen: "127.0.0.1:0", Policy: policy, DialTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

func callCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// runCluster runs c until the test ends.
func runCluster(t *testing.T, c *Cluster) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

func TestFaultMethodsOverTheFabric(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Step = config.Duration(step)
	rep := &fakeReporter{}
	c := mustNew(t, cfg, Deps{Reporter: rep, Logs: joblog.NewRing(1000)})
	runCluster(t, c)

	opsID := newIdentity(t)
	allow := fabric.NewAllowList(opsID.PublicKey())
	sim := newNode(t, "wrk-sim", newIdentity(t), allow)
	worker.Serve(sim, c)
	c.RegisterFaults(sim)
	ops := newNode(t, "cli", opsID, fabric.NewAllowList(sim.PublicKey()))
	ops.AddAddrs(sim.PublicKey(), sim.Addr())

	call := func(method, params string) (simapi.FaultAck, error) {
		var ack simapi.FaultAck
		var p any
		if params != "" {
			p = json.RawMessage(params)
		}
		err := ops.Call(callCtx(t), sim.PublicKey(), method, p, &ack)
		return ack, err
	}

	// A running replica to break, over the worker contract itself.
	w := worker.NewClient(ops, sim.PublicKey())
	err := w.Apply(callCtx(t), worker.ApplyParams{Job: testJob(jobA), Reservations: []cosmic.Reservation{
		resv(jobA, 0, on(0, 0, 1)), resv(jobA, 1, on(1, 0, 1)),
	}})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{c: c, rep: rep}
	e.waitState(t, jobA, 0, cosmic.StateRunning)
	e.waitState(t, jobA, 1, cosmic.StateRunning)

	errors := map[string]struct {
		method, params, code string
	}{
		"unknown field":          {simapi.MethodFailImport, `{"job":"x"}`, fabric.CodeBadRequest},
		"not JSON object":        {simapi.MethodCrash, `[1]`, fabric.CodeBadRequest},
		"import of unknown job":  {simapi.MethodFailImport, `{"jobId":"` + jobB + `","replica":0}`, fabric.CodeNotFound},
		"import already done":    {simapi.MethodFailImport, `{"jobId":"` + jobA + `","replica":0}`, fabric.CodeBadRequest},
		"crash without job":      {simapi.MethodCrash, `{}`, fabric.CodeBadRequest},
		"crash unknown replica":  {simapi.MethodCrash, `{"jobId":"` + jobA + `","replica":7}`, fabric.CodeNotFound},
		"lose unknown node":      {simapi.MethodLoseNode, `{"node":"sim-us-1-node-9"}`, fabric.CodeNotFound},
		"lose no node":           {simapi.MethodLoseNode, `{}`, fabric.CodeBadRequest},
		"restore unknown node":   {simapi.MethodRestoreNode, `{"node":"nope"}`, fabric.CodeNotFound},
		"unreachable no seconds": {simapi.MethodUnreachable, `{}`, fabric.CodeBadRequest},
		"unreachable too long":   {simapi.MethodUnreachable, `{"seconds":1e9}`, fabric.CodeBadRequest},
		"hold a running agent":   {simapi.MethodHoldAgent, `{"jobId":"` + jobA + `","replica":0}`, fabric.CodeBadRequest},
		"hold unknown replica":   {simapi.MethodHoldAgent, `{"jobId":"` + jobA + `","replica":7}`, fabric.CodeNotFound},
	}
	for name, tc := range errors {
		t.Run(name, func(t *testing.T) {
			if _, err := call(tc.method, tc.params); fabric.ErrorCode(err) != tc.code {
				t.Errorf("%s %s = %v, want %s", tc.method, tc.params, err, tc.code)
			}
		})
	}

	ack, err := call(simapi.MethodCrash, `{"jobId":"`+jobA+`","replica":1}`)
	if err != nil || ack.Fault != simapi.MethodCrash || ack.Detail == "" {
		t.Fatalf("simCrash = %+v, %v", ack, err)
	}
	if r := e.waitState(t, jobA, 1, cosmic.StateFailed); reasonCode(r) != cosmic.ReasonVMICrashed {
		t.Errorf("crashed replica reason = %+v", r.Reason)
	}

	if _, err := call(simapi.MethodLoseNode, `{"node":"sim-us-1-node-0"}`); err != nil {
		t.Fatal(err)
	}
	if r := e.waitState(t, jobA, 0, cosmic.StateFailed); reasonCode(r) != cosmic.ReasonNodeLost {
		t.Errorf("replica on the lost node: reason = %+v", r.Reason)
	}
	capa, err := w.Capacity(callCtx(t))
	if err != nil || capa.Nodes[0].Ready {
		t.Errorf("capacity after simLoseNode = %+v, %v", capa, err)
	}
	if _, err := call(simapi.MethodRestoreNode, `{"node":"sim-us-1-node-0"}`); err != nil {
		t.Fatal(err)
	}
	if capa, err := w.Capacity(callCtx(t)); err != nil || !capa.Nodes[0].Ready {
		t.Errorf("capacity after simRestoreNode = %+v, %v", capa, err)
	}

	if _, err := call(simapi.MethodFailImport, `{"jobId":""}`); err != nil {
		t.Fatal(err)
	}
	if err := w.Apply(callCtx(t), worker.ApplyParams{Job: testJob(jobB), Reservations: []cosmic.Reservation{resv(jobB, 0, on(0, 0))}}); err != nil {
		t.Fatal(err)
	}
	if r := e.waitState(t, jobB, 0, cosmic.StateFailed); reasonCode(r) != cosmic.ReasonImportFailed {
		t.Errorf("replica whose import was failed: reason = %+v", r.Reason)
	}
}

// orkSide records the reports an ork receives.
type orkSide struct {
	mu      sync.Mutex
	reports []worker.Report
	from    []fabric.PublicKey
}

func (o *orkSide) ReceiveReport(_ context.Context, from fabric.PublicKey, r worker.Report) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.reports = append(o.reports, r)
	o.from = append(o.from, from)
	return nil
}

func (o *orkSide) count() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.reports)
}

func TestUnreachableTakesTheWorkerOffTheFabric(t *testing.T) {
	simID, orkID := newIdentity(t), newIdentity(t)
	rcv := &orkSide{}
	ork := newNode(t, "wrk-ork", orkID, fabric.NewAllowList(simID.PublicKey()))
	worker.ServeReporter(ork, rcv)

	cfg := DefaultConfig()
	cfg.Step = config.Duration(step)
	s, err := NewServer(cfg, ServerDeps{
		Fabric: fabric.Config{Component: "wrk-sim", Identity: simID, Listen: "127.0.0.1:0", Policy: fabric.NewAllowList(orkID.PublicKey()), DialTimeout: 2 * time.Second},
		Ork:    orkID.PublicKey(), OrkAddrs: []string{ork.Addr()},
	})
	if err != nil {
		t.Fatal(err)
	}
	c := s.Cluster
	c.ackGrace = 50 * time.Millisecond
	t.Cleanup(func() { s.Close() })
	runCluster(t, c)
	addr := s.Addr()
	ork.AddAddrs(simID.PublicKey(), addr)
	w := worker.NewClient(ork, simID.PublicKey())

	if err := w.Apply(callCtx(t), worker.ApplyParams{Job: testJob(jobA), Reservations: []cosmic.Reservation{resv(jobA, 0, on(0, 0))}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a report at the ork", func() bool { return rcv.count() > 0 })

	var ack simapi.FaultAck
	if err := ork.Call(callCtx(t), simID.PublicKey(), simapi.MethodUnreachable, simapi.UnreachableParams{Seconds: 1}, &ack); err != nil {
		t.Fatalf("simUnreachable: %v", err)
	}
	if ack.Until.IsZero() {
		t.Errorf("ack = %+v, want the outage's end", ack)
	}
	waitFor(t, "the worker to leave the fabric", func() bool { return s.Node() == nil })
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	_, err = w.Capacity(ctx)
	cancel()
	if err == nil {
		t.Fatal("Capacity answered during the outage")
	}
	seen := rcv.count()

	waitFor(t, "the worker to come back", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		_, err := w.Capacity(ctx)
		return err == nil
	})
	if s.Addr() != addr || s.Node().PublicKey() != simID.PublicKey() {
		t.Errorf("back at %s as %s, want %s as %s", s.Addr(), s.Node().PublicKey().Short(), addr, simID.PublicKey().Short())
	}
	// Back, it reports its whole state.
	waitFor(t, "a full report after the outage", func() bool {
		rcv.mu.Lock()
		defer rcv.mu.Unlock()
		for _, r := range rcv.reports[seen:] {
			if r.Capacity != nil && len(r.Jobs) == 1 && r.Jobs[0].JobID == jobA {
				return true
			}
		}
		return false
	})
	rcv.mu.Lock()
	for _, k := range rcv.from {
		if k != simID.PublicKey() {
			t.Errorf("report from %s", k.Short())
		}
	}
	rcv.mu.Unlock()
	jobs, err := w.Jobs(callCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{jobA}, []string{jobs[0].JobID}); diff != "" || len(jobs) != 1 {
		t.Errorf("Jobs after the outage = %+v", jobs)
	}
}
