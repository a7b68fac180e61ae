package inferproxy

import (
	"bytes"
	"errors"
	"strconv"
	"strings"
	"unicode/utf8"
	"unsafe"

	"github.com/tidwall/gjson"
)

// requestHead is what the proxy reads of a JSON request body: the model it
// routes by, and whether the answer streams. The body goes on to the
// runtime as it came.
type requestHead struct {
	Model  string
	Stream bool
	// models are the byte spans of every top-level "model" value in the
	// body (a key given twice has two), for withModel.
	models [][2]int
	// prompt are the byte spans of the top-level values that make the
	// prompt, in promptKeys' order (zero: absent), for prefix routing.
	prompt [len(promptKeys)][2]int
}

// promptKeys are the top-level keys whose values make a request's prompt,
// in the order an engine puts them: the Responses API's instructions,
// then the chat's messages, the completion's prompt or the input.
var promptKeys = [...]string{"instructions", "messages", "prompt", "input"}

// parseHead checks that body is JSON and reads its top-level "model" and
// "stream". It does not decode the rest: a chat's messages are most of a
// body, and decoding them with encoding/json cost about 1 ms for a 140 KB
// prompt (docs/benchmarks.md, "Reading the request's head"). Keys match
// exactly, as the runtime's (vLLM's pydantic models) do, and of a key given
// twice the last counts, as for Python's json and Go's encoding/json.
func parseHead(body []byte) (requestHead, error) {
	var h requestHead
	if !gjson.ValidBytes(body) {
		return h, errors.New("the body is not valid JSON")
	}
	// gjson.ParseBytes copies the body into a string; nothing writes to
	// body while it is read here, and what is kept of it (the model) is
	// cloned.
	root := gjson.Parse(unsafe.String(unsafe.SliceData(body), len(body)))
	if !root.IsObject() {
		return h, errors.New("the body is not a JSON object")
	}
	var err error
	root.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "model":
			h.models = append(h.models, [2]int{v.Index, v.Index + len(v.Raw)})
			switch v.Type {
			case gjson.String:
				h.Model = strings.Clone(v.Str)
				if !utf8.ValidString(h.Model) {
					err = errors.New("model: not valid UTF-8")
				}
			case gjson.Null:
				h.Model = ""
			default:
				err = errors.New("model: want a string")
			}
		case promptKeys[0], promptKeys[1], promptKeys[2], promptKeys[3]:
			for i, pk := range promptKeys {
				if k.Str == pk {
					h.prompt[i] = [2]int{v.Index, v.Index + len(v.Raw)}
				}
			}
		case "stream":
			switch v.Type {
			case gjson.True, gjson.False:
				h.Stream = v.Bool()
			case gjson.Null:
				h.Stream = false
			default:
				err = errors.New("stream: want true or false")
			}
		}
		return err == nil
	})
	return h, err
}

// withModel is body with every top-level "model" value replaced by name:
// a request that calls an open model by its full name (@TEAM/NAME) reaches
// the runtime with the name the runtime serves, as vLLM answers 404 for
// any other. Every occurrence is replaced, so that no reader of the body
// sees another model than the proxy routed by.
func withModel(body []byte, h requestHead, name string) []byte {
	q := strconv.AppendQuote(nil, name) // a served name is ASCII (cosmic.ValidServedModelName)
	out := make([]byte, 0, len(body)+len(h.models)*len(q))
	at := 0
	for _, span := range h.models {
		out = append(out, body[at:span[0]]...)
		out = append(out, q...)
		at = span[1]
	}
	return append(out, body[at:]...)
}

// withLoRA is body (a JSON object) with "lora": [{"id": id, "scale": 1}]
// as its last member (id < 0: [{"id": 0, "scale": 0}], no adapter):
// llama-server's per-request adapters, of which a key given twice counts
// the last, so a caller's own "lora" does not override the adapter it
// asked for by name, or the base model it asked for. A request for the
// base model says so too: without "lora", llama-server (commit 80fb11a,
// server-context.cpp launch_slot_with_task) goes back to its adapters'
// start scales but keeps the slot's prompt cache, computed with the last
// request's adapter, and answers the base model's prompt from it.
func withLoRA(body []byte, id int) []byte {
	end := bytes.LastIndexByte(body, '}')
	if end < 0 {
		return body
	}
	member := `"lora":[{"id":` + strconv.Itoa(id) + `,"scale":1}]`
	if id < 0 {
		member = `"lora":[{"id":0,"scale":0}]`
	}
	out := make([]byte, 0, len(body)+len(member)+1)
	out = append(out, body[:end]...)
	if inner := bytes.TrimSpace(body[bytes.IndexByte(body, '{')+1 : end]); len(inner) > 0 {
		out = append(out, ',')
	}
	out = append(out, member...)
	return append(out, body[end:]...)
}
