package monitor

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/golang/snappy"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/cosmicac/cosmicac/internal/backoff"
	"github.com/cosmicac/cosmicac/internal/joblog"
)

// Loki HTTP API followed (Loki 3.x, docs "Loki HTTP API"):
//
//   - POST /loki/api/v1/push, either Content-Type application/x-protobuf
//     with a snappy (block format) compressed logproto.PushRequest, or
//     application/json ({"streams":[{"stream":{labels},"values":[["ns",
//     "line",{structured metadata}]]}]}), gzip-compressed here. The
//     protobuf message is encoded by hand (protowire), following
//     pkg/push/push.proto of github.com/grafana/loki/pkg/push:
//     PushRequest{1: repeated StreamAdapter streams}
//     StreamAdapter{1: string labels, 2: repeated EntryAdapter entries}
//     EntryAdapter{1: google.protobuf.Timestamp timestamp, 2: string line,
//     3: repeated LabelPairAdapter structuredMetadata}
//     LabelPairAdapter{1: string name, 2: string value}
//     Timestamp{1: int64 seconds, 2: int32 nanos}
//   - GET /loki/api/v1/query_range?query=&start=&end=&limit=&direction=forward
//     (start inclusive, end exclusive, nanosecond epochs), sent with
//     X-Loki-Response-Encoding-Flags: categorize-labels so that each value
//     is ["ns","line",{"structuredMetadata":{...}}]; an answer without the
//     flag (structured metadata merged into the stream's labels) is read
//     too.
//
// Labels: job, team (when the record has one), source, replica. Structured
// metadata: stream, step, ok, time (the producer's RFC 3339 time). The
// entry's timestamp is the monitor's sequence number (see the package doc).

// lokiClient pushes to and queries one Loki.
type lokiClient struct {
	cfg LokiConfig
	hc  *http.Client
}

func newLokiClient(cfg LokiConfig) *lokiClient {
	return &lokiClient{cfg: cfg, hc: &http.Client{Timeout: cfg.Timeout.D()}}
}

func (l *lokiClient) auth(req *http.Request) {
	if l.cfg.TenantID != "" {
		req.Header.Set("X-Scope-OrgID", l.cfg.TenantID)
	}
	switch {
	case l.cfg.Username != "":
		req.SetBasicAuth(l.cfg.Username, l.cfg.Password)
	case l.cfg.BearerToken != "":
		req.Header.Set("Authorization", "Bearer "+l.cfg.BearerToken)
	}
}

// lokiStream is one stream of a push: its labels and entries.
type lokiStream struct {
	labels  string // {job="...", ...}
	lmap    map[string]string
	entries []Entry
}

// streamLabels are a record's Loki labels, sorted by name.
func streamLabels(r joblog.Record) [][2]string {
	ls := [][2]string{{"job", r.JobID}, {"replica", strconv.Itoa(r.Replica)}, {"source", r.Source}}
	if r.Team != "" {
		ls = append(ls, [2]string{"team", r.Team})
	}
	return ls
}

// metadata is a record's structured metadata.
func metadata(r joblog.Record) [][2]string {
	md := make([][2]string, 0, 4)
	if r.Stream != "" {
		md = append(md, [2]string{"stream", r.Stream})
	}
	if r.Step != "" {
		md = append(md, [2]string{"step", r.Step})
	}
	if r.OK != nil {
		md = append(md, [2]string{"ok", strconv.FormatBool(*r.OK)})
	}
	if !r.Time.IsZero() {
		md = append(md, [2]string{"time", r.Time.UTC().Format(time.RFC3339Nano)})
	}
	return md
}

func labelString(ls [][2]string) string {
	var b strings.Builder
	b.WriteByte('{')
	for i, l := range ls {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(l[0])
		b.WriteString(`="`)
		for _, c := range l[1] {
			switch c {
			case '\\':
				b.WriteString(`\\`)
			case '"':
				b.WriteString(`\"`)
			case '\n':
				b.WriteString(`\n`)
			default:
				b.WriteRune(c)
			}
		}
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}

// groupStreams groups entries by their labels, keeping order.
func groupStreams(es []Entry) []*lokiStream {
	var out []*lokiStream
	idx := map[string]*lokiStream{}
	for _, e := range es {
		ls := streamLabels(e.Record)
		key := labelString(ls)
		s := idx[key]
		if s == nil {
			lm := make(map[string]string, len(ls))
			for _, l := range ls {
				lm[l[0]] = l[1]
			}
			s = &lokiStream{labels: key, lmap: lm}
			idx[key] = s
			out = append(out, s)
		}
		s.entries = append(s.entries, e)
	}
	return out
}

// EncodePushProto encodes es as a logproto.PushRequest (uncompressed).
func EncodePushProto(es []Entry) []byte {
	var b []byte
	for _, s := range groupStreams(es) {
		var sb []byte
		sb = protowire.AppendTag(sb, 1, protowire.BytesType)
		sb = protowire.AppendString(sb, s.labels)
		for _, e := range s.entries {
			var eb []byte
			var ts []byte
			sec, nsec := int64(e.Seq/1e9), int64(e.Seq%1e9)
			if sec != 0 {
				ts = protowire.AppendTag(ts, 1, protowire.VarintType)
				ts = protowire.AppendVarint(ts, uint64(sec))
			}
			if nsec != 0 {
				ts = protowire.AppendTag(ts, 2, protowire.VarintType)
				ts = protowire.AppendVarint(ts, uint64(nsec))
			}
			eb = protowire.AppendTag(eb, 1, protowire.BytesType)
			eb = protowire.AppendBytes(eb, ts)
			eb = protowire.AppendTag(eb, 2, protowire.BytesType)
			eb = protowire.AppendString(eb, e.Line)
			for _, md := range metadata(e.Record) {
				var pb []byte
				pb = protowire.AppendTag(pb, 1, protowire.BytesType)
				pb = protowire.AppendString(pb, md[0])
				pb = protowire.AppendTag(pb, 2, protowire.BytesType)
				pb = protowire.AppendString(pb, md[1])
				eb = protowire.AppendTag(eb, 3, protowire.BytesType)
				eb = protowire.AppendBytes(eb, pb)
			}
			sb = protowire.AppendTag(sb, 2, protowire.BytesType)
			sb = protowire.AppendBytes(sb, eb)
		}
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendBytes(b, sb)
	}
	return b
}

// EncodePushJSON encodes es as Loki's JSON push body (uncompressed).
func EncodePushJSON(es []Entry) ([]byte, error) {
	type stream struct {
		Stream map[string]string `json:"stream"`
		Values [][]any           `json:"values"`
	}
	var body struct {
		Streams []stream `json:"streams"`
	}
	for _, s := range groupStreams(es) {
		st := stream{Stream: s.lmap}
		for _, e := range s.entries {
			v := []any{strconv.FormatUint(e.Seq, 10), e.Line}
			if md := metadata(e.Record); len(md) > 0 {
				m := make(map[string]string, len(md))
				for _, kv := range md {
					m[kv[0]] = kv[1]
				}
				v = append(v, m)
			}
			st.Values = append(st.Values, v)
		}
		body.Streams = append(body.Streams, st)
	}
	return json.Marshal(body)
}

// pushBody is the HTTP body and content headers of one push.
type pushBody struct {
	data            []byte
	contentType     string
	contentEncoding string
	raw             int // bytes before compression
}

func (l *lokiClient) encode(es []Entry) (pushBody, error) {
	if l.cfg.Format == "json" {
		raw, err := EncodePushJSON(es)
		if err != nil {
			return pushBody{}, fmt.Errorf("encode loki push: %w", err)
		}
		var buf bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
		zw.Write(raw)
		zw.Close()
		return pushBody{data: buf.Bytes(), contentType: "application/json", contentEncoding: "gzip", raw: len(raw)}, nil
	}
	raw := EncodePushProto(es)
	return pushBody{data: snappy.Encode(nil, raw), contentType: "application/x-protobuf", raw: len(raw)}, nil
}

// pushError is a failed push: its status (0: no answer), how long Loki
// asked us to wait, and the start of its answer.
type pushError struct {
	status     int
	retryAfter time.Duration
	msg        string
}

func (e *pushError) Error() string {
	msg := e.msg
	if len(msg) > 512 {
		msg = msg[:512] + "…"
	}
	if e.status == 0 {
		return "push to loki: " + msg
	}
	return fmt.Sprintf("push to loki: %d: %s", e.status, msg)
}

// refused: Loki refused some entries of the push, and stored the rest (a
// 400: the distributor validates each entry and sends the valid ones on,
// pkg/distributor/distributor.go Push; the ingester stores what is not too
// far behind, pkg/ingester/stream.go), or the body is too large (413).
// Every other answer (no answer, 429, 5xx, and 4xx such as 401 that no
// record causes) is retried with backoff.
func (e *pushError) refused() bool {
	return e.status == http.StatusBadRequest || e.status == http.StatusRequestEntityTooLarge || e.status == http.StatusUnprocessableEntity
}

// push sends one body.
func (l *lokiClient) push(ctx context.Context, b pushBody) *pushError {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(l.cfg.URL, "/")+"/loki/api/v1/push", bytes.NewReader(b.data))
	if err != nil {
		return &pushError{msg: err.Error()}
	}
	req.Header.Set("Content-Type", b.contentType)
	if b.contentEncoding != "" {
		req.Header.Set("Content-Encoding", b.contentEncoding)
	}
	req.Header.Set("User-Agent", "cosmicac-wrk-monitor")
	l.auth(req)
	resp, err := l.hc.Do(req)
	if err != nil {
		return &pushError{msg: err.Error()}
	}
	defer resp.Body.Close()
	// A 400's body lists the refused entries (up to the ingester's
	// max_returned_errors per stream, and one distributor error per
	// entry): enough of it to count them.
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 256<<10))
	if resp.StatusCode/100 == 2 {
		return nil
	}
	pe := &pushError{status: resp.StatusCode, msg: strings.TrimSpace(string(msg))}
	if ra := resp.Header.Get("Retry-After"); ra != "" {
		if s, err := strconv.Atoi(ra); err == nil {
			pe.retryAfter = time.Duration(s) * time.Second
		} else if t, err := http.ParseTime(ra); err == nil {
			pe.retryAfter = time.Until(t)
		}
	}
	return pe
}

// Why a record is not in Loki: the reason label of
// cosmicac_monitor_loki_records_dropped_total.
const (
	dropTooOld       = "too_old"        // before now - reject_old_samples_max_age
	dropTooNew       = "too_new"        // after now + creation_grace_period
	dropLineTooLong  = "line_too_long"  // longer than max_line_size
	dropTooFarBehind = "too_far_behind" // over max_chunk_age/2 (1h) behind its stream's newest entry
	dropRefused      = "refused"        // any other refusal
	dropEncode       = "encode"
)

// Loki's words for each refusal of an entry (Loki 3.7:
// pkg/validation/validate.go, the distributor's; pkg/chunkenc/interface.go,
// the ingester's).
var refusalReasons = []struct{ phrase, reason string }{
	{"has timestamp too old", dropTooOld},          // GreaterThanMaxSampleAgeErrorMsg
	{"has timestamp too new", dropTooNew},          // TooFarInFutureErrorMsg
	{"bytes exceeded for stream", dropLineTooLong}, // LineTooLongErrorMsg
	{"entry too far behind", dropTooFarBehind},     // errTooFarBehind
	{"entry out of order", dropTooFarBehind},       // ErrOutOfOrder (ordered writes)
}

var (
	totalIgnored = regexp.MustCompile(`total ignored: (\d+) out of`)
	errorsLike   = regexp.MustCompile(`(?:^|; )(\d+) errors like: `)
)

// refusal reads a refused push's answer: the one reason it names
// (dropRefused if none or several) and how many entries it says were
// refused (0: it does not say). The ingester ends its message with "user
// 'X', total ignored: N out of M for stream: …" (pkg/ingester/stream.go
// errorForFailedEntries); the distributor joins one message per refused
// entry, grouped as "N errors like: …" when there is more than one
// (pkg/util/errors.go GroupedErrors).
func refusal(msg string) (string, int) {
	reason := ""
	for _, r := range refusalReasons {
		if strings.Contains(msg, r.phrase) {
			if reason != "" && reason != r.reason {
				return dropRefused, 0
			}
			reason = r.reason
		}
	}
	if reason == "" {
		return dropRefused, 0
	}
	sum := func(re *regexp.Regexp) int {
		n := 0
		for _, m := range re.FindAllStringSubmatch(msg, -1) {
			k, _ := strconv.Atoi(m[1])
			n += k
		}
		return n
	}
	if n := sum(totalIgnored); n > 0 {
		return reason, n
	}
	if n := sum(errorsLike); n > 0 {
		return reason, n
	}
	return reason, 1
}

// forward pushes the spool to Loki until ctx ends. It is a pipeline of
// two: one goroutine reads the next batch from the spool, decodes, screens
// and encodes it while the other pushes the batch before (and commits the
// cursor after each push, in order). Reading and encoding cost about as
// much as the push itself (docs/benchmarks.md), so each now hides the
// other.
func (m *Monitor) forward(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	ready := make(chan preparedBatch, 1)
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(ready)
		m.prepare(ctx, ready)
	})
	defer func() {
		cancel()
		for range ready { // let prepare see ctx's end
		}
		wg.Wait()
	}()
	for p := range ready {
		if len(p.batch) > 0 && !m.pushNarrowing(ctx, p.batch, p.body) {
			return
		}
		if err := m.spool.commit(p.next); err != nil {
			m.log.Error("commit loki spool", "err", err)
		}
		m.spool.release(p.release)
		m.pushed.Store(p.last)
		m.met.spoolBytes.Set(float64(m.spool.size()))
	}
}

// preparedBatch is a batch read from the spool, screened and encoded: the
// records to push (none: all dropped), the body, the spool position after
// the batch, its last number, and the bytes its jobs' shares of the spool
// get back once it is committed.
type preparedBatch struct {
	batch   []Entry
	body    pushBody
	next    spoolPos
	last    uint64
	release map[string]int64
}

// prepare reads the spool from the cursor on, sending each batch, ready to
// push, to out, until ctx ends.
func (m *Monitor) prepare(ctx context.Context, out chan<- preparedBatch) {
	cfg := m.cfg.Loki
	pos := m.spool.position()
	for ctx.Err() == nil {
		es, next, err := m.spool.read(pos, cfg.BatchRecords, cfg.BatchBytes)
		if err != nil {
			m.log.Error("read loki spool", "err", err)
			backoff.Sleep(ctx, time.Second)
			continue
		}
		if len(es) == 0 {
			select {
			case <-ctx.Done():
				return
			case <-m.spool.notify:
			}
			continue
		}
		if len(es) < cfg.BatchRecords && cfg.BatchWait > 0 {
			// Linger for a fuller batch, then read again from pos.
			if !backoff.Sleep(ctx, cfg.BatchWait.D()) {
				return
			}
			if es, next, err = m.spool.read(pos, cfg.BatchRecords, cfg.BatchBytes); err != nil {
				continue
			}
		}
		p := preparedBatch{batch: make([]Entry, len(es)), next: next, last: es[len(es)-1].Seq, release: map[string]int64{}}
		for i, e := range es {
			p.batch[i] = e.Entry
			if e.Seq > m.spool.maxSeq { // appended since open: counted in its job's share
				p.release[e.JobID] += int64(e.size)
			}
		}
		p.batch = m.screen(p.batch)
		if len(p.batch) > 0 {
			if p.body, err = m.loki.encode(p.batch); err != nil {
				m.dropped(dropEncode, p.batch, err.Error())
				p.batch = nil
			}
		}
		select {
		case out <- p:
		case <-ctx.Done():
			return
		}
		pos = next
	}
}

// screen drops the records Loki's limits exclude (older than
// reject_old_samples_max_age, beyond creation_grace_period, a line over
// max_line_size: pkg/distributor/validator.go ValidateEntry), which Loki
// would refuse on every try.
func (m *Monitor) screen(batch []Entry) []Entry {
	lim := m.cfg.Loki.Limits
	now := m.now()
	oldest, newest := uint64(0), uint64(math.MaxInt64)
	if lim.RejectOldSamplesMaxAge > 0 {
		oldest = unixNano(now.Add(-lim.RejectOldSamplesMaxAge.D()))
	}
	if lim.CreationGracePeriod > 0 {
		newest = unixNano(now.Add(lim.CreationGracePeriod.D()))
	}
	var tooOld, tooNew, tooLong []Entry
	keep := batch[:0:0]
	for _, e := range batch {
		switch {
		case e.Seq < oldest:
			tooOld = append(tooOld, e)
		case e.Seq > newest:
			tooNew = append(tooNew, e)
		case lim.MaxLineSize > 0 && len(e.Line) > lim.MaxLineSize:
			tooLong = append(tooLong, e)
		default:
			keep = append(keep, e)
		}
	}
	if len(keep) == len(batch) {
		return batch
	}
	m.dropped(dropTooOld, tooOld, "older than Loki's reject_old_samples_max_age ("+lim.RejectOldSamplesMaxAge.String()+")")
	m.dropped(dropTooNew, tooNew, "further in the future than Loki's creation_grace_period ("+lim.CreationGracePeriod.String()+")")
	m.dropped(dropLineTooLong, tooLong, fmt.Sprintf("a line longer than Loki's max_line_size (%d bytes)", lim.MaxLineSize))
	return keep
}

// pushNarrowing pushes part (encoded as body). When Loki refuses some of
// its entries (a 400, having stored the rest), it narrows: unless Loki's
// answer says every entry was refused, it pushes each half again (Loki
// keeps one copy of an entry it has already: same stream, timestamp and
// line), down to single records, so that exactly the refused records are
// dropped and counted. It returns false when ctx ends first.
func (m *Monitor) pushNarrowing(ctx context.Context, part []Entry, body pushBody) bool {
	pe := m.pushUntilAnswered(ctx, len(part), body)
	if pe == nil {
		return true
	}
	if ctx.Err() != nil {
		return false
	}
	if pe.status == http.StatusTooManyRequests {
		// Rate limited again and again: perhaps more than Loki's burst,
		// which it refuses every time (see pushUntilAnswered). Halves,
		// dropping nothing.
		m.met.lokiSplits.Inc()
	} else if reason, n := refusal(pe.msg); len(part) == 1 || (reason != dropRefused && n >= len(part)) {
		m.dropped(reason, part, pe.Error())
		return true
	}
	half := len(part) / 2
	for _, p := range [][]Entry{part[:half], part[half:]} {
		b, err := m.loki.encode(p)
		if err != nil {
			m.dropped(dropEncode, p, err.Error())
			continue
		}
		if !m.pushNarrowing(ctx, p, b) {
			return false
		}
	}
	return true
}

// rateLimitedSplitAfter is how many 429s in a row a push of more than one
// record gets before it is pushed as two halves.
const rateLimitedSplitAfter = 3

// pushUntilAnswered pushes body (of n records) until Loki takes it (nil)
// or refuses entries of it (a refusal), retrying everything else with
// exponential backoff and jitter: no answer, 429 (which Loki sends
// without Retry-After: pkg/util/server/error.go WriteError), 5xx, and
// 4xx that no record causes (401, 403, 404: the monitor's configuration,
// logged as errors; the records wait in the spool). It returns ctx's end
// as a pushError too.
//
// After rateLimitedSplitAfter 429s in a row it returns the 429 (for more
// than one record): Loki's token buckets refuse a push larger than their
// burst on every try, whatever the wait (the distributor's
// ingestion_burst_size_mb, all or nothing: pkg/distributor/distributor.go
// PushWithResolver, ingestionRateLimiter.AllowN; the ingester's
// per_stream_rate_limit_burst, a stream's entries of the push together
// with shard_streams enabled, Loki's default, else entry by entry,
// charging a retry again for the entries it already has:
// pkg/ingester/stream.go validateEntries), so the caller pushes halves.
// Under a rate limit that a wait would end, halves cost only requests:
// the buckets count bytes. A single record is retried for ever.
func (m *Monitor) pushUntilAnswered(ctx context.Context, n int, body pushBody) *pushError {
	cfg := m.cfg.Loki
	retry := backoff.Backoff{Min: cfg.MinBackoff.D(), Max: cfg.MaxBackoff.D(), Jitter: true}
	limited := 0
	for {
		start := time.Now()
		pe := m.loki.push(ctx, body)
		m.met.lokiLatency.Observe(time.Since(start).Seconds())
		if pe == nil {
			m.met.lokiRecords.Add(float64(n))
			m.met.lokiBytes.Add(float64(len(body.data)))
			return nil
		}
		if ctx.Err() != nil {
			return &pushError{msg: ctx.Err().Error()}
		}
		code := "error"
		if pe.status != 0 {
			code = strconv.Itoa(pe.status)
		}
		m.met.lokiErrors.WithLabelValues(code).Inc()
		if pe.refused() {
			return pe
		}
		if pe.status != http.StatusTooManyRequests {
			limited = 0
		} else if limited++; n > 1 && limited >= rateLimitedSplitAfter {
			m.log.Warn("push to loki rate limited; pushing halves", "err", pe, "records", n)
			return pe
		}
		wait := retry.Next()
		if pe.retryAfter > wait {
			wait = min(pe.retryAfter, 5*time.Minute)
		}
		if pe.status/100 == 4 && pe.status != http.StatusTooManyRequests && pe.status != http.StatusRequestTimeout {
			m.log.Error("push to loki failed; retrying", "err", pe, "wait", wait, "records", n)
		} else {
			m.log.Warn("push to loki failed; retrying", "err", pe, "wait", wait, "records", n)
		}
		if !backoff.Sleep(ctx, wait) {
			return &pushError{msg: ctx.Err().Error()}
		}
	}
}

// StepLokiDropped is the step of the system record that tells a job's
// readers that records of it are not in Loki (history read from Loki
// misses them; live viewers had them).
const StepLokiDropped = "loki_dropped"

// dropped counts and reports records that will not be in Loki: a metric
// by reason, a warning with the counts, and for each job a system record
// saying how many of its records Loki will not have and why (itself
// pushed to Loki, at the present time, so that history shows the hole).
func (m *Monitor) dropped(reason string, es []Entry, why string) {
	if len(es) == 0 {
		return
	}
	m.met.lokiDropped.WithLabelValues(reason).Add(float64(len(es)))
	type job struct {
		team string
		n    int
	}
	jobs := map[string]*job{}
	var order []string
	for _, e := range es {
		if e.Source == joblog.SourceSystem && e.Step == StepLokiDropped {
			continue // a notice is not noticed again
		}
		j := jobs[e.JobID]
		if j == nil {
			j = &job{team: e.Team}
			jobs[e.JobID] = j
			order = append(order, e.JobID)
		}
		j.n++
	}
	m.log.Warn("records not stored in loki; dropped", "reason", reason, "records", len(es), "jobs", len(order),
		"first", time.Unix(0, int64(es[0].Seq)).UTC(), "last", time.Unix(0, int64(es[len(es)-1].Seq)).UTC(), "why", why)
	if len(order) == 0 {
		return
	}
	ok := false
	notes := make([]joblog.Record, 0, len(order))
	for _, id := range order {
		notes = append(notes, joblog.Record{Time: m.now(), JobID: id, Team: jobs[id].team, Source: joblog.SourceSystem,
			Stream: "wrk-monitor", Step: StepLokiDropped, OK: &ok,
			Line: fmt.Sprintf("%d log records not stored in Loki (%s): %s; history read from Loki misses them", jobs[id].n, reason, dropWhy(reason))})
	}
	if _, err := m.append(notes, true); err != nil {
		m.log.Warn("note records not stored in loki", "err", err)
	}
}

func dropWhy(reason string) string {
	switch reason {
	case dropTooOld:
		return "older than Loki takes (reject_old_samples_max_age)"
	case dropTooNew:
		return "too far in the future for Loki (creation_grace_period)"
	case dropLineTooLong:
		return "a line longer than Loki takes (max_line_size)"
	case dropTooFarBehind:
		return "more than Loki's out-of-order window behind the stream's newest entry"
	case dropEncode:
		return "could not be encoded"
	}
	return "Loki refused them"
}

// Filter selects records of a job.
type Filter struct {
	Replica *int   // nil: every replica
	Source  string // "": both
}

func (f Filter) match(r *joblog.Record) bool {
	return (f.Replica == nil || *f.Replica == r.Replica) && (f.Source == "" || f.Source == r.Source)
}

// logQL is the stream selector of a job's records under f.
func logQL(job string, f Filter) string {
	ls := [][2]string{{"job", job}}
	if f.Replica != nil {
		ls = append(ls, [2]string{"replica", strconv.Itoa(*f.Replica)})
	}
	if f.Source != "" {
		ls = append(ls, [2]string{"source", f.Source})
	}
	return labelString(ls)
}

// queryRange calls fn with each record of job under f numbered in
// [from, to), oldest first. It reads in windows Loki accepts: at most
// Limits.MaxQueryLength each (Loki refuses end - start above its
// max_query_length, 721h: pkg/querier/limits/validation.go
// ValidateQueryTimeRangeLimits), paged by min(QueryLimit,
// Limits.MaxEntriesLimitPerQuery) (Loki refuses a limit above
// max_entries_limit_per_query, 5000: pkg/querier/http.go).
func (l *lokiClient) queryRange(ctx context.Context, job string, f Filter, from, to uint64, fn func(Entry) error) error {
	span := uint64(l.cfg.Limits.MaxQueryLength.D())
	limit := min(l.cfg.QueryLimit, l.cfg.Limits.MaxEntriesLimitPerQuery)
	for from < to {
		end := to
		if end-from > span {
			end = from + span
		}
		if err := l.queryWindow(ctx, job, f, from, end, limit, fn); err != nil {
			return err
		}
		from = end
	}
	return nil
}

// queryWindow pages through query_range over [from, to).
func (l *lokiClient) queryWindow(ctx context.Context, job string, f Filter, from, to uint64, limit int, fn func(Entry) error) error {
	for from < to {
		q := url.Values{
			"query":     {logQL(job, f)},
			"start":     {strconv.FormatUint(from, 10)},
			"end":       {strconv.FormatUint(to, 10)},
			"limit":     {strconv.Itoa(limit)},
			"direction": {"forward"},
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(l.cfg.URL, "/")+"/loki/api/v1/query_range?"+q.Encode(), nil)
		if err != nil {
			return fmt.Errorf("query loki: %w", err)
		}
		req.Header.Set("X-Loki-Response-Encoding-Flags", "categorize-labels")
		l.auth(req)
		resp, err := l.hc.Do(req)
		if err != nil {
			return fmt.Errorf("query loki: %w", err)
		}
		es, err := decodeQueryRange(resp)
		resp.Body.Close()
		if err != nil {
			return err
		}
		for _, e := range es {
			if e.Seq < from || e.Seq >= to {
				continue
			}
			if err := fn(e); err != nil {
				return err
			}
		}
		if len(es) < limit {
			return nil
		}
		from = es[len(es)-1].Seq + 1
	}
	return nil
}

func decodeQueryRange(resp *http.Response) ([]Entry, error) {
	body, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return nil, fmt.Errorf("query loki: read answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("query loki: %d: %s", resp.StatusCode, strings.TrimSpace(string(body[:min(len(body), 300)])))
	}
	var qr struct {
		Status string `json:"status"`
		Data   struct {
			ResultType string `json:"resultType"`
			Result     []struct {
				Stream map[string]string   `json:"stream"`
				Values [][]json.RawMessage `json:"values"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &qr); err != nil {
		return nil, fmt.Errorf("query loki: decode answer: %w", err)
	}
	if qr.Status != "success" || qr.Data.ResultType != "streams" {
		return nil, fmt.Errorf("query loki: answer status %q, result type %q", qr.Status, qr.Data.ResultType)
	}
	var out []Entry
	for _, s := range qr.Data.Result {
		for _, v := range s.Values {
			if len(v) < 2 {
				return nil, errors.New("query loki: a value without timestamp and line")
			}
			var ts, line string
			if json.Unmarshal(v[0], &ts) != nil || json.Unmarshal(v[1], &line) != nil {
				return nil, errors.New("query loki: bad value")
			}
			seq, err := strconv.ParseUint(ts, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("query loki: timestamp %q: %w", ts, err)
			}
			kv := s.Stream // without categorize-labels metadata is merged here
			if len(v) > 2 {
				var cat struct {
					StructuredMetadata map[string]string `json:"structuredMetadata"`
				}
				if json.Unmarshal(v[2], &cat) == nil && len(cat.StructuredMetadata) > 0 {
					kv = make(map[string]string, len(s.Stream)+len(cat.StructuredMetadata))
					for k, x := range s.Stream {
						kv[k] = x
					}
					for k, x := range cat.StructuredMetadata {
						kv[k] = x
					}
				}
			}
			out = append(out, Entry{Seq: seq, Record: recordFromLoki(seq, line, kv)})
		}
	}
	slices.SortFunc(out, func(a, b Entry) int {
		switch {
		case a.Seq < b.Seq:
			return -1
		case a.Seq > b.Seq:
			return 1
		}
		return 0
	})
	return out, nil
}

func recordFromLoki(seq uint64, line string, kv map[string]string) joblog.Record {
	r := joblog.Record{JobID: kv["job"], Team: kv["team"], Source: kv["source"], Stream: kv["stream"], Step: kv["step"], Line: line}
	r.Replica, _ = strconv.Atoi(kv["replica"])
	if ok, err := strconv.ParseBool(kv["ok"]); err == nil {
		r.OK = &ok
	}
	if t, err := time.Parse(time.RFC3339Nano, kv["time"]); err == nil {
		r.Time = t
	} else {
		r.Time = time.Unix(0, int64(seq)).UTC()
	}
	return r
}
