// Package lokitest is an in-memory stand-in for Loki's HTTP API, for tests
// and benchmarks of the monitor (there is no Loki binary for this machine).
//
// It follows the Loki 3.x HTTP API ("Loki HTTP API" in Loki's docs, v1
// endpoints):
//
//   - POST /loki/api/v1/push: Content-Type application/x-protobuf with a
//     snappy block-compressed logproto.PushRequest (pkg/push/push.proto:
//     streams=1{labels=1, entries=2{timestamp=1{seconds=1,nanos=2}, line=2,
//     structuredMetadata=3{name=1,value=2}}}), or application/json
//     ({"streams":[{"stream":{...},"values":[["ns","line",{metadata}]]}]},
//     optionally Content-Encoding: gzip). Answers 204. Like Loki, it keeps
//     one copy of an entry identical in timestamp and line to one already in
//     its stream, and with a tenant set it requires X-Scope-OrgID.
//   - GET /loki/api/v1/query_range: query (a stream selector of = matchers
//     only, e.g. {job="x", source="system"}), start (inclusive) and end
//     (exclusive) as nanosecond epochs or RFC 3339, limit (default 100),
//     direction (forward|backward, default backward). Answers
//     {"status":"success","data":{"resultType":"streams","result":[...]}};
//     with X-Loki-Response-Encoding-Flags: categorize-labels each value is
//     ["ns","line",{"structuredMetadata":{...}}] and the data carries
//     "encodingFlags":["categorize-labels"], otherwise structured metadata
//     is merged into each result stream's labels, as Loki does.
//
// Faults: FailNext answers the next pushes with a status (and Retry-After),
// SetDelay slows every request.
//
// Importers: tests and benchmarks only.
package lokitest

import (
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/golang/snappy"
	"google.golang.org/protobuf/encoding/protowire"
)

// Entry is one stored log entry.
type Entry struct {
	TS       int64 // nanoseconds
	Line     string
	Labels   map[string]string
	Metadata map[string]string
}

type stream struct {
	labels  map[string]string
	entries []Entry
	seen    map[string]struct{} // ts+line, for Loki's duplicate drop
}

// Server is a fake Loki.
type Server struct {
	*httptest.Server
	// Tenant, when set, is the X-Scope-OrgID every request must carry.
	Tenant string

	mu        sync.Mutex
	streams   map[string]*stream
	fails     []fault
	delay     time.Duration
	pushes    int
	failed    int
	pushBytes int64
	auth      []string
}

type fault struct {
	status     int
	retryAfter string
}

// New starts a fake Loki; Close stops it.
func New() *Server {
	s := &Server{streams: map[string]*stream{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /loki/api/v1/push", s.push)
	mux.HandleFunc("GET /loki/api/v1/query_range", s.queryRange)
	mux.HandleFunc("GET /ready", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ready\n") })
	s.Server = httptest.NewServer(mux)
	return s
}

// FailNext makes the next n pushes answer status, with a Retry-After
// header when retryAfter is not empty.
func (s *Server) FailNext(n, status int, retryAfter string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range n {
		s.fails = append(s.fails, fault{status, retryAfter})
	}
}

// Heal forgets the faults not yet injected.
func (s *Server) Heal() {
	s.mu.Lock()
	s.fails = nil
	s.mu.Unlock()
}

// SetDelay makes every request wait d first.
func (s *Server) SetDelay(d time.Duration) {
	s.mu.Lock()
	s.delay = d
	s.mu.Unlock()
}

// Stats: pushes answered 2xx, pushes failed on purpose, compressed bytes
// of accepted pushes.
func (s *Server) Stats() (pushes, failed int, bytes int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pushes, s.failed, s.pushBytes
}

// Authorizations lists the Authorization headers of the pushes received.
func (s *Server) Authorizations() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.auth)
}

// Entries returns every stored entry whose labels include match, oldest
// first.
func (s *Server) Entries(match map[string]string) []Entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Entry
	for _, st := range s.streams {
		if matches(st.labels, match) {
			out = append(out, st.entries...)
		}
	}
	slices.SortStableFunc(out, func(a, b Entry) int { return cmpInt(a.TS, b.TS) })
	return out
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func matches(labels, match map[string]string) bool {
	for k, v := range match {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func httpError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(status)
	io.WriteString(w, msg+"\n")
}

func (s *Server) begin(w http.ResponseWriter, r *http.Request) bool {
	s.mu.Lock()
	d, tenant := s.delay, s.Tenant
	s.mu.Unlock()
	if d > 0 {
		select {
		case <-time.After(d):
		case <-r.Context().Done():
			return false
		}
	}
	if tenant != "" && r.Header.Get("X-Scope-OrgID") != tenant {
		httpError(w, http.StatusUnauthorized, "no org id")
		return false
	}
	return true
}

func (s *Server) push(w http.ResponseWriter, r *http.Request) {
	if !s.begin(w, r) {
		return
	}
	s.mu.Lock()
	if len(s.fails) > 0 {
		f := s.fails[0]
		s.fails = s.fails[1:]
		s.failed++
		s.mu.Unlock()
		io.Copy(io.Discard, r.Body)
		if f.retryAfter != "" {
			w.Header().Set("Retry-After", f.retryAfter)
		}
		httpError(w, f.status, "injected fault")
		return
	}
	s.mu.Unlock()
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<20))
	if err != nil {
		httpError(w, http.StatusBadRequest, err.Error())
		return
	}
	var entries []Entry
	ct, _, _ := strings.Cut(r.Header.Get("Content-Type"), ";")
	switch ct {
	case "application/x-protobuf":
		raw, err := snappy.Decode(nil, body)
		if err != nil {
			httpError(w, http.StatusBadRequest, "snappy: "+err.Error())
			return
		}
		entries, err = decodePushProto(raw)
		if err != nil {
			httpError(w, http.StatusBadRequest, err.Error())
			return
		}
	case "application/json":
		raw := body
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(strings.NewReader(string(body)))
			if err == nil {
				raw, err = io.ReadAll(zr)
			}
			if err != nil {
				httpError(w, http.StatusBadRequest, "gzip: "+err.Error())
				return
			}
		}
		if entries, err = decodePushJSON(raw); err != nil {
			httpError(w, http.StatusBadRequest, err.Error())
			return
		}
	default:
		httpError(w, http.StatusUnsupportedMediaType, "unsupported Content-Type "+ct)
		return
	}
	s.mu.Lock()
	for _, e := range entries {
		key := labelKey(e.Labels)
		st := s.streams[key]
		if st == nil {
			st = &stream{labels: e.Labels, seen: map[string]struct{}{}}
			s.streams[key] = st
		}
		dk := strconv.FormatInt(e.TS, 10) + "\x00" + e.Line
		if _, dup := st.seen[dk]; dup {
			continue
		}
		st.seen[dk] = struct{}{}
		st.entries = append(st.entries, e)
	}
	s.pushes++
	s.pushBytes += int64(len(body))
	s.auth = append(s.auth, r.Header.Get("Authorization"))
	s.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func labelKey(m map[string]string) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(m)) {
		fmt.Fprintf(&b, "%s=%q,", k, m[k])
	}
	return b.String()
}

// ParseLabels reads a Prometheus-style label set: {a="b", c="d"}.
func ParseLabels(s string) (map[string]string, error) {
	s = strings.TrimSpace(s)
	if !strings.HasPrefix(s, "{") || !strings.HasSuffix(s, "}") {
		return nil, fmt.Errorf("labels %q: want {name=\"value\", ...}", s)
	}
	s = s[1 : len(s)-1]
	out := map[string]string{}
	for {
		s = strings.TrimLeft(s, " ,")
		if s == "" {
			return out, nil
		}
		name, rest, ok := strings.Cut(s, "=")
		if !ok {
			return nil, fmt.Errorf("labels: %q has no =", s)
		}
		name = strings.TrimSpace(name)
		if strings.ContainsAny(name, "!~") || name == "" {
			return nil, fmt.Errorf("labels: only = matchers are supported (%q)", name)
		}
		rest = strings.TrimSpace(rest)
		if !strings.HasPrefix(rest, `"`) {
			return nil, fmt.Errorf("labels: value of %s not quoted", name)
		}
		// Find the closing quote, skipping escapes.
		i := 1
		for ; i < len(rest); i++ {
			if rest[i] == '\\' {
				i++
				continue
			}
			if rest[i] == '"' {
				break
			}
		}
		if i >= len(rest) {
			return nil, fmt.Errorf("labels: value of %s not closed", name)
		}
		v, err := strconv.Unquote(rest[:i+1])
		if err != nil {
			return nil, fmt.Errorf("labels: value of %s: %w", name, err)
		}
		out[name] = v
		s = rest[i+1:]
	}
}

func decodePushProto(b []byte) ([]Entry, error) {
	var out []Entry
	err := fields(b, func(num protowire.Number, v []byte) error {
		if num != 1 {
			return nil
		}
		var labels map[string]string
		var raw [][]byte
		if err := fields(v, func(num protowire.Number, v []byte) error {
			switch num {
			case 1:
				l, err := ParseLabels(string(v))
				labels = l
				return err
			case 2:
				raw = append(raw, v)
			}
			return nil
		}); err != nil {
			return err
		}
		if labels == nil {
			return errors.New("stream without labels")
		}
		for _, ev := range raw {
			e := Entry{Labels: labels}
			if err := fields(ev, func(num protowire.Number, v []byte) error {
				switch num {
				case 1:
					var sec, nsec int64
					err := fieldsVarint(v, func(num protowire.Number, x uint64) {
						switch num {
						case 1:
							sec = int64(x)
						case 2:
							nsec = int64(int32(x))
						}
					})
					e.TS = sec*1e9 + nsec
					return err
				case 2:
					e.Line = string(v)
				case 3:
					var name, value string
					if err := fields(v, func(num protowire.Number, v []byte) error {
						switch num {
						case 1:
							name = string(v)
						case 2:
							value = string(v)
						}
						return nil
					}); err != nil {
						return err
					}
					if e.Metadata == nil {
						e.Metadata = map[string]string{}
					}
					e.Metadata[name] = value
				}
				return nil
			}); err != nil {
				return err
			}
			out = append(out, e)
		}
		return nil
	})
	return out, err
}

// fields calls fn with each length-delimited field of b (others skipped).
func fields(b []byte, fn func(protowire.Number, []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("protobuf: %w", protowire.ParseError(n))
		}
		b = b[n:]
		if typ == protowire.BytesType {
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return fmt.Errorf("protobuf: %w", protowire.ParseError(n))
			}
			if err := fn(num, v); err != nil {
				return err
			}
			b = b[n:]
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return fmt.Errorf("protobuf: %w", protowire.ParseError(n))
		}
		b = b[n:]
	}
	return nil
}

func fieldsVarint(b []byte, fn func(protowire.Number, uint64)) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("protobuf: %w", protowire.ParseError(n))
		}
		b = b[n:]
		if typ == protowire.VarintType {
			x, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return fmt.Errorf("protobuf: %w", protowire.ParseError(n))
			}
			fn(num, x)
			b = b[n:]
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return fmt.Errorf("protobuf: %w", protowire.ParseError(n))
		}
		b = b[n:]
	}
	return nil
}

func decodePushJSON(b []byte) ([]Entry, error) {
	var req struct {
		Streams []struct {
			Stream map[string]string   `json:"stream"`
			Values [][]json.RawMessage `json:"values"`
		} `json:"streams"`
	}
	if err := json.Unmarshal(b, &req); err != nil {
		return nil, fmt.Errorf("json push: %w", err)
	}
	var out []Entry
	for _, st := range req.Streams {
		if len(st.Stream) == 0 {
			return nil, errors.New("json push: stream without labels")
		}
		for _, v := range st.Values {
			if len(v) < 2 || len(v) > 3 {
				return nil, errors.New("json push: a value must be [ts, line] or [ts, line, metadata]")
			}
			var ts, line string
			if json.Unmarshal(v[0], &ts) != nil || json.Unmarshal(v[1], &line) != nil {
				return nil, errors.New("json push: timestamp and line must be strings")
			}
			n, err := strconv.ParseInt(ts, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("json push: timestamp %q: %w", ts, err)
			}
			e := Entry{TS: n, Line: line, Labels: st.Stream}
			if len(v) == 3 {
				if err := json.Unmarshal(v[2], &e.Metadata); err != nil {
					return nil, fmt.Errorf("json push: structured metadata: %w", err)
				}
			}
			out = append(out, e)
		}
	}
	return out, nil
}

func parseTime(v string, def int64) (int64, error) {
	if v == "" {
		return def, nil
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		return n, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return 0, fmt.Errorf("bad time %q", v)
	}
	return t.UnixNano(), nil
}

func (s *Server) queryRange(w http.ResponseWriter, r *http.Request) {
	if !s.begin(w, r) {
		return
	}
	q := r.URL.Query()
	sel, err := ParseLabels(q.Get("query"))
	if err != nil {
		httpError(w, http.StatusBadRequest, "parse error: "+err.Error())
		return
	}
	now := time.Now().UnixNano()
	start, err1 := parseTime(q.Get("start"), now-int64(time.Hour))
	end, err2 := parseTime(q.Get("end"), now)
	if err := errors.Join(err1, err2); err != nil {
		httpError(w, http.StatusBadRequest, err.Error())
		return
	}
	limit := 100
	if v := q.Get("limit"); v != "" {
		if limit, err = strconv.Atoi(v); err != nil || limit <= 0 {
			httpError(w, http.StatusBadRequest, "bad limit")
			return
		}
	}
	dir := q.Get("direction")
	if dir == "" {
		dir = "backward"
	}
	if dir != "forward" && dir != "backward" {
		httpError(w, http.StatusBadRequest, "bad direction")
		return
	}
	categorize := strings.Contains(r.Header.Get("X-Loki-Response-Encoding-Flags"), "categorize-labels")

	var all []Entry
	for _, e := range s.Entries(sel) {
		if e.TS >= start && e.TS < end {
			all = append(all, e)
		}
	}
	if dir == "backward" {
		slices.Reverse(all)
	}
	all = all[:min(len(all), limit)]
	type result struct {
		Stream map[string]string `json:"stream"`
		Values [][]any           `json:"values"`
	}
	var order []string
	byKey := map[string]*result{}
	for _, e := range all {
		labels := e.Labels
		if !categorize && len(e.Metadata) > 0 {
			labels = maps.Clone(e.Labels)
			maps.Copy(labels, e.Metadata)
		}
		key := labelKey(labels)
		res := byKey[key]
		if res == nil {
			res = &result{Stream: labels}
			byKey[key] = res
			order = append(order, key)
		}
		v := []any{strconv.FormatInt(e.TS, 10), e.Line}
		if categorize {
			cat := map[string]any{}
			if len(e.Metadata) > 0 {
				cat["structuredMetadata"] = e.Metadata
			}
			v = append(v, cat)
		}
		res.Values = append(res.Values, v)
	}
	data := map[string]any{"resultType": "streams", "result": []any{}, "stats": map[string]any{}}
	results := make([]any, 0, len(order))
	for _, k := range order {
		results = append(results, byKey[k])
	}
	data["result"] = results
	if categorize {
		data["encodingFlags"] = []string{"categorize-labels"}
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"status": "success", "data": data})
}
