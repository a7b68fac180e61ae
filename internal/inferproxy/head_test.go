package inferproxy

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/simruntime"
)

func TestParseHead(t *testing.T) {
	for _, c := range []struct {
		body   string
		model  string
		stream bool
		err    string
	}{
		{body: `{"model":"m","stream":true}`, model: "m", stream: true},
		{body: ` {"stream":false, "model" : "m"} `, model: "m"},
		{body: `{"messages":[{"role":"user","content":"{\"model\":\"x\"}","model":"x"}],"model":"m"}`, model: "m"},
		{body: `{"model":"a","model":"b"}`, model: "b"}, // the last, as Python's json takes
		{body: `{"mod\u0065l":"m"}`, model: "m"},
		{body: `{"model":"\u00e9t\u00e9"}`, model: "été"},
		{body: `{"Model":"m"}`, model: ""}, // keys match exactly, as vLLM's do
		{body: `{"model":null,"stream":null}`},
		{body: `{}`},
		{body: `{"model":"m","stream":"true"}`, err: "stream: want true or false"},
		{body: `{"model":1}`, err: "model: want a string"},
		{body: "{\"model\":\"\xff\"}", err: "model: not valid UTF-8"},
		{body: `{"model":"m"`, err: "not valid JSON"},
		{body: `{"model":"m"} {}`, err: "not valid JSON"},
		{body: `{"model":"m",}`, err: "not valid JSON"},
		{body: ``, err: "not valid JSON"},
		{body: `["model","m"]`, err: "not a JSON object"},
		{body: `"m"`, err: "not a JSON object"},
	} {
		h, err := parseHead([]byte(c.body))
		switch {
		case c.err != "":
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: err %v, want %q", c.body, err, c.err)
			}
		case err != nil:
			t.Errorf("%s: %v", c.body, err)
		case h.Model != c.model || h.Stream != c.stream:
			t.Errorf("%s: %+v, want model %q stream %v", c.body, h, c.model, c.stream)
		}
	}
}

// FuzzParseHead holds that parseHead accepts exactly the JSON objects
// encoding/json accepts, and reads the model and stream that a decoder
// matching keys exactly reads.
func FuzzParseHead(f *testing.F) {
	for _, s := range []string{`{"model":"m","stream":true}`, `{"model":"a","model":"b"}`, `{"mod\u0065l":"m"}`,
		`{"messages":[{"content":"x"}],"model":"m"}`, `{"model":"m"`, `[1]`, "{\"model\":\"\xff\"}", `{"model":"\ud800"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := parseHead(b)
		var top map[string]json.RawMessage
		jerr := json.Unmarshal(b, &top)
		isObject := jerr == nil && top != nil
		if err == nil && !isObject {
			t.Fatalf("%q: parseHead accepted what encoding/json refuses (%v)", b, jerr)
		}
		if err != nil {
			if isObject && strings.Contains(err.Error(), "JSON") {
				t.Fatalf("%q: parseHead refused a JSON object: %v", b, err)
			}
			return
		}
		// encoding/json keeps the last of duplicate keys in a map, and
		// matches map keys exactly.
		var want struct {
			Model  string
			Stream bool
		}
		if m, ok := top["model"]; ok {
			json.Unmarshal(m, &want.Model)
		}
		if s, ok := top["stream"]; ok {
			json.Unmarshal(s, &want.Stream)
		}
		if h.Model != want.Model || h.Stream != want.Stream {
			t.Fatalf("%q: parseHead read %+v, encoding/json %+v", b, h, want)
		}
	})
}

// TestRequestHeadThroughTheProxy sends, with the official OpenAI SDK, a
// chat with a long prompt (the head is read without decoding it), a body
// that is not JSON, and one whose model key is not spelled "model".
func TestRequestHeadThroughTheProxy(t *testing.T) {
	h := newHarness(t, Config{})
	h.addJob("job-qwen", "team-a", "qwen", cosmic.RuntimeVLLM, 1, 1, true, simruntime.Config{})
	h.waitReady("job-qwen", 1)
	ctx := context.Background()
	a := sdk(h, h.keys["team-a"])

	long := strings.Repeat("a long \"retrieved\" passage, é, ", 5000) // 160 KB
	cc, err := a.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "qwen",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.SystemMessage(long), openai.UserMessage("Summarize")}, MaxTokens: openai.Int(4)})
	if err != nil {
		t.Fatal(err)
	}
	if cc.Model != "qwen" || len(cc.Choices) != 1 {
		t.Fatalf("answer %+v", cc)
	}
	params := openai.ChatCompletionNewParams{Model: "qwen", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}}
	_, err = a.Chat.Completions.New(ctx, params, option.WithRequestBody("application/json", []byte(`{"model":"qwen","messages":[`)))
	wantAPIError(t, "a body cut short", err, http.StatusBadRequest, "invalid_json")
	_, err = a.Chat.Completions.New(ctx, params, option.WithRequestBody("application/json", []byte(`{"model":"qwen","stream":"yes","messages":[]}`)))
	wantAPIError(t, "stream as a string", err, http.StatusBadRequest, "invalid_json")
	_, err = a.Chat.Completions.New(ctx, params, option.WithRequestBody("application/json", []byte(`{"Model":"qwen","messages":[]}`)))
	wantAPIError(t, "Model capitalized", err, http.StatusBadRequest, "model_required")
}

func TestReadAll(t *testing.T) {
	body := strings.Repeat("0123456789", 300_000) // 3 MB: past maxPresize
	for _, c := range []struct {
		name     string
		n        int
		declared int64
	}{
		{"chunked", 100_000, -1},
		{"empty", 0, 0},
		{"declared", 100_000, 100_000},
		{"declared, fewer sent", 1000, 100_000},
		{"past the presize", len(body), int64(len(body))},
		{"declared less than sent", 5000, 10},
	} {
		got, err := readAll(iotest.OneByteReader(strings.NewReader(body[:c.n])), c.declared)
		if err != nil || string(got) != body[:c.n] {
			t.Errorf("%s: %d bytes, %v; want %d", c.name, len(got), err, c.n)
		}
		if c.declared > 0 && c.declared <= maxPresize && cap(got) > int(c.declared)+1 && c.n <= int(c.declared) {
			t.Errorf("%s: grew to %d for %d declared", c.name, cap(got), c.declared)
		}
	}
	if _, err := readAll(iotest.ErrReader(io.ErrUnexpectedEOF), 10); err != io.ErrUnexpectedEOF {
		t.Errorf("a failing reader: %v", err)
	}
}
