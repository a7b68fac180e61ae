package simruntime

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"
)

// The protocol-conformance suite: what clients of vLLM's OpenAI server
// notice, checked against the simulated runtime and, when
// COSMICAC_VLLM_URL names one (e.g. http://127.0.0.1:8000, a `vllm serve`
// of a chat model; COSMICAC_VLLM_MODEL: its served name, default the first
// of /v1/models), against a real vLLM. Without the variable the real
// target skips, saying so; with it, a difference fails, in CI too. Each
// check cites the vLLM source it follows (github.com/vllm-project/vllm).

// conformanceTarget is a server the suite runs against.
type conformanceTarget struct {
	url, model string
	simulated  bool
}

func conformanceTargets(t *testing.T) map[string]func(t *testing.T) conformanceTarget {
	return map[string]func(t *testing.T) conformanceTarget{
		"simulated": func(t *testing.T) conformanceTarget {
			srv := httptest.NewServer(New(Config{Model: "Qwen/Qwen3-8B", ServedModelName: "qwen"}))
			t.Cleanup(srv.Close)
			return conformanceTarget{url: srv.URL, model: "qwen", simulated: true}
		},
		"vllm": func(t *testing.T) conformanceTarget {
			url := strings.TrimRight(os.Getenv("COSMICAC_VLLM_URL"), "/")
			if url == "" {
				t.Skip("COSMICAC_VLLM_URL is not set: no real vLLM endpoint to check the simulated runtime against (set it to a `vllm serve` of a chat model, e.g. http://127.0.0.1:8000)")
			}
			model := os.Getenv("COSMICAC_VLLM_MODEL")
			if model == "" {
				var list struct {
					Data []struct {
						ID string `json:"id"`
					} `json:"data"`
				}
				resp, err := http.Get(url + "/v1/models")
				if err != nil {
					t.Fatalf("COSMICAC_VLLM_URL=%s: %v", url, err)
				}
				defer resp.Body.Close()
				if err := json.NewDecoder(resp.Body).Decode(&list); err != nil || len(list.Data) == 0 {
					t.Fatalf("COSMICAC_VLLM_URL=%s: /v1/models: %v (%d models)", url, err, len(list.Data))
				}
				model = list.Data[0].ID
			}
			return conformanceTarget{url: url, model: model}
		},
	}
}

// sse posts body and returns the status and the data of each event.
func sse(t *testing.T, url, body string) (int, []string) {
	t.Helper()
	c := &http.Client{Timeout: 2 * time.Minute}
	resp, err := c.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, []string{string(b)}
	}
	var events []string
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			events = append(events, d)
		}
	}
	return resp.StatusCode, events
}

func postJSON(t *testing.T, url, body string, out any) int {
	t.Helper()
	c := &http.Client{Timeout: 2 * time.Minute}
	resp, err := c.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s: %v in %s", url, err, b)
		}
	}
	return resp.StatusCode
}

// usageOf is the usage of an event, nil without.
func usageOf(t *testing.T, ev string) *usage {
	var c struct {
		Usage *usage `json:"usage"`
	}
	if err := json.Unmarshal([]byte(ev), &c); err != nil {
		t.Fatalf("event %s: %v", ev, err)
	}
	return c.Usage
}

func TestOpenAIConformance(t *testing.T) {
	for name, target := range conformanceTargets(t) {
		t.Run(name, func(t *testing.T) {
			tg := target(t)
			chat := tg.url + "/v1/chat/completions"
			msgs := `"messages":[{"role":"user","content":"Say hi."}]`

			// protocol.py, StreamOptions: include_usage defaults to true once
			// stream_options is given; serving_chat.py sends the usage in a
			// last chunk with no choices, before [DONE].
			t.Run("stream_options given: include_usage defaults to true", func(t *testing.T) {
				for so, want := range map[string]bool{`{}`: true, `{"include_usage":true}`: true, `{"include_usage":false}`: false} {
					code, evs := sse(t, chat, `{"model":"`+tg.model+`",`+msgs+`,"max_tokens":4,"stream":true,"stream_options":`+so+`}`)
					if code != 200 || len(evs) < 2 || evs[len(evs)-1] != "[DONE]" {
						t.Fatalf("stream_options %s: %d %v", so, code, evs)
					}
					if got := usageOf(t, evs[len(evs)-2]) != nil; got != want {
						t.Errorf("stream_options %s: usage before [DONE] %v, want %v (%s)", so, got, want, evs[len(evs)-2])
					}
				}
				code, evs := sse(t, chat, `{"model":"`+tg.model+`",`+msgs+`,"max_tokens":4,"stream":true}`)
				if code != 200 || len(evs) < 2 || usageOf(t, evs[len(evs)-2]) != nil {
					t.Errorf("no stream_options: %d, usage in %v", code, evs)
				}
			})

			// protocol.py, ChatCompletionRequest.check_stream_options:
			// `if data.get("stream_options") and not data.get("stream")` is
			// a validation error (400); an empty object is falsy.
			t.Run("stream_options without stream is 400", func(t *testing.T) {
				var e struct {
					Error ErrorBody `json:"error"`
				}
				if code := postJSON(t, chat, `{"model":"`+tg.model+`",`+msgs+`,"max_tokens":4,"stream_options":{"include_usage":true}}`, &e); code != 400 || e.Error.Message == "" {
					t.Errorf("stream_options with stream false: %d %+v, want 400", code, e)
				}
				if code := postJSON(t, chat, `{"model":"`+tg.model+`",`+msgs+`,"max_tokens":4,"stream":false,"stream_options":{}}`, nil); code != 200 {
					t.Errorf("empty stream_options with stream false: %d, want 200", code)
				}
			})

			// protocol.py: ChatCompletionRequest.max_tokens is None (the rest
			// of the context, serving_engine's get_max_tokens), while
			// CompletionRequest.max_tokens defaults to 16.
			t.Run("chat has no default max_tokens, completions 16", func(t *testing.T) {
				var cc struct {
					Choices []struct {
						FinishReason string `json:"finish_reason"`
					} `json:"choices"`
					Usage usage `json:"usage"`
				}
				if code := postJSON(t, chat, `{"model":"`+tg.model+`",`+msgs+`}`, &cc); code != 200 || len(cc.Choices) != 1 {
					t.Fatalf("chat: %d %+v", code, cc)
				}
				if cc.Choices[0].FinishReason != "stop" {
					t.Errorf("chat without max_tokens ended with %q after %d tokens, want stop", cc.Choices[0].FinishReason, cc.Usage.CompletionTokens)
				}
				var tc struct {
					Usage usage `json:"usage"`
				}
				if code := postJSON(t, tg.url+"/v1/completions", `{"model":"`+tg.model+`","prompt":"Once upon a time, in a land far away, there lived"}`, &tc); code != 200 || tc.Usage.CompletionTokens > 16 || tc.Usage.CompletionTokens == 0 {
					t.Errorf("completion without max_tokens: %d, %d tokens, want 1..16", code, tc.Usage.CompletionTokens)
				}
			})

			// protocol.py (ChatCompletionRequest: n, logprobs, top_logprobs,
			// check_logprobs) and serving_chat.py: n choices, a logprob per
			// token with top_logprobs alternatives; top_logprobs without
			// logprobs is a 400 naming the field.
			t.Run("n and logprobs honoured, top_logprobs alone refused", func(t *testing.T) {
				var cc struct {
					Choices []struct {
						Index    int `json:"index"`
						Logprobs *struct {
							Content []struct {
								TopLogprobs []json.RawMessage `json:"top_logprobs"`
							} `json:"content"`
						} `json:"logprobs"`
					} `json:"choices"`
				}
				if code := postJSON(t, chat, `{"model":"`+tg.model+`",`+msgs+`,"max_tokens":3,"n":2,"logprobs":true,"top_logprobs":2}`, &cc); code != 200 || len(cc.Choices) != 2 {
					t.Fatalf("n=2: %d, %d choices", code, len(cc.Choices))
				}
				for _, c := range cc.Choices {
					if c.Logprobs == nil || len(c.Logprobs.Content) == 0 || len(c.Logprobs.Content[0].TopLogprobs) != 2 {
						t.Errorf("choice %d: logprobs %+v, want a logprob per token with 2 alternatives", c.Index, c.Logprobs)
					}
				}
				var e struct {
					Error ErrorBody `json:"error"`
				}
				if code := postJSON(t, chat, `{"model":"`+tg.model+`",`+msgs+`,"max_tokens":3,"top_logprobs":2}`, &e); code != 400 || e.Error.Message == "" {
					t.Errorf("top_logprobs without logprobs: %d %+v, want 400", code, e)
				}
			})

			// serving_chat.py, chat_completion_stream_generator: an error while
			// streaming is sent as `data: {"error": {…}}`, then `data: [DONE]`.
			t.Run("mid-stream error event then [DONE]", func(t *testing.T) {
				if !tg.simulated {
					t.Skip("a failure mid-stream cannot be caused on a real vLLM through its API")
				}
				s := New(Config{Model: "m/m", Faults: Faults{ErrorAfterTokens: 2}})
				srv := httptest.NewServer(s)
				defer srv.Close()
				code, evs := sse(t, srv.URL+"/v1/chat/completions", `{"model":"m/m",`+msgs+`,"max_tokens":8,"stream":true}`)
				if code != 200 || len(evs) < 2 || evs[len(evs)-1] != "[DONE]" {
					t.Fatalf("%d %v", code, evs)
				}
				var e struct {
					Error *ErrorBody `json:"error"`
				}
				if json.Unmarshal([]byte(evs[len(evs)-2]), &e) != nil || e.Error == nil || e.Error.Message == "" || e.Error.Type == "" {
					t.Fatalf("event before [DONE] %s, want an error", evs[len(evs)-2])
				}
			})

			// api_server.py, run_server: the socket is bound before the engine
			// is built and the HTTP server starts after, so a request while
			// loading is taken and answered only once the engine is up.
			t.Run("while loading, requests wait for the engine", func(t *testing.T) {
				if !tg.simulated {
					t.Skip("a real vLLM's loading is seen only at its start")
				}
				const load = 300 * time.Millisecond
				start := time.Now() // before New, where the load starts: the wait is at least load from here
				srv := httptest.NewServer(New(Config{Model: "m/m", LoadTime: load}))
				defer srv.Close()
				resp, err := http.Get(srv.URL + "/health")
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != 200 || time.Since(start) < load {
					t.Fatalf("health %d after %v, want 200 after the load (%v)", resp.StatusCode, time.Since(start), load)
				}
			})
		})
	}
}
