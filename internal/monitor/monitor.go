package monitor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/cosmicac/cosmicac/internal/apiv1"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/httpserve"
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
	size  int64 // what it holds in memory, about (entrySize)
}

// entryOverhead is what an entry holds besides its event and its record's
// strings: the structs, the pointers to them and the strings' headers.
const entryOverhead = 256

// entrySize is what e holds in memory, about.
func entrySize(e *entry) int64 {
	r := &e.Record
	return int64(len(e.frame) + len(r.Line) + len(r.JobID) + len(r.Team) + len(r.Stream) + len(r.Step) + entryOverhead)
}

// Monitor is wrk-monitor. Serve registers its fabric method, Handler serves
// the HTTP API, Run forwards to Loki.
type Monitor struct {
	cfg     Config
	log     *slog.Logger
	viewers Authorizer
	met     *metrics
	now     func() time.Time

	// mu orders appends: a batch gets its numbers, is spooled and reaches
	// the buffers under it, so every job's buffer is in sequence order. It
	// also guards jobs, held and shareDropped.
	mu      sync.Mutex
	lastSeq atomic.Uint64
	jobs    map[string]*jobLog
	held    int64 // bytes of every buffer's entries
	// shareDropped: records of each job refused for its share of the
	// spool, not yet noted in its log.
	shareDropped map[string]*droppedRecords

	followMu sync.Mutex
	follows  map[string]int // open follows by user (viewerKey)

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
	bytes   int64  // of entries; written under both mu and the monitor's, read under either
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

// Deps are what a monitor runs with, from its assembly (the standalone
// wrk-monitor command, or `cosmicac up`).
type Deps struct {
	// Fabric is the monitor's node, whose trust policy admits the
	// producers (workers and agents): joblog.append is served there (nil:
	// records come only through Append, or a later Serve).
	Fabric fabric.Registrar
	// Producers says which rack each job is placed on, so that each
	// producer writes only what is its own (confine; the keyring the
	// assembly follows from the ork). Nil refuses every worker's record.
	Producers Placements
	// Viewers authorizes each viewer of the HTTP API (Handler); nil
	// refuses every viewer.
	Viewers Authorizer
	Log     *slog.Logger
}

// New returns a monitor of cfg on d. With cfg.Loki.URL it opens (and
// replays) the spool in cfg.DataDir/spool.
func New(cfg Config, d Deps) (*Monitor, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("monitor config: %w", err)
	}
	cfg.setDefaults()
	log := d.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	viewers := d.Viewers
	if viewers == nil {
		viewers = AuthorizerFunc(func(*http.Request, string) error {
			return &AuthError{Status: http.StatusForbidden, Code: apiv1.CodeForbidden, Message: "this monitor admits no viewers"}
		})
	}
	m := &Monitor{cfg: cfg, log: log, viewers: viewers, now: time.Now, jobs: map[string]*jobLog{}, quit: make(chan struct{}),
		shareDropped: map[string]*droppedRecords{}, follows: map[string]int{}}
	m.met = newMetrics(m)
	if cfg.Loki.URL != "" {
		sp, err := openSpool(filepath.Join(cfg.DataDir, "spool"), cfg.Loki.SpoolBytes, min(cfg.Loki.SpoolBytesPerJob, cfg.Loki.SpoolBytes), cfg.Loki.SegmentBytes)
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
	if d.Fabric != nil {
		m.Serve(d.Fabric, d.Producers)
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

// Serve registers joblog.Append on r (the monitor's fabric node,
// whose trust policy admits the producers: workers and agents), as New
// does on Deps.Fabric; it is for a node made after the monitor. Each
// caller writes only what is its own (confine): where says which rack a
// job is placed on; nil refuses every worker's record.
func (m *Monitor) Serve(r fabric.Registrar, where Placements) {
	joblog.Append.Handle(r, func(ctx context.Context, _ fabric.PublicKey, p joblog.AppendParams) (joblog.AppendReply, error) {
		recs, refused := confine(ctx, p.Records, where)
		if refused > 0 {
			m.met.rejected.WithLabelValues("scope").Add(float64(refused))
		}
		rep, err := m.Append(ctx, recs)
		rep.Refused += refused
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

// maxNameBytes bounds a record's job, team, stream and step: names, which
// no producer writes long.
const maxNameBytes = 256

// Append takes a batch of records. Once it returns nil the records are in
// the buffers (and viewers have been woken) and, with Loki, on disk. A
// line longer than MaxLineBytes is cut (truncateLine). With Loki, the
// records of a job that would take it past its share of the spool are
// refused (the reply's Refused) and the rest taken; the job's next records
// taken come after a note of how many were refused.
func (m *Monitor) Append(_ context.Context, recs []joblog.Record) (joblog.AppendReply, error) {
	return m.append(recs, false)
}

// append is Append; notes (the monitor's own records about a job's log)
// are not held to the job's share of the spool.
func (m *Monitor) append(recs []joblog.Record, notes bool) (joblog.AppendReply, error) {
	if len(recs) == 0 {
		return joblog.AppendReply{LastSeq: m.lastSeq.Load()}, nil
	}
	cut := 0
	for i, r := range recs {
		var bad string
		switch {
		case r.JobID == "":
			bad = "no job"
		case r.Source != joblog.SourceSystem && r.Source != joblog.SourceApplication:
			bad = fmt.Sprintf("source %q: want system or application", r.Source)
		case max(len(r.JobID), len(r.Team), len(r.Stream), len(r.Step)) > maxNameBytes:
			bad = fmt.Sprintf("job, team, stream or step longer than %d bytes", maxNameBytes)
		}
		if bad != "" {
			m.met.rejected.WithLabelValues("invalid").Add(float64(len(recs)))
			return joblog.AppendReply{}, fmt.Errorf("%w %d: %s", errBadRecord, i, bad)
		}
		if len(r.Line) > m.cfg.MaxLineBytes {
			if cut == 0 {
				recs = slices.Clone(recs) // the caller's stay as they are
			}
			recs[i].Line = truncateLine(r.Line, m.cfg.MaxLineBytes)
			cut++
		}
	}
	if cut > 0 {
		m.met.truncated.Add(float64(cut))
	}
	bodies, err := encodeRecords(recs)
	if err != nil {
		return joblog.AppendReply{}, err
	}
	m.mu.Lock()
	var refused map[string]*droppedRecords
	var noted []string
	if m.spool != nil && !notes {
		recs, bodies, refused, noted = m.fitShares(recs, bodies)
	}
	accepted := len(recs) - len(noted)
	nRefused := 0
	for _, d := range refused {
		nRefused += d.n
	}
	if nRefused > 0 {
		m.met.rejected.WithLabelValues("spool_share").Add(float64(nRefused))
	}
	if len(recs) == 0 {
		m.addShareDropped(refused)
		m.mu.Unlock()
		return joblog.AppendReply{Refused: nRefused, LastSeq: m.lastSeq.Load()}, nil
	}
	es := make([]*entry, len(recs))
	last := m.lastSeq.Load()
	now := uint64(m.now().UnixNano())
	for i := range recs {
		last = max(last+1, now)
		es[i] = &entry{Entry: Entry{Seq: last, Record: recs[i]}, frame: sseFrame(last, bodies[i])}
		es[i].size = entrySize(es[i])
	}
	var gen uint64
	if m.spool != nil {
		if gen, err = m.spool.append(es, bodies); err != nil {
			m.mu.Unlock()
			m.met.rejected.WithLabelValues("spool").Add(float64(accepted))
			return joblog.AppendReply{}, err
		}
	}
	m.addShareDropped(refused)
	for _, id := range noted {
		delete(m.shareDropped, id)
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
	return joblog.AppendReply{Accepted: accepted, Refused: nRefused, LastSeq: last}, nil
}

// encodeRecords returns each record as JSON.
func encodeRecords(recs []joblog.Record) ([][]byte, error) {
	bodies := make([][]byte, len(recs))
	for i, r := range recs {
		b, err := json.Marshal(r)
		if err != nil {
			return nil, fmt.Errorf("encode record: %w", err)
		}
		bodies[i] = b
	}
	return bodies, nil
}

// truncateLine cuts line to at most limit bytes: its start, cut at a UTF-8
// character boundary, and a marker saying how long it was (so a reader
// sees that the line goes on, and the cut line is new memory, not a
// slice of the long one).
func truncateLine(line string, limit int) string {
	marker := fmt.Sprintf(" [… line truncated by wrk-monitor: %d bytes, at most %d kept]", len(line), limit)
	n := limit - len(marker)
	for n > 0 && !utf8.RuneStart(line[n]) {
		n--
	}
	return line[:n] + marker
}

// droppedRecords counts records of one job refused for its share.
type droppedRecords struct {
	team  string
	n     int
	first time.Time
}

// fitShares keeps the records of recs (bodies: their JSON) that fit their
// jobs' shares of the spool, in order (once a job's record does not fit,
// neither do its next ones in the batch). Before the first kept record of
// a job that had records refused earlier it puts a note saying how many
// (noted: those jobs). refused counts this batch's refusals by job. m.mu
// is held; nothing is changed but the slices returned.
func (m *Monitor) fitShares(recs []joblog.Record, bodies [][]byte) (keptRecs []joblog.Record, keptBodies [][]byte, refused map[string]*droppedRecords, noted []string) {
	over := m.spool.overShare(recs, bodies)
	if !slices.Contains(over, true) && len(m.shareDropped) == 0 {
		return recs, bodies, nil, nil
	}
	seen := map[string]bool{}
	for i, r := range recs {
		if over[i] {
			if refused == nil {
				refused = map[string]*droppedRecords{}
			}
			d := refused[r.JobID]
			if d == nil {
				d = &droppedRecords{team: r.Team, first: m.now()}
				refused[r.JobID] = d
			}
			d.n++
			continue
		}
		if !seen[r.JobID] {
			seen[r.JobID] = true
			if d := m.shareDropped[r.JobID]; d != nil {
				note := m.shareNote(r.JobID, d)
				if b, err := json.Marshal(note); err == nil {
					keptRecs, keptBodies = append(keptRecs, note), append(keptBodies, b)
					noted = append(noted, r.JobID)
				}
			}
		}
		keptRecs, keptBodies = append(keptRecs, r), append(keptBodies, bodies[i])
	}
	return keptRecs, keptBodies, refused, noted
}

// shareNote is the system record telling readers of job id that d of its
// records were refused.
func (m *Monitor) shareNote(id string, d *droppedRecords) joblog.Record {
	return joblog.Record{Time: m.now(), JobID: id, Team: d.team, Source: joblog.SourceSystem, Stream: "wrk-monitor",
		Step: joblog.StepLogDropped, OK: joblog.Bool(false),
		Line: fmt.Sprintf("%d log records dropped by wrk-monitor since %s: the job's share of the spool (loki.spoolBytesPerJob, %d bytes) was full while Loki was behind",
			d.n, d.first.UTC().Format(time.RFC3339), m.spool.jobShare)}
}

// addShareDropped adds refusals to those not yet noted. m.mu is held.
func (m *Monitor) addShareDropped(refused map[string]*droppedRecords) {
	for id, d := range refused {
		if have := m.shareDropped[id]; have != nil {
			have.n += d.n
			continue
		}
		m.shareDropped[id] = d
	}
}

// noteShareDrops notes, in each job's log, the records refused for its
// share of the spool that no record taken since has noted.
func (m *Monitor) noteShareDrops() {
	m.mu.Lock()
	var notes []joblog.Record
	taken := m.shareDropped
	for _, id := range slices.Sorted(maps.Keys(taken)) {
		notes = append(notes, m.shareNote(id, taken[id]))
	}
	m.shareDropped = map[string]*droppedRecords{}
	m.mu.Unlock()
	if len(notes) == 0 {
		return
	}
	if _, err := m.append(notes, true); err != nil {
		m.log.Warn("note records dropped for the spool share", "jobs", len(notes), "err", err)
		m.mu.Lock()
		m.addShareDropped(taken)
		m.mu.Unlock()
	}
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

// publish adds es (in sequence order) to their jobs' buffers, evicting
// the oldest records over the bounds (BufferPerJob, BufferBytesPerJob,
// then BufferBytes), and wakes the viewers. m.mu is held.
func (m *Monitor) publish(es []*entry) {
	perJob := min(m.cfg.BufferBytesPerJob, m.cfg.BufferBytes)
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
		for _, e := range es[start:end] {
			j.bytes += e.size
			m.held += e.size
		}
		if over := len(j.entries) - m.cfg.BufferPerJob; over > 0 {
			m.evictOldest(j, over, "records")
		}
		if over := j.over(perJob); over > 0 {
			m.evictOldest(j, over, "job_bytes")
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
	for m.held > m.cfg.BufferBytes {
		// The largest buffer gives up its oldest records: one job's
		// flood costs the others nothing while it is the largest.
		var big *jobLog
		for _, j := range m.jobs {
			if big == nil || j.bytes > big.bytes {
				big = j
			}
		}
		if big == nil || big.bytes == 0 {
			break
		}
		big.mu.Lock()
		m.evictOldest(big, max(big.over(big.bytes-(m.held-m.cfg.BufferBytes)), 1), "total_bytes")
		big.mu.Unlock()
	}
	m.met.bufBytes.Set(float64(m.held))
}

// over returns how many of j's oldest records to evict for j to hold at
// most limit bytes. j.mu is held.
func (j *jobLog) over(limit int64) int {
	n, b := 0, j.bytes
	for b > limit && n < len(j.entries) {
		b -= j.entries[n].size
		n++
	}
	return n
}

// evictOldest drops j's n oldest records, counting them under reason.
// m.mu and j.mu are held.
func (m *Monitor) evictOldest(j *jobLog, n int, reason string) {
	n = min(n, len(j.entries))
	if n == 0 {
		return
	}
	for _, e := range j.entries[:n] {
		j.bytes -= e.size
		m.held -= e.size
	}
	j.floor = j.entries[n-1].Seq
	clear(j.entries[:n])
	j.entries = j.entries[n:]
	j.first += uint64(n)
	m.met.evicted.WithLabelValues(reason).Add(float64(n))
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
			m.dropJobLocked(id)
			one = false
			continue
		}
		if oldest == "" || t.Before(oldestT) {
			oldest, oldestT = id, t
		}
	}
	if one && oldest != "" {
		m.dropJobLocked(oldest)
	}
	m.met.jobs.Set(float64(len(m.jobs)))
	m.met.bufBytes.Set(float64(m.held))
}

// dropJobLocked drops job id's buffer. m.mu is held.
func (m *Monitor) dropJobLocked(id string) {
	m.held -= m.jobs[id].bytes
	delete(m.jobs, id)
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

// Run forwards spooled records to Loki (when configured), drops idle job
// buffers and, when ln is not nil, serves the HTTP API (Handler) on ln,
// its clients bounded by cfg.HTTP, until ctx ends; it returns once all it
// started has stopped (the open log streams end at shutdown: viewers
// reconnect with Last-Event-ID). With ln nil the caller serves Handler
// itself. Close the monitor after.
func (m *Monitor) Run(ctx context.Context, ln net.Listener) error {
	g, ctx := errgroup.WithContext(ctx)
	if m.loki != nil {
		g.Go(func() error { m.forward(ctx); return nil })
	}
	if ln != nil {
		hs := httpserve.New(m.Handler(), m.cfg.HTTP, m.log)
		hs.RegisterOnShutdown(m.CloseStreams)
		m.log.Info("wrk-monitor listening", "addr", ln.Addr().String())
		g.Go(func() error {
			if err := httpserve.Run(ctx, hs, ln, 0); err != nil {
				return fmt.Errorf("wrk-monitor: %w", err)
			}
			return nil
		})
	}
	g.Go(func() error {
		t := time.NewTicker(time.Minute)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
				m.mu.Lock()
				m.evictLocked(false)
				m.mu.Unlock()
				m.noteShareDrops()
			}
		}
	})
	return g.Wait()
}
