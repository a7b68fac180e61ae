package inferproxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/cosmicac/cosmicac/internal/config"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/simruntime"
	"github.com/cosmicac/cosmicac/internal/waittest"
)

// loading is a simulated runtime that loads until the test says it is done
// (setLoaded): /health answers 503 meanwhile.
var loading = simruntime.Config{Faults: simruntime.Faults{Unhealthy: true}}

// setLoaded ends the loading of every runtime of job.
func (h *harness) setLoaded(jobID string) {
	h.t.Helper()
	for _, a := range h.agents[jobID] {
		waittest.Until(h.t, func() bool { return a.sim.Runtime() != nil }, "the runtime of %s started", jobID)
		a.sim.Runtime().SetFaults(simruntime.Faults{})
	}
}

// A request that finds no replica ready waits for one, a stream with SSE
// comments meanwhile, and is answered once the replica is ready: by the
// official SDK, which skips the comments.
func TestRequestsWaitForAStartingReplica(t *testing.T) {
	h := newHarness(t, Config{ReadyWait: config.Duration(waittest.Timeout)})
	h.addJob("job-w", "team-a", "w", cosmic.RuntimeVLLM, 1, 1, true, loading)
	key := h.keys["team-a"]

	// A raw stream, to see its comment.
	body := `{"model":"w","stream":true,"max_tokens":3,"messages":[{"role":"user","content":"hi"}]}`
	req, _ := http.NewRequest(http.MethodPost, h.srv.URL+Prefix+"/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("a waiting stream: %s %s", resp.Status, resp.Header.Get("Content-Type"))
	}
	lines := bufio.NewScanner(resp.Body)
	if !lines.Scan() || !strings.HasPrefix(lines.Text(), ": waiting for a ready replica") {
		t.Fatalf("first line %q, want the waiting comment", lines.Text())
	}

	// The SDK's requests, waiting too (the gauge counts them).
	done := make(chan error, 2)
	cl := sdk(h, key)
	go func() {
		c, err := cl.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: "w", MaxTokens: openai.Int(3),
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
		if err == nil && c.Usage.CompletionTokens != 3 {
			err = fmt.Errorf("usage %+v", c.Usage)
		}
		done <- err
	}()
	go func() {
		s := cl.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{Model: "w", MaxTokens: openai.Int(3),
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
		n := 0
		for s.Next() {
			n++
		}
		if err := s.Err(); err != nil || n == 0 {
			done <- fmt.Errorf("stream: %d chunks, %v", n, err)
			return
		}
		done <- nil
	}()
	waittest.Until(t, func() bool { return gauge(h.proxy.metrics.waiting) == 3 }, "3 requests waiting")

	h.setLoaded("job-w")
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	data := 0
	for lines.Scan() {
		if strings.HasPrefix(lines.Text(), "data: {") {
			if strings.Contains(lines.Text(), `"error"`) {
				t.Fatalf("the waiting stream failed: %s", lines.Text())
			}
			data++
		}
	}
	if data == 0 {
		t.Fatal("the waiting stream got no chunk")
	}
	if n := gauge(h.proxy.metrics.waiting); n != 0 {
		t.Fatalf("%v requests still counted waiting", n)
	}
}

// When ReadyWait passes with no replica ready, a request is answered 503
// no_ready_replica with Retry-After; a stream already answered with
// comments ends with an error event and [DONE], as vLLM ends a failed
// stream.
func TestReadyWaitEnds(t *testing.T) {
	h := newHarness(t, Config{ReadyWait: config.Duration(1500 * 1e6), KeepAlive: config.Duration(100 * 1e6)})
	h.addJob("job-l", "team-a", "l", cosmic.RuntimeVLLM, 1, 1, true, loading)
	key := h.keys["team-a"]
	cl := sdk(h, key)
	_, err := cl.Completions.New(context.Background(), openai.CompletionNewParams{Model: "l",
		Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("hi")}, MaxTokens: openai.Int(3)})
	wantAPIError(t, "no replica ready", err, http.StatusServiceUnavailable, "no_ready_replica")

	req, _ := http.NewRequest(http.MethodPost, h.srv.URL+Prefix+"/completions", strings.NewReader(`{"model":"l","stream":true,"prompt":"hi"}`))
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var events []string
	for lines := bufio.NewScanner(resp.Body); lines.Scan(); {
		if lines.Text() != "" {
			events = append(events, lines.Text())
		}
	}
	n := len(events)
	if n < 3 || !strings.HasPrefix(events[0], ": waiting") || !strings.Contains(events[n-2], `"code":"no_ready_replica"`) || events[n-1] != "data: [DONE]" {
		t.Fatalf("the stream: %q", events)
	}

	// No wait at all (negative): answered at once.
	h2 := newHarness(t, Config{ReadyWait: -1})
	h2.addJob("job-n", "team-a", "n", cosmic.RuntimeVLLM, 1, 1, true, loading)
	cl2 := sdk(h2, h2.keys["team-a"])
	_, err = cl2.Completions.New(context.Background(), openai.CompletionNewParams{Model: "n",
		Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("hi")}})
	wantAPIError(t, "no wait", err, http.StatusServiceUnavailable, "no_ready_replica")
}

// The first request after a replica is ready succeeds without waiting,
// though the proxy's cached answer said it was not (within LookupTTL): the
// agent says it is ready only once the directory announces it so, and a
// request that finds none ready looks again.
func TestFirstRequestAfterReadySucceeds(t *testing.T) {
	h := newHarness(t, Config{ReadyWait: -1, LookupTTL: config.Duration(waittest.Timeout)})
	cl := sdk(h, h.keys["team-a"])
	for i := range 10 {
		job, model := fmt.Sprintf("job-%d", i), fmt.Sprintf("m%d", i)
		h.addJob(job, "team-a", model, cosmic.RuntimeVLLM, 1, 1, true, loading)
		_, err := cl.Completions.New(context.Background(), openai.CompletionNewParams{Model: openai.CompletionNewParamsModel(model),
			Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("hi")}, MaxTokens: openai.Int(1)})
		wantAPIError(t, "while loading", err, http.StatusServiceUnavailable, "no_ready_replica")
		h.setLoaded(job)
		<-h.agents[job][0].a.Ready()
		c, err := cl.Completions.New(context.Background(), openai.CompletionNewParams{Model: openai.CompletionNewParamsModel(model),
			Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("hi")}, MaxTokens: openai.Int(1)})
		if err != nil || c.Usage.CompletionTokens != 1 {
			var ae *openai.Error
			errors.As(err, &ae)
			t.Fatalf("job %d: the first request after ready: %+v, %v %s", i, c, err, ae.RawJSON())
		}
	}
}

// Listing the models takes a key, as every route does.
func TestListModelsTakesAKey(t *testing.T) {
	h := newHarness(t, Config{})
	h.addJob("job-open", "team-a", "open", cosmic.RuntimeVLLM, 1, 1, false, simruntime.Config{})
	none, other := sdk(h, ""), sdk(h, h.keys["team-b"])
	_, err := none.Models.List(context.Background())
	wantAPIError(t, "models without a key", err, http.StatusUnauthorized, "invalid_api_key")
	l, err := other.Models.List(context.Background())
	if err != nil || len(l.Data) != 1 || l.Data[0].ID != "@team-a/open" {
		t.Fatalf("models with another team's key: %+v, %v", l, err)
	}
}

func gauge(g prometheus.Gauge) float64 {
	var m dto.Metric
	if err := g.Write(&m); err != nil {
		return -1
	}
	return m.GetGauge().GetValue()
}
