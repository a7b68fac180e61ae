// Package inferagent is the inference agent (`cosmicac agent inference`):
// the process inside each VMI of a Managed Inference replica. It builds the
// runtime's command line from the spec and the placement (BuildCommand:
// `vllm serve …` with tensor parallelism over the node's GPUs and pipeline
// parallelism over the replica's nodes, or the parakeet server), starts it
// (Launcher: a child process; the simulated rack's in-process simulator is
// internal/inferagent/simlaunch's, so the agent carries none), turns its stdout/stderr into application log records, and reports
// the replica ready only after a real probe (a one-token completion, a short
// transcription) passes.
//
// It is a dial-only fabric node: it connects out to the platform peers of
// its bootstrap, admits only them, announces itself under
// "inference/<job id>" with agentapi.InferenceMeta {replica, role, model, ready, …}, and
// serves agentapi.MethodInferenceHTTP streams: for vLLM and Parakeet each is
// relayed byte for byte to a TCP connection of its own to the local runtime
// (the proxy speaks HTTP/1.1 keep-alive through it); for llama.cpp, which
// closes its connection after each streamed answer, the agent relays each
// request and its answer on a connection of its own to the runtime, with
// framing of its own, so the stream outlives them (relay.go). Either way every
// write of the runtime's answer reaches the stream at once, so SSE events
// are never held back; it refuses them while
// its runtime is not running or when it is a headless worker. The proxy
// (internal/inferproxy) dials those streams with agentapi.DialInference. The bootstrap it reads and what it does with the peers
// (admit, keep connected, report to) it shares with the instance agent:
// see agent.FileBootstrap, agent.KeepConnected.
//
// In a multi-node vLLM replica the lowest VMI index leads: VMI 0 runs the
// vLLM API server (the head) and is the replica's endpoint; the others run
// `vllm serve … --headless` and join it. See docs/inference.md.
//
// Importers: internal/agentcmd (the agent command), internal/inferproxy, and the
// rack workers (HandleReports, agentapi.InferenceStatus).
package inferagent
