// Package inferproxy is proxy-inference (`cosmicac proxy-inference`, and
// part of `cosmicac up`): the OpenAI-compatible endpoint under
// /inference/v1 in front of every managed-inference job's replicas.
//
// A request is authenticated by its API key (Authorization: Bearer KEY or
// X-API-Key: KEY; keys belong to a team and are stored hashed, see
// appnode.NewAPIKey and store.APIKeys), routed by its "model" to the jobs that serve
// that name to the caller (Catalog: its team's jobs, and jobs whose
// requireAuth is off), and sent to the ready replica with the fewest
// requests in flight. Replicas are found through the fabric's directory
// lookup of "inference/<job id>" (agentapi.InferenceMeta) and reached over fabric
// streams carrying HTTP/1.1 to the inference agent (agentapi.MethodInferenceHTTP).
// A request that fails before any byte reached the client is tried on
// another replica; SSE streams pass through event by event, flushed at
// once; a client that goes away cancels the upstream request. Errors have
// OpenAI's shape {"error":{"message","type","code"}}. Per-key limits (in
// flight, per minute) answer 429 with Retry-After; bodies are bounded (413).
// Model health (healthy|degraded|unhealthy|unknown) comes from the agents'
// probes and the proxy's observed error rate and latency per replica
// (JobHealth, GET /inference/health, the fabric method proxyapi.Health).
//
// See docs/inference.md. Importers: internal/cli/components and the platform wiring.
package inferproxy
