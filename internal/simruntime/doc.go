// Package simruntime is a SIMULATED model server for the simulated rack,
// where no GPU exists. It speaks the HTTP API of vLLM's OpenAI-compatible
// server closely enough for clients, the inference agent and the proxy to be
// exercised end to end:
//
//   - GET /v1/models, POST /v1/chat/completions, POST /v1/completions (with
//     "stream": true as SSE chunks ending in "data: [DONE]",
//     stream_options.include_usage, and usage in non-streamed replies),
//     POST /v1/embeddings, and no completions, when Config.Embeddings is set;
//   - GET /health, GET /metrics (a few vLLM-named Prometheus metrics);
//   - for the parakeet runtime, POST /v1/audio/transcriptions (a multipart
//     WAV upload answered with text) in place of the text endpoints.
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
