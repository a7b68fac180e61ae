package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/cosmic"
)

// Painted states line up as plain ones do: every cell of the column has
// codes of one length, and tabwriter counts bytes.
func TestColoredJobsTableLinesUp(t *testing.T) {
	jobs := []cosmic.Job{
		{ID: "a", Spec: cosmic.Spec{Type: cosmic.TypeGPUContainer, Location: "us", Resources: cosmic.Resources{GPU: 1}}, Status: cosmic.Status{State: cosmic.StateRunning}},
		{ID: "b", Spec: cosmic.Spec{Type: cosmic.TypeGPUContainer, Location: "us", Resources: cosmic.Resources{GPU: 8}},
			Status: cosmic.Status{State: cosmic.StateQueued, QueuePosition: 2, WaitingFor: "8 × H100 in us"}},
		{ID: "c", Spec: cosmic.Spec{Type: cosmic.TypeGPUContainer, Location: "us", Resources: cosmic.Resources{GPU: 1}},
			Status: cosmic.Status{State: cosmic.StateFailed, Reason: &cosmic.Reason{Code: cosmic.ReasonImportFailed}}},
	}
	var plain, painted bytes.Buffer
	if err := writeJobsTable(&plain, jobs, false); err != nil {
		t.Fatal(err)
	}
	if err := writeJobsTable(&painted, jobs, true); err != nil {
		t.Fatal(err)
	}
	unpaint := strings.NewReplacer(colorNone, "", colorGreen, "", colorYellow, "", colorRed, "", colorCyan, "", colorReset, "")
	if got := unpaint.Replace(painted.String()); got != plain.String() {
		t.Fatalf("painted table, colors taken out:\n%s\nplain:\n%s", got, plain.String())
	}
	if strings.Contains(plain.String(), "\x1b[") || !strings.Contains(painted.String(), colorGreen+"running") || !strings.Contains(painted.String(), colorRed+"failed") {
		t.Fatalf("colors: plain %q, painted %q", plain.String(), painted.String())
	}
	for _, want := range []string{"#2 waiting for 8 × H100 in us", "import_failed"} {
		if !strings.Contains(plain.String(), want) {
			t.Errorf("the REASON column lacks %q:\n%s", want, plain.String())
		}
	}
}

// NO_COLOR, --no-color and a stdout that is not a terminal paint nothing.
func TestNoColor(t *testing.T) {
	a := &App{Stdout: &bytes.Buffer{}, Getenv: func(string) string { return "" }}
	if a.color() {
		t.Error("a buffer is not a terminal, yet colored")
	}
	a = &App{Stdout: nil, Getenv: func(k string) string { return map[string]string{"NO_COLOR": "1"}[k] }}
	if a.color() {
		t.Error("NO_COLOR=1, yet colored")
	}
}

// jobs get of a Managed Inference Job says where its endpoint is, what
// model name to send and whether it takes a key.
func TestJobDetailOfAnInferenceJob(t *testing.T) {
	no := false
	j := cosmic.Job{ID: "j", Team: "ml", CreatedAt: time.Now(), Spec: cosmic.Spec{Type: cosmic.TypeManagedInference, Location: "us",
		Inference: &cosmic.InferenceSpec{Runtime: cosmic.RuntimeVLLM, Model: "Qwen/Qwen3-8B", ServedModelName: "qwen", Replicas: 2, GPUsPerReplica: 1}},
		Status: cosmic.Status{State: cosmic.StateRunning, ModelHealth: cosmic.ModelHealthy, Replicas: []cosmic.ReplicaStatus{{Index: 0, State: cosmic.StateRunning}, {Index: 1, State: cosmic.StateStarting}},
			Actions: []cosmic.Action{cosmic.ActionRestart, cosmic.ActionKill, cosmic.ActionForceDelete}}}
	var b bytes.Buffer
	if err := writeJobDetail(&b, j, "http://cosmic:8080"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Endpoint:", "http://cosmic:8080/inference/v1 (model qwen)", "an API key of team ml", "Model health:", "healthy", "2 × 1 GPUs", "  1      starting",
		"Actions:", "cosmicac jobs restart j; cosmicac jobs kill j; cosmicac jobs delete --force j"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("jobs get lacks %q:\n%s", want, b.String())
		}
	}
	j.Spec.Inference.RequireAuth = &no
	j.Spec.Name = "qwen-job"
	b.Reset()
	writeJobDetail(&b, j, "http://cosmic:8080")
	if !strings.Contains(b.String(), "cosmicac jobs kill qwen-job") {
		t.Errorf("a named job's actions name it:\n%s", b.String())
	}
	if !strings.Contains(b.String(), "none: anyone who reaches the endpoint") {
		t.Errorf("an open model's auth:\n%s", b.String())
	}
}

// jobs get shows how long a job's run has left under spec.timeout, and
// when a starting replica's agent deadline falls.
func TestJobDetailShowsTheTimeLeft(t *testing.T) {
	now := time.Date(2026, 12, 1, 19, 0, 0, 0, time.UTC)
	defer func(orig func() time.Time) { timeNow = orig }(timeNow)
	timeNow = func() time.Time { return now }
	for name, tc := range map[string]struct {
		job  cosmic.Job
		want []string
		not  []string
	}{
		"running with a timeout": {
			job: cosmic.Job{ID: "j", Spec: cosmic.Spec{Type: cosmic.TypeGPUContainer, Timeout: 3600},
				Status: cosmic.Status{State: cosmic.StateRunning, TimeoutAt: now.Add(12*time.Minute + 3*time.Second)}},
			want: []string{"Timeout:", "1h0m0s, at ", "(12m3s left), then stopped"},
			not:  []string{"Agent deadline:"},
		},
		"restarted at its timeout": {
			job: cosmic.Job{ID: "j", Spec: cosmic.Spec{Type: cosmic.TypeGPUContainer, Timeout: 60, TimeoutAutoRestart: true},
				Status: cosmic.Status{State: cosmic.StateRunning, TimeoutAt: now.Add(-time.Second)}},
			want: []string{"1m0s, at ", "(due now), then restarted"},
		},
		"starting, before its run": {
			job: cosmic.Job{ID: "j", Spec: cosmic.Spec{Type: cosmic.TypeGPUContainer, Timeout: 60},
				Status: cosmic.Status{State: cosmic.StateStarting, AgentDeadline: now.Add(4 * time.Minute)}},
			want: []string{"Timeout:", "1m0s of running, then stopped", "Agent deadline:", "(4m0s left: fails with agent_timeout unless its agent connects)"},
		},
		"no timeout": {
			job: cosmic.Job{ID: "j", Spec: cosmic.Spec{Type: cosmic.TypeGPUContainer}, Status: cosmic.Status{State: cosmic.StateRunning}},
			not: []string{"Timeout:", "Agent deadline:"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			var b bytes.Buffer
			if err := writeJobDetail(&b, tc.job, "http://cosmic:8080"); err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(b.String(), w) {
					t.Errorf("jobs get lacks %q:\n%s", w, b.String())
				}
			}
			for _, w := range tc.not {
				if strings.Contains(b.String(), w) {
					t.Errorf("jobs get has %q:\n%s", w, b.String())
				}
			}
		})
	}
}
