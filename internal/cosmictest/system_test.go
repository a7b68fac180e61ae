package cosmictest

import (
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/client"
	"github.com/cosmicac/cosmicac/internal/config"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/platform"
)

func TestBothJobTypesReachRunning(t *testing.T) {
	e := NewEnv(t)
	c := e.Create(Container("box", 1))
	inf := e.Create(VLLM("qwen", 1, 2))
	c = e.WaitState(c.ID, cosmic.StateRunning)
	inf = e.WaitState(inf.ID, cosmic.StateRunning)
	want := []cosmic.State{cosmic.StateCreating, cosmic.StateQueued, cosmic.StatePending, cosmic.StateStarting, cosmic.StateRunning}
	// Under heavy load the ork may learn of `running` (a heartbeat pull)
	// before the push that said `starting`; it then drops that older report
	// (worker.Observation) and the job goes from pending to running. Any
	// other path is wrong.
	overtaken := slices.DeleteFunc(slices.Clone(want), func(s cosmic.State) bool { return s == cosmic.StateStarting })
	for _, j := range []cosmic.Job{c, inf} {
		if h := History(j); !slices.Equal(h, want) && !slices.Equal(h, overtaken) {
			t.Errorf("job %s went through %v, want %v", j.Spec.Name, h, want)
		}
	}
	if got := e.FreeGPUs(); got != 13 {
		t.Errorf("free GPUs = %d, want 13", got)
	}
}

// A job that could never fit the fleet is refused at create, with the
// reason code, and nothing is stored.
func TestJobsThatCanNeverFitAreRefusedAtCreate(t *testing.T) {
	e := NewEnv(t)
	wide := VLLM("wide", 3, 16) // 48 GPUs; the location holds 16
	unknownModel := Container("odd", 1)
	unknownModel.Resources.GPUModel = "GB200"
	for _, tc := range []struct {
		spec   cosmic.Spec
		field  string
		reason cosmic.ReasonCode
	}{
		{Container("big", 9), "resources.gpu", cosmic.ReasonExceedsNodeGPUs},
		{unknownModel, "resources.gpuModel", cosmic.ReasonNoSuchGPUModel},
		{wide, "inference.replicas", cosmic.ReasonExceedsLocationGPUs},
	} {
		_, err := e.Client.CreateJob(e.Ctx, tc.spec)
		var ae *client.APIError
		if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest {
			t.Fatalf("create %s: %v, want 400", tc.spec.Name, err)
		}
		if fes := ae.FieldErrors(); len(fes) != 1 || fes[0].Field != tc.field || fes[0].Reason != tc.reason {
			t.Errorf("create %s: %+v, want %s with reason %s", tc.spec.Name, fes, tc.field, tc.reason)
		}
	}
	if l, err := e.Client.ListJobs(e.Ctx, client.ListOptions{}); err != nil || l.Total != 0 {
		t.Fatalf("jobs stored: %+v, %v", l, err)
	}
}

func TestThirdJobQueuesUntilOneIsDeleted(t *testing.T) {
	e := NewEnv(t)
	a, b, c := e.Create(Container("a", 8)), e.Create(Container("b", 8)), e.Create(Container("c", 8))
	e.WaitState(a.ID, cosmic.StateRunning)
	e.WaitState(b.ID, cosmic.StateRunning)
	c = e.WaitState(c.ID, cosmic.StateQueued)
	if c.Status.QueuePosition != 1 || c.Status.WaitingFor == "" {
		t.Fatalf("queued job: position %d, waiting for %q", c.Status.QueuePosition, c.Status.WaitingFor)
	}
	if _, err := e.Client.DeleteJob(e.Ctx, a.ID, false); !errors.Is(err, cosmic.ErrConflict) {
		t.Fatalf("delete a running job without force: %v, want a conflict", err)
	}
	if _, err := e.Client.DeleteJob(e.Ctx, a.ID, true); err != nil {
		t.Fatal(err)
	}
	e.WaitState(c.ID, cosmic.StateRunning)
	if _, err := e.Client.GetJob(e.Ctx, a.ID); client.StatusOf(err) != http.StatusNotFound {
		t.Fatalf("deleted job: err = %v, want 404", err)
	}
}

func TestSixteenGPUReplicaSpansTwoNodes(t *testing.T) {
	e := NewEnv(t)
	j := e.Create(VLLM("wide", 1, 16))
	j = e.WaitState(j.ID, cosmic.StateRunning)
	if len(j.Status.Replicas) != 1 || len(j.Status.Replicas[0].Nodes) != 2 {
		t.Fatalf("replicas = %+v, want one replica on two nodes", j.Status.Replicas)
	}
	if got := e.FreeGPUs(); got != 0 {
		t.Fatalf("free GPUs = %d, want 0", got)
	}
}

func TestReplicaCrash(t *testing.T) {
	e := NewEnv(t)
	two := e.Create(VLLM("two", 2, 4))
	one := e.Create(VLLM("one", 1, 4))
	e.WaitState(two.ID, cosmic.StateRunning)
	e.WaitState(one.ID, cosmic.StateRunning)
	e.Fault("simCrash", map[string]any{"jobId": two.ID, "replica": 0})
	e.Fault("simCrash", map[string]any{"jobId": one.ID, "replica": 0})
	two = e.WaitState(two.ID, cosmic.StateDegraded)
	one = e.WaitState(one.ID, cosmic.StateFailed)
	if one.Status.Reason == nil || one.Status.Reason.Code != cosmic.ReasonVMICrashed {
		t.Fatalf("single replica: reason %+v, want vmi_crashed", one.Status.Reason)
	}
	// Restarting the crashed replica brings the job back to running.
	if _, err := e.Client.RestartReplica(e.Ctx, two.ID, 0); err != nil {
		t.Fatal(err)
	}
	e.WaitState(two.ID, cosmic.StateRunning)
}

func TestRestartPassesThroughRestarting(t *testing.T) {
	e := NewEnv(t)
	j := e.Create(Container("r", 2))
	e.WaitState(j.ID, cosmic.StateRunning)
	if _, err := e.Client.RestartJob(e.Ctx, j.ID); err != nil {
		t.Fatal(err)
	}
	j = e.WaitState(j.ID, cosmic.StateRunning)
	h := History(j)
	if !slices.Contains(h, cosmic.StateRestarting) || h[len(h)-1] != cosmic.StateRunning {
		t.Fatalf("history %v: want restarting then running", h)
	}
}

func TestKillStopsAndFreesGPUs(t *testing.T) {
	e := NewEnv(t)
	j := e.Create(Container("k", 4))
	e.WaitState(j.ID, cosmic.StateRunning)
	if got := e.FreeGPUs(); got != 12 {
		t.Fatalf("free GPUs while running = %d, want 12", got)
	}
	if _, err := e.Client.KillJob(e.Ctx, j.ID); err != nil {
		t.Fatal(err)
	}
	j = e.WaitState(j.ID, cosmic.StateStopped)
	if got := e.FreeGPUs(); got != 16 {
		t.Fatalf("free GPUs after kill = %d, want 16", got)
	}
	// A stopped job can be restarted: it is queued and runs again.
	if _, err := e.Client.RestartJob(e.Ctx, j.ID); err != nil {
		t.Fatal(err)
	}
	e.WaitState(j.ID, cosmic.StateRunning)
}

func TestLostWorkerMakesJobsUnknownThenRecovers(t *testing.T) {
	e := NewEnv(t)
	j := e.Create(Container("u", 1))
	e.WaitState(j.ID, cosmic.StateRunning)
	e.Fault("simUnreachable", map[string]any{"seconds": 1})
	j = e.WaitState(j.ID, cosmic.StateUnknown)
	if j.Status.Reason == nil || j.Status.Reason.Code != cosmic.ReasonWorkerUnreachable {
		t.Fatalf("reason %+v, want worker_unreachable", j.Status.Reason)
	}
	e.WaitState(j.ID, cosmic.StateRunning)
}

func TestRestartKeepsJobsAndReservations(t *testing.T) {
	e := NewEnv(t)
	a := e.Create(Container("a", 8))
	b := e.Create(Container("b", 8))
	c := e.Create(Container("c", 8))
	e.WaitState(a.ID, cosmic.StateRunning)
	e.WaitState(b.ID, cosmic.StateRunning)
	e.WaitState(c.ID, cosmic.StateQueued)
	e.Restart()
	e.WaitState(a.ID, cosmic.StateRunning)
	e.WaitState(b.ID, cosmic.StateRunning)
	c = e.WaitState(c.ID, cosmic.StateQueued)
	if got := e.FreeGPUs(); got != 0 {
		t.Fatalf("free GPUs after restart = %d, want 0", got)
	}
	if _, err := e.Client.KillJob(e.Ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	e.WaitState(c.ID, cosmic.StateRunning)
}

func TestBadInputChangesNothing(t *testing.T) {
	e := NewEnv(t)
	bad := Container("nowhere", 1)
	bad.Location = "mars"
	_, err := e.Client.CreateJob(e.Ctx, bad)
	var apiErr *client.APIError
	if !errors.As(err, &apiErr) || apiErr.Status != http.StatusBadRequest {
		t.Fatalf("unknown location: err = %v, want 400", err)
	}
	neg := Container("neg", -1)
	if _, err := e.Client.CreateJob(e.Ctx, neg); client.StatusOf(err) != http.StatusBadRequest {
		t.Fatalf("negative GPUs: err = %v, want 400", err)
	}
	list, err := e.Client.ListJobs(e.Ctx, client.ListOptions{})
	if err != nil || list.Total != 0 {
		t.Fatalf("after bad input: %d jobs (%v), want 0", list.Total, err)
	}
}

func TestImportFailureFailsTheJob(t *testing.T) {
	e := NewEnv(t, func(c *platform.Config) { c.Sim.Step = config.Duration(20 * time.Millisecond) })
	e.Fault("simFailImport", map[string]any{"jobId": "", "replica": 0}) // the next import
	j := e.Create(Container("broken-image", 1))
	j = e.WaitState(j.ID, cosmic.StateFailed)
	if j.Status.Reason == nil || j.Status.Reason.Code != cosmic.ReasonImportFailed {
		t.Fatalf("reason %+v, want import_failed", j.Status.Reason)
	}
	if got := e.FreeGPUs(); got != 16 {
		t.Fatalf("free GPUs after a failed import = %d, want 16", got)
	}
	// The system log shows each step up to the failure.
	var steps []string
	for _, r := range e.P.Logs.Job(j.ID) {
		steps = append(steps, r.Step)
	}
	if !slices.Contains(steps, "import_disk") {
		t.Fatalf("system log steps %v: want the import step", steps)
	}
}

func TestLostNodeFailsItsJobs(t *testing.T) {
	e := NewEnv(t)
	j := e.Create(Container("on-node", 8))
	j = e.WaitState(j.ID, cosmic.StateRunning)
	e.Fault("simLoseNode", map[string]any{"node": j.Status.Replicas[0].Nodes[0]})
	j = e.WaitState(j.ID, cosmic.StateFailed)
	if j.Status.Reason == nil || j.Status.Reason.Code != cosmic.ReasonNodeLost {
		t.Fatalf("reason %+v, want node_lost", j.Status.Reason)
	}
	// The lost node takes no new work: a second 8-GPU job fits only once.
	a, b := e.Create(Container("a", 8)), e.Create(Container("b", 8))
	e.WaitState(a.ID, cosmic.StateRunning)
	e.WaitState(b.ID, cosmic.StateQueued)
	e.Fault("simRestoreNode", map[string]any{"node": j.Status.Replicas[0].Nodes[0]})
	e.WaitState(b.ID, cosmic.StateRunning)
}

// TestJobLogsShowSetupStepsUpToAFailure reads a job's logs through the API,
// as `cosmicac jobs logs` does: the system records of each setup step reach
// wrk-monitor over the fabric, the failed import last.
func TestJobLogsShowSetupStepsUpToAFailure(t *testing.T) {
	e := NewEnv(t, func(c *platform.Config) { c.Sim.Step = config.Duration(20 * time.Millisecond) })
	e.Fault("simFailImport", map[string]any{"jobId": "", "replica": 0})
	j := e.Create(Container("broken-image", 1))
	e.WaitState(j.ID, cosmic.StateFailed)
	recs := e.records(j.ID, func(r []client.LogRecord) bool {
		n := len(r)
		return n > 0 && r[n-1].OK != nil && !*r[n-1].OK
	})
	last := recs[len(recs)-1]
	if last.Step != "import_disk" || last.OK == nil || *last.OK {
		t.Fatalf("last record %+v: want the failed import_disk step", last)
	}
	for i := 1; i < len(recs); i++ {
		if recs[i].Seq <= recs[i-1].Seq {
			t.Fatalf("records out of order: %d after %d", recs[i].Seq, recs[i-1].Seq)
		}
	}
	if recs[0].Source != "system" {
		t.Fatalf("first record %+v: want a system record", recs[0])
	}
}

// TestMetrics: the platform serves Prometheus metrics for its components
// on its metrics listener, and the API's address has none: there
// /monitor/metrics is a JSON 404 and /metrics the web interface's page.
func TestMetrics(t *testing.T) {
	e := NewEnv(t)
	j := e.Create(Container("m", 1))
	e.WaitState(j.ID, cosmic.StateRunning)
	for path, want := range map[string][]string{
		"/metrics":         {"cosmicac_ork_queued_jobs 0", `cosmicac_ork_gpus{free="true",rack="sim-us-1"} 15`, `cosmicac_api_request_duration_seconds_count{code="201",op="createJob"} 1`, "cosmicac_joblog_forwarder_"},
		"/monitor/metrics": {"cosmicac_monitor_records_received_total"},
	} {
		resp, err := http.Get(e.P.MetricsURL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, w := range want {
			if !strings.Contains(string(body), w) {
				t.Errorf("%s lacks %q", path, w)
			}
		}
		resp, err = http.Get(e.P.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		// Not served there: /monitor/metrics is the monitor's JSON 404,
		// /metrics the web interface's page (every path outside the APIs
		// is), neither a metric.
		if strings.Contains(string(body), "# HELP") || strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") ||
			(strings.HasPrefix(path, "/monitor/") && resp.StatusCode != http.StatusNotFound) {
			t.Errorf("the API's address serves %s: %d %s %.300s", path, resp.StatusCode, resp.Header.Get("Content-Type"), body)
		}
	}
}
