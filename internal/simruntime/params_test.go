package simruntime

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestEmbeddingEncodingFormat: encoding_format as vLLM answers it
// (vllm/entrypoints/pooling/embed/protocol.py, vllm/utils/serial_utils.py):
// "float" (the default) a JSON array, "base64" the float32 bytes (native:
// little-endian; or as endianness says), anything else 400 naming the
// field. The official Node SDK asks for base64 by default.
func TestEmbeddingEncodingFormat(t *testing.T) {
	srv := httptest.NewServer(New(Config{Model: "e/e", Embeddings: true}))
	defer srv.Close()
	want := Embedding("hello world")
	decode := func(t *testing.T, s string, order binary.ByteOrder) []float32 {
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil || len(b) != 4*EmbeddingDims {
			t.Fatalf("base64 %q: %v (%d bytes)", s, err, len(b))
		}
		out := make([]float32, EmbeddingDims)
		for i := range out {
			out[i] = math.Float32frombits(order.Uint32(b[4*i:]))
		}
		return out
	}
	for name, tc := range map[string]struct {
		extra  string
		status int
		param  string
		order  binary.ByteOrder // base64 of that order; nil: floats
	}{
		"default is float":      {extra: ``, status: 200},
		"float":                 {extra: `,"encoding_format":"float"`, status: 200},
		"base64":                {extra: `,"encoding_format":"base64"`, status: 200, order: binary.LittleEndian},
		"base64 little":         {extra: `,"encoding_format":"base64","endianness":"little"`, status: 200, order: binary.LittleEndian},
		"base64 big":            {extra: `,"encoding_format":"base64","endianness":"big"`, status: 200, order: binary.BigEndian},
		"bytes not simulated":   {extra: `,"encoding_format":"bytes"`, status: 400, param: "encoding_format"},
		"unknown format":        {extra: `,"encoding_format":"hex"`, status: 400, param: "encoding_format"},
		"float16 not simulated": {extra: `,"encoding_format":"base64","embed_dtype":"float16"`, status: 400, param: "embed_dtype"},
		"unknown endianness":    {extra: `,"encoding_format":"base64","endianness":"middle"`, status: 400, param: "endianness"},
		"dimensions":            {extra: `,"dimensions":4`, status: 400, param: "dimensions"},
	} {
		t.Run(name, func(t *testing.T) {
			var out struct {
				Data []struct {
					Embedding json.RawMessage `json:"embedding"`
				} `json:"data"`
				Error *ErrorBody `json:"error"`
			}
			code := postJSON(t, srv.URL+"/v1/embeddings", `{"model":"e/e","input":["hello world"]`+tc.extra+`}`, &out)
			if code != tc.status {
				t.Fatalf("status %d, want %d (%+v)", code, tc.status, out.Error)
			}
			if tc.status != 200 {
				if out.Error == nil || out.Error.Param != tc.param || out.Error.Message == "" {
					t.Fatalf("error %+v, want one naming %s", out.Error, tc.param)
				}
				return
			}
			var got []float32
			if tc.order != nil {
				var s string
				if err := json.Unmarshal(out.Data[0].Embedding, &s); err != nil {
					t.Fatalf("embedding %s is not a base64 string", out.Data[0].Embedding)
				}
				got = decode(t, s, tc.order)
			} else if err := json.Unmarshal(out.Data[0].Embedding, &got); err != nil {
				t.Fatalf("embedding %s is not an array of floats", out.Data[0].Embedding)
			}
			if len(got) != EmbeddingDims {
				t.Fatalf("%d dimensions, want %d", len(got), EmbeddingDims)
			}
			for i := range got {
				if got[i] != want[i] {
					t.Fatalf("embedding %v, want %v", got, want)
				}
			}
		})
	}
}

// chatReply is what the tests read of a chat or text completion.
type chatReply struct {
	Choices []struct {
		Index   int    `json:"index"`
		Text    string `json:"text"`
		Message struct {
			Content   *string    `json:"content"`
			ToolCalls []toolCall `json:"tool_calls"`
		} `json:"message"`
		Logprobs     json.RawMessage `json:"logprobs"`
		FinishReason string          `json:"finish_reason"`
	} `json:"choices"`
	Usage usage      `json:"usage"`
	Error *ErrorBody `json:"error"`
}

// TestSamplingParameters: n, logprobs and top_logprobs, echo,
// response_format, tools and tool_choice are each honoured as vLLM
// honours them, or refused with vLLM's 400 (its message, the field
// named); never a 200 that ignores them.
func TestSamplingParameters(t *testing.T) {
	plain := httptest.NewServer(New(Config{Model: "m/m"}))
	defer plain.Close()
	auto := httptest.NewServer(New(Config{Model: "m/m", AutoToolChoice: true}))
	defer auto.Close()
	const msgs = `"model":"m/m","messages":[{"role":"user","content":"Say hi."}]`
	const prompt = `"model":"m/m","prompt":"once upon a time"`
	weather := `"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"},"unit":{"type":"string","enum":["celsius","fahrenheit"]},"days":{"type":"integer","minimum":1,"maximum":7}},"required":["city"]}}},{"type":"function","function":{"name":"other","parameters":{"type":"object","properties":{}}}}]`
	for name, tc := range map[string]struct {
		url, path, body string
		status          int
		param, message  string // of a 400
		check           func(t *testing.T, r chatReply)
	}{
		"chat n=3": {path: "/v1/chat/completions", body: `{` + msgs + `,"n":3,"max_tokens":5}`, status: 200, check: func(t *testing.T, r chatReply) {
			if len(r.Choices) != 3 || r.Usage.CompletionTokens != 15 {
				t.Fatalf("%d choices, %d tokens; want 3, 15", len(r.Choices), r.Usage.CompletionTokens)
			}
			seen := map[string]bool{}
			for i, c := range r.Choices {
				if c.Index != i || c.Message.Content == nil {
					t.Fatalf("choice %d: %+v", i, c)
				}
				seen[*c.Message.Content] = true
			}
			if len(seen) != 3 {
				t.Errorf("the 3 choices are not different: %v", seen)
			}
		}},
		"completions n=2 of two prompts": {path: "/v1/completions", body: `{"model":"m/m","prompt":["a b","c d"],"n":2,"max_tokens":3}`, status: 200, check: func(t *testing.T, r chatReply) {
			if len(r.Choices) != 4 || r.Choices[3].Index != 3 || r.Usage.CompletionTokens != 12 || r.Usage.PromptTokens != 4 {
				t.Fatalf("%+v", r)
			}
		}},
		"n=0": {path: "/v1/chat/completions", body: `{` + msgs + `,"n":0}`, status: 400, param: "n", message: "n must be at least 1, got 0."},
		"chat logprobs with top 2": {path: "/v1/chat/completions", body: `{` + msgs + `,"logprobs":true,"top_logprobs":2,"max_tokens":4}`, status: 200, check: func(t *testing.T, r chatReply) {
			var lp struct {
				Content []struct {
					Token       string
					Logprob     float64
					TopLogprobs []struct {
						Token   string
						Logprob float64
					} `json:"top_logprobs"`
				}
			}
			if err := json.Unmarshal(r.Choices[0].Logprobs, &lp); err != nil || len(lp.Content) != 4 {
				t.Fatalf("logprobs %s: %v", r.Choices[0].Logprobs, err)
			}
			var text strings.Builder
			for _, c := range lp.Content {
				text.WriteString(c.Token)
				if c.Logprob >= 0 || len(c.TopLogprobs) != 2 || c.TopLogprobs[0].Token != c.Token || c.TopLogprobs[1].Logprob >= c.Logprob {
					t.Fatalf("token logprob %+v", c)
				}
			}
			if text.String() != *r.Choices[0].Message.Content {
				t.Errorf("logprob tokens %q, content %q", text.String(), *r.Choices[0].Message.Content)
			}
		}},
		"chat logprobs false": {path: "/v1/chat/completions", body: `{` + msgs + `,"logprobs":false,"max_tokens":2}`, status: 200, check: func(t *testing.T, r chatReply) {
			if string(r.Choices[0].Logprobs) != "null" {
				t.Fatalf("logprobs %s, want null", r.Choices[0].Logprobs)
			}
		}},
		"top_logprobs without logprobs": {path: "/v1/chat/completions", body: `{` + msgs + `,"top_logprobs":2}`, status: 400, param: "top_logprobs", message: "when using `top_logprobs`, `logprobs` must be set to true."},
		"top_logprobs negative":         {path: "/v1/chat/completions", body: `{` + msgs + `,"logprobs":true,"top_logprobs":-2}`, status: 400, param: "top_logprobs", message: "`top_logprobs` must be a positive value."},
		"top_logprobs over 20":          {path: "/v1/chat/completions", body: `{` + msgs + `,"logprobs":true,"top_logprobs":21}`, status: 400, param: "logprobs", message: "Requested sample logprobs of 21, which is greater than max allowed: 20"},
		"chat logprobs not a bool":      {path: "/v1/chat/completions", body: `{` + msgs + `,"logprobs":3}`, status: 400, param: "logprobs"},
		"completions logprobs 3": {path: "/v1/completions", body: `{` + prompt + `,"logprobs":3,"max_tokens":4}`, status: 200, check: func(t *testing.T, r chatReply) {
			var lp struct {
				Tokens        []string             `json:"tokens"`
				TokenLogprobs []float64            `json:"token_logprobs"`
				TextOffset    []int                `json:"text_offset"`
				TopLogprobs   []map[string]float64 `json:"top_logprobs"`
			}
			if err := json.Unmarshal(r.Choices[0].Logprobs, &lp); err != nil || len(lp.Tokens) != 4 || len(lp.TopLogprobs) != 4 || len(lp.TopLogprobs[0]) != 3 {
				t.Fatalf("logprobs %s: %v", r.Choices[0].Logprobs, err)
			}
			if strings.Join(lp.Tokens, "") != r.Choices[0].Text || lp.TextOffset[1] != len(lp.Tokens[0]) {
				t.Fatalf("tokens %q offsets %v, text %q", lp.Tokens, lp.TextOffset, r.Choices[0].Text)
			}
		}},
		"completions logprobs negative": {path: "/v1/completions", body: `{` + prompt + `,"logprobs":-1}`, status: 400, param: "logprobs", message: "`logprobs` must be a positive value."},
		"completions echo": {path: "/v1/completions", body: `{` + prompt + `,"echo":true,"max_tokens":3}`, status: 200, check: func(t *testing.T, r chatReply) {
			if !strings.HasPrefix(r.Choices[0].Text, "once upon a time") || len(strings.Fields(r.Choices[0].Text)) != 7 {
				t.Fatalf("text %q, want the prompt and 3 words", r.Choices[0].Text)
			}
		}},
		"chat echo of the assistant's message": {path: "/v1/chat/completions", body: `{"model":"m/m","messages":[{"role":"user","content":"Go on:"},{"role":"assistant","content":"Once upon"}],"echo":true,"max_tokens":2}`, status: 200, check: func(t *testing.T, r chatReply) {
			if c := *r.Choices[0].Message.Content; !strings.HasPrefix(c, "Once upon") || len(strings.Fields(c)) != 4 {
				t.Fatalf("content %q", c)
			}
		}},
		"response_format json_object": {path: "/v1/chat/completions", body: `{` + msgs + `,"response_format":{"type":"json_object"}}`, status: 200, check: func(t *testing.T, r chatReply) {
			var v map[string]any
			if err := json.Unmarshal([]byte(*r.Choices[0].Message.Content), &v); err != nil {
				t.Fatalf("content %q is not a JSON object: %v", *r.Choices[0].Message.Content, err)
			}
		}},
		"response_format json_schema": {path: "/v1/chat/completions", body: `{` + msgs + `,"response_format":{"type":"json_schema","json_schema":{"name":"p","schema":{"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer","minimum":18},"tags":{"type":"array","items":{"type":"string"}}},"required":["name","age"]}}}}`, status: 200, check: func(t *testing.T, r chatReply) {
			var v struct {
				Name string
				Age  *int
				Tags []string
			}
			if err := json.Unmarshal([]byte(*r.Choices[0].Message.Content), &v); err != nil || v.Name == "" || v.Age == nil || *v.Age < 18 || len(v.Tags) != 1 {
				t.Fatalf("content %q: %v", *r.Choices[0].Message.Content, err)
			}
		}},
		"response_format json_schema on completions": {path: "/v1/completions", body: `{` + prompt + `,"max_tokens":50,"response_format":{"type":"json_schema","json_schema":{"name":"p","schema":{"type":"object","properties":{"ok":{"type":"boolean"}}}}}}`, status: 200, check: func(t *testing.T, r chatReply) {
			var v struct{ Ok *bool }
			if err := json.Unmarshal([]byte(r.Choices[0].Text), &v); err != nil || v.Ok == nil {
				t.Fatalf("text %q: %v", r.Choices[0].Text, err)
			}
		}},
		"response_format json_schema without a schema":             {path: "/v1/chat/completions", body: `{` + msgs + `,"response_format":{"type":"json_schema"}}`, status: 400, param: "response_format"},
		"response_format unknown type":                             {path: "/v1/chat/completions", body: `{` + msgs + `,"response_format":{"type":"yaml"}}`, status: 400, param: "response_format"},
		"response_format text":                                     {path: "/v1/chat/completions", body: `{` + msgs + `,"response_format":{"type":"text"},"max_tokens":3}`, status: 200},
		"tools without tool_choice: auto needs the server's flags": {path: "/v1/chat/completions", body: `{` + msgs + `,` + weather + `}`, status: 400, param: "tool_choice", message: `"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set`},
		"tool_choice auto with the server's flags": {url: "auto", path: "/v1/chat/completions", body: `{` + msgs + `,` + weather + `,"tool_choice":"auto"}`, status: 200, check: func(t *testing.T, r chatReply) {
			c := r.Choices[0]
			if c.FinishReason != "tool_calls" || len(c.Message.ToolCalls) != 1 || c.Message.ToolCalls[0].Function.Name != "get_weather" || c.Message.Content != nil {
				t.Fatalf("choice %+v", c)
			}
		}},
		"tool_choice required": {path: "/v1/chat/completions", body: `{` + msgs + `,` + weather + `,"tool_choice":"required","n":2}`, status: 200, check: func(t *testing.T, r chatReply) {
			for _, c := range r.Choices {
				if c.FinishReason != "tool_calls" || len(c.Message.ToolCalls) != 1 {
					t.Fatalf("choice %+v", c)
				}
				var args struct {
					City string
					Unit string
					Days int
				}
				tc := c.Message.ToolCalls[0]
				if err := json.Unmarshal([]byte(tc.Function.Arguments), &args); err != nil || args.City == "" || args.Unit != "celsius" || args.Days < 1 || args.Days > 7 || tc.ID == "" || tc.Type != "function" {
					t.Fatalf("tool call %+v: %v", tc, err)
				}
			}
		}},
		"tool_choice named": {path: "/v1/chat/completions", body: `{` + msgs + `,` + weather + `,"tool_choice":{"type":"function","function":{"name":"other"}}}`, status: 200, check: func(t *testing.T, r chatReply) {
			c := r.Choices[0]
			if c.FinishReason != "stop" || len(c.Message.ToolCalls) != 1 || c.Message.ToolCalls[0].Function.Name != "other" || c.Message.ToolCalls[0].Function.Arguments != "{}" {
				t.Fatalf("choice %+v", c)
			}
		}},
		"tool_choice none ignores the tools": {path: "/v1/chat/completions", body: `{` + msgs + `,` + weather + `,"tool_choice":"none","max_tokens":3}`, status: 200, check: func(t *testing.T, r chatReply) {
			if c := r.Choices[0]; len(c.Message.ToolCalls) != 0 || c.Message.Content == nil || *c.Message.Content == "" {
				t.Fatalf("choice %+v", c)
			}
		}},
		"tool_choice naming no tool given": {path: "/v1/chat/completions", body: `{` + msgs + `,` + weather + `,"tool_choice":{"type":"function","function":{"name":"nope"}}}`, status: 400, param: "tool_choice", message: "Tool 'nope' has not been passed in `tools`."},
		"tool_choice without tools":        {path: "/v1/chat/completions", body: `{` + msgs + `,"tool_choice":"required"}`, status: 400, param: "tool_choice", message: "When using `tool_choice`, `tools` must be set."},
		"tool_choice unknown":              {path: "/v1/chat/completions", body: `{` + msgs + `,` + weather + `,"tool_choice":"always"}`, status: 400, param: "tool_choice"},
	} {
		t.Run(name, func(t *testing.T) {
			base := plain.URL
			if tc.url == "auto" {
				base = auto.URL
			}
			var r chatReply
			code := postJSON(t, base+tc.path, tc.body, &r)
			if code != tc.status {
				t.Fatalf("status %d, want %d (%+v)", code, tc.status, r.Error)
			}
			if tc.status == 400 {
				if r.Error == nil || r.Error.Param != tc.param || r.Error.Message == "" || (tc.message != "" && r.Error.Message != tc.message) {
					t.Fatalf("error %+v, want param %q message %q", r.Error, tc.param, tc.message)
				}
				return
			}
			if tc.check != nil {
				tc.check(t, r)
			}
		})
	}
}

// TestResponsesInput: the Responses API's input as a string, and as
// messages whose content is input_text parts, makes the same prompt as
// the same messages in chat; instructions come first.
func TestResponsesInput(t *testing.T) {
	srv := httptest.NewServer(New(Config{Model: "m/m"}))
	defer srv.Close()
	text := func(body string) string {
		var out struct {
			Output []struct {
				Content []struct{ Text string }
			}
			Error *ErrorBody
		}
		if code := postJSON(t, srv.URL+"/v1/responses", body, &out); code != 200 || len(out.Output) != 1 {
			t.Fatalf("%s: %d %+v", body, code, out.Error)
		}
		return out.Output[0].Content[0].Text
	}
	a := text(`{"model":"m/m","input":"hello there","max_output_tokens":6}`)
	b := text(`{"model":"m/m","input":[{"role":"user","content":[{"type":"input_text","text":"hello there"}]}],"max_output_tokens":6}`)
	c := text(`{"model":"m/m","input":"hello there","instructions":"Be brief.","max_output_tokens":6}`)
	if a != b || a == c || len(strings.Fields(a)) != 6 {
		t.Fatalf("string input %q, parts %q, with instructions %q", a, b, c)
	}
}
