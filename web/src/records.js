// Whose a job's log record is. wrk-monitor sets the stream of every system
// record that a job's agent writes to the agent's role ("agent-instance",
// "agent-inference": internal/monitor/confine.go), so a step that a
// tenant's VM forges is told from the platform's by its stream; the job's
// output (application records) is never the platform's. The CLI decides
// the same in internal/cli (platformRecord).

// AGENT_ROLE_PREFIX starts the role of every agent (trust.Role.IsAgent): a
// stream with it is never the platform's, whatever agent roles come.
const AGENT_ROLE_PREFIX = "agent-";

// isPlatformRecord reports whether r was written by the platform itself.
export function isPlatformRecord(r) {
  return r.source === "system" && !String(r.stream || "").startsWith(AGENT_ROLE_PREFIX);
}
