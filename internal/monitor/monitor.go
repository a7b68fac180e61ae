package monitor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/joblog"
)

// Entry is a record as the monitor serves it: with its sequence number.
type Entry struct {
	Seq uint64 `json:"seq"`
	joblog.Record
}

// entry is a kept record and its SSE event, encoded once for all viewers.
type entry struct {
	Entry
	frame []byte
}

// Monitor is wrk-monitor. Serve registers its fabric method, Handler serves
// the HTTP API, Run forwards to Loki.
type Monitor struct {
	cfg Config
	log *slog.Logger
	met *metrics
	now func() time.Time

	// mu orders appends: a batch gets its numbers, is spooled and reaches
	// the buffers under it, so every job's buffer is in sequence order. It
	// also guards jobs.
	mu      sync.Mutex
	lastSeq atomic.Uint64
	jobs    map[string]*jobLog

	quit     chan struct{} // closed by CloseStreams
	quitOnce sync.Once

	spool  *spool      // nil without Loki
	loki   *lokiClient // nil without Loki
	pushed atomic.Uint64
}

// jobLog is one job's buffer and its live viewers.
type jobLog struct {
	mu      sync.RWMutex
	entries []*entry
	first   uint64 // position (count of records ever kept) of entries[0]
	// floor: records of the job numbered at most floor may exist outside
	// the buffer (evicted, or taken before this buffer began).
	floor   uint64
	viewers map[*viewer]struct{}
	active  time.Time
}

func (j *jobLog) end() uint64 { return j.first + uint64(len(j.entries)) }

// after returns the position of the first kept record numbered above seq.
func (j *jobLog) after(seq uint64) uint64 {
	i := sort.Search(len(j.entries), func(i int) bool { return j.entries[i].Seq > seq })
	return j.first + uint64(i)
}

type viewer struct {
	wake chan struct{}
}

// New returns a monitor of cfg. With cfg.Loki.URL it opens (and replays)
// the spool in cfg.DataDir/spool.
func New(cfg Config, log *slog.Logger) (*Monitor, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("monitor config: %w", err)
	}
	cfg.setDefaults()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m := &Monitor{cfg: cfg, log: log, now: time.Now, jobs: map[string]*jobLog{}, quit: make(chan struct{})}
	m.met = newMetrics(m)
	if cfg.Loki.URL != "" {
		sp, err := openSpool(filepath.Join(cfg.DataDir, "spool"), cfg.Loki.SpoolBytes, cfg.Loki.SegmentBytes)
		if err != nil {
			return nil, err
		}
		m.spool = sp
		m.lastSeq.Store(sp.maxSeq)
		if sp.size() == 0 {
			m.pushed.Store(sp.maxSeq) // else the replay's first push sets it
		}
		m.loki = newLokiClient(cfg.Loki)
	}
	return m, nil
}

// Close closes the spool. Call it after Run has returned.
func (m *Monitor) Close() error {
	if m.spool != nil {
		return m.spool.close()
	}
	return nil
}

// CloseStreams ends every open log stream (viewers reconnect with
// Last-Event-ID to wherever the monitor comes back). Register it with
// http.Server.RegisterOnShutdown: Shutdown does not end streaming
// handlers by itself.
func (m *Monitor) CloseStreams() { m.quitOnce.Do(func() { close(m.quit) }) }

// Registry holds the monitor's metrics.
func (m *Monitor) Registry() *prometheus.Registry { return m.met.reg }

// HasLoki reports whether history comes from Loki.
func (m *Monitor) HasLoki() bool { return m.loki != nil }

// Serve registers joblog.MethodAppend on r (the monitor's fabric node,
// whose trust policy admits the producers: workers and agents). Each
// caller writes only what is its own (confine): where says which rack a
// job is placed on; nil refuses every worker's record.
func (m *Monitor) Serve(r fabric.Registrar, where Placements) {
	fabric.HandleFunc(r, joblog.MethodAppend, func(ctx context.Context, _ fabric.PublicKey, p joblog.AppendParams) (joblog.AppendReply, error) {
		recs, refused := confine(ctx, p.Records, where)
		if refused > 0 {
			m.met.rejected.WithLabelValues("scope").Add(float64(refused))
		}
		rep, err := m.Append(ctx, recs)
		rep.Refused = refused
		switch {
		case errors.Is(err, errBadRecord):
			return rep, fabric.Errorf(fabric.CodeBadRequest, "%v", err)
		case errors.Is(err, errSpoolFull):
			return rep, fabric.Errorf(fabric.CodeUnavailable, "%v", err)
		}
		return rep, err
	})
}

var errBadRecord = errors.New("bad record")

// Append takes a batch of records. Once it returns nil the records are in
// the buffers (and viewers have been woken) and, with Loki, on disk.
func (m *Monitor) Append(ctx context.Context, recs []joblog.Record) (joblog.AppendReply, error) {
	if len(recs) == 0 {
		return joblog.AppendReply{LastSeq: m.lastSeq.Load()}, nil
	}
	bodies := make([][]byte, len(recs))
	for i, r := range recs {
		if r.JobID == "" {
			m.met.rejected.WithLabelValues("invalid").Add(float64(len(recs)))
			return joblog.AppendReply{}, fmt.Errorf("%w %d: no job", errBadRecord, i)
		}
		if r.Source != joblog.SourceSystem && r.Source != joblog.SourceApplication {
			m.met.rejected.WithLabelValues("invalid").Add(float64(len(recs)))
			return joblog.AppendReply{}, fmt.Errorf("%w %d: source %q: want system or application", errBadRecord, i, r.Source)
		}
		b, err := json.Marshal(r)
		if err != nil {
			return joblog.AppendReply{}, fmt.Errorf("encode record: %w", err)
		}
		bodies[i] = b
	}
	es := make([]*entry, len(recs))
	m.mu.Lock()
	last := m.lastSeq.Load()
	now := uint64(m.now().UnixNano())
	for i := range recs {
		last = max(last+1, now)
		es[i] = &entry{Entry: Entry{Seq: last, Record: recs[i]}, frame: sseFrame(last, bodies[i])}
	}
	var gen uint64
	if m.spool != nil {
		var err error
		if gen, err = m.spool.append(es, bodies); err != nil {
			m.mu.Unlock()
			m.met.rejected.WithLabelValues("spool").Add(float64(len(recs)))
			return joblog.AppendReply{}, err
		}
	}
	// publish first: a job's buffer made for this batch has its floor
	// below it (else its first records would count as older than the
	// buffer, and history would look for them in Loki only).
	m.publish(es)
	m.lastSeq.Store(last)
	m.mu.Unlock()
	if m.spool != nil {
		if err := m.spool.sync(gen); err != nil {
			return joblog.AppendReply{}, err
		}
		m.met.spoolBytes.Set(float64(m.spool.size()))
	}
	m.met.recordsIn.Add(float64(len(recs)))
	return joblog.AppendReply{Accepted: len(recs), LastSeq: last}, nil
}

// sseFrame is a record's SSE event: id, event type, and the record with
// its number as data.
func sseFrame(seq uint64, body []byte) []byte {
	b := make([]byte, 0, len(body)+64)
	b = append(b, "id: "...)
	b = strconv.AppendUint(b, seq, 10)
	b = append(b, "\nevent: record\ndata: {\"seq\":"...)
	b = strconv.AppendUint(b, seq, 10)
	if len(body) > 2 {
		b = append(b, ',')
	}
	b = append(b, body[1:]...)
	return append(b, "\n\n"...)
}

// publish adds es (in sequence order) to their jobs' buffers and wakes
// the viewers. m.mu is held.
func (m *Monitor) publish(es []*entry) {
	start := 0
	for start < len(es) {
		id := es[start].JobID
		end := start + 1
		for end < len(es) && es[end].JobID == id {
			end++
		}
		j := m.jobLocked(id)
		j.mu.Lock()
		j.entries = append(j.entries, es[start:end]...)
		if over := len(j.entries) - m.cfg.BufferPerJob; over > 0 {
			j.floor = j.entries[over-1].Seq
			clear(j.entries[:over])
			j.entries = j.entries[over:]
			j.first += uint64(over)
		}
		j.active = m.now()
		for v := range j.viewers {
			select {
			case v.wake <- struct{}{}:
			default:
			}
		}
		j.mu.Unlock()
		start = end
	}
}

// jobLocked returns id's buffer, making it if need be. m.mu is held.
func (m *Monitor) jobLocked(id string) *jobLog {
	if j := m.jobs[id]; j != nil {
		return j
	}
	if len(m.jobs) >= m.cfg.MaxJobs {
		m.evictLocked(true)
	}
	j := &jobLog{floor: m.lastSeq.Load(), viewers: map[*viewer]struct{}{}, active: m.now()}
	m.jobs[id] = j
	m.met.jobs.Set(float64(len(m.jobs)))
	return j
}

// evictLocked drops the buffers of jobs idle longer than JobIdle without
// viewers; with one, at least the longest idle such job. m.mu is held.
func (m *Monitor) evictLocked(one bool) {
	cutoff := m.now().Add((-m.cfg.JobIdle).D())
	var oldest string
	var oldestT time.Time
	for id, j := range m.jobs {
		j.mu.RLock()
		idle, t := len(j.viewers) == 0, j.active
		j.mu.RUnlock()
		if !idle {
			continue
		}
		if t.Before(cutoff) {
			delete(m.jobs, id)
			one = false
			continue
		}
		if oldest == "" || t.Before(oldestT) {
			oldest, oldestT = id, t
		}
	}
	if one && oldest != "" {
		delete(m.jobs, oldest)
	}
	m.met.jobs.Set(float64(len(m.jobs)))
}

// subscribe registers a viewer of job id, making its buffer if need be.
func (m *Monitor) subscribe(id string) (*jobLog, *viewer) {
	v := &viewer{wake: make(chan struct{}, 1)}
	m.mu.Lock()
	j := m.jobLocked(id)
	j.mu.Lock()
	j.viewers[v] = struct{}{}
	j.mu.Unlock()
	m.mu.Unlock()
	m.met.viewers.Inc()
	return j, v
}

func (m *Monitor) unsubscribe(j *jobLog, v *viewer) {
	j.mu.Lock()
	delete(j.viewers, v)
	j.active = m.now()
	j.mu.Unlock()
	m.met.viewers.Dec()
}

// Run forwards spooled records to Loki (when configured) and drops idle
// job buffers, until ctx ends.
func (m *Monitor) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	if m.loki != nil {
		wg.Go(func() { m.forward(ctx) })
	}
	t := time.NewTicker(time.Minute)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			wg.Wait()
			return nil
		case <-t.C:
			m.mu.Lock()
			m.evictLocked(false)
			m.mu.Unlock()
		}
	}
}
