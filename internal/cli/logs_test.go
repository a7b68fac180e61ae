package cli

import (
	"encoding/json"
	"maps"
	"strings"
	"testing"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/cosmictest"
	"github.com/cosmicac/cosmicac/internal/simcluster/simapi"
)

// logLine is what a test reads of a line of `jobs logs -o json`.
type logLine struct {
	Seq     uint64 `json:"seq"`
	Replica int    `json:"replica"`
	Source  string `json:"source"`
	Step    string `json:"step"`
	Line    string `json:"line"`
}

// logLines runs `jobs logs ARGS -o json` and returns its records.
func logLines(t *testing.T, env map[string]string, args ...string) []logLine {
	t.Helper()
	code, out, errs := runCLI(t, env, append(append([]string{"jobs", "logs"}, args...), "-o", "json")...)
	if code != 0 {
		t.Fatalf("logs %v: exit %d: %s", args, code, errs)
	}
	var recs []logLine
	for l := range strings.Lines(strings.TrimSpace(out)) {
		var r logLine
		if err := json.Unmarshal([]byte(l), &r); err != nil || r.Seq == 0 {
			t.Fatalf("logs %v: line %q: %v", args, l, err)
		}
		recs = append(recs, r)
	}
	return recs
}

// TestJobsLogs reads, through the platform's wrk-monitor (which checks
// each viewer's token with the app-node), what the simulated rack and the
// jobs' agents logged: the steps of a job whose import failed, a job's
// command's output, and one replica's records of a job of two.
func TestJobsLogs(t *testing.T) {
	e, env := onPlatform(t)
	e.Fault(simapi.MethodFailImport, simapi.ReplicaParams{})
	broken := cosmictest.Container("broken", 1)
	broken.Image = "ubuntu"
	id := e.WaitState(e.Create(broken).ID, cosmic.StateFailed).ID
	hello := cosmictest.Container("hello", 1)
	hello.Command = []string{"sh", "-c", "echo hello"}
	e.WaitState(e.Create(hello).ID, cosmic.StateStopped)
	llm := e.WaitState(e.Create(cosmictest.VLLM("llm", 2, 1)).ID, cosmic.StateRunning)

	code, out, errOut := runCLI(t, env, "jobs", "logs", id[:8], "--since", "1h")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for _, l := range lines {
		if !strings.Contains(l, "  r0  [platform]  system/sim-us-1  [") {
			t.Errorf("line %q: want replica 0's system records of the rack", l)
		}
	}
	if !strings.Contains(out, "[accept ok]  replica 0 accepted") ||
		!strings.HasSuffix(lines[len(lines)-1], "[import_disk FAILED]  import of the root disk of replica 0 from ubuntu failed at 50% (simulated)") {
		t.Errorf("output:\n%s", out)
	}
	// The monitor's buffer holds this job's every record, from its first:
	// without Loki nothing older is missing, so there is no note.
	if strings.Contains(errOut, "no Loki") {
		t.Errorf("stderr %q: a note of missing history, though the buffer holds the job's first record", errOut)
	}

	var steps []string
	for _, r := range logLines(t, env, id, "--source", "system") {
		steps = append(steps, r.Step)
	}
	if strings.Join(steps, ",") != "accept,import_disk,import_disk,import_disk" {
		t.Errorf("steps %v", steps)
	}
	if code, out, errs := runCLI(t, env, "jobs", "logs", "hello", "--source", "application"); code != 0 ||
		!strings.HasSuffix(out, "  r0  [vm]  application/stdout  hello\n") || strings.Count(out, "\n") != 1 {
		t.Errorf("--source application: exit %d, %q %s", code, out, errs)
	}

	all, one := logLines(t, env, llm.ID), logLines(t, env, llm.ID, "--replica", "1")
	if len(one) == 0 || len(one) >= len(all) {
		t.Errorf("--replica 1: %d of the job's %d records", len(one), len(all))
	}
	for _, r := range one {
		if r.Replica != 1 {
			t.Errorf("--replica 1 printed %+v", r)
		}
	}
	if code, _, _ := runCLI(t, env, "jobs", "logs", id, "--source", "nope"); code != ExitUsage {
		t.Errorf("--source nope: exit %d, want %d", code, ExitUsage)
	}
	bad := maps.Clone(env)
	bad[envToken] = "cac_wrong"
	if code, _, errOut := runCLI(t, bad, "jobs", "logs", id); code != ExitFailure {
		t.Errorf("a bad token: exit %d (%s), want %d", code, errOut, ExitFailure)
	}
}
