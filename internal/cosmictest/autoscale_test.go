package cosmictest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"

	"github.com/cosmicac/cosmicac/internal/client"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/gguf/testmodel"
	"github.com/cosmicac/cosmicac/internal/waittest"
)

// TestAutoscaleWithTheRealEngine: an autoscaled llama.cpp job on the
// simulated rack, each replica a real llama-server. Three streams at a
// target of one per replica grow it to its maximum, two, and both serve;
// idle past its cool-down it goes to zero replicas and holds no GPU, and
// its status says so; a chat then waits while the job wakes, and is
// answered by the engine. Each decision is in the job's system log.
func TestAutoscaleWithTheRealEngine(t *testing.T) {
	e := NewEnv(t, withLlama(t))
	total := e.FreeGPUs()
	spec := inference("auto", cosmic.RuntimeLlamaCPP, testmodel.ChatModel, 0, 1)
	spec.Inference.Args = map[string]string{"ctx-size": "1024", "parallel": "1"}
	spec.Inference.Autoscaling = &cosmic.Autoscaling{MinReplicas: 0, MaxReplicas: 2, TargetInFlight: 1, ScaleDownDelay: 10}
	j := e.Create(spec)
	key, err := e.Client.CreateAPIKey(e.Ctx, "auto", "")
	if err != nil {
		t.Fatal(err)
	}
	if j.Spec.Inference.Replicas != 1 {
		t.Fatalf("created with %d replicas, want 1 (min 0 starts with one)", j.Spec.Inference.Replicas)
	}
	e.WaitState(j.ID, cosmic.StateRunning)
	e.waitReplicas(j.ID, 1)
	oa := e.openAI(key.Key)
	// Greedy completions of one prompt (steadyLoad says why).
	ask := func(ctx context.Context, tokens int) (string, error) {
		s := oa.Completions.NewStreaming(ctx, openai.CompletionNewParams{Model: openai.CompletionNewParamsModel("auto"), MaxTokens: openai.Int(int64(tokens)),
			Temperature: openai.Float(0), Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")}})
		var text strings.Builder
		for s.Next() {
			for _, ch := range s.Current().Choices {
				text.WriteString(ch.Text)
			}
		}
		return text.String(), s.Err()
	}

	// Load: three clients streaming without a pause until the job runs
	// two ready replicas. Under CI's load the new replica's engine starts
	// slowly: the time allowed is the scaler's second, the placement and a
	// llama-server's start on a loaded machine.
	stop := e.steadyLoad(key.Key, "auto", 3)
	e.waitReplicasWithin(j.ID, 2, 2*time.Minute)
	answered, loadErrs := stop()
	if len(loadErrs) > 0 {
		t.Fatalf("%d requests failed while the job scaled up (%d answered); the first: %v", len(loadErrs), answered, loadErrs[0])
	}
	if got := e.job(j.ID); got.Spec.Inference.Replicas != 2 || got.Status.State != cosmic.StateRunning {
		t.Fatalf("under load: %s with %d replicas, want running with 2", got.Status.State, got.Spec.Inference.Replicas)
	}

	// Idle: zero replicas after the cool-down, no GPU held.
	var idle cosmic.Job
	waittest.NoErrorWithin(t, 2*time.Minute, func() error {
		idle = e.job(j.ID)
		if idle.Status.Reason == nil || idle.Status.Reason.Code != cosmic.ReasonScaledToZero || len(idle.Status.Replicas) != 0 {
			return fmt.Errorf("job %s (%+v) with %d replicas", idle.Status.State, idle.Status.Reason, len(idle.Status.Replicas))
		}
		return nil
	}, "the idle job to scale to zero")
	if idle.Status.State != cosmic.StateRunning || idle.Spec.Inference.Replicas != 0 {
		t.Fatalf("scaled to zero: %s, %d replicas", idle.Status.State, idle.Spec.Inference.Replicas)
	}
	if free := e.FreeGPUs(); free != total {
		t.Fatalf("%d of %d GPUs free with the job at zero replicas", free, total)
	}

	// Wake: a chat waits for a replica and is answered.
	start := time.Now()
	text, err := ask(e.Ctx, 8)
	wake := time.Since(start)
	if err != nil || text == "" {
		t.Fatalf("the chat that woke the job: %q, %v", text, err)
	}
	t.Logf("woke from zero replicas and answered in %v", wake.Round(time.Millisecond))
	if got := e.job(j.ID); got.Spec.Inference.Replicas != 1 || got.Status.State != cosmic.StateRunning || got.Status.Reason != nil {
		t.Fatalf("woken: %s (%+v) with %d replicas, want running with 1", got.Status.State, got.Status.Reason, got.Spec.Inference.Replicas)
	}

	recs := e.records(j.ID, func(rs []client.LogRecord) bool {
		return slices.ContainsFunc(rs, func(r client.LogRecord) bool { return strings.HasPrefix(r.Line, "scaled up from 0 to 1") })
	})
	var decisions []string
	for _, r := range recs {
		if r.Step == "autoscale" {
			if r.Source != "system" || r.Stream != "wrk-ork" {
				t.Errorf("decision record %+v: want a system record of wrk-ork", r.Record)
			}
			decisions = append(decisions, r.Line)
		}
	}
	want := []string{"scaled up from 1 to 2", "scaled down from 2 to 0", "scaled up from 0 to 1"}
	if len(decisions) != len(want) {
		t.Fatalf("decisions:\n%s\nwant %q", strings.Join(decisions, "\n"), want)
	}
	for i, d := range decisions {
		if !strings.HasPrefix(d, want[i]) {
			t.Errorf("decision %d: %q, want %q…", i, d, want[i])
		}
	}
	if n := e.metricSum(`cosmicac_ork_autoscale_decisions_total{direction="up"}`); n != 2 {
		t.Errorf("%v scale-ups counted, want 2", n)
	}
}

// job reads a job through the API.
func (e *Env) job(id string) cosmic.Job {
	e.T.Helper()
	j, err := e.Client.GetJob(e.Ctx, id)
	if err != nil {
		e.T.Fatal(err)
	}
	return j
}
