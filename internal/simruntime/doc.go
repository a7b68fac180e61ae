// Package simruntime is a SIMULATED model server for the simulated rack,
// where no GPU exists. It is a fake of vLLM v0.18's OpenAI-compatible
// server (the target of internal/inferagent's command lines,
// docs/inference.md, "The target vLLM version"), close enough for clients,
// the inference agent and the proxy to be exercised end to end. It follows
// these files of github.com/vllm-project/vllm, cited where each behaviour
// is implemented:
//
//   - vllm/entrypoints/openai/protocol.py (ChatCompletionRequest,
//     CompletionRequest, ResponsesRequest: n, logprobs and top_logprobs,
//     echo, response_format, tools and tool_choice, stream_options, and
//     their validation) and vllm/sampling_params.py (n);
//   - vllm/entrypoints/openai/serving_chat.py, serving_completion.py and
//     serving_responses.py (the answers, streamed and not, and the errors,
//     such as "auto" tool choice without --enable-auto-tool-choice);
//   - vllm/entrypoints/pooling/embed/protocol.py and
//     vllm/utils/serial_utils.py (embeddings: encoding_format "float" or
//     "base64", embed_dtype, endianness);
//   - vllm/entrypoints/openai/api_server.py (loading, the routes of a
//     generating and of a pooling model).
//
// It serves:
//
//   - GET /v1/models, POST /v1/chat/completions, POST /v1/completions,
//     POST /v1/responses (with "stream": true as SSE: chunks ending in
//     "data: [DONE]", or the Responses API's typed events),
//     stream_options.include_usage, and usage in non-streamed replies;
//     POST /v1/embeddings, and no completions, when Config.Embeddings is
//     set;
//   - GET /health, GET /metrics (a few vLLM-named Prometheus metrics);
//   - for the parakeet runtime, NVIDIA's ASR NIM's HTTP API instead:
//     POST /v1/audio/transcriptions and /v1/audio/translations (a
//     multipart WAV upload answered with text), /v1/health/ready.
//
// A request parameter is honoured as vLLM honours it, or refused with
// vLLM's 400 (its message, the field in "param"); the few vLLM answers
// not simulated (embeddings as "bytes", a structural_tag response format,
// tools in the Responses API) are refused with a 400 that says so, never
// answered 200 in a shape the client did not ask for.
//
// Nothing is inferred: the text is a deterministic function of the prompt
// (the same prompt always gets the same words). Every reply says it is
// simulated: the header X-CosmicAC-Simulated: true, "system_fingerprint":
// "cosmicac-simulated" in completions, and "owned_by": "cosmicac-simulated"
// in the model list. Time to first token, the delay between tokens, a load
// time and failures (a fraction of requests, the next N requests, streams cut
// after N tokens, an unhealthy /health) are configurable, at start (Config)
// and at run time (SetFaults, or POST /sim/faults with a Faults JSON body).
//
// See docs/inference.md. Importers: internal/inferagent (its simulated
// launcher), tests and benchmarks.
package simruntime
