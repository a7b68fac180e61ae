package platform

import (
	"fmt"
	"strings"

	"github.com/cosmicac/cosmicac/internal/appnode"
	"github.com/cosmicac/cosmicac/internal/inferproxy"
	"github.com/cosmicac/cosmicac/internal/monitor"
	"github.com/cosmicac/cosmicac/internal/ork"
)

// Limit is one bound the platform puts on what one tenant, key or client
// may take of what all share: its default (as the components' defaults
// say), the setting that changes it, and what it bounds.
type Limit struct {
	Name, Default, Setting, Bounds string
}

// Limits lists the bounds a security reviewer asks about: who can starve
// whom, and at what point. docs/security.md's limits table is this list
// (TestSecurityDocLimits).
func Limits() []Limit {
	p, a, o, m := inferproxy.DefaultConfig(), appnode.DefaultConfig(), ork.DefaultConfig(), monitor.DefaultConfig("")
	var out []Limit
	out = append(out,
		Limit{"inference requests in flight", fmt.Sprint(p.MaxConcurrentPerKey), "proxy-inference `maxConcurrentPerKey`",
			"per API key; without a key, per client address (behind a trusted gateway, the address it forwards for); 429 with `Retry-After`"},
		Limit{"inference requests per minute", fmt.Sprint(p.RequestsPerMinute), "proxy-inference `requestsPerMinute`",
			"the same; every request counts before its body is read, one for a model that does not exist too"},
		Limit{"inference tokens per minute", "none", "the API key's `tokensPerMinute` (`api-keys create --tpm`)",
			"per API key, per proxy: prompt and completion tokens as the engine counted them, taken after each answer; 429 with `Retry-After` and `x-ratelimit-*-tokens` once spent"},
		Limit{"inference JSON body", size(p.MaxBodyBytes), "proxy-inference `maxBodyBytes`", "a request with a key; 413"},
		Limit{"inference JSON body without a key", size(p.MaxAnonymousBodyBytes), "proxy-inference `maxAnonymousBodyBytes`", "a request without a key, read only once its client's limits admitted it; 413"},
		Limit{"audio upload", size(p.MaxAudioBytes), "proxy-inference `maxAudioBytes`", "a transcription with a key; 413"},
		Limit{"audio upload without a key", size(p.MaxAnonymousAudioBytes), "proxy-inference `maxAnonymousAudioBytes`", "a transcription without a key; 413"},
		Limit{"job creates", fmt.Sprintf("%d a minute", a.JobCreatesPerMinute), "app-node `jobCreatesPerMinute`; `up --job-creates-per-minute`",
			"per team, per app-node (a burst of that many, refilled at that rate); 429 with `Retry-After`, before the body is read"},
		Limit{"jobs held", fmt.Sprint(o.MaxJobsPerTeam), "wrk-ork `maxJobsPerTeam`", "per team, in any state until deleted; 403"},
	)
	out = append(out,
		Limit{"log line", size(int64(m.MaxLineBytes)), "wrk-monitor `maxLineBytes`", "one record's line, at append: a longer one is cut with a marker and counted"},
		Limit{"log buffer per job", fmt.Sprintf("%d records, %s", m.BufferPerJob, size(m.BufferBytesPerJob)), "wrk-monitor `bufferPerJob`, `bufferBytesPerJob`",
			"one job's (so one agent key's) history in memory; the oldest go first, counted"},
		Limit{"log buffers in all", size(m.BufferBytes), "wrk-monitor `bufferBytes`", "every job's buffer together; the largest loses its oldest records"},
		Limit{"log spool per job", size(m.Loki.SpoolBytesPerJob), "wrk-monitor `loki.spoolBytesPerJob`",
			"one job's records not yet in Loki; past it they are refused (`Refused`), counted and noted in the job's log"},
		Limit{"log spool", size(m.Loki.SpoolBytes), "wrk-monitor `loki.spoolBytes`", "all records not yet in Loki; a batch past it is refused `unavailable` and its producer keeps it"},
		Limit{"log follows", fmt.Sprint(m.MaxFollowsPerUser), "wrk-monitor `maxFollowsPerUser`", "live follows per user, across all their tokens and sessions; 429"},
	)
	for _, l := range appnode.SignInLimits() {
		out = append(out, Limit{"sign-in attempts", fmt.Sprintf("%d, then 1 every %v", l.Burst, l.Every), "fixed",
			"per " + l.Per + "; 429 with `Retry-After`"})
	}
	return out
}

// size writes a byte count in KiB or MiB.
func size(n int64) string {
	if n >= 1<<30 && n%(1<<30) == 0 {
		return fmt.Sprintf("%d GiB", n>>30)
	}
	if n >= 1<<20 && n%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d KiB", n>>10)
}

// LimitsTable is Limits as docs/security.md's Markdown table.
func LimitsTable() string {
	var b strings.Builder
	b.WriteString("| limit | default | setting | what it bounds |\n|---|---|---|---|\n")
	for _, l := range Limits() {
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", l.Name, l.Default, l.Setting, l.Bounds)
	}
	return b.String()
}
