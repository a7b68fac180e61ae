package simruntime

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cosmicac/cosmicac/internal/backoff"
	"github.com/cosmicac/cosmicac/internal/wav"
)

// What every reply carries to say it is simulated.
const (
	// Fingerprint is the system_fingerprint of every completion and the
	// owned_by of every model.
	Fingerprint = "cosmicac-simulated"
	// HeaderSimulated is set to "true" on every response.
	HeaderSimulated = "X-CosmicAC-Simulated"
)

// Runtimes the simulator plays.
const (
	RuntimeVLLM     = "vllm"
	RuntimeParakeet = "parakeet"
)

// Config configures a simulated runtime.
type Config struct {
	// Runtime is RuntimeVLLM (default: text endpoints) or RuntimeParakeet
	// (transcriptions).
	Runtime string
	// Model is the model id (e.g. "Qwen/Qwen3-32B"); ServedModelName the
	// name clients use (default: Model).
	Model string
	// Adapters are the names of LoRA adapters served beside the model,
	// each as a model of its own name (vLLM's --lora-modules NAME=…).
	Adapters        []string
	ServedModelName string
	// TTFT is the time from a request to its first token; InterTokenDelay
	// the time between tokens.
	TTFT            time.Duration
	InterTokenDelay time.Duration
	// DefaultMaxTokens caps a text completion (/v1/completions) whose
	// request sets no max_tokens (default 16, vLLM's CompletionRequest). A
	// chat completion has no such cap, as in vLLM (ChatCompletionRequest's
	// max_tokens is None: the rest of the context): it ends where its words
	// do, with "stop". MaxModelLen is reported in the model list (default
	// 32768).
	DefaultMaxTokens int
	MaxModelLen      int
	// LoadTime is how long "loading the weights" takes after New. As vLLM,
	// which binds its socket before it builds the engine and starts its
	// HTTP server after (vllm/entrypoints/openai/api_server.py, run_server:
	// setup_server, then build_async_engine_client, then serve_http), the
	// server takes connections meanwhile and answers nothing, /health
	// included, until it is loaded; then it answers them.
	LoadTime time.Duration
	// Embeddings makes it an embedding model (vLLM's pooling runner): it
	// serves /v1/embeddings and, as vLLM, no chat or text completions (404).
	Embeddings bool
	// AutoToolChoice is vLLM's --enable-auto-tool-choice with a
	// --tool-call-parser: without both, a chat request whose tool_choice
	// is "auto" (the default when it gives tools) is a 400, as vLLM's
	// serving_chat.py answers it.
	AutoToolChoice bool
	// Faults are the failures injected from the start.
	Faults Faults
	// AccessLog, if set, receives one uvicorn-like line per request.
	AccessLog io.Writer
	// OnEvent, if set, is called as each SSE event of a stream is written
	// (the completion's id and the event's index), for latency benchmarks.
	OnEvent func(id string, index int, at time.Time)
	// Hold, if set, holds every stream before its first token (after TTFT)
	// until it is closed: a test's way to have requests wait for their
	// first token for as long as it needs (Held counts them). Completions
	// that do not stream, such as the inference agent's probes, are not
	// held.
	Hold <-chan struct{}
	// OnUpload, if set, is called as a transcription's body is read, with
	// the bytes read so far, and once more when it is answered 200, with
	// done true: a test's way to see the audio arrive while the client is
	// still sending it.
	OnUpload func(read int64, done bool)
}

// Faults are injected failures.
type Faults struct {
	// FailRate is the fraction of requests (0..1) answered with Status.
	FailRate float64 `json:"failRate,omitempty"`
	// FailNext answers the next N requests with Status.
	FailNext int `json:"failNext,omitempty"`
	// Status of an injected failure (default 500).
	Status int `json:"status,omitempty"`
	// AbortAfterTokens cuts every stream (the connection) after that many
	// tokens (0: never): a runtime that died.
	AbortAfterTokens int `json:"abortAfterTokens,omitempty"`
	// ErrorAfterTokens ends every stream after that many tokens with the
	// error event vLLM sends when generation fails mid-stream, `data:
	// {"error": {…}}` then `data: [DONE]` (serving_chat.py,
	// chat_completion_stream_generator) (0: never).
	ErrorAfterTokens int `json:"errorAfterTokens,omitempty"`
	// Unhealthy makes /health answer 503.
	Unhealthy bool `json:"unhealthy,omitempty"`
	// ExtraLatency is added before every answer.
	ExtraLatency time.Duration `json:"extraLatency,omitempty"`
}

// Server is a simulated runtime; it is an http.Handler.
type Server struct {
	cfg     Config
	mux     *http.ServeMux
	created int64
	readyAt time.Time
	idBase  string
	nextID  atomic.Uint64

	faultMu  sync.Mutex
	faults   Faults
	failNext int
	failAcc  float64 // accumulates FailRate, so failures are spread evenly

	running, waiting  atomic.Int64
	held              atomic.Int64
	promptTokens      atomic.Int64
	generationTokens  atomic.Int64
	success, failures atomic.Int64
	ttftSumNanos      atomic.Int64
	ttftCount         atomic.Int64
	e2eSumNanos       atomic.Int64
	e2eCount          atomic.Int64
}

// New makes a simulated runtime of cfg.
func New(cfg Config) *Server {
	if cfg.Runtime == "" {
		cfg.Runtime = RuntimeVLLM
	}
	if cfg.ServedModelName == "" {
		cfg.ServedModelName = cfg.Model
	}
	if cfg.DefaultMaxTokens <= 0 {
		cfg.DefaultMaxTokens = 16
	}
	if cfg.MaxModelLen <= 0 {
		cfg.MaxModelLen = 32768
	}
	b := make([]byte, 6)
	rand.Read(b)
	s := &Server{cfg: cfg, mux: http.NewServeMux(), created: time.Now().Unix(),
		readyAt: time.Now().Add(cfg.LoadTime), idBase: hex.EncodeToString(b)}
	s.SetFaults(cfg.Faults)
	s.mux.HandleFunc("GET /metrics", s.metrics)
	s.mux.HandleFunc("GET /v1/models", s.models)
	s.mux.HandleFunc("GET /sim/faults", s.getFaults)
	s.mux.HandleFunc("POST /sim/faults", s.postFaults)
	if cfg.Runtime == RuntimeParakeet {
		// NVIDIA's ASR NIM: readiness at /v1/health/ready, liveness at
		// /v1/health/live, no /health.
		s.mux.HandleFunc("GET /v1/health/ready", s.nimReady)
		s.mux.HandleFunc("GET /v1/health/live", s.nimLive)
		s.mux.HandleFunc("POST /v1/audio/transcriptions", s.transcribe)
		s.mux.HandleFunc("POST /v1/audio/translations", s.translate)
	} else if cfg.Embeddings {
		// vLLM registers the generate routes only for a model whose
		// supported tasks include "generate" (vllm/entrypoints/openai/api_server.py).
		s.mux.HandleFunc("GET /health", s.health)
		s.mux.HandleFunc("POST /v1/embeddings", s.embeddings)
	} else {
		s.mux.HandleFunc("GET /health", s.health)
		s.mux.HandleFunc("POST /v1/chat/completions", s.chat)
		s.mux.HandleFunc("POST /v1/completions", s.completions)
		s.mux.HandleFunc("POST /v1/responses", s.responses)
	}
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "NotFoundError", fmt.Sprintf("%s %s is not served by this (simulated) %s runtime", r.Method, r.URL.Path, s.cfg.Runtime))
	})
	return s
}

// Config returns the server's configuration (defaults filled in).
func (s *Server) Config() Config { return s.cfg }

// Generating is the number of completions being generated now, streamed
// or not (vllm:num_requests_running).
func (s *Server) Generating() int { return int(s.running.Load()) }

// Held is the number of streams waiting at Config.Hold now.
func (s *Server) Held() int { return int(s.held.Load()) }

// SetFaults replaces the injected failures.
func (s *Server) SetFaults(f Faults) {
	s.faultMu.Lock()
	defer s.faultMu.Unlock()
	if f.Status == 0 {
		f.Status = http.StatusInternalServerError
	}
	s.faults, s.failNext, s.failAcc = f, f.FailNext, 0
}

// Faults returns the injected failures now (FailNext counts down).
func (s *Server) Faults() Faults {
	s.faultMu.Lock()
	defer s.faultMu.Unlock()
	f := s.faults
	f.FailNext = s.failNext
	return f
}

// inject decides whether this request fails; it returns the status (0: no).
func (s *Server) inject() (status int, f Faults) {
	s.faultMu.Lock()
	defer s.faultMu.Unlock()
	f = s.faults
	if s.failNext > 0 {
		s.failNext--
		return f.Status, f
	}
	if f.FailRate > 0 {
		s.failAcc += f.FailRate
		if s.failAcc >= 1 {
			s.failAcc--
			return f.Status, f
		}
	}
	return 0, f
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set(HeaderSimulated, "true")
	if s.cfg.AccessLog == nil {
		s.mux.ServeHTTP(w, r)
		return
	}
	sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
	s.mux.ServeHTTP(sw, r)
	fmt.Fprintf(s.cfg.AccessLog, "INFO:     %s - \"%s %s %s\" %d %s\n", r.RemoteAddr, r.Method, r.URL.Path, r.Proto, sw.status, http.StatusText(sw.status))
}

type statusWriter struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.status, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// waitLoaded holds a request that came while loading until the runtime is
// loaded (vLLM has no HTTP server before: the connection waits in the
// listen backlog); false if the request went away meanwhile.
func (s *Server) waitLoaded(r *http.Request) bool {
	if d := time.Until(s.readyAt); d > 0 {
		return backoff.Sleep(r.Context(), d)
	}
	return true
}

// loaded reports whether the runtime has finished loading its model.
func (s *Server) loaded() bool { return !time.Now().Before(s.readyAt) }

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	if !s.waitLoaded(r) {
		return
	}
	if s.Faults().Unhealthy {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// nimReady is the ASR NIM's readiness route: {"status":"ready"} once the
// model is loaded (docs.nvidia.com/nim/speech/latest/nmt/deploy-nmt-model.html,
// "Verify Readiness", the same route for every speech NIM), 503 before.
func (s *Server) nimReady(w http.ResponseWriter, r *http.Request) {
	if !s.loaded() || s.Faults().Unhealthy {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "not ready"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

// nimLive is the ASR NIM's liveness route: the process is up.
func (s *Server) nimLive(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "live"})
}

func (s *Server) getFaults(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.Faults())
}

func (s *Server) postFaults(w http.ResponseWriter, r *http.Request) {
	var f Faults
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<16)).Decode(&f); err != nil {
		writeError(w, http.StatusBadRequest, "BadRequestError", "decode faults: "+err.Error())
		return
	}
	s.SetFaults(f)
	writeJSON(w, http.StatusOK, s.Faults())
}

func (s *Server) models(w http.ResponseWriter, r *http.Request) {
	type model struct {
		ID          string `json:"id"`
		Object      string `json:"object"`
		Created     int64  `json:"created"`
		OwnedBy     string `json:"owned_by"`
		Root        string `json:"root"`
		MaxModelLen int    `json:"max_model_len,omitempty"`
	}
	m := model{ID: s.cfg.ServedModelName, Object: "model", Created: s.created, OwnedBy: Fingerprint, Root: s.cfg.Model}
	if s.cfg.Runtime == RuntimeVLLM {
		m.MaxModelLen = s.cfg.MaxModelLen
	}
	data := []model{m}
	for _, a := range s.cfg.Adapters {
		data = append(data, model{ID: a, Object: "model", Created: s.created, OwnedBy: Fingerprint, Root: a})
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
}

// serves says whether a request for model is served: the served name, or
// one of the adapters (vLLM answers 404 for any other).
func (s *Server) serves(model string) bool {
	return model == s.cfg.ServedModelName || slices.Contains(s.cfg.Adapters, model)
}

// ---- errors and JSON

// ErrorBody is the OpenAI error shape.
type ErrorBody struct {
	Message string `json:"message"`
	Type    string `json:"type"`
	Param   any    `json:"param"`
	Code    any    `json:"code"`
}

func writeError(w http.ResponseWriter, status int, typ, msg string) {
	writeJSON(w, status, map[string]ErrorBody{"error": {Message: msg, Type: typ, Code: status}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	w.Write(b)
}

// admit runs the checks every inference request shares: loaded, injected
// failures, extra latency. It reports whether to go on.
func (s *Server) admit(w http.ResponseWriter, r *http.Request) (Faults, bool) {
	if !s.waitLoaded(r) {
		return Faults{}, false
	}
	status, f := s.inject()
	if f.ExtraLatency > 0 {
		if !backoff.Sleep(r.Context(), f.ExtraLatency) {
			return f, false
		}
	}
	if status != 0 {
		s.failures.Add(1)
		writeError(w, status, "InternalServerError", "injected failure (simulated runtime)")
		return f, false
	}
	return f, true
}

// ---- embeddings

// The embeddings follow vLLM v0.18's EmbeddingCompletionRequest
// (vllm/entrypoints/pooling/embed/protocol.py: encoding_format, default
// "float"; embed_dtype, default "float32"; endianness, default "native")
// and its encoding (vllm/utils/serial_utils.py, encode_pooling_output:
// "float" a JSON array, "base64" the base64 of the tensor's bytes in
// embed_dtype and endianness). The official SDKs ask for "base64" by
// default (openai-node 6.x, and the Python SDK with numpy) and decode
// float32 little-endian. vLLM's "bytes" and "bytes_only" (a binary
// answer of its own, not OpenAI's) and embed_dtype other than float32 are
// not simulated: 400, never a 200 in a shape the client did not ask for.

// EmbeddingDims is the length of every simulated embedding.
const EmbeddingDims = 8

// Embedding is the simulated embedding of input: EmbeddingDims values
// of unit length, a deterministic function of input.
func Embedding(input string) []float32 {
	h := fnv.New64a()
	h.Write([]byte(input))
	x := h.Sum64()
	vec := make([]float64, EmbeddingDims)
	var norm float64
	for j := range vec {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		vec[j] = float64(int64(x%2001)-1000) / 1000
		norm += vec[j] * vec[j]
	}
	out := make([]float32, len(vec))
	for j := range vec {
		out[j] = float32(vec[j] / math.Sqrt(norm))
	}
	return out
}

func (s *Server) embeddings(w http.ResponseWriter, r *http.Request) {
	if _, ok := s.admit(w, r); !ok {
		return
	}
	var req struct {
		Model          string          `json:"model"`
		Input          json.RawMessage `json:"input"`
		EncodingFormat *string         `json:"encoding_format"`
		EmbedDType     *string         `json:"embed_dtype"`
		Endianness     *string         `json:"endianness"`
		Dimensions     *int            `json:"dimensions"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "BadRequestError", "invalid JSON body: "+err.Error())
		return
	}
	if !s.serves(req.Model) {
		writeError(w, http.StatusNotFound, "NotFoundError", fmt.Sprintf("The model `%s` does not exist.", req.Model))
		return
	}
	format, dtype, endian := "float", "float32", "native"
	if req.EncodingFormat != nil {
		format = *req.EncodingFormat
	}
	if req.EmbedDType != nil {
		dtype = *req.EmbedDType
	}
	if req.Endianness != nil {
		endian = *req.Endianness
	}
	switch format {
	case "float", "base64":
	case "bytes", "bytes_only":
		writeBadRequest(w, &badRequest{fmt.Sprintf("encoding_format %q (vLLM's binary answer) is not simulated: the simulated runtime answers 'float' and 'base64'", format), "encoding_format"})
		return
	default:
		writeBadRequest(w, &badRequest{fmt.Sprintf("encoding_format: Input should be 'float', 'base64', 'bytes' or 'bytes_only', got %q", format), "encoding_format"})
		return
	}
	if dtype != "float32" {
		writeBadRequest(w, &badRequest{fmt.Sprintf("embed_dtype %q is not simulated: the simulated runtime encodes float32", dtype), "embed_dtype"})
		return
	}
	var order binary.AppendByteOrder = binary.LittleEndian // "native" on the platforms vLLM runs on (x86-64, aarch64)
	switch endian {
	case "native", "little":
	case "big":
		order = binary.BigEndian
	default:
		writeBadRequest(w, &badRequest{fmt.Sprintf("endianness: Input should be 'native', 'big' or 'little', got %q", endian), "endianness"})
		return
	}
	if req.Dimensions != nil {
		// serving_embedding / PoolingParams.verify: the simulated model
		// has no Matryoshka representation.
		writeBadRequest(w, &badRequest{fmt.Sprintf("Model %q does not support matryoshka representation, changing output dimensions will lead to poor results.", req.Model), "dimensions"})
		return
	}
	var inputs []string
	var one string
	if json.Unmarshal(req.Input, &one) == nil {
		inputs = []string{one}
	} else if json.Unmarshal(req.Input, &inputs) != nil {
		writeError(w, http.StatusBadRequest, "BadRequestError", "input must be a string or an array of strings")
		return
	}
	data := make([]any, len(inputs))
	toks := 0
	for i, in := range inputs {
		toks += countTokens(in)
		vec := Embedding(in)
		var emb any = vec
		if format == "base64" {
			b := make([]byte, 0, 4*len(vec))
			for _, v := range vec {
				b = order.AppendUint32(b, math.Float32bits(v))
			}
			emb = base64.StdEncoding.EncodeToString(b)
		}
		data[i] = map[string]any{"object": "embedding", "index": i, "embedding": emb}
	}
	s.success.Add(1)
	writeJSON(w, http.StatusOK, map[string]any{"id": s.id("embd-"), "object": "list", "created": time.Now().Unix(), "model": req.Model, "data": data,
		"usage": map[string]int{"prompt_tokens": toks, "total_tokens": toks, "completion_tokens": 0}})
}

// ---- transcriptions (parakeet)
//
// The parakeet runtime is NVIDIA's ASR NIM, and this follows its HTTP API
// (docs.nvidia.com/nim/speech/latest/reference/api-references/asr/http-asr.html):
// POST /v1/audio/transcriptions takes a multipart form with "file" (WAV
// here; the NIM also takes OPUS and FLAC), "language" (a BCP-47 code, or
// "multi" for Parakeet TDT v3's automatic detection) or "model" (the NIM's
// internal model name, which wins over language; the simulator takes the
// served model name or the model id as that name), "response_format" json
// (default: {"text": "..."}) or text (the plain transcript), and
// "temperature" (accepted, no effect). Neither language nor model: 400.
// Any other response_format (srt, vtt, verbose_json): 400, as the NIM
// accepts only json and text.

// MaxAudioBytes bounds an upload.
const MaxAudioBytes = 64 << 20

// ResponseFormats are the response formats the ASR NIM accepts.
var ResponseFormats = []string{"json", "text"}

func (s *Server) transcribe(w http.ResponseWriter, r *http.Request) { s.audio(w, r, false) }

// translate is POST /v1/audio/translations: the NIM's HTTP API lists it
// beside transcriptions, with the same form, for the models that
// translate speech (http-asr.html, "POST /v1/audio/translations"); the
// simulator answers it as a transcription whose text says it is a
// translation into English (OpenAI's translations API: into English).
// Whether a real NIM with the Parakeet TDT v3 profile translates is not
// known here: a refusal of the real NIM passes through the proxy as it is.
func (s *Server) translate(w http.ResponseWriter, r *http.Request) { s.audio(w, r, true) }

func (s *Server) audio(w http.ResponseWriter, r *http.Request, translate bool) {
	if _, ok := s.admit(w, r); !ok {
		return
	}
	start := time.Now()
	r.Body = http.MaxBytesReader(w, r.Body, MaxAudioBytes)
	var up *uploadCounter
	if s.cfg.OnUpload != nil {
		up = &uploadCounter{r: r.Body, on: s.cfg.OnUpload}
		r.Body = up
	}
	if err := r.ParseMultipartForm(8 << 20); err != nil {
		writeError(w, http.StatusBadRequest, "BadRequestError", "want a multipart/form-data body with a file: "+err.Error())
		return
	}
	defer r.MultipartForm.RemoveAll()
	lang, model := r.FormValue("language"), r.FormValue("model")
	switch {
	case lang == "" && model == "":
		writeError(w, http.StatusBadRequest, "BadRequestError", "either language or model must be given")
		return
	case model != "" && model != s.cfg.ServedModelName && model != s.cfg.Model:
		writeError(w, http.StatusBadRequest, "BadRequestError", fmt.Sprintf("model %q is not deployed", model))
		return
	}
	format := r.FormValue("response_format")
	if format == "" {
		format = "json"
	}
	if !slices.Contains(ResponseFormats, format) {
		writeError(w, http.StatusBadRequest, "BadRequestError", fmt.Sprintf("response_format %q is not supported: want json or text", format))
		return
	}
	f, _, err := r.FormFile("file")
	if err != nil {
		writeError(w, http.StatusBadRequest, "BadRequestError", "the form has no file field")
		return
	}
	audio, err := io.ReadAll(f)
	f.Close()
	if err != nil {
		writeError(w, http.StatusBadRequest, "BadRequestError", "read the file: "+err.Error())
		return
	}
	dur, err := wav.Duration(audio)
	if err != nil {
		writeError(w, http.StatusBadRequest, "BadRequestError", "could not decode the audio: "+err.Error())
		return
	}
	if !backoff.Sleep(r.Context(), s.cfg.TTFT) {
		return
	}
	h := fnv.New64a()
	h.Write(audio)
	_, token := Words(hex.EncodeToString(h.Sum(nil)))
	nw := 2 + int(dur*2.5) // about 150 words a minute
	if nw > 200 {
		nw = 200
	}
	var b strings.Builder
	if translate {
		fmt.Fprintf(&b, "[simulated translation into English of %.2f s] ", dur)
	} else {
		fmt.Fprintf(&b, "[simulated transcript of %.2f s] ", dur)
	}
	for i := 0; i < nw; i++ {
		b.WriteString(token(i))
	}
	b.WriteString(".")
	text := b.String()
	s.finish(start)
	if up != nil {
		up.on(up.n, true)
	}
	if format == "text" {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, text)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"text": text})
}

// uploadCounter is a body that tells Config.OnUpload of each read.
type uploadCounter struct {
	r  io.ReadCloser
	n  int64
	on func(int64, bool)
}

func (u *uploadCounter) Read(p []byte) (int, error) {
	n, err := u.r.Read(p)
	if n > 0 {
		u.n += int64(n)
		u.on(u.n, false)
	}
	return n, err
}

func (u *uploadCounter) Close() error { return u.r.Close() }

// ---- metrics

func (s *Server) metrics(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	m := strconv.Quote(s.cfg.ServedModelName)
	secs := func(n int64) string { return strconv.FormatFloat(float64(n)/1e9, 'g', -1, 64) }
	var b strings.Builder
	line := func(name, typ, help, value string, labels string) {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s %s\n%s{model_name=%s%s} %s\n", name, help, name, typ, name, m, labels, value)
	}
	fmt.Fprintf(&b, "# HELP cosmicac_simulated 1: this runtime is simulated (no model runs).\n# TYPE cosmicac_simulated gauge\ncosmicac_simulated 1\n")
	line("vllm:num_requests_running", "gauge", "Number of requests currently running.", strconv.FormatInt(s.running.Load(), 10), "")
	line("vllm:num_requests_waiting", "gauge", "Number of requests waiting.", strconv.FormatInt(s.waiting.Load(), 10), "")
	line("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.", strconv.FormatInt(s.promptTokens.Load(), 10), "")
	line("vllm:generation_tokens_total", "counter", "Number of generation tokens processed.", strconv.FormatInt(s.generationTokens.Load(), 10), "")
	line("vllm:request_success_total", "counter", "Count of successfully processed requests.", strconv.FormatInt(s.success.Load(), 10), "")
	line("cosmicac_sim_injected_failures_total", "counter", "Requests failed by fault injection.", strconv.FormatInt(s.failures.Load(), 10), "")
	fmt.Fprintf(&b, "# HELP vllm:time_to_first_token_seconds Time to first token.\n# TYPE vllm:time_to_first_token_seconds summary\n")
	fmt.Fprintf(&b, "vllm:time_to_first_token_seconds_sum{model_name=%s} %s\nvllm:time_to_first_token_seconds_count{model_name=%s} %d\n", m, secs(s.ttftSumNanos.Load()), m, s.ttftCount.Load())
	fmt.Fprintf(&b, "# HELP vllm:e2e_request_latency_seconds End-to-end request latency.\n# TYPE vllm:e2e_request_latency_seconds summary\n")
	fmt.Fprintf(&b, "vllm:e2e_request_latency_seconds_sum{model_name=%s} %s\nvllm:e2e_request_latency_seconds_count{model_name=%s} %d\n", m, secs(s.e2eSumNanos.Load()), m, s.e2eCount.Load())
	io.WriteString(w, b.String())
}

// ---- serving

// Running is a simulated runtime serving HTTP on a listener.
type Running struct {
	*Server
	srv  *http.Server
	ln   net.Listener
	done chan struct{}
}

// Start serves s on addr ("127.0.0.1:0" picks a port) until Close.
func Start(addr string, s *Server) (*Running, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	r := &Running{Server: s, srv: &http.Server{Handler: s, ReadHeaderTimeout: 30 * time.Second}, ln: ln, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		r.srv.Serve(ln)
	}()
	return r, nil
}

// Addr is the host:port served.
func (r *Running) Addr() string { return r.ln.Addr().String() }

// URL is the base URL (http://host:port).
func (r *Running) URL() string { return "http://" + r.Addr() }

// Close stops at once: the listener and every connection are closed, as
// when the process dies.
func (r *Running) Close() error {
	err := r.srv.Close()
	<-r.done
	return err
}

// Done is closed when the server has stopped.
func (r *Running) Done() <-chan struct{} { return r.done }
