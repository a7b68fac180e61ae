package simruntime

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cosmicac/cosmicac/internal/wav"
)

func post(t *testing.T, url, body string) *http.Response {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func TestChatDeterministicAndSimulated(t *testing.T) {
	srv := httptest.NewServer(New(Config{Model: "Qwen/Qwen3-32B", ServedModelName: "qwen"}))
	defer srv.Close()
	var texts []string
	for range 2 {
		resp := post(t, srv.URL+"/v1/chat/completions", `{"model":"qwen","messages":[{"role":"user","content":"hello there"}],"max_tokens":5}`)
		if resp.StatusCode != 200 || resp.Header.Get(HeaderSimulated) != "true" {
			t.Fatalf("status %d, header %q", resp.StatusCode, resp.Header.Get(HeaderSimulated))
		}
		var out struct {
			SystemFingerprint string `json:"system_fingerprint"`
			Choices           []struct {
				Message      struct{ Content string }
				FinishReason string `json:"finish_reason"`
			}
			Usage usage
		}
		json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		if out.SystemFingerprint != Fingerprint || out.Choices[0].FinishReason != "length" || out.Usage.CompletionTokens != 5 || out.Usage.PromptTokens != 5 {
			t.Fatalf("reply %+v", out)
		}
		texts = append(texts, out.Choices[0].Message.Content)
	}
	if texts[0] != texts[1] || len(strings.Fields(texts[0])) != 5 {
		t.Fatalf("texts %q", texts)
	}
	resp := post(t, srv.URL+"/v1/chat/completions", `{"model":"other","messages":[{"role":"user","content":"x"}]}`)
	if resp.StatusCode != 404 {
		t.Fatalf("unknown model: %d", resp.StatusCode)
	}
}

func TestStreamWithUsage(t *testing.T) {
	srv := httptest.NewServer(New(Config{Model: "m/m", InterTokenDelay: time.Millisecond}))
	defer srv.Close()
	for _, path := range []string{"/v1/chat/completions", "/v1/completions"} {
		body := `{"model":"m/m","prompt":"once upon","messages":[{"role":"user","content":"once upon"}],"max_tokens":4,"stream":true,"stream_options":{"include_usage":true}}`
		resp := post(t, srv.URL+path, body)
		if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
			t.Fatalf("content type %q", ct)
		}
		sc := bufio.NewScanner(resp.Body)
		var events []string
		for sc.Scan() {
			if l := sc.Text(); strings.HasPrefix(l, "data: ") {
				events = append(events, strings.TrimPrefix(l, "data: "))
			}
		}
		resp.Body.Close()
		if events[len(events)-1] != "[DONE]" {
			t.Fatalf("%s: last event %q", path, events[len(events)-1])
		}
		var last chunk
		json.Unmarshal([]byte(events[len(events)-2]), &last)
		if last.Usage == nil || last.Usage.CompletionTokens != 4 || len(last.Choices) != 0 {
			t.Fatalf("%s: usage chunk %s", path, events[len(events)-2])
		}
		want := 4 + 2 // tokens, usage, [DONE]
		if path == "/v1/chat/completions" {
			want++ // the role chunk
		}
		if len(events) != want {
			t.Fatalf("%s: %d events: %q", path, len(events), events)
		}
	}
}

func TestTranscription(t *testing.T) {
	srv := httptest.NewServer(New(Config{Runtime: RuntimeParakeet, Model: "nvidia/parakeet-tdt-0.6b-v3"}))
	defer srv.Close()
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	mw.WriteField("model", "nvidia/parakeet-tdt-0.6b-v3")
	fw, _ := mw.CreateFormFile("file", "a.wav")
	fw.Write(wav.Tone(1.5, 16000))
	mw.Close()
	resp, err := http.Post(srv.URL+"/v1/audio/transcriptions", mw.FormDataContentType(), &body)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !strings.Contains(string(b), "simulated transcript of 1.50 s") {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	if resp := post(t, srv.URL+"/v1/chat/completions", `{}`); resp.StatusCode != 404 {
		t.Fatalf("parakeet chat: %d", resp.StatusCode)
	}
}

// TestLoading: while loading, the runtime takes requests and answers none
// (vLLM starts its HTTP server only once the engine is built:
// vllm/entrypoints/openai/api_server.py, run_server); once LoadTime has
// passed since New, it answers them, /health 200 and the completion. It
// runs on the bubble's clock, served without a socket.
func TestLoading(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const load = 10 * time.Second
		start := time.Now()
		s := New(Config{Model: "m/m", LoadTime: load})
		serve := func(method, path, body string) <-chan int {
			done := make(chan int, 1)
			go func() {
				w := httptest.NewRecorder()
				s.ServeHTTP(w, httptest.NewRequest(method, path, strings.NewReader(body)))
				done <- w.Code
			}()
			return done
		}
		health := serve("GET", "/health", "")
		completion := serve("POST", "/v1/completions", `{"model":"m/m","prompt":"x"}`)
		synctest.Wait()
		select {
		case code := <-health:
			t.Fatalf("health answered %d while loading", code)
		case code := <-completion:
			t.Fatalf("completion answered %d while loading", code)
		default:
		}
		if code := <-health; code != 200 {
			t.Fatalf("health once loaded: %d", code)
		}
		// The bubble's clock moves only as the test waits, so this is exact.
		if waited := time.Since(start); waited < load {
			t.Fatalf("answered %v after New, before LoadTime %v", waited, load)
		}
		if code := <-completion; code != 200 {
			t.Fatalf("completion once loaded: %d", code)
		}
	})
}

func TestFaults(t *testing.T) {
	s := New(Config{Model: "m/m"})
	srv := httptest.NewServer(s)
	defer srv.Close()
	post(t, srv.URL+"/sim/faults", `{"failNext":2,"status":503}`)
	for i, want := range []int{503, 503, 200} {
		if resp := post(t, srv.URL+"/v1/completions", `{"model":"m/m","prompt":"x"}`); resp.StatusCode != want {
			t.Fatalf("request %d: %d, want %d", i, resp.StatusCode, want)
		}
	}
	s.SetFaults(Faults{FailRate: 0.5})
	fails := 0
	for range 10 {
		if resp := post(t, srv.URL+"/v1/completions", `{"model":"m/m","prompt":"x"}`); resp.StatusCode == 500 {
			fails++
		}
	}
	if fails != 5 {
		t.Fatalf("%d of 10 failed at rate 0.5", fails)
	}
	resp, _ := http.Get(srv.URL + "/metrics")
	b, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(b), "vllm:generation_tokens_total{model_name=\"m/m\"}") || !strings.Contains(string(b), "cosmicac_simulated 1") {
		t.Fatalf("metrics:\n%s", b)
	}
}

// TestTranscriptionNIMProtocol: the parakeet mode follows NVIDIA's ASR NIM
// HTTP API (docs.nvidia.com/nim/speech/latest/reference/api-references/asr/http-asr.html):
// language or model, response_format json or text only, readiness at
// /v1/health/ready and no /health.
func TestTranscriptionNIMProtocol(t *testing.T) {
	srv := httptest.NewServer(New(Config{Runtime: RuntimeParakeet, Model: "nvidia/parakeet-tdt-0.6b-v3", ServedModelName: "asr"}))
	defer srv.Close()
	for name, c := range map[string]struct {
		fields map[string]string
		code   int
		want   string
	}{
		"language multi, default json": {map[string]string{"language": "multi"}, 200, `{"text":"[simulated transcript of 1.00 s]`},
		"served name as model":         {map[string]string{"model": "asr"}, 200, `{"text":`},
		"text":                         {map[string]string{"language": "en-US", "response_format": "text"}, 200, "[simulated transcript of 1.00 s]"},
		"neither language nor model":   {map[string]string{}, 400, "either language or model"},
		"unknown model":                {map[string]string{"model": "whisper-1"}, 400, "not deployed"},
		"verbose_json":                 {map[string]string{"language": "multi", "response_format": "verbose_json"}, 400, "want json or text"},
		"srt":                          {map[string]string{"language": "multi", "response_format": "srt"}, 400, "want json or text"},
		"vtt":                          {map[string]string{"language": "multi", "response_format": "vtt"}, 400, "want json or text"},
	} {
		var body bytes.Buffer
		mw := multipart.NewWriter(&body)
		fw, _ := mw.CreateFormFile("file", "a.wav")
		fw.Write(wav.Tone(1, 16000))
		for k, v := range c.fields {
			mw.WriteField(k, v)
		}
		mw.Close()
		resp, err := http.Post(srv.URL+"/v1/audio/transcriptions", mw.FormDataContentType(), &body)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.code || !strings.Contains(string(b), c.want) {
			t.Errorf("%s: %d %s (want %d, %q)", name, resp.StatusCode, b, c.code, c.want)
		}
	}
	for path, code := range map[string]int{"/v1/health/ready": 200, "/v1/health/live": 200, "/health": 404} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != code {
			t.Errorf("GET %s: %d %s, want %d", path, resp.StatusCode, b, code)
		}
	}
}
