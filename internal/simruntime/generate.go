package simruntime

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/cosmicac/cosmicac/internal/backoff"
)

// ---- text generation

// vocabulary of the simulated model.
var vocabulary = strings.Fields(`the a of to and in is it that for on with as this
was by at be from or an are which model token GPU cluster fabric replica stream
simulated answer quick brown fox jumps over lazy dog cosmic light star orbit
rack node job queue proxy agent vLLM request reply data signal time space wave
field energy code test value`)

// Words returns the deterministic completion of prompt: its tokens (the
// first without a leading space) and the natural length before "stop".
func Words(prompt string) (natural int, token func(i int) string) {
	h := fnv.New64a()
	h.Write([]byte(prompt))
	seed := h.Sum64()
	natural = 8 + int(seed%24)
	return natural, func(i int) string {
		x := seed + uint64(i)*0x9E3779B97F4A7C15
		x ^= x >> 31
		x *= 0xBF58476D1CE4E5B9
		x ^= x >> 29
		w := vocabulary[x%uint64(len(vocabulary))]
		if i == 0 {
			return w
		}
		return " " + w
	}
}

// countTokens is the simulator's tokenizer: one token per word.
func countTokens(s string) int { return len(strings.Fields(s)) }

type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// genRequest is what the simulator reads of a chat or text completion
// request: vLLM's ChatCompletionRequest and CompletionRequest
// (vllm/entrypoints/openai/protocol.py in v0.18), the fields it answers.
// A field of another JSON type than vLLM's is a 400, as pydantic's
// validation is in vLLM.
type genRequest struct {
	Model               string          `json:"model"`
	Messages            []chatMessage   `json:"messages"`
	Prompt              json.RawMessage `json:"prompt"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Stream              bool            `json:"stream"`
	// StreamOptions is kept raw: vLLM refuses it, unless empty, without
	// stream (protocol.py, check_stream_options: `if
	// data.get("stream_options") and not data.get("stream")`).
	StreamOptions json.RawMessage `json:"stream_options"`
	// N is the number of choices (default 1).
	N *int `json:"n"`
	// Logprobs is a boolean for chat (with TopLogprobs alternatives),
	// the number of alternatives for a text completion.
	Logprobs    json.RawMessage `json:"logprobs"`
	TopLogprobs *int            `json:"top_logprobs"`
	// Echo prepends the prompt (completions) or the last message when it
	// is the assistant's (chat).
	Echo           bool            `json:"echo"`
	Tools          []chatTool      `json:"tools"`
	ToolChoice     json.RawMessage `json:"tool_choice"`
	ResponseFormat *responseFormat `json:"response_format"`
}

// streamOptions is vLLM's StreamOptions (protocol.py): include_usage
// defaults to true once stream_options is given.
type streamOptions struct {
	IncludeUsage *bool `json:"include_usage"`
}

// includeUsage: stream_options given (not null) and include_usage not false.
func (req genRequest) includeUsage() bool {
	var so *streamOptions
	if json.Unmarshal(req.StreamOptions, &so) != nil || so == nil {
		return false
	}
	return so.IncludeUsage == nil || *so.IncludeUsage
}

// streamOptionsSet is Python's truth of data.get("stream_options"): given,
// not null, and not an empty object.
func (req genRequest) streamOptionsSet() bool {
	var m map[string]any
	if len(req.StreamOptions) == 0 || json.Unmarshal(req.StreamOptions, &m) != nil {
		return len(req.StreamOptions) > 0 && string(req.StreamOptions) != "null"
	}
	return len(m) > 0
}

type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// text of a message's content: a string, or an array of parts.
func (m chatMessage) text() string {
	var s string
	if json.Unmarshal(m.Content, &s) == nil {
		return s
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	json.Unmarshal(m.Content, &parts)
	var b strings.Builder
	for _, p := range parts {
		if p.Type == "text" || p.Type == "input_text" || p.Type == "output_text" { // chat, and the Responses API's input
			b.WriteString(p.Text)
		}
	}
	return b.String()
}

func (s *Server) id(prefix string) string {
	return prefix + s.idBase + strconv.FormatUint(s.nextID.Add(1), 16)
}

// hold waits for Config.Hold to be closed, if set; false if the request
// went away meanwhile.
func (s *Server) hold(r *http.Request) bool {
	if s.cfg.Hold == nil {
		return true
	}
	s.held.Add(1)
	defer s.held.Add(-1)
	select {
	case <-s.cfg.Hold:
		return true
	case <-r.Context().Done():
		return false
	}
}

func (s *Server) observeTTFT(start time.Time) {
	s.ttftSumNanos.Add(int64(time.Since(start)))
	s.ttftCount.Add(1)
}

func (s *Server) finish(start time.Time) {
	s.e2eSumNanos.Add(int64(time.Since(start)))
	s.e2eCount.Add(1)
	s.success.Add(1)
}

// chatTool is a tool of a chat request (type "function").
type chatTool struct {
	Type     string `json:"type"`
	Function struct {
		Name        string         `json:"name"`
		Description string         `json:"description"`
		Parameters  map[string]any `json:"parameters"`
	} `json:"function"`
}

// responseFormat is vLLM's ResponseFormat: "text", "json_object" or
// "json_schema" (with json_schema.schema); vLLM's own "structural_tag"
// is not simulated (400).
type responseFormat struct {
	Type       string `json:"type"`
	JSONSchema *struct {
		Name   string         `json:"name"`
		Schema map[string]any `json:"schema"`
	} `json:"json_schema"`
}

// maxLogprobs is vLLM's default --max-logprobs (ModelConfig.max_logprobs).
const maxLogprobs = 20

// maxChoices bounds n: the simulator's own bound (vLLM has none), so a
// request cannot make it build a huge answer.
const maxChoices = 128

// badRequest is a request vLLM refuses with 400: its message, and the
// field at fault.
type badRequest struct{ msg, param string }

// plan is what a valid request asks for.
type plan struct {
	chat      bool
	n         int
	logprobs  bool
	top       int // alternatives per token
	format    *responseFormat
	tool      *chatTool // the tool every choice calls, nil: none
	toolNamed bool      // tool_choice named the tool (finish "stop", as vLLM)
	autoTool  bool      // tool_choice "auto" (content null)
}

// checkRequest validates what vLLM validates of req, in vLLM's words, and
// answers the plan.
func (s *Server) checkRequest(req genRequest, chat bool) (plan, *badRequest) {
	p := plan{chat: chat, n: 1}
	if req.N != nil {
		p.n = *req.N
		// vllm/sampling_params.py, SamplingParams._verify_args.
		if p.n < 1 {
			return p, &badRequest{fmt.Sprintf("n must be at least 1, got %d.", p.n), "n"}
		}
		if p.n > maxChoices {
			return p, &badRequest{fmt.Sprintf("n must be at most %d in the simulated runtime, got %d.", maxChoices, p.n), "n"}
		}
	}
	if chat {
		// protocol.py, ChatCompletionRequest: logprobs is a bool,
		// top_logprobs an int; check_logprobs.
		if len(req.Logprobs) > 0 && string(req.Logprobs) != "null" {
			if json.Unmarshal(req.Logprobs, &p.logprobs) != nil {
				return p, &badRequest{"logprobs: Input should be a valid boolean", "logprobs"}
			}
		}
		if req.TopLogprobs != nil {
			p.top = *req.TopLogprobs
			switch {
			case p.top < 0:
				return p, &badRequest{"`top_logprobs` must be a positive value.", "top_logprobs"}
			case p.top > 0 && !p.logprobs:
				return p, &badRequest{"when using `top_logprobs`, `logprobs` must be set to true.", "top_logprobs"}
			}
		}
	} else if len(req.Logprobs) > 0 && string(req.Logprobs) != "null" {
		// protocol.py, CompletionRequest: logprobs is an int (the
		// alternatives), check_logprobs.
		if json.Unmarshal(req.Logprobs, &p.top) != nil {
			return p, &badRequest{"logprobs: Input should be a valid integer", "logprobs"}
		}
		if p.top < 0 {
			return p, &badRequest{"`logprobs` must be a positive value.", "logprobs"}
		}
		p.logprobs = true
	}
	if p.top > maxLogprobs {
		// vllm/v1/engine/processor.py, _validate_logprobs.
		return p, &badRequest{fmt.Sprintf("Requested sample logprobs of %d, which is greater than max allowed: %d", p.top, maxLogprobs), "logprobs"}
	}
	if f := req.ResponseFormat; f != nil {
		switch f.Type {
		case "text":
		case "json_object":
			p.format = f
		case "json_schema":
			if f.JSONSchema == nil || f.JSONSchema.Schema == nil {
				return p, &badRequest{"response_format: json_schema must be set (with a schema) when type is json_schema", "response_format"}
			}
			p.format = f
		case "structural_tag":
			return p, &badRequest{"response_format structural_tag is not simulated: the simulated runtime answers text, json_object and json_schema", "response_format"}
		default:
			return p, &badRequest{fmt.Sprintf("response_format.type: Input should be 'text', 'json_object', 'json_schema' or 'structural_tag', got %q", f.Type), "response_format"}
		}
	}
	if !chat {
		return p, nil // CompletionRequest has no tools (vLLM ignores unknown fields)
	}
	return p, s.checkTools(req, &p)
}

// checkTools follows protocol.py's ChatCompletionRequest.check_tool_usage
// and serving_chat.py's create_chat_completion: tools without a
// tool_choice mean "auto", which needs the server's
// --enable-auto-tool-choice and --tool-call-parser; "required" and a
// named function are answered by structured outputs, with no flag.
func (s *Server) checkTools(req genRequest, p *plan) *badRequest {
	choice := ""
	var named struct {
		Type     string `json:"type"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	switch raw := req.ToolChoice; {
	case len(raw) == 0 || string(raw) == "null":
		if len(req.Tools) > 0 {
			choice = "auto"
		}
	case json.Unmarshal(raw, &choice) == nil:
		if choice != "none" && choice != "auto" && choice != "required" {
			return &badRequest{fmt.Sprintf("tool_choice: Input should be 'none', 'auto', 'required' or a named function, got %q", choice), "tool_choice"}
		}
	case json.Unmarshal(raw, &named) == nil && named.Function.Name != "":
		choice = "named"
	default:
		return &badRequest{"tool_choice: Input should be 'none', 'auto', 'required' or {\"type\": \"function\", \"function\": {\"name\": ...}}", "tool_choice"}
	}
	for i, t := range req.Tools {
		if t.Type != "function" || t.Function.Name == "" {
			return &badRequest{fmt.Sprintf("tools.%d: a tool is {\"type\": \"function\", \"function\": {\"name\": ...}}", i), "tools"}
		}
	}
	if choice == "" || choice == "none" {
		return nil
	}
	if len(req.Tools) == 0 {
		return &badRequest{"When using `tool_choice`, `tools` must be set.", "tool_choice"}
	}
	switch choice {
	case "named":
		for i := range req.Tools {
			if req.Tools[i].Function.Name == named.Function.Name {
				p.tool, p.toolNamed = &req.Tools[i], true
				return nil
			}
		}
		return &badRequest{fmt.Sprintf("Tool '%s' has not been passed in `tools`.", named.Function.Name), "tool_choice"}
	case "auto":
		if !s.cfg.AutoToolChoice {
			return &badRequest{`"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set`, "tool_choice"}
		}
		p.autoTool = true
	}
	// "required", and "auto" (the simulated model always calls a tool
	// when it may): the first tool.
	p.tool = &req.Tools[0]
	return nil
}

func writeBadRequest(w http.ResponseWriter, e *badRequest) {
	writeJSON(w, http.StatusBadRequest, map[string]ErrorBody{"error": {Message: e.msg, Type: "BadRequestError", Param: e.param, Code: http.StatusBadRequest}})
}

func (s *Server) decodeGen(w http.ResponseWriter, r *http.Request, chat bool) (genRequest, plan, bool) {
	var req genRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "BadRequestError", "invalid JSON body: "+err.Error())
		return req, plan{}, false
	}
	if !s.serves(req.Model) {
		writeError(w, http.StatusNotFound, "NotFoundError", fmt.Sprintf("The model `%s` does not exist.", req.Model))
		return req, plan{}, false
	}
	if req.streamOptionsSet() && !req.Stream {
		writeError(w, http.StatusBadRequest, "BadRequestError", "Stream options can only be defined when `stream=True`.")
		return req, plan{}, false
	}
	p, bad := s.checkRequest(req, chat)
	if bad != nil {
		writeBadRequest(w, bad)
		return req, p, false
	}
	return req, p, true
}

func (req genRequest) maxTokens(def int) (int, bool) {
	switch {
	case req.MaxCompletionTokens != nil:
		return *req.MaxCompletionTokens, *req.MaxCompletionTokens >= 1
	case req.MaxTokens != nil:
		return *req.MaxTokens, *req.MaxTokens >= 1
	}
	return def, true
}

func (s *Server) chat(w http.ResponseWriter, r *http.Request) {
	faults, ok := s.admit(w, r)
	if !ok {
		return
	}
	req, p, ok := s.decodeGen(w, r, true)
	if !ok {
		return
	}
	if len(req.Messages) == 0 {
		writeError(w, http.StatusBadRequest, "BadRequestError", "messages must not be empty")
		return
	}
	var prompt strings.Builder
	ptoks := 0
	for _, m := range req.Messages {
		t := m.text()
		prompt.WriteString(m.Role + ": " + t + "\n")
		ptoks += countTokens(t) + 3
	}
	echo := ""
	// serving_chat.py: with echo, the answer begins with the last
	// message's content when that message is the assistant's (the role
	// of the answer, add_generation_prompt being true).
	if last := req.Messages[len(req.Messages)-1]; req.Echo && last.Role == "assistant" {
		echo = last.text()
	}
	s.generate(w, r, req, p, faults, []genPrompt{{text: prompt.String(), tokens: ptoks, echo: echo}})
}

func (s *Server) completions(w http.ResponseWriter, r *http.Request) {
	faults, ok := s.admit(w, r)
	if !ok {
		return
	}
	req, p, ok := s.decodeGen(w, r, false)
	if !ok {
		return
	}
	// A list of prompts is a batch: n choices for each, indexed prompt
	// by prompt (serving_completion.py).
	var ps []string
	var one string
	if json.Unmarshal(req.Prompt, &one) == nil {
		ps = []string{one}
	} else if json.Unmarshal(req.Prompt, &ps) != nil || len(ps) == 0 {
		writeError(w, http.StatusBadRequest, "BadRequestError", "prompt must be a string or an array of strings")
		return
	}
	prompts := make([]genPrompt, len(ps))
	for i, t := range ps {
		prompts[i] = genPrompt{text: t, tokens: countTokens(t)}
		if req.Echo {
			prompts[i].echo = t
		}
	}
	s.generate(w, r, req, p, faults, prompts)
}

// genPrompt is one prompt of a request: its text, its tokens, and what
// echo puts before its answer.
type genPrompt struct {
	text   string
	tokens int
	echo   string
}

// genChoice is one choice of the answer.
type genChoice struct {
	index  int
	echo   string
	tokens []string // the generated text, token by token
	finish string
	call   *toolCall // a tool call in place of text
}

type toolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

func (c genChoice) text() string { return strings.Join(c.tokens, "") }

// makeChoice is choice j of prompt pr, at most max tokens.
func (s *Server) makeChoice(p plan, pr genPrompt, index, j, max int) genChoice {
	seed := pr.text
	if j > 0 {
		seed += "\x00choice " + strconv.Itoa(j) // n choices differ, as sampled ones do
	}
	natural, token := Words(seed)
	c := genChoice{index: index, echo: pr.echo, finish: "stop"}
	if p.tool != nil {
		args, _ := json.Marshal(schemaValue(p.tool.Function.Parameters, token, 0))
		c.call = &toolCall{ID: s.id("chatcmpl-tool-"), Type: "function"}
		c.call.Function.Name, c.call.Function.Arguments = p.tool.Function.Name, string(args)
		c.tokens = pieces(string(args))
		if !p.toolNamed {
			c.finish = "tool_calls"
		}
		return c
	}
	if p.format != nil {
		var v any
		if p.format.Type == "json_schema" {
			v = schemaValue(p.format.JSONSchema.Schema, token, 0)
		} else {
			var b strings.Builder
			for i := range natural {
				b.WriteString(token(i))
			}
			v = map[string]any{"answer": b.String()}
		}
		out, _ := json.Marshal(v)
		c.tokens = pieces(string(out))
	} else {
		c.tokens = make([]string, natural)
		for i := range c.tokens {
			c.tokens[i] = token(i)
		}
		if pr.echo != "" {
			c.tokens[0] = " " + c.tokens[0] // the model goes on after the echoed text
		}
	}
	if len(c.tokens) > max {
		c.tokens, c.finish = c.tokens[:max], "length"
	}
	return c
}

// pieces cuts structured output into tokens: after each ',', ':' and
// space, so that a token limit cuts the JSON as a real model's would.
func pieces(s string) []string {
	var out []string
	start := 0
	for i := 0; i < len(s); i++ {
		if s[i] == ',' || s[i] == ':' || s[i] == ' ' {
			out = append(out, s[start:i+1])
			start = i + 1
		}
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}

// schemaValue is a deterministic value of a JSON schema: the first of an
// enum, every property of an object, one item of an array, and words for
// strings. It is what structured outputs (vLLM's guided decoding) would
// make of a model: valid for the schema, not necessarily sensible.
func schemaValue(schema map[string]any, token func(int) string, depth int) any {
	if schema == nil || depth > 8 {
		return map[string]any{}
	}
	if c, ok := schema["const"]; ok {
		return c
	}
	if e, ok := schema["enum"].([]any); ok && len(e) > 0 {
		return e[0]
	}
	for _, k := range []string{"anyOf", "oneOf", "allOf"} {
		if alts, ok := schema[k].([]any); ok && len(alts) > 0 {
			if m, ok := alts[0].(map[string]any); ok {
				return schemaValue(m, token, depth+1)
			}
		}
	}
	typ, _ := schema["type"].(string)
	if ts, ok := schema["type"].([]any); ok {
		for _, t := range ts {
			if t, ok := t.(string); ok && t != "null" {
				typ = t
				break
			}
		}
	}
	if typ == "" {
		if _, ok := schema["properties"]; ok {
			typ = "object"
		}
	}
	h := fnv.New32a()
	h.Write([]byte(token(depth)))
	x := h.Sum32()
	switch typ {
	case "object":
		out := map[string]any{}
		props, _ := schema["properties"].(map[string]any)
		for k, v := range props {
			m, _ := v.(map[string]any)
			out[k] = schemaValue(m, token, depth+1)
		}
		return out
	case "array":
		items, _ := schema["items"].(map[string]any)
		n := 1
		if mi, ok := schema["minItems"].(float64); ok && int(mi) > n {
			n = min(int(mi), 8)
		}
		out := make([]any, n)
		for i := range out {
			out[i] = schemaValue(items, token, depth+1)
		}
		return out
	case "integer":
		v := int(x % 100)
		if m, ok := schema["minimum"].(float64); ok && float64(v) < m {
			v = int(m)
		}
		if m, ok := schema["maximum"].(float64); ok && float64(v) > m {
			v = int(m)
		}
		return v
	case "number":
		v := float64(x%10000) / 100
		if m, ok := schema["minimum"].(float64); ok && v < m {
			v = m
		}
		if m, ok := schema["maximum"].(float64); ok && v > m {
			v = m
		}
		return v
	case "boolean":
		return x%2 == 0
	case "null":
		return nil
	}
	return strings.TrimSpace(token(depth) + token(depth+1))
}

// ---- logprobs
//
// The simulated model is sure of each token it picks: its logprob is
// the highest; the alternatives are other words of its vocabulary, each
// less likely than the one before.

func tokenLogprob(tok string, i int) float64 {
	h := fnv.New32a()
	h.Write([]byte(tok))
	return -float64((h.Sum32()+uint32(i))%900+10) / 1000
}

// alternatives are the top k tokens at position i, the chosen one first.
func alternatives(tok string, i, k int) []logprobEntry {
	lp := tokenLogprob(tok, i)
	out := []logprobEntry{{Token: tok, Logprob: lp, Bytes: bytesOf(tok)}}
	h := fnv.New32a()
	h.Write([]byte(tok))
	x := int(h.Sum32()) + i
	for j := 1; len(out) < k && j < len(vocabulary); j++ {
		w := vocabulary[(x+j*7)%len(vocabulary)]
		if strings.HasPrefix(tok, " ") {
			w = " " + w
		}
		if w == tok {
			continue
		}
		lp -= 0.5 + float64(j)/10
		out = append(out, logprobEntry{Token: w, Logprob: math.Round(lp*1000) / 1000, Bytes: bytesOf(w)})
	}
	return out
}

func bytesOf(s string) []int {
	b := make([]int, len(s))
	for i := range len(s) {
		b[i] = int(s[i])
	}
	return b
}

// logprobEntry is vLLM's ChatCompletionLogProb.
type logprobEntry struct {
	Token   string  `json:"token"`
	Logprob float64 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

// chatLogprob is vLLM's ChatCompletionLogProbsContent.
type chatLogprob struct {
	logprobEntry
	TopLogprobs []logprobEntry `json:"top_logprobs"`
}

// chatLogprobs is the logprobs of a chat choice over tokens from index
// from: {"content": [...]}, vLLM's ChatCompletionLogProbs.
func chatLogprobs(p plan, tokens []string, from int) map[string]any {
	content := make([]chatLogprob, len(tokens))
	for i, t := range tokens {
		alts := alternatives(t, from+i, max(p.top, 1))
		content[i] = chatLogprob{logprobEntry: alts[0], TopLogprobs: alts[:p.top]}
	}
	return map[string]any{"content": content}
}

// completionLogprobs is vLLM's CompletionLogProbs of tokens (from index
// from, at text offset off): with echo, the prompt's tokens come first,
// the very first without a logprob (serving_completion.py).
func completionLogprobs(p plan, tokens []string, from, off int, echoed bool) map[string]any {
	n := len(tokens)
	offsets, lps, tops := make([]int, n), make([]any, n), make([]any, n)
	for i, t := range tokens {
		offsets[i] = off
		off += len(t)
		if echoed && from+i == 0 {
			continue // the prompt's first token has no logprob
		}
		alts := alternatives(t, from+i, max(p.top, 1))
		lps[i] = alts[0].Logprob
		top := make(map[string]float64, len(alts))
		for _, a := range alts {
			top[a.Token] = a.Logprob
		}
		tops[i] = top
	}
	return map[string]any{"text_offset": offsets, "token_logprobs": lps, "tokens": tokens, "top_logprobs": tops}
}

// promptTokens cuts an echoed prompt into the simulator's tokens (words,
// each after the first with its leading space).
func promptTokens(s string) []string {
	var out []string
	for i, w := range strings.Fields(s) {
		if i > 0 {
			w = " " + w
		}
		out = append(out, w)
	}
	return out
}

// ---- answers

// generate answers a chat (p.chat) or text completion of prompts.
func (s *Server) generate(w http.ResponseWriter, r *http.Request, req genRequest, p plan, faults Faults, prompts []genPrompt) {
	ptoks := 0
	for _, pr := range prompts {
		ptoks += pr.tokens
	}
	def := s.cfg.DefaultMaxTokens
	if p.chat {
		// vLLM's chat default: the rest of the context (get_max_tokens).
		def = max(s.cfg.MaxModelLen-ptoks, 1)
	}
	maxTok, ok := req.maxTokens(def)
	if !ok {
		writeError(w, http.StatusBadRequest, "BadRequestError", "max_tokens must be at least 1")
		return
	}
	for _, pr := range prompts {
		if pr.tokens+maxTok > s.cfg.MaxModelLen {
			writeError(w, http.StatusBadRequest, "BadRequestError", fmt.Sprintf("This model's maximum context length is %d tokens. However, you requested %d tokens.", s.cfg.MaxModelLen, pr.tokens+maxTok))
			return
		}
	}
	var choices []genChoice
	gen := 0
	for i, pr := range prompts {
		for j := range p.n {
			c := s.makeChoice(p, pr, i*p.n+j, j, maxTok)
			gen += len(c.tokens)
			choices = append(choices, c)
		}
	}
	start := time.Now()
	s.running.Add(1)
	defer s.running.Add(-1)
	s.promptTokens.Add(int64(ptoks))
	u := usage{PromptTokens: ptoks, CompletionTokens: gen, TotalTokens: ptoks + gen}
	id := s.id("cmpl-")
	if p.chat {
		id = s.id("chatcmpl-")
	}
	if req.Stream {
		s.stream(w, r, req, p, faults, id, choices, u, start)
		return
	}
	if !backoff.Sleep(r.Context(), s.cfg.TTFT) {
		return
	}
	s.observeTTFT(start)
	steps := 0
	for _, c := range choices {
		steps = max(steps, len(c.tokens))
	}
	for i := 1; i < steps; i++ {
		if !backoff.Sleep(r.Context(), s.cfg.InterTokenDelay) {
			return
		}
	}
	s.generationTokens.Add(int64(gen))
	out := make([]any, len(choices))
	for k, c := range choices {
		var lp any
		if p.chat {
			msg := map[string]any{"role": "assistant", "content": c.echo + c.text()}
			if c.call != nil {
				// serving_chat.py: a named or required tool call has
				// content "", an auto one none.
				msg["content"] = ""
				if p.autoTool {
					msg["content"] = nil
				}
				msg["tool_calls"] = []*toolCall{c.call}
			}
			if p.logprobs {
				lp = chatLogprobs(p, c.tokens, 0)
			}
			out[k] = map[string]any{"index": c.index, "message": msg, "logprobs": lp, "finish_reason": c.finish}
			continue
		}
		if p.logprobs {
			toks := append(promptTokens(c.echo), c.tokens...)
			lp = completionLogprobs(p, toks, 0, 0, c.echo != "")
		}
		out[k] = map[string]any{"index": c.index, "text": c.echo + c.text(), "logprobs": lp, "finish_reason": c.finish}
	}
	object := "text_completion"
	if p.chat {
		object = "chat.completion"
	}
	s.finish(start)
	writeJSON(w, http.StatusOK, map[string]any{"id": id, "object": object, "created": time.Now().Unix(), "model": req.Model,
		"system_fingerprint": Fingerprint, "choices": out, "usage": u})
}

// chunk is one SSE chunk of a stream.
type chunk struct {
	ID                string        `json:"id"`
	Object            string        `json:"object"`
	Created           int64         `json:"created"`
	Model             string        `json:"model"`
	SystemFingerprint string        `json:"system_fingerprint"`
	Choices           []chunkChoice `json:"choices"`
	Usage             *usage        `json:"usage,omitempty"`
}

type chunkChoice struct {
	Index        int     `json:"index"`
	Delta        *delta  `json:"delta,omitempty"`
	Text         *string `json:"text,omitempty"`
	Logprobs     any     `json:"logprobs"`
	FinishReason *string `json:"finish_reason"`
}

type delta struct {
	Role      string          `json:"role,omitempty"`
	Content   *string         `json:"content,omitempty"`
	ToolCalls []toolCallDelta `json:"tool_calls,omitempty"`
}

type toolCallDelta struct {
	Index    int    `json:"index"`
	ID       string `json:"id,omitempty"`
	Type     string `json:"type,omitempty"`
	Function struct {
		Name      string `json:"name,omitempty"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// stream writes the choices as SSE chunks, as serving_chat.py and
// serving_completion.py do: for chat, a first chunk per choice with the
// role (and one with the echoed message); then, step by step, one chunk
// per choice with its next token (a tool call: its name, then its
// arguments), the last with the finish reason; the usage; [DONE].
func (s *Server) stream(w http.ResponseWriter, r *http.Request, req genRequest, p plan, faults Faults, id string, choices []genChoice, u usage, start time.Time) {
	fl, _ := w.(http.Flusher)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	if fl != nil {
		fl.Flush() // headers at once, as vLLM's StreamingResponse does
	}
	object := "text_completion"
	if p.chat {
		object = "chat.completion.chunk"
	}
	created := time.Now().Unix()
	buf := make([]byte, 0, 512)
	sent := 0
	send := func(c *chunk) bool {
		if s.cfg.OnEvent != nil {
			s.cfg.OnEvent(id, sent, time.Now())
			sent++
		}
		buf = append(buf[:0], "data: "...)
		b, _ := json.Marshal(c)
		buf = append(buf, b...)
		buf = append(buf, "\n\n"...)
		if _, err := w.Write(buf); err != nil {
			return false
		}
		if fl != nil {
			fl.Flush()
		}
		return true
	}
	mk := func(cc chunkChoice) *chunk {
		return &chunk{ID: id, Object: object, Created: created, Model: req.Model, SystemFingerprint: Fingerprint, Choices: []chunkChoice{cc}}
	}
	if !backoff.Sleep(r.Context(), s.cfg.TTFT) || !s.hold(r) {
		return
	}
	s.observeTTFT(start)
	if p.chat {
		for _, c := range choices {
			empty := ""
			if !send(mk(chunkChoice{Index: c.index, Delta: &delta{Role: "assistant", Content: &empty}})) {
				return
			}
		}
		for _, c := range choices {
			if c.echo == "" {
				continue
			}
			e := c.echo
			if !send(mk(chunkChoice{Index: c.index, Delta: &delta{Content: &e}})) {
				return
			}
		}
	}
	steps := 0
	for _, c := range choices {
		steps = max(steps, len(c.tokens))
	}
	offsets := make([]int, len(choices)) // text offsets, for completion logprobs
	for i := 0; i < steps; i++ {
		if i > 0 && !backoff.Sleep(r.Context(), s.cfg.InterTokenDelay) {
			return
		}
		if faults.AbortAfterTokens > 0 && i >= faults.AbortAfterTokens {
			s.failures.Add(1)
			panic(http.ErrAbortHandler) // cut the connection mid-stream
		}
		if faults.ErrorAfterTokens > 0 && i >= faults.ErrorAfterTokens {
			s.failures.Add(1)
			b, _ := json.Marshal(map[string]ErrorBody{"error": {Message: "injected failure mid-stream (simulated runtime)",
				Type: "InternalServerError", Code: http.StatusInternalServerError}})
			w.Write([]byte("data: " + string(b) + "\n\ndata: [DONE]\n\n"))
			if fl != nil {
				fl.Flush()
			}
			return
		}
		for k, c := range choices {
			if i >= len(c.tokens) {
				continue
			}
			t := c.tokens[i]
			cc := chunkChoice{Index: c.index}
			switch {
			case p.chat && c.call != nil:
				d := toolCallDelta{}
				if i == 0 {
					d.ID, d.Type, d.Function.Name = c.call.ID, "function", c.call.Function.Name
				}
				d.Function.Arguments = t
				cc.Delta = &delta{ToolCalls: []toolCallDelta{d}}
			case p.chat:
				cc.Delta = &delta{Content: &t}
				if p.logprobs {
					cc.Logprobs = chatLogprobs(p, c.tokens[i:i+1], i)
				}
			default:
				text := t
				toks := c.tokens[i : i+1]
				echoed := false
				if i == 0 && c.echo != "" {
					text = c.echo + t
					toks = append(promptTokens(c.echo), t)
					echoed = true
				}
				cc.Text = &text
				if p.logprobs {
					from := i
					if i > 0 && c.echo != "" {
						from += len(promptTokens(c.echo))
					}
					cc.Logprobs = completionLogprobs(p, toks, from, offsets[k], echoed)
				}
				offsets[k] += len(text)
			}
			last := i == len(c.tokens)-1
			if last && c.call == nil {
				f := c.finish
				cc.FinishReason = &f
			}
			if !send(mk(cc)) {
				return
			}
			s.generationTokens.Add(1)
			if last && c.call != nil {
				// The finish of a tool call in a chunk of its own, with
				// an empty delta, as OpenAI's and vLLM's streams end
				// one (clients see the call complete there).
				f := c.finish
				if !send(mk(chunkChoice{Index: c.index, Delta: &delta{}, FinishReason: &f})) {
					return
				}
			}
		}
	}
	if req.includeUsage() {
		uu := u
		if !send(&chunk{ID: id, Object: object, Created: created, Model: req.Model, SystemFingerprint: Fingerprint, Choices: []chunkChoice{}, Usage: &uu}) {
			return
		}
	}
	w.Write([]byte("data: [DONE]\n\n"))
	if fl != nil {
		fl.Flush()
	}
	s.finish(start)
}
