// Package monitor is cosmicac-wrk-monitor (docs/logs.md): it receives jobs' log
// records over the fabric (joblog.Append, sent by joblog.Forwarder),
// keeps a short per-job buffer, fans records out to live viewers as
// Server-Sent Events under /monitor/v1/jobs/{id}/logs, and, when a Loki URL
// is configured, forwards every record to Loki through a bounded on-disk
// spool and reads history back with Loki's query_range.
//
// Each record gets a sequence number when the monitor takes it: its arrival
// time in Unix nanoseconds, bumped to stay strictly increasing (also across
// restarts: a restarted monitor continues after the last number in its
// spool). The number is the SSE event id (Last-Event-ID resumes from it)
// and the record's Loki timestamp, so history read from Loki and the live
// buffer meet at one number with neither gap nor duplicate.
//
// See docs/logs.md. Importers: the CLI wiring (cosmicac wrk-monitor,
// cosmicac up) and tests.
package monitor
