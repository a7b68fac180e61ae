// Package lokitest is an in-memory stand-in for Loki's HTTP API, for tests
// and benchmarks of the monitor; the monitor's integration tests also run
// against a real Loki when hack/build-loki.sh has built one (Start).
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
// Limits, as Loki 3.7 applies them with its default limits_config (Limits,
// SetLimits; DefaultLimits are Loki's defaults, each from the Loki file
// named):
//
//   - the distributor refuses an entry older than now - RejectOldSamplesMaxAge
//     (7d), newer than now + CreationGracePeriod (10m), or with a line over
//     MaxLineSize (256 KiB), storing the rest of the push and answering 400
//     with one message per refused entry, grouped as "N errors like: …"
//     (pkg/distributor/validator.go ValidateEntry, pkg/distributor/
//     distributor.go Push, pkg/util/errors.go GroupedErrors);
//   - the ingester refuses an entry more than OutOfOrderWindow (1h:
//     max_chunk_age/2) behind the newest entry of its stream, storing the
//     rest and answering 400 "entry with timestamp … ignored, reason:
//     'entry too far behind, …'" (at most 10 listed) and "user 'fake',
//     total ignored: N out of M for stream: {…}" (pkg/ingester/stream.go);
//   - a stream without service_name gets it from the first of Loki's
//     discover_service_name labels it has (for the monitor's streams:
//     job), else "unknown_service" (pkg/loghttp/push/push.go); each entry
//     without detected_level gets it as structured metadata, guessed from
//     the first level word in its line, else "unknown" (a simplification
//     of pkg/distributor/field_detection.go, without its JSON and logfmt
//     parsing);
//   - query_range refuses a limit over MaxEntriesLimitPerQuery (5000:
//     pkg/querier/http.go) and end - start over MaxQueryLength (721h:
//     pkg/querier/limits/validation.go), with 400;
//   - with Limits.IngestionRate set, a push beyond the distributor's token
//     bucket is refused whole with 429 "ingestion rate limit exceeded …"
//     (pkg/distributor/distributor.go PushWithResolver), every time when
//     it is larger than the burst;
//   - with Limits.PerStreamRate set, a stream's entries of a push beyond
//     its token bucket are refused together: 429 listing them, "total
//     ignored: N out of N" (pkg/ingester/stream.go, shard_streams enabled);
//   - errors carry no Retry-After, a 429 neither (pkg/util/server/error.go
//     WriteError): RateLimitNext answers pushes with a 429 too.
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
	"golang.org/x/time/rate"
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
	highest int64               // the newest entry's timestamp
	rate    *rate.Limiter       // of Limits.PerStreamRate; nil: none
}

// Limits are the Loki limits the fake applies (zero: none).
type Limits struct {
	RejectOldSamplesMaxAge  time.Duration // validation.reject-old-samples.max-age
	CreationGracePeriod     time.Duration // validation.create-grace-period
	MaxLineSize             int           // distributor.max-line-size
	OutOfOrderWindow        time.Duration // ingester.max-chunk-age / 2
	MaxEntriesLimitPerQuery int           // validation.max-entries-limit
	MaxQueryLength          time.Duration // querier.max-query-length
	// IngestionRate and IngestionBurst (bytes a second, bytes) are the
	// distributor's token bucket (distributor.ingestion-rate-limit-mb,
	// distributor.ingestion-burst-size-mb; local strategy). Zero: none,
	// unlike Loki (4 MB/s, 6 MB), so that benchmarks measure the monitor.
	IngestionRate  float64
	IngestionBurst int
	// PerStreamRate and PerStreamBurst (bytes a second, bytes) are each
	// stream's (ingester.per-stream-rate-limit, -burst; Loki: 3 MB, 15
	// MB), applied to a stream's entries of a push as a whole, as Loki does
	// with shard_streams enabled (its default): 429, nothing stored
	// (pkg/ingester/stream.go validateEntries, errorForFailedEntries). Zero:
	// none. Streams made before SetLimits keep their limiter.
	PerStreamRate  float64
	PerStreamBurst int
	// Now is Loki's clock (nil: time.Now).
	Now func() time.Time
}

// DefaultLimits are Loki 3.7's defaults (pkg/validation/limits.go
// RegisterFlags; ingester.max-chunk-age 2h in pkg/ingester/ingester.go).
func DefaultLimits() Limits {
	return Limits{
		RejectOldSamplesMaxAge:  7 * 24 * time.Hour,
		CreationGracePeriod:     10 * time.Minute,
		MaxLineSize:             256 << 10,
		OutOfOrderWindow:        time.Hour,
		MaxEntriesLimitPerQuery: 5000,
		MaxQueryLength:          721 * time.Hour,
	}
}

// discoverServiceName is Loki's default discover_service_name list.
var discoverServiceName = []string{"service", "app", "application", "app_name", "name", "app_kubernetes_io_name",
	"container", "container_name", "k8s_container_name", "component", "workload", "job", "k8s_job_name"}

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
	limits    Limits
	discarded map[string]int
	queries   int
	rate      *rate.Limiter // of limits.IngestionRate; nil: none
}

type fault struct {
	status     int
	retryAfter string
}

// New starts a fake Loki; Close stops it.
func New() *Server {
	s := &Server{streams: map[string]*stream{}, limits: DefaultLimits(), discarded: map[string]int{}}
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

// RateLimitNext makes the next n pushes answer as Loki does when a
// tenant's ingestion rate is exceeded: 429, without Retry-After.
func (s *Server) RateLimitNext(n int) { s.FailNext(n, http.StatusTooManyRequests, "") }

// SetLimits replaces the limits (New starts with DefaultLimits).
func (s *Server) SetLimits(l Limits) {
	s.mu.Lock()
	s.limits = l
	s.rate = nil
	if l.IngestionRate > 0 {
		s.rate = rate.NewLimiter(rate.Limit(l.IngestionRate), l.IngestionBurst)
	}
	s.mu.Unlock()
}

// Discarded counts the entries refused, by Loki's reason
// (greater_than_max_sample_age, too_far_in_future, line_too_long,
// too_far_behind: the reason label of loki_discarded_samples_total).
func (s *Server) Discarded() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.discarded)
}

// Queries counts the query_range requests answered 200.
func (s *Server) Queries() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.queries
}

func (l Limits) now() time.Time {
	if l.Now != nil {
		return l.Now()
	}
	return time.Now()
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

// httpError answers as Loki's server does (pkg/util/server/error.go
// WriteError, through http.Error): plain text, nosniff, no Retry-After.
func httpError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
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
	defer s.mu.Unlock()
	lim := s.limits
	now := lim.now()
	var distErrs []string // the distributor's, one per refused entry
	type ingested struct {
		labels  string
		entries []Entry
	}
	var order []string
	byStream := map[string]*ingested{}
	withService := map[string]map[string]string{}
	for _, e := range entries {
		key := labelKey(e.Labels)
		lbs := withService[key]
		if lbs == nil {
			lbs = addServiceName(e.Labels)
			withService[key] = lbs
		}
		e.Labels = lbs
		if reason, msg := lim.validate(e, now); reason != "" {
			s.discarded[reason]++
			distErrs = append(distErrs, msg)
			continue
		}
		if _, ok := e.Metadata["detected_level"]; !ok {
			md := maps.Clone(e.Metadata)
			if md == nil {
				md = map[string]string{}
			}
			md["detected_level"] = detectLevel(e.Line)
			e.Metadata = md
		}
		skey := labelKey(lbs)
		in := byStream[skey]
		if in == nil {
			in = &ingested{labels: promLabels(lbs)}
			byStream[skey] = in
			order = append(order, skey)
		}
		in.entries = append(in.entries, e)
	}
	// The distributor's rate limit, all or nothing, after validation:
	// 429 with RateLimitedErrorMsg (pkg/validation/validate.go), which
	// drops the validation errors (pkg/distributor/distributor.go
	// PushWithResolver).
	if len(order) > 0 && s.rate != nil {
		size, lines := 0, 0
		for _, in := range byStream {
			for _, e := range in.entries {
				size += entrySize(e)
				lines++
			}
		}
		if !s.rate.AllowN(now, size) {
			s.discarded["rate_limited"] += lines
			httpError(w, http.StatusTooManyRequests, fmt.Sprintf("ingestion rate limit exceeded for user fake (limit: %d bytes/sec) while attempting to ingest '%d' lines totaling '%d' bytes, reduce log volume or contact your Loki administrator to see if the limit can be increased",
				int(lim.IngestionRate), lines, size))
			return
		}
	}
	var ingErr string // the ingester's: the first stream's
	ingStatus := http.StatusBadRequest
	for _, key := range order {
		in := byStream[key]
		st := s.streams[key]
		if st == nil {
			st = &stream{labels: in.entries[0].Labels, seen: map[string]struct{}{}}
			if lim.PerStreamRate > 0 {
				st.rate = rate.NewLimiter(rate.Limit(lim.PerStreamRate), lim.PerStreamBurst)
			}
			s.streams[key] = st
		}
		var ignored []string
		failed := 0
		ignore := func(e Entry, reason string) {
			failed++
			if len(ignored) < 10 {
				ignored = append(ignored, fmt.Sprintf("entry with timestamp %s ignored, reason: '%s',\n", time.Unix(0, e.TS).UTC(), reason))
			}
		}
		highest, size := st.highest, 0
		var keep []Entry
		for _, e := range in.entries {
			if cutoff := highest - int64(lim.OutOfOrderWindow); lim.OutOfOrderWindow > 0 && highest != 0 && e.TS < cutoff {
				s.discarded["too_far_behind"]++
				ignore(e, fmt.Sprintf("entry too far behind, entry timestamp is: %s, oldest acceptable timestamp is: %s",
					time.Unix(0, e.TS).UTC().Format(time.RFC3339), time.Unix(0, cutoff).UTC().Format(time.RFC3339)))
				continue
			}
			highest = max(highest, e.TS)
			size += entrySize(e)
			keep = append(keep, e)
		}
		// The per-stream rate limit, for the stream's entries of the push
		// as a whole (shard_streams.enabled, Loki's default): none stored.
		if st.rate != nil && len(keep) > 0 && !st.rate.AllowN(now, size) {
			for _, e := range keep {
				s.discarded["per_stream_rate_limit"]++
				ignore(e, fmt.Sprintf("Per stream rate limit exceeded (limit: %dB/sec) while attempting to ingest for stream '%s' totaling %dB, consider splitting a stream via additional labels or contact your Loki administrator to see if the limit can be increased",
					int(lim.PerStreamRate), in.labels, entrySize(e)))
			}
			keep = nil
			if ingErr == "" {
				ingStatus = http.StatusTooManyRequests
			}
		}
		for _, e := range keep {
			st.highest = max(st.highest, e.TS)
			dk := strconv.FormatInt(e.TS, 10) + "\x00" + e.Line
			if _, dup := st.seen[dk]; dup {
				continue
			}
			st.seen[dk] = struct{}{}
			st.entries = append(st.entries, e)
		}
		if failed > 0 && ingErr == "" {
			ingErr = strings.Join(ignored, "") + fmt.Sprintf("user 'fake', total ignored: %d out of %d for stream: %s", failed, len(in.entries), in.labels)
		}
	}
	s.auth = append(s.auth, r.Header.Get("Authorization"))
	switch {
	case ingErr != "":
		httpError(w, ingStatus, ingErr)
	case len(distErrs) > 0:
		httpError(w, http.StatusBadRequest, groupErrors(distErrs))
	default:
		s.pushes++
		s.pushBytes += int64(len(body))
		w.WriteHeader(http.StatusNoContent)
	}
}

// entrySize is what an entry costs against the rate limits: its line and
// structured metadata but detected_level (pkg/util/entry_size.go
// EntryTotalSize, ExcludedStructuredMetadataLabels).
func entrySize(e Entry) int {
	n := len(e.Line)
	for k, v := range e.Metadata {
		if k != "detected_level" {
			n += len(k) + len(v)
		}
	}
	return n
}

// validate is the distributor's check of one entry: Loki's reason and
// message when it refuses it.
func (l Limits) validate(e Entry, now time.Time) (string, string) {
	ls := promLabels(e.Labels)
	t := time.Unix(0, e.TS).UTC()
	switch {
	case l.RejectOldSamplesMaxAge > 0 && e.TS < now.Add(-l.RejectOldSamplesMaxAge).UnixNano():
		return "greater_than_max_sample_age", fmt.Sprintf("entry for stream '%s' has timestamp too old: %v, oldest acceptable timestamp is: %v",
			ls, t.Format(time.RFC3339), now.Add(-l.RejectOldSamplesMaxAge).UTC().Format(time.RFC3339))
	case l.CreationGracePeriod > 0 && e.TS > now.Add(l.CreationGracePeriod).UnixNano():
		return "too_far_in_future", fmt.Sprintf("entry for stream '%s' has timestamp too new: %v", ls, t.Format(time.RFC3339))
	case l.MaxLineSize > 0 && len(e.Line) > l.MaxLineSize:
		return "line_too_long", fmt.Sprintf("max entry size '%d' bytes exceeded for stream '%s' while adding an entry with length '%d' bytes", l.MaxLineSize, ls, len(e.Line))
	}
	return "", ""
}

// groupErrors joins messages as Loki's util.GroupedErrors does.
func groupErrors(msgs []string) string {
	var order []string
	n := map[string]int{}
	for _, m := range msgs {
		if n[m] == 0 {
			order = append(order, m)
		}
		n[m]++
	}
	var b strings.Builder
	for i, m := range order {
		if i > 0 {
			b.WriteString("; ")
		}
		if len(order) > 1 || n[m] > 1 {
			fmt.Fprintf(&b, "%d errors like: ", n[m])
		}
		b.WriteString(m)
	}
	return b.String()
}

func addServiceName(labels map[string]string) map[string]string {
	if _, ok := labels["service_name"]; ok {
		return labels
	}
	out := maps.Clone(labels)
	out["service_name"] = "unknown_service"
	for _, name := range discoverServiceName {
		if v := labels[name]; v != "" {
			out["service_name"] = v
			break
		}
	}
	return out
}

// promLabels writes labels as Loki prints a stream: {a="b", c="d"}.
func promLabels(m map[string]string) string {
	var b strings.Builder
	b.WriteByte('{')
	for i, k := range slices.Sorted(maps.Keys(m)) {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s=%q", k, m[k])
	}
	b.WriteByte('}')
	return b.String()
}

var levelWords = []struct{ word, level string }{
	{"trace", "trace"}, {"debug", "debug"}, {"fatal", "fatal"}, {"critical", "critical"},
	{"error", "error"}, {"err", "error"}, {"warning", "warn"}, {"warn", "warn"}, {"info", "info"},
}

// detectLevel is the level of the first level word (a whole word, any
// case) in line, else "unknown".
func detectLevel(line string) string {
	lower := strings.ToLower(line)
	best, at := "unknown", len(lower)
	word := func(c byte) bool { return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' }
	for _, p := range levelWords {
		for off := 0; off < at; {
			i := strings.Index(lower[off:], p.word)
			if i < 0 {
				break
			}
			i += off
			end := i + len(p.word)
			if (i == 0 || !word(lower[i-1])) && (end == len(lower) || !word(lower[end])) {
				if i < at {
					best, at = p.level, i
				}
				break
			}
			off = i + 1
		}
	}
	return best
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
	s.mu.Lock()
	lim := s.limits
	s.mu.Unlock()
	if lim.MaxEntriesLimitPerQuery > 0 && limit > lim.MaxEntriesLimitPerQuery {
		httpError(w, http.StatusBadRequest, fmt.Sprintf("max entries limit per query exceeded, limit > max_entries_limit_per_query (%d > %d)", limit, lim.MaxEntriesLimitPerQuery))
		return
	}
	if lim.MaxQueryLength > 0 && time.Duration(end-start) > lim.MaxQueryLength {
		httpError(w, http.StatusBadRequest, fmt.Sprintf("the query time range exceeds the limit (query length: %s, limit: %s)", time.Duration(end-start), lim.MaxQueryLength))
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
	s.mu.Lock()
	s.queries++
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"status": "success", "data": data})
}
