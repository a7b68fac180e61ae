package ork_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/joblog"
	"github.com/cosmicac/cosmicac/internal/ork"
	"github.com/cosmicac/cosmicac/internal/ork/orkapi"
	"github.com/cosmicac/cosmicac/internal/store/sqlite"
	"github.com/cosmicac/cosmicac/internal/trust"
	"github.com/cosmicac/cosmicac/internal/worker"
)

// The harness of the ork's unit tests: the real ork over the real SQLite
// store, driven in-process inside a testing/synctest bubble. The ork
// reaches its racks' workers through its Dialer, which hands it
// fakeWorkers; a worker's pushed reports are ork.ReceiveReport calls, as
// worker.ServeReporter makes them of the fabric's. Time is the bubble's:
// a heartbeat is time.Sleep(heartbeat) and synctest.Wait, which returns
// once everything the ork started meanwhile is done or blocked.

var (
	heartbeat     = ork.DefaultConfig().Heartbeat.D()
	workerTimeout = ork.DefaultConfig().WorkerTimeout.D()
)

// errHang, as a fault of the fakeWorker's Apply, makes that Apply block
// until its context ends.
var errHang = errors.New("hang")

// fakeWorker plays one rack's worker. Like the real workers it keeps each
// replica's last observation with the stamp it took then (worker.Observe),
// and answers Jobs with those; unlike them it changes nothing by itself:
// the test says what it observes (observe, gone), and pushes the reports
// that returns.
type fakeWorker struct {
	rack    string
	key     fabric.PublicKey
	nodes   []cosmic.Node
	process string

	mu    sync.Mutex
	seq   uint64
	calls []string // "apply JOB", "stop JOB/REPLICA", "delete JOB/REPLICA", ...
	// jobs is what the worker runs: each replica's last observation.
	jobs map[string]map[int]worker.ReplicaReport
	// applyFaults are what the next Applies do instead of applying, in
	// turn: return the error, or hang (errHang).
	applyFaults []error
	// stopErr, when set, is what Stop returns.
	stopErr error
	// powersOff makes Stop leave the replicas as they are, as a rack
	// whose VMs power off, their agents pushing, until observe says
	// they are off.
	powersOff bool
	// deleteGate, when set, holds Delete until it is closed; a Delete
	// whose context ended meanwhile fails.
	deleteGate chan struct{}
	// deleted are the jobs Delete succeeded for, and forced those it
	// was asked with Force.
	deleted, forced []string
	// overhead is the VM overhead the worker reports.
	overhead cosmic.VMOverhead
	// catalogue is the catalogue the worker reports (nil: none).
	catalogue *cosmic.Catalogue
	// volumes are the standalone volumes the worker reports it keeps.
	volumes []cosmic.StoredVolume
	// volumeGate, when set, holds DeleteVolume until it is closed.
	volumeGate chan struct{}
	// outage: "" (up), "refused" (every call fails at once, as a worker
	// whose process is gone) or "hung" (every call blocks until its
	// context ends, as a worker cut off by the network).
	outage string
}

// newWorker is the worker of rack id, with one node per count of GPUs
// (n0, n1, ...).
func newWorker(t *testing.T, id string, gpus ...int) *fakeWorker {
	t.Helper()
	ident, err := fabric.GenerateIdentity()
	if err != nil {
		t.Fatal(err)
	}
	w := &fakeWorker{rack: id, key: ident.PublicKey(), process: "proc-" + id, jobs: map[string]map[int]worker.ReplicaReport{}}
	for i, g := range gpus {
		w.nodes = append(w.nodes, cosmic.Node{Name: fmt.Sprintf("n%d", i), Rack: id, GPUModel: "H100", GPUs: g, Schedulable: true, Ready: true})
	}
	return w
}

// enter records a call and plays the outage, if any.
func (w *fakeWorker) enter(ctx context.Context, call string) error {
	w.mu.Lock()
	w.calls = append(w.calls, call)
	outage := w.outage
	w.mu.Unlock()
	switch outage {
	case "refused":
		return fabric.Errorf(fabric.CodeUnavailable, "rack %s: connection refused", w.rack)
	case "hung":
		<-ctx.Done()
		return ctx.Err()
	}
	return nil
}

func (w *fakeWorker) Capacity(ctx context.Context) (worker.Capacity, error) {
	if err := w.enter(ctx, "capacity"); err != nil {
		return worker.Capacity{}, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return worker.Capacity{Rack: w.rack, Nodes: slices.Clone(w.nodes), ObservedAt: time.Now(), Overhead: w.overhead, Catalogue: w.catalogue,
		Volumes: slices.Clone(w.volumes)}, nil
}

func (w *fakeWorker) Apply(ctx context.Context, p worker.ApplyParams) error {
	if err := w.enter(ctx, "apply "+p.Job.ID); err != nil {
		return err
	}
	if err := worker.CheckApply(p, w.rack); err != nil {
		return err
	}
	w.mu.Lock()
	var fault error
	if len(w.applyFaults) > 0 {
		fault, w.applyFaults = w.applyFaults[0], w.applyFaults[1:]
	}
	w.mu.Unlock()
	switch {
	case errors.Is(fault, errHang):
		<-ctx.Done()
		return ctx.Err()
	case fault != nil:
		return fault
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, r := range p.Reservations {
		if _, ok := w.jobs[p.Job.ID][r.Replica]; !ok {
			w.setLocked(p.Job.ID, worker.ReplicaReport{Replica: r.Replica, State: cosmic.StatePending, Nodes: r.NodeNames()})
		}
	}
	return nil
}

func (w *fakeWorker) Stop(ctx context.Context, r worker.ReplicaRef) error {
	if err := w.enter(ctx, fmt.Sprintf("stop %s/%d", r.JobID, r.Replica)); err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopErr != nil {
		return w.stopErr
	}
	if w.powersOff {
		return nil
	}
	for i, rr := range w.jobs[r.JobID] {
		if r.Replica == worker.AllReplicas || r.Replica == i {
			w.setLocked(r.JobID, worker.ReplicaReport{Replica: i, State: cosmic.StateStopped, Nodes: rr.Nodes})
		}
	}
	return nil
}

func (w *fakeWorker) Restart(ctx context.Context, r worker.ReplicaRef) error {
	return w.enter(ctx, fmt.Sprintf("restart %s/%d", r.JobID, r.Replica))
}

// Delete is taken and left to the test: the replicas go when it says so
// (gone).
func (w *fakeWorker) Delete(ctx context.Context, p worker.DeleteParams) error {
	if err := w.enter(ctx, fmt.Sprintf("delete %s/%d", p.JobID, p.Replica)); err != nil {
		return err
	}
	w.mu.Lock()
	gate := w.deleteGate
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
	if p.Force {
		w.forced = append(w.forced, p.JobID)
	}
	return nil
}

// DeleteVolume removes a volume the worker keeps, unless a job has it.
func (w *fakeWorker) DeleteVolume(ctx context.Context, p worker.VolumeRef) error {
	if err := w.enter(ctx, "deleteVolume "+p.Team+"/"+p.Name); err != nil {
		return err
	}
	w.mu.Lock()
	gate := w.volumeGate
	w.mu.Unlock()
	if gate != nil {
		<-gate
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	i := slices.IndexFunc(w.volumes, func(v cosmic.StoredVolume) bool { return v.Team == p.Team && v.Name == p.Name })
	switch {
	case i < 0:
		return fmt.Errorf("%w: no volume %s", cosmic.ErrNotFound, p.Name)
	case w.volumes[i].Job != "":
		return fmt.Errorf("%w: volume %s is mounted by job %s", cosmic.ErrConflict, p.Name, w.volumes[i].Job)
	}
	w.volumes = slices.Delete(w.volumes, i, i+1)
	return nil
}

func (w *fakeWorker) Jobs(ctx context.Context) ([]worker.JobReport, error) {
	if err := w.enter(ctx, "jobs"); err != nil {
		return nil, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	out := []worker.JobReport{}
	for _, id := range slices.Sorted(maps.Keys(w.jobs)) {
		jr := worker.JobReport{JobID: id}
		for _, i := range slices.Sorted(maps.Keys(w.jobs[id])) {
			jr.Replicas = append(jr.Replicas, w.jobs[id][i])
		}
		out = append(out, jr)
	}
	return out, nil
}

// setLocked records rep as the replica's observation, stamped now.
func (w *fakeWorker) setLocked(job string, rep worker.ReplicaReport) worker.ReplicaReport {
	w.seq++
	rep.Observed = worker.Observation{Process: w.process, Seq: w.seq}
	if w.jobs[job] == nil {
		w.jobs[job] = map[int]worker.ReplicaReport{}
	}
	w.jobs[job][rep.Replica] = rep
	return rep
}

// observe makes the worker see replica in state (on the nodes it was
// applied to) and returns the report it pushes.
func (w *fakeWorker) observe(job string, replica int, state cosmic.State) worker.Report {
	w.mu.Lock()
	defer w.mu.Unlock()
	rep := w.setLocked(job, worker.ReplicaReport{Replica: replica, State: state, Nodes: w.jobs[job][replica].Nodes})
	return worker.Report{Rack: w.rack, Jobs: []worker.JobReport{{JobID: job, Replicas: []worker.ReplicaReport{rep}}}}
}

// current is the report of the job's replicas as the worker last observed
// them, stamps and all: what a push of them again carries.
func (w *fakeWorker) current(job string) worker.Report {
	w.mu.Lock()
	defer w.mu.Unlock()
	jr := worker.JobReport{JobID: job}
	for _, i := range slices.Sorted(maps.Keys(w.jobs[job])) {
		jr.Replicas = append(jr.Replicas, w.jobs[job][i])
	}
	return worker.Report{Rack: w.rack, Jobs: []worker.JobReport{jr}}
}

// restartProcess is a new worker process: its stamps start again.
func (w *fakeWorker) restartProcess() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.process += "'"
	w.seq = 0
}

// gone makes the replica's objects vanish and returns the report it
// pushes (Gone), as worker.ReportQueue.SetGone makes it.
func (w *fakeWorker) gone(job string, replica int) worker.Report {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seq++
	rep := worker.ReplicaReport{Replica: replica, State: cosmic.StateStopped, Gone: true, Observed: worker.Observation{Process: w.process, Seq: w.seq}}
	delete(w.jobs[job], replica)
	if len(w.jobs[job]) == 0 {
		delete(w.jobs, job)
	}
	return worker.Report{Rack: w.rack, Jobs: []worker.JobReport{{JobID: job, Replicas: []worker.ReplicaReport{rep}}}}
}

// forget drops the job without a word (a worker that lost it).
func (w *fakeWorker) forget(job string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.jobs, job)
}

// keep makes the worker report the standalone volumes vols.
func (w *fakeWorker) keep(vols ...cosmic.StoredVolume) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.volumes = vols
}

func (w *fakeWorker) setOutage(o string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.outage = o
}

func (w *fakeWorker) failApplies(faults ...error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.applyFaults = append(w.applyFaults, faults...)
}

// count is how many calls were exactly call.
func (w *fakeWorker) count(call string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, c := range w.calls {
		if c == call {
			n++
		}
	}
	return n
}

func (w *fakeWorker) wasDeleted(job string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Contains(w.deleted, job)
}

// runs reports whether the worker has the job.
func (w *fakeWorker) runs(job string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, ok := w.jobs[job]
	return ok
}

// env is one ork over one SQLite file and its racks' fakeWorkers.
type env struct {
	t       *testing.T
	ctx     context.Context
	path    string
	workers map[string]*fakeWorker // by worker key
	errs    *errorLog

	st   *sqlite.Store
	o    *ork.Ork
	ring *trust.Keyring // the ork's keyring: its racks' workers are bound there
	stop func()         // ends Run and closes the store
	// created counts the jobs create made, to name each its own.
	created int
	// tune, if set, changes the ork's config (newEnvConfig).
	tune func(*ork.Config)
	// records are the ork's system records of jobs.
	records *joblog.Ring
}

// newEnv starts an ork over a new store and registers the workers' racks,
// all in location eu. Call it inside a synctest bubble.
func newEnv(t *testing.T, workers ...*fakeWorker) *env {
	t.Helper()
	return newEnvConfig(t, nil, workers...)
}

// newEnvConfig is newEnv with an ork whose config tune changes.
func newEnvConfig(t *testing.T, tune func(*ork.Config), workers ...*fakeWorker) *env {
	t.Helper()
	e := &env{t: t, ctx: t.Context(), path: filepath.Join(t.TempDir(), "ork.db"), workers: map[string]*fakeWorker{}, errs: &errorLog{}, tune: tune, ring: trust.NewKeyring(), records: joblog.NewRing(1000)}
	for _, w := range workers {
		e.workers[w.key.String()] = w
	}
	e.start()
	for _, w := range workers {
		if _, err := e.o.RegisterRack(e.ctx, orkapi.RegisterRackParams{Rack: cosmic.Rack{ID: w.rack, Location: "eu", GPUModel: "H100", WorkerKey: w.key.String()}}); err != nil {
			t.Fatal(err)
		}
	}
	synctest.Wait()
	t.Cleanup(func() {
		if e.stop != nil {
			e.stop()
		}
		if errs := e.errs.list(); len(errs) > 0 {
			t.Errorf("the ork logged errors:\n%s", strings.Join(errs, "\n"))
		}
	})
	return e
}

// start opens the store and starts an ork on it, idle once it returns.
func (e *env) start() {
	e.t.Helper()
	st, err := sqlite.Open(e.path)
	if err != nil {
		e.t.Fatal(err)
	}
	dial := func(key fabric.PublicKey, _ []string) worker.Worker { return e.workers[key.String()] }
	cfg := ork.DefaultConfig()
	if e.tune != nil {
		e.tune(&cfg)
	}
	o, err := ork.New(cfg, ork.Deps{Store: st, Dial: dial, Keys: e.ring, Records: e.records, Log: slog.New(e.errs)})
	if err != nil {
		e.t.Fatal(err)
	}
	if err := o.Start(e.ctx); err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	go func() { done <- o.Run(ctx) }()
	e.st, e.o = st, o
	e.stop = func() {
		cancel()
		if err := <-done; err != nil {
			e.t.Errorf("run: %v", err)
		}
		if err := st.Close(); err != nil {
			e.t.Errorf("close store: %v", err)
		}
	}
	synctest.Wait()
}

// restart stops the ork and starts a new one on the same file.
func (e *env) restart() {
	e.t.Helper()
	e.stop()
	e.stop = nil
	e.start()
}

// heartbeats lets n heartbeats pass, and what they started finish.
func (e *env) heartbeats(n int) {
	time.Sleep(time.Duration(n) * heartbeat)
	synctest.Wait()
}

// create creates a gpu-container job asking for gpus, and lets the ork
// place it.
func (e *env) create(gpus int) cosmic.Job {
	e.t.Helper()
	e.created++
	return e.createSpec(cosmic.Spec{Type: cosmic.TypeGPUContainer, Name: fmt.Sprintf("c%d", e.created), Location: "eu", Image: "ubuntu:24.04", Resources: cosmic.Resources{GPU: gpus}})
}

func (e *env) createSpec(spec cosmic.Spec) cosmic.Job {
	e.t.Helper()
	j, err := e.o.CreateJob(e.ctx, orkapi.CreateJobParams{ID: cosmic.NewJobID(), User: "u", Team: "t", Spec: spec})
	if err != nil {
		e.t.Fatal(err)
	}
	synctest.Wait()
	return j
}

// push delivers a worker's report, as its ReportQueue does.
func (e *env) push(w *fakeWorker, rep worker.Report) {
	e.t.Helper()
	if err := e.o.ReceiveReport(e.ctx, w.key, rep); err != nil {
		e.t.Fatal(err)
	}
	synctest.Wait()
}

func (e *env) job(id string) cosmic.Job {
	e.t.Helper()
	j, err := e.o.GetJob(e.ctx, id)
	if err != nil {
		e.t.Fatalf("get job %s: %v", id, err)
	}
	return j
}

// wantState fails unless the job and its replicas are in these states.
func (e *env) wantState(id string, job cosmic.State, replicas ...cosmic.State) cosmic.Job {
	e.t.Helper()
	j := e.job(id)
	var got []cosmic.State
	for _, r := range j.Status.Replicas {
		got = append(got, r.State)
	}
	if j.Status.State != job || !slices.Equal(got, replicas) {
		e.t.Fatalf("job %s is %s with replicas %v, want %s with %v", id, j.Status.State, got, job, replicas)
	}
	return j
}

func (e *env) wantGone(id string) {
	e.t.Helper()
	if j, err := e.o.GetJob(e.ctx, id); !errors.Is(err, cosmic.ErrNotFound) {
		e.t.Fatalf("job %s: %s, %v; want it removed", id, j.Status.State, err)
	}
}

// held is the store's reservations of the job, as "rack/node/gpu,...".
func (e *env) held(id string) []string {
	e.t.Helper()
	res, err := e.st.Reservations(e.ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, r := range res {
		if r.JobID == id {
			for _, g := range r.GPUs() {
				out = append(out, g.String())
			}
		}
	}
	slices.Sort(out)
	return out
}

// checkBooks checks what must hold between any two steps: no GPU is
// claimed twice; a job holds GPUs exactly when its state says it does
// (or it is stopped, its VMs powering off as they push its volumes);
// the free GPUs the ork shows are the racks' GPUs less the store's claims.
func (e *env) checkBooks() {
	e.t.Helper()
	res, err := e.st.Reservations(e.ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	owner := map[cosmic.GPURef]string{}
	holds := map[string]int{}
	byRack := map[string]int{}
	for _, r := range res {
		for _, g := range r.GPUs() {
			if o, ok := owner[g]; ok {
				e.t.Fatalf("GPU %s claimed by %s and by %s/%d", g, o, r.JobID, r.Replica)
			}
			owner[g] = fmt.Sprintf("%s/%d", r.JobID, r.Replica)
			byRack[r.Rack]++
		}
		holds[r.JobID]++
	}
	jobs, err := e.o.ListJobs(e.ctx, orkapi.ListJobsParams{Size: 1000})
	if err != nil {
		e.t.Fatal(err)
	}
	for _, j := range jobs.Jobs {
		if j.Spec.Autoscaled() && holds[j.ID] == 0 && j.Spec.Replicas() == 0 || slices.ContainsFunc(j.Status.Replicas, func(r cosmic.ReplicaStatus) bool { return r.State == cosmic.StateQueued }) && holds[j.ID] == 0 && j.Spec.Autoscaled() {
			// Scaled to zero, or waking from it: serving, holding none.
			continue
		}
		if j.Status.State == cosmic.StateStopped && j.Spec.PushesVolumes() && holds[j.ID] > 0 {
			// Killed, its VMs powering off as their agents push the
			// job's volumes: their GPUs wait for the rack (poweroff.go).
			continue
		}
		if j.Status.State.HoldsGPUs() != (holds[j.ID] > 0) {
			e.t.Fatalf("job %s is %s and holds %d reservations", j.ID, j.Status.State, holds[j.ID])
		}
	}
	for _, r := range e.o.ListRacks().Racks {
		if r.FreeGPUs != r.GPUs-byRack[r.ID] {
			e.t.Fatalf("rack %s shows %d of %d GPUs free; the store has %d claimed", r.ID, r.FreeGPUs, r.GPUs, byRack[r.ID])
		}
	}
}

// errorLog is the ork's log handler: it keeps the errors (an ork that
// meets a conflict it should not, such as a GPU it claims twice, logs
// one), which fail the test.
type errorLog struct {
	mu   sync.Mutex
	errs []string
}

func (l *errorLog) Enabled(_ context.Context, lvl slog.Level) bool { return lvl >= slog.LevelError }
func (l *errorLog) WithAttrs([]slog.Attr) slog.Handler             { return l }
func (l *errorLog) WithGroup(string) slog.Handler                  { return l }

func (l *errorLog) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errs = append(l.errs, b.String())
	return nil
}

func (l *errorLog) list() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.errs)
}
