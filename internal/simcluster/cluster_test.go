package simcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/cosmicac/cosmicac/internal/config"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/joblog"
	"github.com/cosmicac/cosmicac/internal/waittest"
	"github.com/cosmicac/cosmicac/internal/worker"
	"github.com/cosmicac/cosmicac/internal/worker/workertest"
)

const (
	step = 10 * time.Millisecond
	jobA = "aaaaaaaa-0000-4000-8000-000000000001"
	jobB = "bbbbbbbb-0000-4000-8000-000000000002"
	jobC = "cccccccc-0000-4000-8000-000000000003"
	jobD = "dddddddd-0000-4000-8000-000000000004"
)

// fakeReporter records every report (workertest.Recorder); while failing
// it refuses them.
type fakeReporter struct {
	workertest.Recorder
	mu      sync.Mutex
	failing bool
	refused int
}

func (f *fakeReporter) Report(ctx context.Context, r worker.Report) error {
	f.mu.Lock() // held while recording: a report is refused or recorded, never both sides of a switch
	defer f.mu.Unlock()
	if f.failing {
		f.refused++
		return errors.New("ork unreachable")
	}
	return f.Recorder.Report(ctx, r)
}

func (f *fakeReporter) setFailing(b bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failing = b
}

// states lists the replica's reported states, repeats collapsed.
func (f *fakeReporter) states(job string, replica int) []cosmic.State {
	var out []cosmic.State
	for _, rr := range f.History(job, replica) {
		if len(out) == 0 || out[len(out)-1] != rr.State {
			out = append(out, rr.State)
		}
	}
	return out
}

type env struct {
	c    *Cluster
	rep  *fakeReporter
	logs *joblog.Ring
}

// start runs a 2 × 8 cluster until the test ends.
func start(t *testing.T) *env {
	t.Helper()
	return startAgents(t, nil)
}

// startAgents is start with agents run by a (nil: none).
func startAgents(t *testing.T, a AgentRunner) *env {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Step = config.Duration(step)
	e := &env{rep: &fakeReporter{}, logs: joblog.NewRing(10000)}
	e.c = mustNew(t, cfg, Deps{Reporter: e.rep, Logs: e.logs, Agents: a})
	e.c.retryMin, e.c.retryMax = step, 4*step
	e.c.ackGrace = step
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	})
	return e
}

// waitFor is waittest.Until, what first. In a synctest bubble it polls on
// the bubble's clock.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	waittest.Until(t, cond, "%s", what)
}

func (e *env) waitState(t *testing.T, job string, replica int, want cosmic.State) worker.ReplicaReport {
	t.Helper()
	var got worker.ReplicaReport
	waitFor(t, fmt.Sprintf("replica %s/%d %s", job, replica, want), func() bool {
		var ok bool
		got, ok = e.rep.Last(job, replica)
		return ok && got.State == want
	})
	return got
}

func (e *env) apply(t *testing.T, id string, rs ...cosmic.Reservation) {
	t.Helper()
	j := testJob(id)
	j.UpdatedAt = time.Now() // as the ork stamps every write of a job
	if err := e.c.Apply(context.Background(), worker.ApplyParams{Job: j, Reservations: rs}); err != nil {
		t.Fatalf("Apply %s: %v", id, err)
	}
}

func testJob(id string) cosmic.Job {
	return cosmic.Job{ID: id, Spec: cosmic.Spec{Type: cosmic.TypeGPUContainer, Location: "us", Image: "docker.io/library/ubuntu:24.04", DiskGB: 100}}
}

func resv(job string, replica int, allocs ...cosmic.NodeAlloc) cosmic.Reservation {
	return cosmic.Reservation{JobID: job, Replica: replica, Rack: "sim-us-1", Nodes: allocs}
}

func on(node int, gpus ...int) cosmic.NodeAlloc {
	return cosmic.NodeAlloc{Node: fmt.Sprintf("sim-us-1-node-%d", node), GPUs: gpus}
}

func span(from, to int) []int {
	var out []int
	for i := from; i <= to; i++ {
		out = append(out, i)
	}
	return out
}

func steps(recs []joblog.Record) []string {
	var out []string
	for _, r := range recs {
		out = append(out, r.Step)
	}
	return out
}

func importPercents(rs []worker.ReplicaReport) []int {
	var out []int
	for _, r := range rs {
		if r.Progress != nil && r.Progress.Step == progressImport {
			out = append(out, r.Progress.Percent)
		}
	}
	return out
}

func reasonCode(r worker.ReplicaReport) cosmic.ReasonCode {
	if r.Reason == nil {
		return ""
	}
	return r.Reason.Code
}

func TestDefaultConfig(t *testing.T) {
	cfg := DefaultConfig()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("DefaultConfig().Validate() = %v", err)
	}
	want := Config{Rack: "sim-us-1", Location: "us", GPUModel: "GH100_H100_SXM5_80GB", Nodes: 2, GPUsPerNode: 8, Step: config.Duration(time.Second)}
	if diff := cmp.Diff(want, cfg); diff != "" {
		t.Errorf("DefaultConfig (-want +got):\n%s", diff)
	}
}

func TestConfigValidateReportsEveryProblem(t *testing.T) {
	cfg := Config{Rack: "bad rack", Location: "", GPUModel: "H100 80GB", Nodes: 0, GPUsPerNode: 65, Step: config.Duration(-time.Second), NodePrefix: "bad prefix "}
	var fields []string
	for _, fe := range cosmic.FieldErrors(cfg.Validate()) {
		fields = append(fields, fe.Field)
	}
	want := []string{"rack", "location", "gpuModel", "nodes", "gpusPerNode", "step", "nodePrefix"}
	if diff := cmp.Diff(want, fields); diff != "" {
		t.Errorf("fields with problems (-want +got):\n%s", diff)
	}
}

func TestCapacity(t *testing.T) {
	c := mustNew(t, Config{Rack: "r1", Location: "eu", GPUModel: "A100", Nodes: 3, GPUsPerNode: 4}, Deps{Reporter: &fakeReporter{}})
	capa, err := c.Capacity(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var want []cosmic.Node
	for i := range 3 {
		// CPU and memory default to a DGX H100's share per GPU.
		want = append(want, cosmic.Node{Name: fmt.Sprintf("r1-node-%d", i), Rack: "r1", GPUModel: "A100", GPUs: 4, Schedulable: true, Ready: true,
			CPUMilli: 4 * 28 * 1000, MemoryMiB: 4 * 256 * 1024})
	}
	if capa.Rack != "r1" {
		t.Errorf("rack = %q", capa.Rack)
	}
	if diff := cmp.Diff(want, capa.Nodes); diff != "" {
		t.Errorf("nodes (-want +got):\n%s", diff)
	}
	c = mustNew(t, Config{Rack: "r1", Location: "eu", GPUModel: "A100", Nodes: 1, GPUsPerNode: 4, CPUsPerNode: 16, MemoryGiBPerNode: 100}, Deps{Reporter: &fakeReporter{}})
	if capa, err := c.Capacity(context.Background()); err != nil || capa.Nodes[0].CPUMilli != 16000 || capa.Nodes[0].MemoryMiB != 100*1024 {
		t.Errorf("Capacity with CPU and memory = %+v, %v", capa.Nodes, err)
	}
	if got := c.Config().Step; got.D() != DefaultStep {
		t.Errorf("default step = %s", got)
	}
}

// TestCapacityVolumes: the standalone volumes are the directories of
// VolumesDir, each with its files' size, walked again only once
// volumeBytesTTL has passed or the job that has it changed (a heartbeat
// lists, it does not read every file each time); a volume removed or made
// is seen at once.
func TestCapacityVolumes(t *testing.T) {
	dir := t.TempDir()
	c := mustNew(t, Config{Rack: "r1", Location: "eu", GPUModel: "A100", Nodes: 1, GPUsPerNode: 4, VolumesDir: dir}, Deps{Reporter: &fakeReporter{}})
	write := func(path string, n int) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, make([]byte, n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(dir, "ml", "scratch", "a", "b"), 1000)
	write(filepath.Join(dir, "ml", "scratch", "c"), 24)
	if err := os.MkdirAll(filepath.Join(dir, "ops", "empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	want := []cosmic.StoredVolume{{Team: "ml", Name: "scratch", Bytes: 1024}, {Team: "ops", Name: "empty"}}
	if diff := cmp.Diff(want, c.volumes(nil, now)); diff != "" {
		t.Errorf("volumes (-want +got):\n%s", diff)
	}
	write(filepath.Join(dir, "ml", "scratch", "d"), 976)
	write(filepath.Join(dir, "ml", "new", "e"), 5)
	if err := os.RemoveAll(filepath.Join(dir, "ops")); err != nil {
		t.Fatal(err)
	}
	want = []cosmic.StoredVolume{{Team: "ml", Name: "new", Bytes: 5, Job: "j1"}, {Team: "ml", Name: "scratch", Bytes: 1024}}
	if diff := cmp.Diff(want, c.volumes(map[string]string{cosmic.VolumeKey("ml", "new"): "j1"}, now.Add(volumeBytesTTL-time.Second))); diff != "" {
		t.Errorf("volumes within the TTL (-want +got):\n%s", diff)
	}
	// The job that had it ended: its size is walked again.
	write(filepath.Join(dir, "ml", "new", "f"), 995)
	want[0].Job, want[0].Bytes = "", 1000
	if diff := cmp.Diff(want, c.volumes(nil, now.Add(volumeBytesTTL-time.Second))); diff != "" {
		t.Errorf("volumes once the job that had one ended (-want +got):\n%s", diff)
	}
	want[1].Bytes = 2000
	if diff := cmp.Diff(want, c.volumes(nil, now.Add(volumeBytesTTL))); diff != "" {
		t.Errorf("volumes after the TTL (-want +got):\n%s", diff)
	}
	capa, err := c.Capacity(context.Background())
	if err != nil || len(capa.Volumes) != 2 {
		t.Errorf("Capacity's volumes = %+v, %v", capa.Volumes, err)
	}
}

func TestLifecycleToRunning(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := start(t)
		e.apply(t, jobA, resv(jobA, 0, on(0, span(0, 7)...)))
		got := e.waitState(t, jobA, 0, cosmic.StateRunning)

		if diff := cmp.Diff([]cosmic.State{cosmic.StatePending, cosmic.StateStarting, cosmic.StateRunning}, e.rep.states(jobA, 0)); diff != "" {
			t.Errorf("states (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]int{0, 25, 50, 75, 100}, importPercents(e.rep.History(jobA, 0))); diff != "" {
			t.Errorf("import progress (-want +got):\n%s", diff)
		}
		// Given: the job's share (the spec here asks for no CPU or memory).
		want := worker.ReplicaReport{Replica: 0, State: cosmic.StateRunning, Nodes: []string{"sim-us-1-node-0"}, Given: &cosmic.Given{GPUs: 8}}
		if diff := cmp.Diff(want, got, ignoreStamps); diff != "" {
			t.Errorf("final report (-want +got):\n%s", diff)
		}
		recs := e.logs.Job(jobA)
		wantSteps := []string{"accept", "import_disk", "import_disk", "import_disk", "import_disk", "import_disk", "schedule", "boot", "ready"}
		if diff := cmp.Diff(wantSteps, steps(recs)); diff != "" {
			t.Errorf("record steps (-want +got):\n%s", diff)
		}
		for _, r := range recs {
			if r.Source != joblog.SourceSystem || r.OK == nil || !*r.OK || r.JobID != jobA {
				t.Errorf("record %+v: want a successful system record of %s", r, jobA)
			}
		}
		if l := recs[6].Line; !strings.Contains(l, "sim-us-1-node-0") || !strings.Contains(l, "GPUs 0-7") {
			t.Errorf("schedule record %q does not name the node and GPUs", l)
		}
	})
}

func TestSixteenGPUReplicaTakesTwoNodes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := start(t)
		e.apply(t, jobA, resv(jobA, 0, on(0, span(0, 7)...), on(1, span(0, 7)...)))
		got := e.waitState(t, jobA, 0, cosmic.StateRunning)
		if diff := cmp.Diff([]string{"sim-us-1-node-0", "sim-us-1-node-1"}, got.Nodes); diff != "" {
			t.Errorf("nodes (-want +got):\n%s", diff)
		}
		var scheduled, booted []string
		for _, r := range e.logs.Job(jobA) {
			switch r.Step {
			case "schedule":
				scheduled = append(scheduled, r.Line)
			case "boot":
				booted = append(booted, r.Line)
			}
		}
		if len(scheduled) != 2 || len(booted) != 2 {
			t.Fatalf("want 2 VMIs scheduled and booted, got %q and %q", scheduled, booted)
		}
		for i, l := range scheduled {
			if node := fmt.Sprintf("sim-us-1-node-%d", i); !strings.Contains(l, node) {
				t.Errorf("VMI %d: %q does not name %s", i, l, node)
			}
		}
		// The rack is full: any further GPU is refused.
		e.apply(t, jobB, resv(jobB, 0, on(1, 7)))
		if r := e.waitState(t, jobB, 0, cosmic.StateFailed); reasonCode(r) != cosmic.ReasonVMIUnschedulable {
			t.Errorf("reason = %+v, want %s", r.Reason, cosmic.ReasonVMIUnschedulable)
		}
	})
}

func TestReservationsTheHardwareCannotHonourFail(t *testing.T) {
	tests := map[string]cosmic.Reservation{
		"GPU held by another job": resv(jobB, 0, on(0, 6, 7)),
		"GPU index beyond node":   resv(jobB, 0, on(1, 7, 8)),
		"unknown node":            resv(jobB, 0, cosmic.NodeAlloc{Node: "sim-us-1-node-9", GPUs: []int{0}}),
		"GPU asked twice":         resv(jobB, 0, on(1, 3, 3)),
		"negative GPU index":      resv(jobB, 0, on(1, -1)),
	}
	for name, r := range tests {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := start(t)
				e.apply(t, jobA, resv(jobA, 0, on(0, span(0, 7)...)))
				e.waitState(t, jobA, 0, cosmic.StateRunning)
				e.apply(t, jobB, r)
				got := e.waitState(t, jobB, 0, cosmic.StateFailed)
				if reasonCode(got) != cosmic.ReasonVMIUnschedulable || len(got.Nodes) != 0 {
					t.Errorf("report = %+v, want failed vmi_unschedulable holding nothing", got)
				}
				recs := e.logs.Job(jobB)
				if len(recs) != 1 || recs[0].Step != "schedule" || *recs[0].OK {
					t.Errorf("records = %+v, want one failed schedule record", recs)
				}
				// jobA is untouched and still holds its GPUs.
				synctest.Wait()
				if diff := cmp.Diff([]cosmic.State{cosmic.StatePending, cosmic.StateStarting, cosmic.StateRunning}, e.rep.states(jobA, 0)); diff != "" {
					t.Errorf("jobA states (-want +got):\n%s", diff)
				}
				assertNoDoubleBooking(t, e.c)
			})
		})
	}
}

// assertNoDoubleBooking checks that every replica holding GPUs holds them
// alone and within the hardware.
func assertNoDoubleBooking(t *testing.T, c *Cluster) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	held := map[gpuKey]replicaKey{}
	for _, j := range c.jobs {
		for _, r := range j.replicas {
			if !r.claimed {
				continue
			}
			for _, g := range r.res.GPUs() {
				k := gpuKey{g.Node, g.Index}
				if other, dup := held[k]; dup {
					t.Errorf("GPU %v held by %v and %v", k, other, r.key)
				}
				if g.Index < 0 || g.Index >= c.cfg.GPUsPerNode || c.byName[g.Node] == nil {
					t.Errorf("GPU %v beyond the hardware", k)
				}
				held[k] = r.key
			}
		}
	}
	if diff := cmp.Diff(held, c.claims, cmp.AllowUnexported(gpuKey{}, replicaKey{})); diff != "" {
		t.Errorf("claims disagree with replicas (-replicas +claims):\n%s", diff)
	}
}

func TestApplyIsIdempotent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := start(t)
		r := resv(jobA, 0, on(0, 0, 1))
		e.apply(t, jobA, r)
		e.waitState(t, jobA, 0, cosmic.StateRunning)
		n := len(e.logs.Job(jobA))
		e.apply(t, jobA, r)
		// A whole lifecycle of another job gives a second lifecycle of
		// jobA, had the Apply begun one, the steps to write its records.
		e.apply(t, jobB, resv(jobB, 0, on(1, 2)))
		e.waitState(t, jobB, 0, cosmic.StateRunning)
		if got := len(e.logs.Job(jobA)); got != n {
			t.Errorf("a second Apply wrote %d records", got-n)
		}
		err := e.c.Apply(context.Background(), worker.ApplyParams{Job: testJob(jobA), Reservations: []cosmic.Reservation{resv(jobA, 0, on(1, 0, 1))}})
		if fabric.ErrorCode(err) != codeConflict {
			t.Errorf("Apply with another reservation = %v, want a conflict", err)
		}
	})
}

func TestApplyRejectsMalformedRequests(t *testing.T) {
	c := mustNew(t, DefaultConfig(), Deps{Reporter: &fakeReporter{}})
	other := resv(jobA, 0, on(0, 0))
	other.Rack = "elsewhere"
	tests := map[string]worker.ApplyParams{
		"no job ID":        {Reservations: []cosmic.Reservation{resv(jobA, 0, on(0, 0))}},
		"another job":      {Job: testJob(jobA), Reservations: []cosmic.Reservation{resv(jobB, 0, on(0, 0))}},
		"another rack":     {Job: testJob(jobA), Reservations: []cosmic.Reservation{other}},
		"no GPUs":          {Job: testJob(jobA), Reservations: []cosmic.Reservation{resv(jobA, 0)}},
		"replica twice":    {Job: testJob(jobA), Reservations: []cosmic.Reservation{resv(jobA, 0, on(0, 0)), resv(jobA, 0, on(0, 1))}},
		"negative replica": {Job: testJob(jobA), Reservations: []cosmic.Reservation{resv(jobA, -1, on(0, 0))}},
	}
	for name, p := range tests {
		t.Run(name, func(t *testing.T) {
			if err := c.Apply(context.Background(), p); fabric.ErrorCode(err) != fabric.CodeBadRequest {
				t.Errorf("Apply = %v, want bad_request", err)
			}
		})
	}
	jobs, _ := c.Jobs(context.Background())
	if len(jobs) != 0 {
		t.Errorf("malformed applies left jobs: %+v", jobs)
	}
}

func TestFailImport(t *testing.T) {
	tests := map[string]struct {
		jobID  string
		before bool // inject before the Apply (only with jobID "")
	}{
		"named replica": {jobID: jobA},
		"next import":   {jobID: "", before: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := start(t)
				if tc.before {
					if _, err := e.c.FailImport(tc.jobID, 0); err != nil {
						t.Fatal(err)
					}
				}
				e.apply(t, jobA, resv(jobA, 0, on(0, span(0, 7)...)))
				if !tc.before {
					if _, err := e.c.FailImport(tc.jobID, 0); err != nil {
						t.Fatal(err)
					}
				}
				got := e.waitState(t, jobA, 0, cosmic.StateFailed)
				if reasonCode(got) != cosmic.ReasonImportFailed {
					t.Errorf("reason = %+v, want import_failed", got.Reason)
				}
				recs := e.logs.Job(jobA)
				lastRec := recs[len(recs)-1]
				if lastRec.Step != "import_disk" || *lastRec.OK || !strings.Contains(lastRec.Line, "50%") {
					t.Errorf("last record %+v, want a failed import at 50%%", lastRec)
				}
				if diff := cmp.Diff([]int{0, 25}, importPercents(e.rep.History(jobA, 0))); diff != "" {
					t.Errorf("import progress (-want +got):\n%s", diff)
				}
				// The GPUs are free again; the next import is not armed.
				e.apply(t, jobB, resv(jobB, 0, on(0, span(0, 7)...)))
				e.waitState(t, jobB, 0, cosmic.StateRunning)
			})
		})
	}
}

func TestCrash(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := start(t)
		e.apply(t, jobA, resv(jobA, 0, on(0, 0, 1)), resv(jobA, 1, on(1, 0, 1)))
		e.waitState(t, jobA, 0, cosmic.StateRunning)
		e.waitState(t, jobA, 1, cosmic.StateRunning)
		if _, err := e.c.Crash(jobA, 1); err != nil {
			t.Fatal(err)
		}
		got := e.waitState(t, jobA, 1, cosmic.StateFailed)
		if reasonCode(got) != cosmic.ReasonVMICrashed {
			t.Errorf("reason = %+v, want vmi_crashed", got.Reason)
		}
		if r, _ := e.rep.Last(jobA, 0); r.State != cosmic.StateRunning {
			t.Errorf("replica 0 = %s, want running", r.State)
		}
		// A crashed replica has no VMI left to crash.
		if _, err := e.c.Crash(jobA, 1); fabric.ErrorCode(err) != fabric.CodeBadRequest {
			t.Errorf("second crash = %v, want bad_request", err)
		}
		assertNoDoubleBooking(t, e.c)
	})
}

func TestLoseAndRestoreNode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := start(t)
		e.apply(t, jobA, resv(jobA, 0, on(0, 0, 1, 2, 3)))
		e.apply(t, jobB, resv(jobB, 0, on(1, 0, 1)))
		e.apply(t, jobC, resv(jobC, 0, on(0, 4, 5), on(1, 4, 5)))
		for _, id := range []string{jobA, jobB, jobC} {
			e.waitState(t, id, 0, cosmic.StateRunning)
		}
		if _, err := e.c.LoseNode("sim-us-1-node-0"); err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{jobA, jobC} {
			if r := e.waitState(t, id, 0, cosmic.StateFailed); reasonCode(r) != cosmic.ReasonNodeLost {
				t.Errorf("%s: reason = %+v, want node_lost", id, r.Reason)
			}
		}
		if r, _ := e.rep.Last(jobB, 0); r.State != cosmic.StateRunning {
			t.Errorf("job on the other node = %s, want running", r.State)
		}
		waitFor(t, "capacity with node-0 not ready", func() bool {
			capa := e.rep.LastCapacity()
			return capa != nil && !capa.Nodes[0].Ready && capa.Nodes[1].Ready
		})
		// Nothing is scheduled on a lost node.
		e.apply(t, jobA, resv(jobA, 0, on(0, 0)))
		synctest.Wait()
		if r := e.waitState(t, jobA, 0, cosmic.StateFailed); reasonCode(r) != cosmic.ReasonVMIUnschedulable {
			t.Errorf("apply on a lost node: reason = %+v, want vmi_unschedulable", r.Reason)
		}
		if _, err := e.c.RestoreNode("sim-us-1-node-0"); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "capacity with node-0 ready", func() bool {
			capa := e.rep.LastCapacity()
			return capa != nil && capa.Nodes[0].Ready
		})
		e.apply(t, jobA, resv(jobA, 0, on(0, 0)))
		e.waitState(t, jobA, 0, cosmic.StateRunning)
		capa, _ := e.c.Capacity(context.Background())
		if !capa.Nodes[0].Ready {
			t.Errorf("Capacity after restore: %+v", capa.Nodes[0])
		}
	})
}

func TestStopKeepsTheDisk(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := start(t)
		r := resv(jobA, 0, on(0, span(0, 7)...))
		e.apply(t, jobA, r)
		e.waitState(t, jobA, 0, cosmic.StateRunning)
		if err := e.c.Stop(context.Background(), worker.ReplicaRef{JobID: jobA, Replica: worker.AllReplicas}); err != nil {
			t.Fatal(err)
		}
		got := e.waitState(t, jobA, 0, cosmic.StateStopped)
		if got.Gone || len(got.Nodes) != 0 {
			t.Errorf("stopped report = %+v: want not gone (the disk is kept), no nodes", got)
		}
		// Another job may take the released GPUs meanwhile.
		e.apply(t, jobB, resv(jobB, 0, on(0, 0)))
		e.waitState(t, jobB, 0, cosmic.StateRunning)
		if err := e.c.Delete(context.Background(), worker.DeleteParams{JobID: jobB, Replica: worker.AllReplicas, Force: true}); err != nil {
			t.Fatal(err)
		}

		n := len(e.logs.Job(jobA))
		e.apply(t, jobA, r)
		e.waitState(t, jobA, 0, cosmic.StateRunning)
		after := e.logs.Job(jobA)[n:]
		if diff := cmp.Diff([]string{"accept", "import_disk", "schedule", "boot", "ready"}, steps(after)); diff != "" {
			t.Errorf("steps after the second Apply (-want +got):\n%s", diff)
		}
		if l := after[1].Line; !strings.Contains(l, "reusing") {
			t.Errorf("import record %q does not say the disk is reused", l)
		}
	})
}

func TestRestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := start(t)
		e.apply(t, jobA, resv(jobA, 0, on(0, 0, 1)))
		e.waitState(t, jobA, 0, cosmic.StateRunning)
		n := len(e.rep.History(jobA, 0))
		if err := e.c.Restart(context.Background(), worker.ReplicaRef{JobID: jobA, Replica: 0}); err != nil {
			t.Fatal(err)
		}
		e.waitState(t, jobA, 0, cosmic.StateRestarting)
		e.waitState(t, jobA, 0, cosmic.StateRunning)
		var states []cosmic.State
		for _, r := range e.rep.History(jobA, 0)[n:] {
			if len(states) == 0 || states[len(states)-1] != r.State {
				states = append(states, r.State)
			}
			if r.State == cosmic.StateRestarting && !slices.Equal(r.Nodes, []string{"sim-us-1-node-0"}) {
				t.Errorf("restarting report %+v: the GPUs are kept", r)
			}
		}
		if diff := cmp.Diff([]cosmic.State{cosmic.StateRestarting, cosmic.StateRunning}, states); diff != "" {
			t.Errorf("states after restart (-want +got):\n%s", diff)
		}
		for _, r := range e.logs.Job(jobA) {
			if r.Step == "import_disk" && strings.Contains(r.Line, "reusing") {
				return
			}
		}
		t.Error("the restart did not reuse the disk")
	})
}

func TestRestartErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := start(t)
		ctx := context.Background()
		if err := e.c.Restart(ctx, worker.ReplicaRef{JobID: jobA}); fabric.ErrorCode(err) != fabric.CodeNotFound {
			t.Errorf("restart of an unknown job = %v, want not_found", err)
		}
		e.apply(t, jobA, resv(jobA, 0, on(0, 0)))
		e.waitState(t, jobA, 0, cosmic.StateRunning)
		if err := e.c.Stop(ctx, worker.ReplicaRef{JobID: jobA, Replica: 0}); err != nil {
			t.Fatal(err)
		}
		if err := e.c.Restart(ctx, worker.ReplicaRef{JobID: jobA, Replica: 0}); fabric.ErrorCode(err) != codeConflict {
			t.Errorf("restart of a stopped replica = %v, want conflict", err)
		}
		if err := e.c.Restart(ctx, worker.ReplicaRef{JobID: jobA, Replica: 3}); fabric.ErrorCode(err) != fabric.CodeNotFound {
			t.Errorf("restart of an unknown replica = %v, want not_found", err)
		}
	})
}

func TestDelete(t *testing.T) {
	for _, force := range []bool{false, true} {
		t.Run(fmt.Sprintf("force=%v", force), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := start(t)
				e.apply(t, jobA, resv(jobA, 0, on(0, span(0, 7)...)), resv(jobA, 1, on(1, span(0, 7)...)))
				e.waitState(t, jobA, 0, cosmic.StateRunning)
				e.waitState(t, jobA, 1, cosmic.StateRunning)
				if err := e.c.Delete(context.Background(), worker.DeleteParams{JobID: jobA, Replica: worker.AllReplicas, Force: force}); err != nil {
					t.Fatal(err)
				}
				if force {
					// Gone at once, before any step passes.
					jobs, _ := e.c.Jobs(context.Background())
					if len(jobs) != 0 {
						t.Errorf("Jobs right after a forced delete = %+v", jobs)
					}
				}
				for i := range 2 {
					waitFor(t, "replica gone", func() bool {
						r, _ := e.rep.Last(jobA, i)
						return r.Gone
					})
				}
				jobs, err := e.c.Jobs(context.Background())
				if err != nil || len(jobs) != 0 {
					t.Errorf("Jobs after delete = %+v, %v", jobs, err)
				}
				recs := e.logs.Job(jobA)
				if last := recs[len(recs)-1]; last.Step != "delete" || !strings.Contains(last.Line, "root disk") {
					t.Errorf("last record %+v, want the delete of VMIs and disk", last)
				}
				assertNoDoubleBooking(t, e.c)
				// Deleting again succeeds.
				if err := e.c.Delete(context.Background(), worker.DeleteParams{JobID: jobA, Replica: worker.AllReplicas}); err != nil {
					t.Errorf("second delete = %v", err)
				}
			})
		})
	}
}

func TestJobsAfterOperations(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := start(t)
		ctx := context.Background()
		e.apply(t, jobA, resv(jobA, 0, on(0, 0)), resv(jobA, 1, on(0, 1)))
		e.apply(t, jobB, resv(jobB, 0, on(1, 0, 1)))
		e.apply(t, jobC, resv(jobC, 0, on(1, 2)))
		e.waitState(t, jobA, 1, cosmic.StateRunning)
		e.waitState(t, jobB, 0, cosmic.StateRunning)
		e.waitState(t, jobC, 0, cosmic.StateRunning)
		if err := e.c.Stop(ctx, worker.ReplicaRef{JobID: jobA, Replica: 1}); err != nil {
			t.Fatal(err)
		}
		if _, err := e.c.Crash(jobB, 0); err != nil {
			t.Fatal(err)
		}
		if err := e.c.Delete(ctx, worker.DeleteParams{JobID: jobC, Replica: worker.AllReplicas, Force: true}); err != nil {
			t.Fatal(err)
		}
		jobs, err := e.c.Jobs(ctx)
		if err != nil {
			t.Fatal(err)
		}
		killed := cosmic.NewReason(cosmic.ReasonKilled, "")
		crashed := cosmic.NewReason(cosmic.ReasonVMICrashed, "VMI job-bbbbbbbb-r0-0 on sim-us-1-node-1 crashed (simulated)")
		want := []worker.JobReport{
			{JobID: jobA, Replicas: []worker.ReplicaReport{
				{Replica: 0, State: cosmic.StateRunning, Nodes: []string{"sim-us-1-node-0"}, Given: &cosmic.Given{GPUs: 1}},
				{Replica: 1, State: cosmic.StateStopped, Reason: &killed},
			}},
			{JobID: jobB, Replicas: []worker.ReplicaReport{{Replica: 0, State: cosmic.StateFailed, Reason: &crashed}}},
		}
		if diff := cmp.Diff(want, jobs, ignoreStamps); diff != "" {
			t.Errorf("Jobs (-want +got):\n%s", diff)
		}
	})
}

func TestReportsRetriedWithoutBlockingTheLifecycle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := start(t)
		e.rep.setFailing(true)
		e.apply(t, jobA, resv(jobA, 0, on(0, 0)))
		waitFor(t, "the replica to run while reports fail", func() bool {
			recs := e.logs.Job(jobA)
			return len(recs) > 0 && recs[len(recs)-1].Step == "ready"
		})
		if got := e.rep.History(jobA, 0); len(got) != 0 {
			t.Fatalf("reports delivered while failing: %+v", got)
		}
		e.rep.mu.Lock()
		refused := e.rep.refused
		e.rep.mu.Unlock()
		if refused < 2 {
			t.Errorf("reporter tried %d times, want retries", refused)
		}
		e.rep.setFailing(false)
		e.waitState(t, jobA, 0, cosmic.StateRunning)
		// Only the latest state was kept.
		if diff := cmp.Diff([]cosmic.State{cosmic.StateRunning}, e.rep.states(jobA, 0)); diff != "" {
			t.Errorf("delivered states (-want +got):\n%s", diff)
		}
	})
}

func TestUnreachableWithoutLink(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := start(t)
		ctx := context.Background()
		e.apply(t, jobA, resv(jobA, 0, on(0, 0)))
		synctest.Wait()
		if _, err := e.c.Unreachable(time.Second); err != nil {
			t.Fatal(err)
		}
		if _, err := e.c.Capacity(ctx); fabric.ErrorCode(err) != fabric.CodeUnavailable {
			t.Errorf("Capacity while unreachable = %v, want unavailable", err)
		}
		if err := e.c.Apply(ctx, worker.ApplyParams{Job: testJob(jobB)}); fabric.ErrorCode(err) != fabric.CodeUnavailable {
			t.Errorf("Apply while unreachable = %v, want unavailable", err)
		}
		// The VMI lives on, unreported.
		waitFor(t, "the replica to run", func() bool {
			recs := e.logs.Job(jobA)
			return recs[len(recs)-1].Step == "ready"
		})
		if r, _ := e.rep.Last(jobA, 0); r.State != cosmic.StatePending {
			t.Errorf("last report while unreachable = %s, want pending", r.State)
		}
		// Back, it reports its whole state.
		n := len(e.rep.Reports())
		e.waitState(t, jobA, 0, cosmic.StateRunning)
		back := e.rep.Reports()[n]
		if back.Capacity == nil || len(back.Jobs) != 1 {
			t.Errorf("first report after the outage = %+v, want capacity and every job", back)
		}
		if _, err := e.c.Capacity(ctx); err != nil {
			t.Errorf("Capacity after the outage = %v", err)
		}
		if _, err := e.c.Unreachable(0); fabric.ErrorCode(err) != fabric.CodeBadRequest {
			t.Errorf("Unreachable(0) = %v, want bad_request", err)
		}
	})
}

func TestRunExitsOnCancel(t *testing.T) {
	c := mustNew(t, DefaultConfig(), Deps{Reporter: &fakeReporter{}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	if err := c.Apply(context.Background(), worker.ApplyParams{Job: testJob(jobA), Reservations: []cosmic.Reservation{resv(jobA, 0, on(0, 0))}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Unreachable(time.Hour); err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run = %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}

func TestFormatGPUs(t *testing.T) {
	tests := map[string]struct {
		in   []int
		want string
	}{
		"none":  {nil, ""},
		"one":   {[]int{3}, "3"},
		"range": {span(0, 7), "0-7"},
		"mixed": {[]int{0, 2, 4, 5, 7}, "0,2,4-5,7"},
	}
	for name, tc := range tests {
		if got := formatGPUs(tc.in); got != tc.want {
			t.Errorf("%s: formatGPUs(%v) = %q, want %q", name, tc.in, got, tc.want)
		}
	}
}

// ignoreStamps leaves the reports' stamps out of comparisons (they are
// checked in TestReportsAreStamped).
var ignoreStamps = cmpopts.IgnoreFields(worker.ReplicaReport{}, "Observed")

// TestReportsAreStamped: every pushed report of a replica is stamped later
// than the one before, and Jobs answers an unchanged replica with the stamp
// of its last push (so the ork, which drops reports older than one it
// applied, drops a pulled answer that a newer push overtook).
func TestReportsAreStamped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := start(t)
		e.apply(t, jobA, resv(jobA, 0, on(0, 0)))
		last := e.waitState(t, jobA, 0, cosmic.StateRunning)
		reps := e.rep.History(jobA, 0)
		for i, rr := range reps {
			if rr.Observed.Process == "" || i > 0 && !rr.Observed.Supersedes(reps[i-1].Observed) {
				t.Fatalf("report %d stamped %+v after %+v", i, rr.Observed, reps[max(i-1, 0)].Observed)
			}
		}
		jobs, err := e.c.Jobs(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if got := jobs[0].Replicas[0].Observed; got != last.Observed {
			t.Fatalf("Jobs stamps the running replica %+v, its last push was %+v", got, last.Observed)
		}
		if reps[0].Observed.Supersedes(last.Observed) {
			t.Fatal("the first report would replace the last one")
		}
	})
}

// TestSimulatedRackReportsCatalogueAndGiven: the simulated rack reports
// that it runs both job types, the simulated runtimes (and llama.cpp when
// its host has the engine) and any image, and gives a replica its share of
// the job (cosmic.ShareOf).
func TestSimulatedRackReportsCatalogueAndGiven(t *testing.T) {
	c := Catalogue(DefaultConfig())
	if len(c.Images) != 0 || len(c.JobTypes) != 2 || !slices.Equal(c.Runtimes, []cosmic.Runtime{cosmic.RuntimeVLLM, cosmic.RuntimeParakeet}) || c.MaxVMCPUs != 0 || c.MaxVMMemoryMiB != 0 {
		t.Fatalf("catalogue %+v", c)
	}
	llama := DefaultConfig()
	llama.LlamaCPP = true
	if c := Catalogue(llama); !slices.Equal(c.Runtimes, cosmic.Runtimes) {
		t.Fatalf("with the engine, runtimes %v, want %v", c.Runtimes, cosmic.Runtimes)
	}
	spec := cosmic.Spec{Type: cosmic.TypeGPUContainer, Resources: cosmic.Resources{GPU: 2}}
	spec.Default()
	g := cosmic.ShareOf(spec, cosmic.Reservation{Nodes: []cosmic.NodeAlloc{{Node: "n", GPUs: []int{0, 1}}}})
	if g != (cosmic.Given{CPUs: 16, MemoryMiB: 128 * 1024, GPUs: 2}) {
		t.Fatalf("given %+v", g)
	}
}

// mustNew is New, the test failing on its error.
func mustNew(tb testing.TB, cfg Config, d Deps) *Cluster {
	tb.Helper()
	c, err := New(cfg, d)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}
