// Package joblog defines a job's log record and the sink that components
// write records to. Workers write system records (each step of setting a job
// up and whether it succeeded); agents write application records. The
// monitor (internal/monitor) receives them over the fabric; Forwarder is the
// sink that sends them there. Any package may import joblog.
package joblog

import (
	"sync"
	"time"
)

// Sources of records.
const (
	SourceSystem      = "system"
	SourceApplication = "application"
)

// StepLogDropped is the step of the system record that tells a job's
// readers that some of its records were dropped before the monitor stored
// them: by the producer's Forwarder (its buffer was full), or by the
// monitor (the job's share of its spool was).
const StepLogDropped = "log_dropped"

// Record is one line of a job's log.
type Record struct {
	Time  time.Time `json:"time"`
	JobID string    `json:"job"`
	// Team owns the job; optional (the monitor labels Loki streams with it
	// when set).
	Team    string `json:"team,omitempty"`
	Replica int    `json:"replica"`
	Source  string `json:"source"`           // system | application
	Stream  string `json:"stream,omitempty"` // stdout | stderr | the worker's name
	Line    string `json:"line"`
	// Step names the setup step of a system record ("import_disk",
	// "schedule", "boot", ...) and OK whether it succeeded.
	Step string `json:"step,omitempty"`
	OK   *bool  `json:"ok,omitempty"`
}

// Sink receives records. Emit must not block the caller for long: a sink
// that cannot deliver buffers within a bound and counts what it drops.
type Sink interface {
	Emit(Record)
}

// Discard drops every record.
var Discard Sink = discard{}

type discard struct{}

func (discard) Emit(Record) {}

// Ring keeps the last records in memory; it is the sink of tests and of a
// platform running without a monitor.
type Ring struct {
	mu   sync.Mutex
	recs []Record // once full, a circle whose oldest record is at next
	next int
	max  int
}

// NewRing keeps at most max records (none for max <= 0).
func NewRing(max int) *Ring { return &Ring{max: max} }

// Emit implements Sink. Once the ring is full a record takes the oldest
// one's place: an emit costs the same however many are kept (it copied
// them all, which on a chatty runtime's log cost as much as serving its
// requests: docs/benchmarks.md, "Inference on a real engine").
func (r *Ring) Emit(rec Record) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.max <= 0:
	case len(r.recs) < r.max:
		r.recs = append(r.recs, rec)
	default:
		r.recs[r.next] = rec
		r.next = (r.next + 1) % r.max
	}
}

// Job returns the kept records of one job, oldest first.
func (r *Ring) Job(id string) []Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Record
	for _, part := range [][]Record{r.recs[r.next:], r.recs[:r.next]} {
		for _, rec := range part {
			if rec.JobID == id {
				out = append(out, rec)
			}
		}
	}
	return out
}

// Bool returns a pointer to b, for Record.OK.
func Bool(b bool) *bool { return &b }

// Tee returns a sink that emits every record to each of sinks, in order.
func Tee(sinks ...Sink) Sink { return tee(sinks) }

type tee []Sink

func (t tee) Emit(r Record) {
	for _, s := range t {
		s.Emit(r)
	}
}
