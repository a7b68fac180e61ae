package cosmictest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/gguf/testmodel"
	"github.com/cosmicac/cosmicac/internal/inferproxy"
	"github.com/cosmicac/cosmicac/internal/joblog"
	"github.com/cosmicac/cosmicac/internal/platform"
	"github.com/cosmicac/cosmicac/internal/simruntime"
	"github.com/cosmicac/cosmicac/internal/testenv"
	"github.com/cosmicac/cosmicac/internal/waittest"
)

// llamaServer is the llama-server the tests run: $COSMICAC_LLAMA_SERVER,
// which hack/test.sh sets to hack/build-llama.sh's build.
func llamaServer(t testing.TB) string {
	t.Helper()
	p := os.Getenv("COSMICAC_LLAMA_SERVER")
	_, err := os.Stat(p)
	testenv.Require(t, p != "" && err == nil, "COSMICAC_LLAMA_SERVER is not a llama-server (%q): hack/build-llama.sh builds one, hack/test.sh sets it", p)
	return p
}

// withLlama runs the simulated rack's llama.cpp replicas with the real
// llama-server, on the test models.
func withLlama(t testing.TB) Option {
	server, dir := llamaServer(t), t.TempDir()
	if _, err := testmodel.Install(dir); err != nil {
		t.Fatal(err)
	}
	return func(c *platform.Config) { c.LlamaServer, c.ModelDir = server, dir }
}

// TestLlamaCPPServesRealTokens: a llama.cpp job on the simulated rack is
// served by a real llama-server (the rack's one real part), through
// proxy-inference, to the official OpenAI SDK: a streamed chat with its
// usage, a completion, and a model's embeddings as float and as base64,
// of the model's dimension. No answer says it is simulated.
func TestLlamaCPPServesRealTokens(t *testing.T) {
	e := NewEnv(t, withLlama(t))
	chat := inference("tiny-chat", cosmic.RuntimeLlamaCPP, testmodel.ChatModel, 1, 1)
	chat.Inference.Args = map[string]string{"ctx-size": "1024", "parallel": "2"}
	embed := inference("tiny-embed", cosmic.RuntimeLlamaCPP, testmodel.EmbedModel, 1, 1)
	embed.Inference.Args = map[string]string{"embeddings": "true", "pooling": "mean"}
	cj, ej := e.Create(chat), e.Create(embed)
	key, err := e.Client.CreateAPIKey(e.Ctx, "llama", "")
	if err != nil {
		t.Fatal(err)
	}
	e.WaitState(cj.ID, cosmic.StateRunning)
	e.WaitState(ej.ID, cosmic.StateRunning)
	e.waitReplicas(cj.ID, 1)
	e.waitReplicas(ej.ID, 1)
	oa := e.openAI(key.Key)

	// The agent reads the engine's own load (its /metrics and /slots) with
	// each probe: 2 slots, as the job asked (parallel 2).
	agents := e.P.InferenceAgents(cj.ID, 0)
	if len(agents) != 1 {
		t.Fatalf("%d agents of the chat replica", len(agents))
	}
	if l := agents[0].Status().Load; l == nil || l.Slots != 2 || l.Running < 0 || l.At.IsZero() {
		t.Fatalf("the engine's load as the agent read it: %+v", l)
	}

	stream := oa.Chat.Completions.NewStreaming(e.Ctx, openai.ChatCompletionNewParams{
		Model:         "tiny-chat",
		Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Say hello.")},
		MaxTokens:     openai.Int(16),
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	})
	var text strings.Builder
	var usage openai.CompletionUsage
	chunks := 0
	for stream.Next() {
		c := stream.Current()
		chunks++
		for _, ch := range c.Choices {
			text.WriteString(ch.Delta.Content)
		}
		if c.Usage.TotalTokens > 0 {
			usage = c.Usage
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("chat stream: %v", err)
	}
	if text.Len() == 0 || chunks < 2 || usage.CompletionTokens == 0 || usage.CompletionTokens > 16 || usage.PromptTokens == 0 {
		t.Fatalf("chat: %d chunks, text %q, usage %+v", chunks, text.String(), usage)
	}

	var raw *http.Response
	comp, err := oa.Completions.New(e.Ctx, openai.CompletionNewParams{
		Model: "tiny-chat", Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")},
		MaxTokens: openai.Int(8),
	}, option.WithResponseInto(&raw))
	if err != nil {
		t.Fatalf("completion: %v", err)
	}
	if len(comp.Choices) != 1 || comp.Usage.CompletionTokens == 0 {
		t.Fatalf("completion %+v", comp)
	}
	if v := raw.Header.Get(simruntime.HeaderSimulated); v != "" {
		t.Fatalf("the real engine's answer has %s: %s", simruntime.HeaderSimulated, v)
	}

	vec, err := oa.Embeddings.New(e.Ctx, openai.EmbeddingNewParams{Model: "tiny-embed",
		Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{"a cat", "a dog"}}, EncodingFormat: openai.EmbeddingNewParamsEncodingFormatFloat})
	if err != nil {
		t.Fatalf("embeddings: %v", err)
	}
	if len(vec.Data) != 2 || len(vec.Data[0].Embedding) != 128 {
		t.Fatalf("embeddings: %d vectors of %d, want 2 of 128", len(vec.Data), len(vec.Data[0].Embedding))
	}
	// base64, the Node SDK's default: 128 little-endian float32s, the
	// same vector.
	bs := base64Embedding(t, e, key.Key, "a cat", "tiny-embed")
	if len(bs) != 128 {
		t.Fatalf("base64 embedding: %d values, want 128", len(bs))
	}
	for i, got := range bs {
		if d := math.Abs(float64(got) - vec.Data[0].Embedding[i]); d > 1e-4 {
			t.Fatalf("base64 component %d is %v, the float answer's %v", i, got, vec.Data[0].Embedding[i])
		}
	}

	// On the platform's host the engine listens on a unix socket of its
	// own, not on the loopback, where other users and web pages reach.
	started := ""
	for _, r := range e.P.Logs.Job(cj.ID) {
		if r.Step == "runtime_start" {
			started = r.Line
		}
	}
	if !strings.Contains(started, "--host /") || !strings.Contains(started, ".sock ") || strings.Contains(started, "--port") {
		t.Errorf("the runtime's start: %q, want it on a unix socket", started)
	}
	// The engine's own output reaches the job's log as application
	// records: llama-server's, which no simulator writes.
	waittest.NoError(t, func() error {
		for _, r := range e.P.Logs.Job(cj.ID) {
			if r.Source == joblog.SourceApplication && strings.Contains(r.Line, "llama") && strings.Contains(r.Line, "model") {
				return nil
			}
		}
		return fmt.Errorf("no line of llama-server's among %d records", len(e.P.Logs.Job(cj.ID)))
	}, "llama-server's output in the job's log")
}

// TestPrefixRoutingFollowsTheCache: with prefix routing (the default), the
// requests whose prompts start alike go to the replica that was sent that
// start, and the real engine there takes it from its cache (llama-server's
// timings); the proxy counts the picks as hits.
func TestPrefixRoutingFollowsTheCache(t *testing.T) {
	e := NewEnv(t, withLlama(t))
	spec := inference("tiny", cosmic.RuntimeLlamaCPP, testmodel.ChatModel, 2, 1)
	spec.Inference.Args = map[string]string{"ctx-size": "2048", "parallel": "1", "cache-ram": "0"}
	j, key := e.serving(spec, "prefix")
	if j.Spec.Inference.Routing != cosmic.RoutingPrefix {
		t.Fatalf("routing %q, want the default, prefix", j.Spec.Inference.Routing)
	}
	complete := func(prompt string) (replica string, cached, processed int) {
		t.Helper()
		body, _ := json.Marshal(map[string]any{"model": "tiny", "prompt": prompt, "max_tokens": 2})
		req, _ := http.NewRequestWithContext(e.Ctx, http.MethodPost, e.P.URL+inferproxy.Prefix+"/completions", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out struct {
			Timings struct {
				CacheN  int `json:"cache_n"`
				PromptN int `json:"prompt_n"`
			} `json:"timings"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("completion: %d, %v", resp.StatusCode, err)
		}
		return resp.Header.Get("X-CosmicAC-Replica"), out.Timings.CacheN, out.Timings.PromptN
	}
	system := prose("You are the test's assistant. ", 2000, 1)
	first, _, _ := complete(system + " Question 0: what now?")
	for i := 1; i < 4; i++ {
		replica, cached, processed := complete(system + fmt.Sprintf(" Question %d: and then?", i))
		if replica != first {
			t.Fatalf("request %d went to replica %s, the prompt's start to replica %s", i, replica, first)
		}
		if cached < 4*processed {
			t.Errorf("request %d: %d prompt tokens from the engine's cache, %d processed: the start was not cached", i, cached, processed)
		}
	}
	if hits := e.metricSum(`cosmicac_inference_prefix_routed_total{model="tiny",outcome="hit"}`); hits != 3 {
		t.Errorf("%v prefix hits counted, want 3", hits)
	}
}

// TestLlamaCPPAdapters: a llama.cpp job's LoRA adapter (the test model's,
// testmodel.ChatLoRAAdapter) is served as NAME:ADAPTER by the real engine:
// greedy completions of one prompt answer the base model's text without
// it, another with it, each the same every time; the model list names it.
func TestLlamaCPPAdapters(t *testing.T) {
	e := NewEnv(t, withLlama(t))
	spec := inference("tiny", cosmic.RuntimeLlamaCPP, testmodel.ChatModel, 1, 1)
	spec.Inference.Args = map[string]string{"ctx-size": "1024", "parallel": "2"}
	spec.Inference.Adapters = []cosmic.Adapter{{Name: "noise", Source: testmodel.ChatLoRAAdapter}}
	_, key := e.serving(spec, "lora")
	call := func(method, path, body string) string {
		t.Helper()
		req, _ := http.NewRequestWithContext(e.Ctx, method, e.P.URL+inferproxy.Prefix+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, b)
		}
		return string(b)
	}
	text := func(model string) string {
		t.Helper()
		var out struct{ Choices []struct{ Text string } }
		b := call("POST", "/completions", `{"model":"`+model+`","prompt":"Once upon a time","max_tokens":12,"temperature":0,"seed":1}`)
		if json.Unmarshal([]byte(b), &out) != nil || len(out.Choices) != 1 || out.Choices[0].Text == "" {
			t.Fatalf("%s: %s", model, b)
		}
		return out.Choices[0].Text
	}
	base, adapted := text("tiny"), text("tiny:noise")
	if base == adapted {
		t.Fatalf("the adapter changed nothing: %q", base)
	}
	if again, adaptedAgain := text("tiny"), text("tiny:noise"); again != base || adaptedAgain != adapted {
		t.Fatalf("greedy answers changed: %q → %q, %q → %q", base, again, adapted, adaptedAgain)
	}
	if list := call("GET", "/models", ""); !strings.Contains(list, `"id":"tiny:noise"`) {
		t.Fatalf("the model list lacks tiny:noise: %s", list)
	}
}
