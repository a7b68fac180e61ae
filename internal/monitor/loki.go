package monitor

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
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

// pushError is a failed push: its status (0: no answer) and how long Loki
// asked us to wait.
type pushError struct {
	status     int
	retryAfter time.Duration
	msg        string
}

func (e *pushError) Error() string {
	if e.status == 0 {
		return "push to loki: " + e.msg
	}
	return fmt.Sprintf("push to loki: %d: %s", e.status, e.msg)
}

// retryable: no answer, 429 or 5xx. Other 4xx mean Loki will never take
// the batch (too old, too long a line, bad labels).
func (e *pushError) retryable() bool {
	return e.status == 0 || e.status == http.StatusTooManyRequests || e.status >= 500
}

// push sends one body.
func (l *lokiClient) push(ctx context.Context, b pushBody) error {
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
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
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

// forward pushes the spool to Loki until ctx ends.
func (m *Monitor) forward(ctx context.Context) {
	cfg := m.cfg.Loki
	for ctx.Err() == nil {
		es, next, err := m.spool.read(cfg.BatchRecords, cfg.BatchBytes)
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
			// Linger for a fuller batch, then read again from the cursor.
			if !backoff.Sleep(ctx, cfg.BatchWait.D()) {
				return
			}
			if es, next, err = m.spool.read(cfg.BatchRecords, cfg.BatchBytes); err != nil {
				continue
			}
		}
		batch := make([]Entry, len(es))
		for i, e := range es {
			batch[i] = e.Entry
		}
		if !m.pushRetrying(ctx, batch) {
			return
		}
		if err := m.spool.commit(next); err != nil {
			m.log.Error("commit loki spool", "err", err)
		}
		m.pushed.Store(batch[len(batch)-1].Seq)
		m.met.spoolBytes.Set(float64(m.spool.size()))
	}
}

// pushRetrying pushes a batch until Loki takes it, refuses it for good, or
// ctx ends (false).
func (m *Monitor) pushRetrying(ctx context.Context, batch []Entry) bool {
	cfg := m.cfg.Loki
	body, err := m.loki.encode(batch)
	if err != nil {
		m.log.Error("encode loki push", "err", err)
		m.met.lokiDropped.Add(float64(len(batch)))
		return true
	}
	retry := backoff.Backoff{Min: cfg.MinBackoff.D(), Max: cfg.MaxBackoff.D(), Jitter: true}
	for {
		start := time.Now()
		err := m.loki.push(ctx, body)
		m.met.lokiLatency.Observe(time.Since(start).Seconds())
		if err == nil {
			m.met.lokiRecords.Add(float64(len(batch)))
			m.met.lokiBytes.Add(float64(len(body.data)))
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		var pe *pushError
		errors.As(err, &pe)
		code := "error"
		if pe != nil && pe.status != 0 {
			code = strconv.Itoa(pe.status)
		}
		m.met.lokiErrors.WithLabelValues(code).Inc()
		if pe != nil && !pe.retryable() {
			m.log.Error("loki refused a batch; dropping it", "records", len(batch), "err", err)
			m.met.lokiDropped.Add(float64(len(batch)))
			return true
		}
		wait := retry.Next()
		if pe != nil && pe.retryAfter > wait {
			wait = min(pe.retryAfter, 5*time.Minute)
		}
		m.log.Warn("push to loki failed; retrying", "err", err, "wait", wait)
		if !backoff.Sleep(ctx, wait) {
			return false
		}
	}
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
// [from, to), oldest first, paging through query_range.
func (l *lokiClient) queryRange(ctx context.Context, job string, f Filter, from, to uint64, fn func(Entry) error) error {
	for from < to {
		q := url.Values{
			"query":     {logQL(job, f)},
			"start":     {strconv.FormatUint(from, 10)},
			"end":       {strconv.FormatUint(to, 10)},
			"limit":     {strconv.Itoa(l.cfg.QueryLimit)},
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
		if len(es) < l.cfg.QueryLimit {
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
