// Package inferagent is the inference agent (`cosmicac agent inference`):
// the process inside each VMI of a Managed Inference replica. It builds the
// runtime's command line from the spec and the placement (BuildCommand:
// `vllm serve …` with tensor parallelism over the node's GPUs and pipeline
// parallelism over the replica's nodes, or the parakeet server), starts it
// (Launcher: a child process, or simruntime in-process on the simulated
// rack), turns its stdout/stderr into application log records, and reports
// the replica ready only after a real probe (a one-token completion, a short
// transcription) passes.
//
// It is a dial-only fabric node: it connects out to the platform peers of
// its bootstrap, admits only them, announces itself under
// "inference/<job id>" with Meta {replica, role, model, ready, …}, and
// serves MethodHTTP streams: HTTP/1.1 (keep-alive) that it forwards to the
// local runtime, streaming the answers back write by write, so SSE events
// are never held back. The proxy (internal/inferproxy) dials those streams
// with DialStream. The bootstrap it reads and what it does with the peers
// (admit, keep connected, report to) it shares with the instance agent:
// see agent.FileBootstrap, agent.KeepConnected.
//
// In a multi-node vLLM replica the lowest VMI index leads: VMI 0 runs the
// vLLM API server (the head) and is the replica's endpoint; the others run
// `vllm serve … --headless` and join it. See docs/inference.md.
//
// Importers: internal/cli (the agent command), internal/inferproxy, and the
// rack workers (HandleReports, Status).
package inferagent
