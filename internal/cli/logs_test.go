package cli

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/joblog"
	"github.com/cosmicac/cosmicac/internal/monitor"
)

func TestJobsLogs(t *testing.T) {
	const id = "3f2a9c1e-0b7d-4c1e-9a55-2b8e4f6d7a10"
	f := newFakeAPI(t)
	f.addJob(id, "train", cosmic.StateFailed, nil, time.Now())
	m, err := monitor.New(monitor.DefaultConfig(""), nil)
	if err != nil {
		t.Fatal(err)
	}
	// The monitor checks each viewer's token with the (fake) app-node.
	srv := httptest.NewServer(m.Handler(monitor.NewAPIAuthorizer(f.srv.URL, nil)))
	defer srv.Close()
	t0 := time.Now()
	recs := []joblog.Record{
		{Time: t0, JobID: id, Source: joblog.SourceSystem, Stream: "sim-r1", Step: "schedule", OK: joblog.Bool(true), Line: "placed on node n1"},
		{Time: t0, JobID: id, Source: joblog.SourceSystem, Stream: "sim-r1", Step: "import_disk", OK: joblog.Bool(false), Line: "import ubuntu: 404"},
		{Time: t0, JobID: id, Replica: 1, Source: joblog.SourceApplication, Stream: "stdout", Line: "hello"},
	}
	if _, err := m.Append(context.Background(), recs); err != nil {
		t.Fatal(err)
	}
	env := f.env()
	env[envMonitorURL] = srv.URL

	code, out, errOut := runCLI(t, env, "jobs", "logs", "3f2a", "--since", "1h")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], "r0  system/sim-r1  [schedule ok]  placed on node n1") ||
		!strings.Contains(lines[1], "[import_disk FAILED]  import ubuntu: 404") || !strings.Contains(lines[2], "r1  application/stdout  hello") {
		t.Errorf("output:\n%s", out)
	}
	if !strings.Contains(errOut, "no Loki") {
		t.Errorf("stderr %q: want a note that history is the buffer only", errOut)
	}

	code, out, errOut = runCLI(t, env, "jobs", "logs", id, "--source", "system", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var steps []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var r struct {
			Seq  uint64 `json:"seq"`
			Step string `json:"step"`
		}
		if err := json.Unmarshal([]byte(l), &r); err != nil || r.Seq == 0 {
			t.Fatalf("line %q: %v", l, err)
		}
		steps = append(steps, r.Step)
	}
	if strings.Join(steps, ",") != "schedule,import_disk" {
		t.Errorf("steps %v", steps)
	}

	code, out, _ = runCLI(t, env, "jobs", "logs", id, "--replica", "1", "-o", "json")
	if code != 0 || strings.Count(out, "\n") != 1 || !strings.Contains(out, `"line":"hello"`) {
		t.Errorf("--replica 1: exit %d, %q", code, out)
	}
	if code, _, _ := runCLI(t, env, "jobs", "logs", id, "--source", "nope"); code != ExitUsage {
		t.Errorf("--source nope: exit %d, want %d", code, ExitUsage)
	}
	bad := f.env()
	bad[envToken], bad[envMonitorURL] = "cac_wrong", srv.URL
	if code, _, errOut := runCLI(t, bad, "jobs", "logs", id); code != ExitFailure {
		t.Errorf("a bad token: exit %d (%s), want %d", code, errOut, ExitFailure)
	}
}
