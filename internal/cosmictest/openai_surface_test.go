package cosmictest

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/cosmicac/cosmicac/internal/client"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/gguf/testmodel"
	"github.com/cosmicac/cosmicac/internal/inferproxy"
	"github.com/cosmicac/cosmicac/internal/simruntime"
	"github.com/cosmicac/cosmicac/internal/waittest"
)

// The OpenAI surface every runtime shares, through proxy-inference, with
// the official OpenAI Go SDK: the same checks against the real engine
// (llama.cpp's llama-server) and the simulated runtime (which stands in for
// vLLM), so that the simulator is held to a real server wherever the two
// agree. Where they differ, docs/inference.md ("Where the runtimes
// differ") says how, and the checks here keep to what both do.

// surfaceTarget is a platform serving a chat model and an embedding model
// under the names chat and embed.
type surfaceTarget struct {
	e    *Env
	key  string
	dims int // the embedding model's dimension
	// overflow is a prompt longer than the chat model's context.
	overflow string
	// simulated says the answers come from the simulated runtime.
	simulated bool
}

func surfaceTargets(t *testing.T) map[string]func(t *testing.T) surfaceTarget {
	start := func(t *testing.T, e *Env, chat, embed cosmic.Spec) string {
		cj, ej := e.Create(chat), e.Create(embed)
		key, err := e.Client.CreateAPIKey(e.Ctx, "surface", "")
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range []cosmic.Job{cj, ej} {
			e.WaitState(j.ID, cosmic.StateRunning)
			e.waitReplicas(j.ID, 1)
		}
		return key.Key
	}
	return map[string]func(t *testing.T) surfaceTarget{
		"llama.cpp": func(t *testing.T) surfaceTarget {
			e := NewEnv(t, withLlama(t))
			chat := inference("chat", cosmic.RuntimeLlamaCPP, testmodel.ChatModel, 1, 1)
			chat.Inference.Args = map[string]string{"ctx-size": "512", "parallel": "2"}
			embed := inference("embed", cosmic.RuntimeLlamaCPP, testmodel.EmbedModel, 1, 1)
			embed.Inference.Args = map[string]string{"embeddings": "true", "pooling": "mean"}
			return surfaceTarget{e: e, key: start(t, e, chat, embed), dims: 128, overflow: strings.Repeat("hello ", 1000)}
		},
		"simulated": func(t *testing.T) surfaceTarget {
			e := NewEnv(t)
			chat := inference("chat", cosmic.RuntimeVLLM, "Qwen/Qwen3-8B", 1, 1)
			embed := inference("embed", cosmic.RuntimeVLLM, "BAAI/bge-base-en-v1.5", 1, 1)
			embed.Inference.Args = map[string]string{"runner": "pooling"}
			// The simulated model's context is 32768 tokens (simruntime's
			// default MaxModelLen), a token a word.
			return surfaceTarget{e: e, key: start(t, e, chat, embed), dims: simruntime.EmbeddingDims,
				overflow: strings.Repeat("hello ", 33000), simulated: true}
		},
	}
}

// TestOpenAISurface runs the shared checks against each runtime.
func TestOpenAISurface(t *testing.T) {
	for name, target := range surfaceTargets(t) {
		t.Run(name, func(t *testing.T) {
			tg := target(t)
			e := tg.e
			oa := e.openAI(tg.key)
			ctx := e.Ctx
			user := []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Say hello.")}

			t.Run("chat", func(t *testing.T) {
				var raw *http.Response
				c, err := oa.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "chat", Messages: user, MaxTokens: openai.Int(8)},
					option.WithResponseInto(&raw))
				if err != nil {
					t.Fatal(err)
				}
				if c.ID == "" || c.Object != "chat.completion" || c.Model != "chat" || len(c.Choices) != 1 {
					t.Fatalf("chat completion %s", c.RawJSON())
				}
				ch := c.Choices[0]
				if ch.Message.Role != "assistant" || (ch.FinishReason != "stop" && ch.FinishReason != "length") {
					t.Errorf("choice %s", ch.RawJSON())
				}
				checkUsage(t, c.Usage, 8)
				if sim := raw.Header.Get(simruntime.HeaderSimulated) == "true"; sim != tg.simulated {
					t.Errorf("%s: %q, want simulated %v", simruntime.HeaderSimulated, raw.Header.Get(simruntime.HeaderSimulated), tg.simulated)
				}
			})

			t.Run("streamed chat with include_usage", func(t *testing.T) {
				s := oa.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: "chat", Messages: user, MaxTokens: openai.Int(12),
					StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}})
				var chunks, usageChunks int
				var last openai.ChatCompletionChunk
				finish := ""
				for s.Next() {
					c := s.Current()
					chunks++
					if c.Object != "chat.completion.chunk" || c.Model != "chat" {
						t.Errorf("chunk %s", c.RawJSON())
					}
					for _, ch := range c.Choices {
						if ch.FinishReason != "" {
							finish = ch.FinishReason
						}
					}
					if c.JSON.Usage.Valid() && c.Usage.TotalTokens > 0 {
						usageChunks++
						if len(c.Choices) != 0 {
							t.Errorf("the usage chunk has choices: %s", c.RawJSON())
						}
					}
					last = c
				}
				if err := s.Err(); err != nil {
					t.Fatal(err)
				}
				if chunks < 2 || usageChunks != 1 || last.Usage.TotalTokens == 0 || (finish != "stop" && finish != "length") {
					t.Fatalf("%d chunks, %d with usage, finish %q, last %s", chunks, usageChunks, finish, last.RawJSON())
				}
				checkUsage(t, last.Usage, 12)
			})

			t.Run("completion", func(t *testing.T) {
				c, err := oa.Completions.New(ctx, openai.CompletionNewParams{Model: "chat",
					Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")}, MaxTokens: openai.Int(8)})
				if err != nil {
					t.Fatal(err)
				}
				if c.Object != "text_completion" || len(c.Choices) != 1 || c.Model != "chat" {
					t.Fatalf("completion %s", c.RawJSON())
				}
				checkUsage(t, c.Usage, 8)
			})

			t.Run("responses", func(t *testing.T) {
				r, err := oa.Responses.New(ctx, responses.ResponseNewParams{Model: "chat",
					Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Say hello.")}, MaxOutputTokens: openai.Int(8)})
				if err != nil {
					t.Fatal(err)
				}
				// Cut at max_output_tokens, vLLM says "incomplete" (reason
				// max_output_tokens) and llama-server "completed".
				if r.Object != "response" || (r.Status != "completed" && r.Status != "incomplete") || r.ID == "" || len(r.Output) == 0 || r.Output[0].Type != "message" {
					t.Fatalf("response %s", r.RawJSON())
				}
				if u := r.Usage; u.OutputTokens == 0 || u.OutputTokens > 8 || u.TotalTokens != u.InputTokens+u.OutputTokens {
					t.Errorf("usage %s", u.RawJSON())
				}
			})

			t.Run("embeddings, float and base64", func(t *testing.T) {
				in := []string{"a cat", "a dog on a mat"}
				v, err := oa.Embeddings.New(ctx, openai.EmbeddingNewParams{Model: "embed",
					Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: in}, EncodingFormat: openai.EmbeddingNewParamsEncodingFormatFloat})
				if err != nil {
					t.Fatal(err)
				}
				if v.Object != "list" || len(v.Data) != len(in) || v.Usage.PromptTokens == 0 {
					t.Fatalf("embeddings %s", v.RawJSON())
				}
				for i, d := range v.Data {
					if d.Index != int64(i) || len(d.Embedding) != tg.dims {
						t.Fatalf("vector %d: index %d, %d values, want %d", i, d.Index, len(d.Embedding), tg.dims)
					}
				}
				b64 := base64Embedding(t, e, tg.key, in[0], "embed")
				if len(b64) != tg.dims {
					t.Fatalf("base64: %d values, want %d", len(b64), tg.dims)
				}
				for i, f := range b64 {
					if math.Abs(float64(f)-v.Data[0].Embedding[i]) > 1e-4 {
						t.Fatalf("base64 value %d is %v, the float answer's %v", i, f, v.Data[0].Embedding[i])
					}
				}
			})

			t.Run("bad input is a 400", func(t *testing.T) {
				for name, body := range map[string]string{
					"no messages":             `{"model":"chat"}`,
					"messages not an array":   `{"model":"chat","messages":"hello"}`,
					"max_tokens below -1":     `{"model":"chat","messages":[{"role":"user","content":"hi"}],"max_tokens":-5}`,
					"prompt beyond the model": fmt.Sprintf(`{"model":"chat","messages":[{"role":"user","content":%q}],"max_tokens":4}`, tg.overflow),
				} {
					status, msg := post(t, e, tg.key, "/chat/completions", body)
					if status != http.StatusBadRequest || msg == "" {
						t.Errorf("%s: %d %q, want a 400 with a message", name, status, msg)
					}
				}
			})

			t.Run("a cancelled stream frees the replica", func(t *testing.T) {
				cctx, cancel := context.WithCancel(ctx)
				s := oa.Chat.Completions.NewStreaming(cctx, openai.ChatCompletionNewParams{Model: "chat", Messages: user, MaxTokens: openai.Int(400)})
				if !s.Next() {
					t.Fatalf("no first chunk: %v", s.Err())
				}
				cancel()
				for s.Next() {
				}
				if err := s.Err(); !errors.Is(err, context.Canceled) && err != nil && !strings.Contains(err.Error(), "canceled") {
					t.Logf("stream after cancel: %v", err)
				}
				jobs, err := e.Client.ListJobs(ctx, client.ListOptions{})
				if err != nil {
					t.Fatal(err)
				}
				var chatJob string
				for _, j := range jobs.Items {
					if j.Spec.Inference != nil && j.Spec.Inference.ServedName() == "chat" {
						chatJob = j.ID
					}
				}
				waittest.NoError(t, func() error {
					if n := e.outstanding(chatJob)[0]; n != 0 {
						return fmt.Errorf("%d requests outstanding", n)
					}
					return nil
				}, "the proxy to count the cancelled stream ended")
				c, err := oa.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "chat", Messages: user, MaxTokens: openai.Int(4)})
				if err != nil || len(c.Choices) != 1 {
					t.Fatalf("the next request: %v", err)
				}
			})
		})
	}
}

// checkUsage: the counts add up, something was generated, and no more than
// max.
func checkUsage(t *testing.T, u openai.CompletionUsage, max int64) {
	t.Helper()
	if u.PromptTokens == 0 || u.CompletionTokens == 0 || u.CompletionTokens > max || u.TotalTokens != u.PromptTokens+u.CompletionTokens {
		t.Errorf("usage %s (max_tokens %d)", u.RawJSON(), max)
	}
}

// base64Embedding asks for input's embedding as base64 (the Node SDK's
// default) and decodes its little-endian float32s.
func base64Embedding(t *testing.T, e *Env, key, input, model string) []float32 {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"model": model, "input": input, "encoding_format": "base64"})
	req, _ := http.NewRequestWithContext(e.Ctx, http.MethodPost, e.P.URL+inferproxy.Prefix+"/embeddings", strings.NewReader(string(body)))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out struct {
		Data []struct {
			Embedding string `json:"embedding"`
		} `json:"data"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &out) != nil || len(out.Data) != 1 {
		t.Fatalf("base64 embeddings: %d %s", resp.StatusCode, b)
	}
	raw, err := base64.StdEncoding.DecodeString(out.Data[0].Embedding)
	if err != nil || len(raw)%4 != 0 {
		t.Fatalf("base64 embedding: %v (%d bytes)", err, len(raw))
	}
	fs := make([]float32, len(raw)/4)
	for i := range fs {
		fs[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return fs
}

// post sends body to the proxy's path and answers the status and the
// OpenAI error's message ("" when there is none).
func post(t *testing.T, e *Env, key, path, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(e.Ctx, http.MethodPost, e.P.URL+inferproxy.Prefix+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var er struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	b, _ := io.ReadAll(resp.Body)
	json.Unmarshal(b, &er)
	return resp.StatusCode, er.Error.Message
}
