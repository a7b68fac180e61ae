package inferproxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cosmicac/cosmicac/internal/config"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/inferproxy/keyapi"
	"github.com/cosmicac/cosmicac/internal/simruntime"
	"github.com/cosmicac/cosmicac/internal/waittest"
	"github.com/cosmicac/cosmicac/internal/wav"
)

func sdk(h *harness, key string) openai.Client {
	opts := []option.RequestOption{option.WithBaseURL(h.srv.URL + Prefix + "/"), option.WithMaxRetries(0)}
	if key != "" {
		opts = append(opts, option.WithAPIKey(key))
	}
	return openai.NewClient(opts...)
}

// wantAPIError checks err is an OpenAI-shaped error with status and code.
func wantAPIError(t *testing.T, what string, err error, status int, code string) {
	t.Helper()
	var ae *openai.Error
	if !errors.As(err, &ae) {
		t.Fatalf("%s: %v is not an API error", what, err)
	}
	if ae.StatusCode != status || ae.Code != code || ae.Message == "" || ae.Type == "" {
		t.Fatalf("%s: status %d code %q type %q message %q; want %d %q (raw %s)", what, ae.StatusCode, ae.Code, ae.Type, ae.Message, status, code, ae.RawJSON())
	}
}

// TestOpenAISDK drives /inference/v1 with the official OpenAI Go SDK: a
// chat completion, a streamed one with include_usage, the model list, a
// transcription of a WAV file, and the errors (wrong key, another team's
// model, unknown model), each in OpenAI's error shape.
func TestOpenAISDK(t *testing.T) {
	h := newHarness(t, Config{LookupTTL: config.Duration(100 * time.Millisecond), KeyTTL: config.Duration(100 * time.Millisecond)})
	h.addJob("job-qwen", "team-a", "qwen", cosmic.RuntimeVLLM, 2, 1, true, simruntime.Config{})
	h.addJob("job-asr", "team-a", cosmic.ParakeetModel, cosmic.RuntimeParakeet, 1, 1, true, simruntime.Config{})
	h.addJob("job-b", "team-b", "b-model", cosmic.RuntimeVLLM, 1, 1, true, simruntime.Config{})
	h.waitReady("job-qwen", 2)
	h.waitReady("job-asr", 1)
	h.waitReady("job-b", 1)
	ctx := context.Background()
	a := sdk(h, h.keys["team-a"])

	cc, err := a.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "qwen",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Say hello")}, MaxTokens: openai.Int(6)})
	if err != nil {
		t.Fatal(err)
	}
	if len(cc.Choices) != 1 || len(strings.Fields(cc.Choices[0].Message.Content)) != 6 || cc.Usage.CompletionTokens != 6 ||
		//lint:ignore SA1019 vLLM still sends system_fingerprint; the test checks that it reaches the client
		cc.SystemFingerprint != simruntime.Fingerprint || cc.Choices[0].FinishReason != "length" {
		t.Fatalf("chat completion %+v", cc)
	}

	stream := a.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: "qwen",
		Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Say hello")},
		MaxTokens:     openai.Int(6),
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}})
	var acc openai.ChatCompletionAccumulator
	chunks := 0
	for stream.Next() {
		acc.AddChunk(stream.Current())
		chunks++
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if acc.Usage.CompletionTokens != 6 || acc.Usage.TotalTokens == 0 || acc.Choices[0].Message.Content != cc.Choices[0].Message.Content || chunks != 8 {
		t.Fatalf("stream: %d chunks, usage %+v, text %q (non-streamed %q)", chunks, acc.Usage, acc.Choices[0].Message.Content, cc.Choices[0].Message.Content)
	}

	page, err := a.Models.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range page.Data {
		names = append(names, m.ID)
	}
	if strings.Join(names, ",") != "qwen,"+cosmic.ParakeetModel {
		t.Fatalf("models %v", names)
	}

	wav := wav.Tone(2, 16000)
	tr, err := a.Audio.Transcriptions.New(ctx, openai.AudioTranscriptionNewParams{Model: cosmic.ParakeetModel,
		File: openai.File(bytes.NewReader(wav), "hello.wav", "audio/wav")})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(tr.Text, "simulated transcript of 2.00 s") {
		t.Fatalf("transcription %q", tr.Text)
	}

	wrong := sdk(h, keyapi.KeyPrefix+"wrong")
	_, err = wrong.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "qwen",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("x")}})
	wantAPIError(t, "wrong key", err, 401, "invalid_api_key")
	_, err = a.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "b-model",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("x")}})
	wantAPIError(t, "another team's model", err, 404, "model_not_found")
	_, err = a.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "nope",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("x")}})
	wantAPIError(t, "unknown model", err, 404, "model_not_found")
	nokey := sdk(h, "")
	_, err = nokey.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "qwen",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("x")}})
	wantAPIError(t, "no key", err, 401, "invalid_api_key")
	// team-b's key reaches its own model with X-API-Key.
	req, _ := http.NewRequest("POST", h.srv.URL+Prefix+"/completions", strings.NewReader(`{"model":"b-model","prompt":"hi","max_tokens":2}`))
	req.Header.Set("X-API-Key", h.keys["team-b"])
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("X-API-Key: %v %v", resp.Status, err)
	}
	resp.Body.Close()
	// A key revoked in the store stops working once the proxy's cached
	// answer expires (KeyTTL).
	keys, _ := h.store.ListAPIKeys(ctx, "team-b")
	if err := h.store.DeleteAPIKey(ctx, keys[0].ID); err != nil {
		t.Fatal(err)
	}
	waittest.NoError(t, func() error {
		req, _ := http.NewRequest("POST", h.srv.URL+Prefix+"/completions", strings.NewReader(`{"model":"b-model","prompt":"hi"}`))
		req.Header.Set("X-API-Key", h.keys["team-b"])
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != 401 {
			return fmt.Errorf("status %s, want 401", resp.Status)
		}
		return nil
	}, "the revoked key to be refused")
	mh, _ := h.proxy.JobHealth(ctx, "job-qwen")
	if mh.Health != HealthHealthy || len(mh.Replicas) != 2 {
		t.Fatalf("health %+v", mh)
	}
}

// TestRequireAuthOff: a model whose job turns authorization off is reached
// without a key and by any team's key, by its full name @TEAM/NAME.
func TestRequireAuthOff(t *testing.T) {
	h := newHarness(t, Config{LookupTTL: config.Duration(100 * time.Millisecond)})
	h.addJob("job-open", "team-a", "open", cosmic.RuntimeVLLM, 1, 1, false, simruntime.Config{})
	h.waitReady("job-open", 1)
	for _, key := range []string{"", h.keys["team-b"]} {
		cl := sdk(h, key)
		c, err := cl.Completions.New(context.Background(), openai.CompletionNewParams{Model: "@team-a/open",
			Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("hi")}, MaxTokens: openai.Int(3)})
		if err != nil || c.Usage.CompletionTokens != 3 {
			t.Fatalf("key %q: %+v %v", key, c, err)
		}
	}
}

// TestLimits: per-key concurrency and requests per minute answer 429 with
// Retry-After; an oversized body 413; all in OpenAI's shape.
func TestLimits(t *testing.T) {
	h := newHarness(t, Config{LookupTTL: config.Duration(100 * time.Millisecond), MaxConcurrentPerKey: 2, RequestsPerMinute: 5, MaxBodyBytes: 1024})
	hold := make(chan struct{})
	h.addJob("job-q", "team-a", "q", cosmic.RuntimeVLLM, 1, 1, true, simruntime.Config{Hold: hold})
	h.waitReady("job-q", 1)
	post := func(body string) *http.Response {
		req, _ := http.NewRequest("POST", h.srv.URL+Prefix+"/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+h.keys["team-a"])
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	shape := func(resp *http.Response, status int, code string) {
		t.Helper()
		var e struct {
			Error struct{ Message, Type, Code string }
		}
		json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if resp.StatusCode != status || e.Error.Code != code || e.Error.Message == "" || e.Error.Type == "" {
			t.Fatalf("status %d %+v, want %d %s", resp.StatusCode, e, status, code)
		}
		if status == 429 && resp.Header.Get("Retry-After") == "" {
			t.Fatal("429 without Retry-After")
		}
	}
	shape(post(`{"model":"q","prompt":"`+strings.Repeat("x", 2000)+`"}`), 413, "request_too_large")
	// Two streams wait at the runtime for their first token (held until
	// the third request is answered): the third is one too many.
	var wg sync.WaitGroup
	codes := make(chan int, 2)
	for range 2 {
		wg.Go(func() {
			resp := post(`{"model":"q","prompt":"hi","stream":true}`)
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			codes <- resp.StatusCode
		})
	}
	waittest.Until(t, func() bool { return h.held("job-q") == 2 }, "two streams at the runtime")
	shape(post(`{"model":"q","prompt":"hi","stream":true}`), 429, "rate_limit_exceeded")
	close(hold)
	wg.Wait()
	close(codes)
	for c := range codes {
		if c != 200 {
			t.Fatalf("one of the 2 concurrent requests within the limit: status %d", c)
		}
	}
	// 5 per minute: the 413 and the two that ran took 3 (the limits are
	// taken before the body is read; the refused 429 takes none); two more
	// pass, then 429. A request for a model that does not exist counts
	// too: it costs a read of the catalog.
	// Each answer says what is left, as the OpenAI API's headers do.
	left := func(resp *http.Response) (limit, remaining string, reset time.Duration) {
		t.Helper()
		reset, err := time.ParseDuration(resp.Header.Get("X-Ratelimit-Reset-Requests"))
		if err != nil || reset <= 0 || reset > time.Minute {
			t.Fatalf("x-ratelimit-reset-requests %q: %v", resp.Header.Get("X-Ratelimit-Reset-Requests"), err)
		}
		return resp.Header.Get("X-Ratelimit-Limit-Requests"), resp.Header.Get("X-Ratelimit-Remaining-Requests"), reset
	}
	for _, want := range []string{"1", "0"} {
		resp := post(`{"model":"q","prompt":"hi"}`)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		if limit, remaining, _ := left(resp); limit != "5" || remaining != want {
			t.Fatalf("x-ratelimit-limit-requests %q, remaining %q; want 5, %s", limit, remaining, want)
		}
	}
	resp := post(`{"model":"q","prompt":"hi"}`)
	if limit, remaining, _ := left(resp); limit != "5" || remaining != "0" {
		t.Fatalf("the 429: x-ratelimit-limit-requests %q, remaining %q; want 5, 0", limit, remaining)
	}
	shape(resp, 429, "rate_limit_exceeded")
	h2 := newHarness(t, Config{RequestsPerMinute: 2})
	for i, want := range []int{404, 404, 429} {
		req, _ := http.NewRequest("POST", h2.srv.URL+Prefix+"/completions", strings.NewReader(`{"model":"nope","prompt":"hi"}`))
		req.Header.Set("Authorization", "Bearer "+h2.keys["team-a"])
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("request %d for an unknown model: status %d, want %d", i, resp.StatusCode, want)
		}
	}
}

// TestStreamHeadBeforeFirstEvent: an event stream's head reaches the
// client as the runtime sends it, before the first event (which the runtime
// holds here), naming the replica; the events follow, with no comment
// naming another.
func TestStreamHeadBeforeFirstEvent(t *testing.T) {
	h := newHarness(t, Config{})
	hold := make(chan struct{})
	released := false
	t.Cleanup(func() {
		if !released {
			close(hold)
		}
	})
	h.addJob("job-h", "team-a", "h", cosmic.RuntimeVLLM, 1, 1, true, simruntime.Config{Hold: hold})
	h.waitReady("job-h", 1)
	req, _ := http.NewRequest("POST", h.srv.URL+Prefix+"/chat/completions",
		strings.NewReader(`{"model":"h","messages":[{"role":"user","content":"hi"}],"stream":true,"max_tokens":3}`))
	req.Header.Set("Authorization", "Bearer "+h.keys["team-a"])
	type answer struct {
		resp *http.Response
		err  error
	}
	got := make(chan answer, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		got <- answer{resp, err}
	}()
	waittest.Until(t, func() bool { return h.held("job-h") == 1 }, "the runtime holding the stream's first event")
	var a answer
	select {
	case a = <-got:
	case <-time.After(30 * time.Second):
		t.Fatal("no head reached the client while the runtime held the first event")
	}
	if a.err != nil {
		t.Fatal(a.err)
	}
	defer a.resp.Body.Close()
	if a.resp.StatusCode != 200 || !strings.HasPrefix(a.resp.Header.Get("Content-Type"), "text/event-stream") || a.resp.Header.Get("X-CosmicAC-Replica") != "0" {
		t.Fatalf("head before the first event: %d %v", a.resp.StatusCode, a.resp.Header)
	}
	released = true
	close(hold)
	b, err := io.ReadAll(a.resp.Body)
	if err != nil || !strings.Contains(string(b), "data: {") || !strings.HasSuffix(string(b), "data: [DONE]\n\n") || strings.Contains(string(b), ": replica") {
		t.Fatalf("events after the head: %q, %v", b, err)
	}
}

// TestReplicaKilledDuringStreaming: with two replicas and requests waiting
// for their first token, replica 0 dies; every request that had not begun
// streaming completes on replica 1. The head went on before the first token
// (an event stream's does), naming the replica that began; one that fails
// over is named by an SSE comment before its first event.
func TestReplicaKilledDuringStreaming(t *testing.T) {
	h := newHarness(t, Config{LookupTTL: config.Duration(100 * time.Millisecond), MaxConcurrentPerKey: 100})
	hold := make(chan struct{}) // no stream gets its first token before the crash
	h.addJob("job-k", "team-a", "k", cosmic.RuntimeVLLM, 2, 1, true, simruntime.Config{Hold: hold, InterTokenDelay: 5 * time.Millisecond})
	h.waitReady("job-k", 2)
	const n = 20
	type result struct {
		replica string
		events  int
		done    bool
		err     error
	}
	results := make(chan result, n)
	for range n {
		go func() {
			req, _ := http.NewRequest("POST", h.srv.URL+Prefix+"/chat/completions",
				strings.NewReader(`{"model":"k","messages":[{"role":"user","content":"tell me"}],"stream":true,"max_tokens":10}`))
			req.Header.Set("Authorization", "Bearer "+h.keys["team-a"])
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				results <- result{err: err}
				return
			}
			defer resp.Body.Close()
			r := result{replica: resp.Header.Get("X-CosmicAC-Replica")}
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				l := sc.Text()
				if n, ok := strings.CutPrefix(l, ": replica "); ok && r.events == 0 {
					r.replica = n
				}
				if strings.HasPrefix(l, "data: ") {
					r.events++
					r.done = l == "data: [DONE]"
				}
			}
			r.err = sc.Err()
			results <- r
		}()
	}
	waittest.Until(t, func() bool { return h.held("job-k") == n }, "all %d requests waiting for their first token", n)
	var victim *agentHandle
	for _, a := range h.agents["job-k"] {
		if a.a.Status().Replica == 0 {
			victim = a
		}
	}
	victim.a.Crash()
	<-victim.done // its connections are cut and its runtime is dead
	close(hold)
	byReplica := map[string]int{}
	for range n {
		r := <-results
		if r.err != nil || !r.done || r.events != 12 {
			t.Fatalf("a request failed: %+v", r)
		}
		byReplica[r.replica]++
	}
	if byReplica["1"] != n {
		t.Fatalf("answers by replica: %v", byReplica)
	}
	mh, _ := h.proxy.JobHealth(context.Background(), "job-k")
	if mh.Health != HealthDegraded && mh.Health != HealthHealthy { // replica 0 is out, or already expired from the directory
		t.Fatalf("health after the crash: %+v", mh)
	}
}

// TestMultiNodeReplica: a 2-node vLLM replica's agents elect VMI 0 as head;
// only the head is routed to, and the replica serves one endpoint.
func TestMultiNodeReplica(t *testing.T) {
	h := newHarness(t, Config{LookupTTL: config.Duration(100 * time.Millisecond)})
	h.addJob("job-mn", "team-a", "big", cosmic.RuntimeVLLM, 1, 2, true, simruntime.Config{})
	h.waitReady("job-mn", 1)
	for _, a := range h.agents["job-mn"] {
		select {
		case <-a.a.Ready():
		case <-time.After(10 * time.Second):
			t.Fatalf("VMI not ready: %+v", a.a.Status())
		}
	}
	var roles []string
	for _, a := range h.agents["job-mn"] {
		st := a.a.Status()
		roles = append(roles, st.Role)
		if st.Role == "worker" && !strings.Contains(st.Command, "--headless") || st.Role == "head" && strings.Contains(st.Command, "--headless") {
			t.Fatalf("VMI %d: role %s, command %s", st.VMIIndex, st.Role, st.Command)
		}
	}
	if strings.Join(roles, ",") != "head,worker" {
		t.Fatalf("roles %v", roles)
	}
	mh, _ := h.proxy.JobHealth(context.Background(), "job-mn")
	if len(mh.Replicas) != 1 {
		t.Fatalf("the proxy sees %d replicas: %+v", len(mh.Replicas), mh)
	}
	for range 3 {
		cl := sdk(h, h.keys["team-a"])
		c, err := cl.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: "big",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("x")}, MaxTokens: openai.Int(2)})
		if err != nil || c.Usage.CompletionTokens != 2 {
			t.Fatalf("%+v %v", c, err)
		}
	}
}

// TestAgentConnectionsAreDirect: the agents only dial out (no address), so
// the proxy's connections to them are ones they parked: each a TCP+TLS
// connection of its own, not a stream of a multiplexed one.
func TestAgentConnectionsAreDirect(t *testing.T) {
	h := newHarness(t, Config{LookupTTL: config.Duration(100 * time.Millisecond)})
	h.addJob("job-qwen", "team-a", "qwen", cosmic.RuntimeVLLM, 2, 1, true, simruntime.Config{})
	h.waitReady("job-qwen", 2)
	a := sdk(h, h.keys["team-a"])
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 16 {
		wg.Go(func() {
			_, err := a.Completions.New(context.Background(), openai.CompletionNewParams{
				Model: openai.CompletionNewParamsModel("qwen"), Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("hi")}, MaxTokens: openai.Int(2)})
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	byTransport := countersByLabel(t, h.proxy, "cosmicac_inference_agent_connections_total")
	// Parks arrive within milliseconds; a request that found none within
	// 250 ms (a starved machine) goes over the multiplexed connection.
	if byTransport["tcp-direct"] == 0 {
		t.Fatalf("agent connections by transport %v, want tcp-direct ones", byTransport)
	}
	t.Logf("agent connections by transport: %v", byTransport)
}

func gatherer(p *Proxy) prometheus.Gatherer {
	r := prometheus.NewRegistry()
	r.MustRegister(p.Collector())
	return r
}

// TestClientDisconnectStopsGeneration: a client that leaves a streamed
// completion makes the runtime stop generating (the proxy closes its
// connection to the agent, the agent the runtime's), long before the
// answer's end.
func TestClientDisconnectStopsGeneration(t *testing.T) {
	var mu sync.Mutex
	events := map[string]int{}
	sim := simruntime.Config{InterTokenDelay: 20 * time.Millisecond, OnEvent: func(id string, _ int, _ time.Time) {
		mu.Lock()
		events[id]++
		mu.Unlock()
	}}
	h := newHarness(t, Config{LookupTTL: config.Duration(100 * time.Millisecond)})
	h.addJob("job-qwen", "team-a", "qwen", cosmic.RuntimeVLLM, 1, 1, true, sim)
	h.waitReady("job-qwen", 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", h.srv.URL+Prefix+"/chat/completions",
		strings.NewReader(`{"model":"qwen","messages":[{"role":"user","content":"go on"}],"stream":true,"max_tokens":500}`))
	req.Header.Set("Authorization", "Bearer "+h.keys["team-a"])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(resp.Body)
	for got := 0; got < 3 && sc.Scan(); {
		if strings.HasPrefix(sc.Text(), "data: ") {
			got++
		}
	}
	cancel() // the client leaves
	resp.Body.Close()
	total := func() int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, c := range events {
			n += c
		}
		return n
	}
	// Wait until the runtime's generation has ended (the whole answer
	// would take 10 s), then check it ended well before its 500 tokens.
	rt := h.agents["job-qwen"][0].sim.Runtime()
	waittest.Until(t, func() bool { return rt.Generating() == 0 }, "the runtime to stop generating")
	t.Logf("events: %d", total())
	if n := total(); n >= 500 {
		t.Fatalf("the runtime wrote %d events: the whole answer", n)
	}
}

// TestEmbeddingModel: a vLLM job of an embedding model (runner "pooling")
// serves /v1/embeddings through the proxy to the OpenAI SDK. Its runtime
// serves no completions, as vLLM's pooling runner does not, so its replicas
// become ready only because the agent's probe suits the task (an
// embeddings request, not a one-token completion).
func TestEmbeddingModel(t *testing.T) {
	h := newHarness(t, Config{LookupTTL: config.Duration(100 * time.Millisecond), KeyTTL: config.Duration(100 * time.Millisecond)})
	on := true
	h.addJobSpec("job-emb", "team-a", cosmic.InferenceSpec{Runtime: cosmic.RuntimeVLLM, Model: "BAAI/bge-m3", ServedModelName: "bge",
		RequireAuth: &on, Args: map[string]string{"runner": "pooling"}}, 1, 1, simruntime.Config{})
	// runner left to auto: vLLM chooses pooling for an embedding model; the
	// probe falls back from /v1/completions (404) to /v1/embeddings.
	h.addJobSpec("job-emb-auto", "team-a", cosmic.InferenceSpec{Runtime: cosmic.RuntimeVLLM, Model: "intfloat/e5-small", ServedModelName: "e5",
		RequireAuth: &on}, 1, 1, simruntime.Config{Embeddings: true})
	h.waitReady("job-emb", 1)
	h.waitReady("job-emb-auto", 1)
	ctx := context.Background()
	a := sdk(h, h.keys["team-a"])
	for _, model := range []string{"bge", "e5"} {
		res, err := a.Embeddings.New(ctx, openai.EmbeddingNewParams{Model: model,
			Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{"the sky is blue", "grass is green"}}})
		if err != nil {
			t.Fatalf("%s: %v", model, err)
		}
		if len(res.Data) != 2 || len(res.Data[0].Embedding) == 0 || res.Data[1].Index != 1 || res.Usage.PromptTokens == 0 || res.Model != model {
			t.Fatalf("%s: embeddings %+v", model, res)
		}
		// An embedding model has no completions: the runtime's 404 passes through.
		_, err = a.Completions.New(ctx, openai.CompletionNewParams{Model: openai.CompletionNewParamsModel(model),
			Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("hi")}})
		var ae *openai.Error
		if !errors.As(err, &ae) || ae.StatusCode != http.StatusNotFound {
			t.Fatalf("%s: completion on an embedding model: %v, want 404", model, err)
		}
	}
}

// TestExchangeConnectionsOutlastAPause: the proxy keeps a connection to an
// agent that relays exchanges (llama.cpp's) past a pause longer than it
// keeps one to an agent that relays bytes (vLLM's, bound by the runtime's
// keep-alive): after the pause the llama.cpp job's request reuses its
// connection, the vLLM job's opens another.
func TestExchangeConnectionsOutlastAPause(t *testing.T) {
	h := newHarness(t, Config{})
	h.addJob("job-llama", "team-a", "llama", cosmic.RuntimeLlamaCPP, 1, 1, true, simruntime.Config{})
	h.addJob("job-vllm", "team-a", "vllm", cosmic.RuntimeVLLM, 1, 1, true, simruntime.Config{})
	h.waitReady("job-llama", 1)
	h.waitReady("job-vllm", 1)
	conns := func() float64 { return counterSum(t, h.proxy, "cosmicac_inference_agent_connections_total") }
	ask := func(model string) {
		req, _ := http.NewRequest("POST", h.srv.URL+Prefix+"/completions", strings.NewReader(`{"model":"`+model+`","prompt":"hi","max_tokens":1}`))
		req.Header.Set("Authorization", "Bearer "+h.keys["team-a"])
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %s %s", model, resp.Status, b)
		}
	}
	ask("llama")
	before := conns()
	ask("vllm")
	if got := conns() - before; got != 1 {
		t.Fatalf("the first vLLM request opened %v connections, want 1", got)
	}
	time.Sleep(agentIdleFor + 500*time.Millisecond)
	before = conns()
	ask("llama")
	if got := conns() - before; got != 0 {
		t.Errorf("after a pause of %v the llama.cpp job's request opened %v connections, want 0 (its kept one)", agentIdleFor+500*time.Millisecond, got)
	}
	ask("vllm")
	if got := conns() - before; got != 1 {
		t.Errorf("after the pause the vLLM job's request opened %v connections, want 1 (the kept one is retired before the runtime's keep-alive ends)", got)
	}
}
