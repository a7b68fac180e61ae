package cosmictest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"

	"github.com/cosmicac/cosmicac/internal/config"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/platform"
)

// A Managed Inference Job is running ("Active": its endpoint accepts
// requests) only once proxy-inference routes to it: the first request
// after the job turns running succeeds, 100 times in a row, for a job of
// one replica and of two, with the proxy waiting for no replica at all
// (ReadyWait off), so nothing hides a gap.
func TestFirstRequestAfterRunningSucceeds(t *testing.T) {
	// 200 jobs of one team, as fast as they run: no bound on creates.
	e := NewEnv(t, func(c *platform.Config) { c.Proxy.ReadyWait, c.JobCreatesPerMinute = -1, -1 })
	key, err := e.Client.CreateAPIKey(e.Ctx, "first", "")
	if err != nil {
		t.Fatal(err)
	}
	a := e.openAI(key.Key)
	for _, replicas := range []int{1, 2} {
		for i := range 100 {
			name := fmt.Sprintf("m%d-%d", replicas, i)
			j := e.Create(inference(name, cosmic.RuntimeVLLM, "Qwen/Qwen3-8B", replicas, 1))
			e.WaitState(j.ID, cosmic.StateRunning)
			c, err := a.Completions.New(e.Ctx, openai.CompletionNewParams{Model: openai.CompletionNewParamsModel(name),
				Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("hi")}, MaxTokens: openai.Int(1)})
			if err != nil || c.Usage.CompletionTokens != 1 {
				var ae *openai.Error
				if errors.As(err, &ae) {
					mh, _ := e.P.Proxy.JobHealth(e.Ctx, j.ID)
					t.Fatalf("%d replicas, try %d: the first request after running: %s (the proxy's replicas: %+v)", replicas, i, ae.RawJSON(), mh)
				}
				t.Fatalf("%d replicas, try %d: the first request after running: %+v, %v", replicas, i, c, err)
			}
			if _, err := e.Client.DeleteJob(e.Ctx, j.ID, true); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// A request made while the model's replicas are still starting waits for
// one (proxy-inference's ReadyWait) and is answered once it is ready.
func TestRequestWhileStartingWaits(t *testing.T) {
	// Steps of 100 ms: the job takes several to start.
	e := NewEnv(t, func(c *platform.Config) { c.Sim.Step = config.Duration(100 * time.Millisecond) })
	key, err := e.Client.CreateAPIKey(e.Ctx, "early", "")
	if err != nil {
		t.Fatal(err)
	}
	a := e.openAI(key.Key)
	j := e.Create(inference("early", cosmic.RuntimeVLLM, "Qwen/Qwen3-8B", 2, 1))
	if got, err := e.Client.GetJob(e.Ctx, j.ID); err != nil || got.Status.State == cosmic.StateRunning {
		t.Fatalf("the job before the request: %s, %v; want it not running yet", got.Status.State, err)
	}
	c, err := a.Chat.Completions.New(e.Ctx, openai.ChatCompletionNewParams{Model: "early", MaxTokens: openai.Int(2),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
	if err != nil || c.Usage.CompletionTokens != 2 {
		t.Fatalf("a request while starting: %+v, %v", c, err)
	}
	// It was answered by a ready replica, which the job has now.
	if mh, err := e.P.Proxy.JobHealth(e.Ctx, j.ID); err != nil || len(mh.Replicas) == 0 {
		t.Fatalf("the job's replicas after the answer: %+v, %v", mh, err)
	}
}
