package cosmictest

import (
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/cosmicac/cosmicac/internal/apiv1"
	"github.com/cosmicac/cosmicac/internal/client"
	"github.com/cosmicac/cosmicac/internal/config"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/gguf/testmodel"
	"github.com/cosmicac/cosmicac/internal/platform"
	"github.com/cosmicac/cosmicac/internal/waittest"
)

// TestMeteringWithTheRealEngine: what GET /api/v1/usage reports is the sum
// of the usage in the answers the OpenAI SDK got from real llama.cpp
// replicas, per API key: chats, completions, streams that asked for their
// usage, embeddings; and after the platform's restart (the proxy, the ork
// and the app-node anew on the same database) it adds up on. Streams whose
// client did not ask for usage get none (no usage-only chunk), yet they
// are metered: as many prompt tokens as the same prompt unstreamed. The
// CSV export and the Prometheus counter say the same.
func TestMeteringWithTheRealEngine(t *testing.T) {
	e := NewEnv(t, withLlama(t), func(c *platform.Config) { c.Ork.GPUMeterEvery = config.Duration(time.Second) })
	created := time.Now()
	chat := inference("meter-chat", cosmic.RuntimeLlamaCPP, testmodel.ChatModel, 1, 1)
	chat.Inference.Args = map[string]string{"ctx-size": "1024", "parallel": "2"}
	embed := inference("meter-embed", cosmic.RuntimeLlamaCPP, testmodel.EmbedModel, 1, 1)
	embed.Inference.Args = map[string]string{"embeddings": "true", "pooling": "mean"}
	cj, ej := e.Create(chat), e.Create(embed)
	ka, err := e.Client.CreateAPIKey(e.Ctx, "meter-a", "")
	if err != nil {
		t.Fatal(err)
	}
	kb, err := e.Client.CreateAPIKey(e.Ctx, "meter-b", "")
	if err != nil {
		t.Fatal(err)
	}
	e.WaitState(cj.ID, cosmic.StateRunning)
	e.WaitState(ej.ID, cosmic.StateRunning)
	e.waitReplicas(cj.ID, 1)
	e.waitReplicas(ej.ID, 1)

	type sum struct{ requests, prompt, completion int64 }
	var a sum // what key a's answers said
	add := func(u openai.CompletionUsage) {
		a.requests++
		a.prompt += u.PromptTokens
		a.completion += u.CompletionTokens
	}
	msg := []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Count the usage, please.")}
	chats := func(oa openai.Client, n int) {
		for range n {
			c, err := oa.Chat.Completions.New(e.Ctx, openai.ChatCompletionNewParams{Model: "meter-chat", Messages: msg, MaxTokens: openai.Int(8)})
			if err != nil {
				t.Fatalf("chat: %v", err)
			}
			add(c.Usage)
		}
	}
	stream := func(oa openai.Client, includeUsage bool) (usage openai.CompletionUsage, usageOnly int) {
		p := openai.ChatCompletionNewParams{Model: "meter-chat", Messages: msg, MaxTokens: openai.Int(8)}
		if includeUsage {
			p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
		}
		s := oa.Chat.Completions.NewStreaming(e.Ctx, p)
		for s.Next() {
			c := s.Current()
			if len(c.Choices) == 0 {
				usageOnly++
			}
			if c.Usage.TotalTokens > 0 {
				usage = c.Usage
			}
		}
		if err := s.Err(); err != nil {
			t.Fatalf("stream: %v", err)
		}
		return usage, usageOnly
	}

	oa, ob := e.openAI(ka.Key), e.openAI(kb.Key)
	chats(oa, 3)
	promptOf := a.prompt / 3 // the message's prompt, as the engine counts it
	for range 2 {
		u, _ := stream(oa, true)
		if u.TotalTokens == 0 {
			t.Fatal("a stream that asked for its usage got none")
		}
		add(u)
	}
	comp, err := oa.Completions.New(e.Ctx, openai.CompletionNewParams{Model: "meter-chat",
		Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")}, MaxTokens: openai.Int(8)})
	if err != nil {
		t.Fatal(err)
	}
	add(comp.Usage)
	vec, err := oa.Embeddings.New(e.Ctx, openai.EmbeddingNewParams{Model: "meter-embed",
		Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{"one", "two words"}}})
	if err != nil {
		t.Fatal(err)
	}
	a.requests++
	a.prompt += vec.Usage.PromptTokens
	for range 3 {
		u, usageOnly := stream(ob, false)
		if u.TotalTokens != 0 || usageOnly != 0 {
			t.Fatalf("a stream that did not ask for its usage got it: %+v, %d usage-only chunks", u, usageOnly)
		}
	}

	byKey := func() map[string]apiv1.UsageItem {
		u, err := e.Client.Usage(e.Ctx, client.UsageQuery{GroupBy: []string{"key"}})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]apiv1.UsageItem{}
		for _, it := range u.Items {
			out[it.KeyID] = it
		}
		return out
	}
	check := func(what string, want sum) {
		t.Helper()
		waittest.NoErrorWithin(t, time.Minute, func() error {
			got := byKey()
			ga, gb := got[ka.ID], got[kb.ID]
			if ga.Requests != want.requests || ga.PromptTokens != want.prompt || ga.CompletionTokens != want.completion || ga.KeyName != "meter-a" {
				return fmt.Errorf("%s: key a: %+v; its answers said %+v", what, ga, want)
			}
			if gb.Requests != 3 || gb.PromptTokens != 3*promptOf || gb.CompletionTokens < 3 || gb.CompletionTokens > 3*8 {
				return fmt.Errorf("%s: key b: %+v; want 3 requests of %d prompt tokens each and 1 to 8 completion tokens", what, gb, promptOf)
			}
			return nil
		}, "the usage to be delivered")
	}
	check("before the restart", a)
	before := byKey()
	if m := e.metricSum("cosmicac_inference_tokens_total"); int64(m) != before[ka.ID].TotalTokens+before[kb.ID].TotalTokens {
		t.Errorf("cosmicac_inference_tokens_total = %v; the usage says %d", m, before[ka.ID].TotalTokens+before[kb.ID].TotalTokens)
	}

	// A key of 1 token a minute: its first request is admitted (its budget
	// is above 0) and its answer's tokens are taken after; the next is
	// refused 429 in OpenAI's shape, with Retry-After and the token
	// headers, until the budget has refilled (about half an hour here).
	kc, err := e.Client.CreateAPIKeyWith(e.Ctx, apiv1.CreateAPIKey{Name: "meter-tpm", TokensPerMinute: 1})
	if err != nil || kc.TokensPerMinute != 1 {
		t.Fatalf("a key of 1 token a minute: %+v, %v", kc.APIKey, err)
	}
	oc := e.openAI(kc.Key)
	var raw *http.Response
	if _, err := oc.Chat.Completions.New(e.Ctx, openai.ChatCompletionNewParams{Model: "meter-chat", Messages: msg, MaxTokens: openai.Int(8)},
		option.WithResponseInto(&raw)); err != nil {
		t.Fatalf("the first request of a key of 1 token a minute: %v", err)
	}
	if raw.Header.Get("X-Ratelimit-Limit-Tokens") != "1" || raw.Header.Get("X-Ratelimit-Remaining-Tokens") != "1" {
		t.Errorf("the first answer's token headers: %v", raw.Header)
	}
	_, err = oc.Chat.Completions.New(e.Ctx, openai.ChatCompletionNewParams{Model: "meter-chat", Messages: msg, MaxTokens: openai.Int(8)},
		option.WithResponseInto(&raw))
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 429 || apiErr.Code != "rate_limit_exceeded" {
		t.Fatalf("the second request of a key of 1 token a minute: %v; want 429 rate_limit_exceeded", err)
	}
	if ra, _ := strconv.Atoi(apiErr.Response.Header.Get("Retry-After")); ra < 60 || apiErr.Response.Header.Get("X-Ratelimit-Remaining-Tokens") != "0" {
		t.Errorf("the refusal's headers: %v; want Retry-After of minutes and no tokens left", apiErr.Response.Header)
	}

	waittest.NoErrorWithin(t, time.Minute, func() error {
		if got := byKey()[kc.ID]; got.Requests != 1 || got.TotalTokens == 0 {
			return fmt.Errorf("the 1-token key's usage: %+v; want its one answer", got)
		}
		return nil
	}, "the 1-token key's usage")

	// The CSV export: a header, a line per key and model, the same sums.
	b, err := e.Client.UsageCSV(e.Ctx, client.UsageQuery{GroupBy: []string{"key", "model"}})
	if err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(bytes.NewReader(b)).ReadAll()
	if err != nil || len(recs) < 5 || fmt.Sprint(recs[0]) != "[key_id key_name model requests prompt_tokens completion_tokens total_tokens gpu_seconds]" {
		t.Fatalf("CSV %q: %v", b, err)
	}
	var csvTotal int64
	for _, r := range recs[1:] {
		n, _ := strconv.ParseInt(r[6], 10, 64)
		csvTotal += n
	}
	if want := before[ka.ID].TotalTokens + before[kb.ID].TotalTokens + byKey()[kc.ID].TotalTokens; csvTotal != want {
		t.Errorf("the CSV's tokens: %d; the usage says %d\n%s", csvTotal, want, b)
	}

	// The GPUs the jobs held, sampled by the ork each second: the chat job's
	// one GPU for about as long as it has existed, on its rows without a key.
	waittest.NoErrorWithin(t, time.Minute, func() error {
		u, err := e.Client.Usage(e.Ctx, client.UsageQuery{GroupBy: []string{"job", "key"}})
		if err != nil {
			return err
		}
		for _, it := range u.Items {
			if it.JobID == cj.ID && it.KeyID == "" {
				if held := time.Since(created); it.GPUSeconds < 3 || time.Duration(it.GPUSeconds)*time.Second > held+2*time.Second {
					return fmt.Errorf("the chat job held %d GPU-seconds in %v", it.GPUSeconds, held.Round(time.Second))
				}
				return nil
			}
		}
		return fmt.Errorf("no GPU-seconds of the chat job: %+v", u.Items)
	}, "the chat job's GPU-seconds")

	// A restart of the platform: what was delivered stays, and more adds on.
	e.Restart()
	e.WaitState(cj.ID, cosmic.StateRunning)
	e.waitReplicas(cj.ID, 1)
	oa = e.openAI(ka.Key)
	chats(oa, 2)
	check("after the restart", a)
}
