package simruntime

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/cosmicac/cosmicac/internal/backoff"
)

// The Responses API (POST /v1/responses), as vLLM v0.18 serves it for a
// model that generates text (vllm/entrypoints/openai/serving_responses.py,
// the ResponsesRequest and ResponsesResponse of protocol.py):
//
//   - input is a string or a list of messages ({"role", "content"}, the
//     content a string or input_text parts); instructions come first;
//   - the answer is a "response" with one output message of one
//     output_text part, status "completed", or "incomplete" with
//     incomplete_details.reason "max_output_tokens";
//   - "stream": true sends `event: TYPE` / `data: JSON` pairs, each with
//     its sequence_number: response.created, response.in_progress,
//     response.output_item.added, response.content_part.added,
//     response.output_text.delta per token, response.output_text.done,
//     response.content_part.done, response.output_item.done,
//     response.completed; no [DONE] (serving_responses.py,
//     _process_simple_streaming_events);
//   - vLLM keeps no responses unless VLLM_ENABLE_RESPONSES_API_STORE is
//     set (it is not, on the platform's runtimes): previous_response_id
//     is 404 "Response with id '…' not found." (_make_not_found_error),
//     and store is taken as false.
//
// Tools in the Responses API are not simulated (400 naming tools).

type responsesRequest struct {
	Model           string          `json:"model"`
	Input           json.RawMessage `json:"input"`
	Instructions    *string         `json:"instructions"`
	MaxOutputTokens *int            `json:"max_output_tokens"`
	Stream          bool            `json:"stream"`
	PreviousID      *string         `json:"previous_response_id"`
	Temperature     *float64        `json:"temperature"`
	TopP            *float64        `json:"top_p"`
	Tools           []any           `json:"tools"`
	Metadata        map[string]any  `json:"metadata"`
}

// prompt is the text of the request's input, and its tokens.
func (req responsesRequest) prompt() (string, int, error) {
	var b strings.Builder
	toks := 0
	add := func(role, text string) {
		b.WriteString(role + ": " + text + "\n")
		toks += countTokens(text) + 3
	}
	if req.Instructions != nil {
		add("system", *req.Instructions)
	}
	var one string
	if json.Unmarshal(req.Input, &one) == nil {
		add("user", one)
		return b.String(), toks, nil
	}
	var items []chatMessage
	if err := json.Unmarshal(req.Input, &items); err != nil || len(items) == 0 {
		return "", 0, fmt.Errorf("input: Input should be a string or a list of input items")
	}
	for _, it := range items {
		add(it.Role, it.text())
	}
	return b.String(), toks, nil
}

func (s *Server) responses(w http.ResponseWriter, r *http.Request) {
	faults, ok := s.admit(w, r)
	if !ok {
		return
	}
	var req responsesRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "BadRequestError", "invalid JSON body: "+err.Error())
		return
	}
	if !s.serves(req.Model) {
		writeError(w, http.StatusNotFound, "NotFoundError", fmt.Sprintf("The model `%s` does not exist.", req.Model))
		return
	}
	if req.PreviousID != nil {
		writeJSON(w, http.StatusNotFound, map[string]ErrorBody{"error": {Message: fmt.Sprintf("Response with id '%s' not found.", *req.PreviousID),
			Type: "invalid_request_error", Param: "previous_response_id", Code: http.StatusNotFound}})
		return
	}
	if len(req.Tools) > 0 {
		writeBadRequest(w, &badRequest{"tools in the Responses API are not simulated: the simulated runtime answers tools in /v1/chat/completions", "tools"})
		return
	}
	prompt, ptoks, err := req.prompt()
	if err != nil {
		writeBadRequest(w, &badRequest{err.Error(), "input"})
		return
	}
	maxTok := max(s.cfg.MaxModelLen-ptoks, 1) // vLLM's default: the rest of the context
	if req.MaxOutputTokens != nil {
		if maxTok = *req.MaxOutputTokens; maxTok < 1 {
			writeBadRequest(w, &badRequest{"max_output_tokens must be at least 1", "max_output_tokens"})
			return
		}
	}
	if ptoks+maxTok > s.cfg.MaxModelLen {
		writeError(w, http.StatusBadRequest, "BadRequestError", fmt.Sprintf("This model's maximum context length is %d tokens. However, you requested %d tokens.", s.cfg.MaxModelLen, ptoks+maxTok))
		return
	}
	c := s.makeChoice(plan{n: 1}, genPrompt{text: prompt, tokens: ptoks}, 0, 0, maxTok)
	start := time.Now()
	s.running.Add(1)
	defer s.running.Add(-1)
	s.promptTokens.Add(int64(ptoks))
	rs := &response{ID: s.id("resp_"), Object: "response", CreatedAt: time.Now().Unix(), Model: req.Model, Status: "in_progress",
		Instructions: req.Instructions, MaxOutputTokens: req.MaxOutputTokens, Metadata: req.Metadata, ParallelToolCalls: true,
		Temperature: or(req.Temperature, 1), TopP: or(req.TopP, 1), ToolChoice: "auto", Tools: []any{}, Truncation: "disabled",
		ServiceTier: "auto", Output: []outputMessage{}}
	msg := outputMessage{ID: s.id("msg_"), Type: "message", Role: "assistant", Status: "in_progress", Content: []outputText{}}
	done := func() {
		rs.Status = "completed"
		if c.finish == "length" {
			rs.Status, rs.IncompleteDetails = "incomplete", map[string]string{"reason": "max_output_tokens"}
		}
		msg.Status = "completed"
		msg.Content = []outputText{{Type: "output_text", Text: c.text(), Annotations: []any{}, Logprobs: []any{}}}
		rs.Output = []outputMessage{msg}
		n := len(c.tokens)
		rs.Usage = &responseUsage{InputTokens: ptoks, OutputTokens: n, TotalTokens: ptoks + n,
			InputTokensDetails: map[string]int{"cached_tokens": 0}, OutputTokensDetails: map[string]int{"reasoning_tokens": 0}}
	}
	if !req.Stream {
		if !backoff.Sleep(r.Context(), s.cfg.TTFT) {
			return
		}
		s.observeTTFT(start)
		for i := 1; i < len(c.tokens); i++ {
			if !backoff.Sleep(r.Context(), s.cfg.InterTokenDelay) {
				return
			}
		}
		s.generationTokens.Add(int64(len(c.tokens)))
		done()
		s.finish(start)
		writeJSON(w, http.StatusOK, rs)
		return
	}

	fl, _ := w.(http.Flusher)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	if fl != nil {
		fl.Flush()
	}
	seq := 0
	send := func(typ string, ev map[string]any) bool {
		ev["type"], ev["sequence_number"] = typ, seq
		if s.cfg.OnEvent != nil {
			s.cfg.OnEvent(rs.ID, seq, time.Now())
		}
		seq++
		b, _ := json.Marshal(ev)
		if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", typ, b); err != nil {
			return false
		}
		if fl != nil {
			fl.Flush()
		}
		return true
	}
	snapshot := func() response { return *rs }
	if !send("response.created", map[string]any{"response": snapshot()}) || !send("response.in_progress", map[string]any{"response": snapshot()}) {
		return
	}
	if !backoff.Sleep(r.Context(), s.cfg.TTFT) || !s.hold(r) {
		return
	}
	s.observeTTFT(start)
	at := map[string]any{"item_id": msg.ID, "output_index": 0, "content_index": 0}
	with := func(kv ...any) map[string]any {
		m := map[string]any{}
		for k, v := range at {
			m[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}
	if !send("response.output_item.added", map[string]any{"output_index": 0, "item": msg}) ||
		!send("response.content_part.added", with("part", outputText{Type: "output_text", Text: "", Annotations: []any{}, Logprobs: []any{}})) {
		return
	}
	for i, t := range c.tokens {
		if i > 0 && !backoff.Sleep(r.Context(), s.cfg.InterTokenDelay) {
			return
		}
		if faults.AbortAfterTokens > 0 && i >= faults.AbortAfterTokens {
			s.failures.Add(1)
			panic(http.ErrAbortHandler)
		}
		if faults.ErrorAfterTokens > 0 && i >= faults.ErrorAfterTokens {
			s.failures.Add(1)
			send("error", map[string]any{"code": "InternalServerError", "message": "injected failure mid-stream (simulated runtime)", "param": nil})
			return
		}
		if !send("response.output_text.delta", with("delta", t, "logprobs", []any{})) {
			return
		}
		s.generationTokens.Add(1)
	}
	done()
	part := msg.Content[0]
	if !send("response.output_text.done", with("text", part.Text, "logprobs", []any{})) ||
		!send("response.content_part.done", with("part", part)) ||
		!send("response.output_item.done", map[string]any{"output_index": 0, "item": msg}) ||
		!send("response.completed", map[string]any{"response": snapshot()}) {
		return
	}
	s.finish(start)
}

func or(v *float64, def float64) float64 {
	if v != nil {
		return *v
	}
	return def
}

// response is vLLM's ResponsesResponse (the fields OpenAI's SDKs read).
type response struct {
	ID                 string            `json:"id"`
	Object             string            `json:"object"`
	CreatedAt          int64             `json:"created_at"`
	Model              string            `json:"model"`
	Status             string            `json:"status"`
	IncompleteDetails  map[string]string `json:"incomplete_details"`
	Instructions       *string           `json:"instructions"`
	MaxOutputTokens    *int              `json:"max_output_tokens"`
	Metadata           map[string]any    `json:"metadata"`
	Output             []outputMessage   `json:"output"`
	ParallelToolCalls  bool              `json:"parallel_tool_calls"`
	PreviousResponseID *string           `json:"previous_response_id"`
	Reasoning          any               `json:"reasoning"`
	ServiceTier        string            `json:"service_tier"`
	Temperature        float64           `json:"temperature"`
	ToolChoice         string            `json:"tool_choice"`
	Tools              []any             `json:"tools"`
	TopP               float64           `json:"top_p"`
	Truncation         string            `json:"truncation"`
	User               *string           `json:"user"`
	Error              any               `json:"error"`
	Usage              *responseUsage    `json:"usage"`
}

type outputMessage struct {
	ID      string       `json:"id"`
	Type    string       `json:"type"`
	Role    string       `json:"role"`
	Status  string       `json:"status"`
	Content []outputText `json:"content"`
}

type outputText struct {
	Type        string `json:"type"`
	Text        string `json:"text"`
	Annotations []any  `json:"annotations"`
	Logprobs    []any  `json:"logprobs"`
}

type responseUsage struct {
	InputTokens         int            `json:"input_tokens"`
	InputTokensDetails  map[string]int `json:"input_tokens_details"`
	OutputTokens        int            `json:"output_tokens"`
	OutputTokensDetails map[string]int `json:"output_tokens_details"`
	TotalTokens         int            `json:"total_tokens"`
}
