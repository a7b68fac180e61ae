package cosmictest

import (
	"bufio"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"

	"github.com/cosmicac/cosmicac/internal/config"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/httpserve"
	"github.com/cosmicac/cosmicac/internal/httpserve/httpservetest"
	"github.com/cosmicac/cosmicac/internal/inferproxy"
	"github.com/cosmicac/cosmicac/internal/platform"
	"github.com/cosmicac/cosmicac/internal/simruntime"
	"github.com/cosmicac/cosmicac/internal/waittest"
)

// HTTPLimits sets the limits of the platform's HTTP servers.
func HTTPLimits(l httpserve.Limits) Option {
	return func(c *platform.Config) { c.HTTP = l }
}

// TestHTTPLimits: with body, write and idle limits of 1 s, `cosmicac up`'s
// API server and its metrics listener cut a client that sends its body a
// byte every 200 ms and close idle keep-alive connections, each within its
// limit (plus slack); a log follow, a shell and chat completions (streamed,
// and not streamed but slow to begin) that last three times as long are
// not cut.
func TestHTTPLimits(t *testing.T) {
	lim := httpserve.Limits{Body: config.Duration(time.Second), Write: config.Duration(time.Second), Idle: config.Duration(time.Second)}
	const long = 3 * time.Second
	tokens := 10 // a completion of 10 tokens, 300 ms apart
	e := NewEnv(t, HTTPLimits(lim), func(c *platform.Config) {
		c.Monitor.Heartbeat = config.Duration(200 * time.Millisecond)
		c.SimRuntime = simruntime.Config{TTFT: 10 * time.Millisecond, InterTokenDelay: long / time.Duration(tokens-1)}
	})
	tok, err := e.P.AdminToken()
	if err != nil {
		t.Fatal(err)
	}
	api := strings.TrimPrefix(e.P.URL, "http://")
	met := strings.TrimPrefix(e.P.MetricsURL, "http://")
	auth := http.Header{"Authorization": {"Bearer " + tok}}

	t.Run("slow bodies are cut", func(t *testing.T) {
		if code := httpservetest.SlowBody(t, api, "POST", "/api/v1/jobs", auth, lim.Body.D()); code != http.StatusRequestTimeout {
			t.Errorf("a job spec: answered %d, want 408", code)
		}
		if code := httpservetest.SlowBody(t, api, "POST", inferproxy.Prefix+"/chat/completions", nil, lim.Body.D()); code != http.StatusRequestTimeout {
			t.Errorf("a chat completion: answered %d, want 408", code)
		}
		httpservetest.SlowBody(t, api, "POST", "/monitor/v1/jobs/x/logs", nil, lim.Body.D())
		httpservetest.SlowBody(t, met, "POST", "/metrics", nil, lim.Body.D())
	})
	t.Run("idle connections are closed", func(t *testing.T) {
		httpservetest.Idle(t, api, "/api/v1/healthz", nil, lim.Idle.D())
		httpservetest.Idle(t, api, "/inference/health", nil, lim.Idle.D())
		httpservetest.Idle(t, met, "/metrics", nil, lim.Idle.D())
	})

	box := e.Create(Container("box", 1))
	qwen := e.Create(inference("qwen", cosmic.RuntimeVLLM, "Qwen/Qwen3-32B", 1, 1))
	e.WaitState(box.ID, cosmic.StateRunning)
	e.WaitState(qwen.ID, cosmic.StateRunning)
	key, err := e.Client.CreateAPIKey(e.Ctx, "limits", "")
	if err != nil {
		t.Fatal(err)
	}
	e.waitReplicas(qwen.ID, 1)
	// One short completion first: the replica's first request can fail
	// (502) while the agent's connection to the proxy comes up, once seen
	// on a loaded machine; the limits are not what that tests.
	warm := e.openAI(key.Key)
	waittest.NoError(t, func() error {
		_, err := warm.Chat.Completions.New(e.Ctx, openai.ChatCompletionNewParams{Model: "qwen",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}, MaxTokens: openai.Int(1)})
		if err != nil {
			t.Logf("a first completion: %v", apiErr(err))
			return apiErr(err)
		}
		return nil
	}, "a first completion")

	t.Run("a log follow outlives the limits", func(t *testing.T) {
		t.Parallel()
		req, _ := http.NewRequestWithContext(e.Ctx, "GET", e.P.URL+"/monitor/v1/jobs/"+box.ID+"/logs?follow=true", nil)
		req.Header = auth.Clone()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("follow: %s", resp.Status)
		}
		start := time.Now()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if time.Since(start) > long {
				return // still streaming (heartbeats every 200 ms)
			}
		}
		t.Errorf("the log follow ended after %v (limits %+v): %v", time.Since(start).Round(time.Millisecond), lim, sc.Err())
	})
	t.Run("a shell outlives the limits", func(t *testing.T) {
		t.Parallel()
		code, out, _, err := e.shell(tok, box.ID, "", "sh", "-c", "sleep 3; echo done")
		if err != nil || code != 0 || out != "done\n" {
			t.Errorf("a shell of %v (limits %+v): code %d, output %q, err %v", long, lim, code, out, err)
		}
	})
	t.Run("a streamed completion outlives the limits", func(t *testing.T) {
		t.Parallel()
		a := e.openAI(key.Key)
		stream := a.Chat.Completions.NewStreaming(e.Ctx, openai.ChatCompletionNewParams{Model: "qwen",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Say hello")}, MaxTokens: openai.Int(int64(tokens))})
		var acc openai.ChatCompletionAccumulator
		for stream.Next() {
			acc.AddChunk(stream.Current())
		}
		var text string
		if len(acc.Choices) == 1 {
			text = acc.Choices[0].Message.Content
		}
		if err := stream.Err(); err != nil || len(strings.Fields(text)) != tokens {
			t.Errorf("a streamed completion of %v (limits %+v): %v, text %q", long, lim, apiErr(err), text)
		}
	})
	t.Run("a completion slow to begin outlives the limits", func(t *testing.T) {
		t.Parallel()
		a := e.openAI(key.Key)
		cc, err := a.Chat.Completions.New(e.Ctx, openai.ChatCompletionNewParams{Model: "qwen",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Say hello")}, MaxTokens: openai.Int(int64(tokens))})
		var text string
		if err == nil && len(cc.Choices) == 1 {
			text = cc.Choices[0].Message.Content
		}
		if err != nil || len(strings.Fields(text)) != tokens {
			t.Errorf("a completion of %v (limits %+v): %v, text %q", long, lim, apiErr(err), text)
		}
	})
}

// apiErr is err with the body of an OpenAI API error.
func apiErr(err error) error {
	var ae *openai.Error
	if errors.As(err, &ae) {
		return fmt.Errorf("%w: %s", err, ae.RawJSON())
	}
	return err
}
