package inferproxy

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// proxyMetrics are proxy-inference's Prometheus metrics (docs/inference.md,
// "Metrics"). The model label is the served model name once the request
// was routed to a model the caller may use, else "" (so that clients
// cannot grow the label set with made-up names).
type proxyMetrics struct {
	requests    *prometheus.CounterVec   // model, endpoint, code
	ttfb        *prometheus.HistogramVec // model, endpoint
	duration    *prometheus.HistogramVec // model, endpoint
	inFlight    prometheus.Gauge
	waiting     prometheus.Gauge
	retries     *prometheus.CounterVec // model
	failovers   *prometheus.CounterVec // model
	rateLimited *prometheus.CounterVec // reason
	tokens      *prometheus.CounterVec // team, model, kind
	agentConns  *prometheus.CounterVec // transport
	uploads     *prometheus.CounterVec // mode
	prefix      *prometheus.CounterVec // model, outcome
	outstanding *prometheus.Desc       // job, replica, model
	replicas    *replicaSet
}

// latencyBuckets span a cached short reply (ms) to a long generation
// (minutes).
var latencyBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}

func newProxyMetrics(rs *replicaSet) *proxyMetrics {
	return &proxyMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cosmicac_inference_requests_total",
			Help: "Requests to /inference, by served model (\"\" before routing), endpoint and HTTP status code (\"aborted\": a stream cut).",
		}, []string{"model", "endpoint", "code"}),
		ttfb: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "cosmicac_inference_time_to_first_byte_seconds",
			Help:    "Time from a request's arrival to the first byte of its answer's body written to the client (2xx answers).",
			Buckets: latencyBuckets,
		}, []string{"model", "endpoint"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "cosmicac_inference_request_duration_seconds",
			Help:    "Time from a request's arrival to the end of its answer.",
			Buckets: latencyBuckets,
		}, []string{"model", "endpoint"}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "cosmicac_inference_requests_in_flight",
			Help: "Requests to /inference being served now.",
		}),
		waiting: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "cosmicac_inference_requests_waiting",
			Help: "Requests waiting for a replica of their model to be ready (Config.ReadyWait).",
		}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cosmicac_inference_retries_total",
			Help: "Attempts on another replica after one failed before answering.",
		}, []string{"model"}),
		failovers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cosmicac_inference_failovers_total",
			Help: "Requests answered by a replica after another one failed them.",
		}, []string{"model"}),
		rateLimited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cosmicac_inference_rate_limited_total",
			Help: "Requests answered 429, by limit (concurrent, rpm, tpm: a key's tokens per minute).",
		}, []string{"reason"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cosmicac_inference_tokens_total",
			Help: "Tokens of the answered requests as their engines counted them (their usage), by the team that pays (the API key's; without one, the model's), model (@TEAM/NAME) and kind (prompt, completion).",
		}, []string{"team", "model", "kind"}),
		agentConns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cosmicac_inference_agent_connections_total",
			Help: "Connections opened to inference agents (each carries keep-alive HTTP/1.1), by fabric transport: tcp-direct (a TCP+TLS connection of its own, dialled or parked by the agent), quic or tcp (a stream of a multiplexed connection).",
		}, []string{"transport"}),
		uploads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cosmicac_inference_uploads_total",
			Help: "Audio uploads forwarded, by mode: streamed (sent on as they arrived) or spooled (read to their end first: the form named its model after its file, and the caller reaches several transcription models).",
		}, []string{"mode"}),
		prefix: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cosmicac_inference_prefix_routed_total",
			Help: "Picks of a replica by prefix routing, by outcome: hit (the replica that was sent the longest prefix of the prompt), over_bound (the replicas holding it were over the load bound: least outstanding instead), miss (no prefix of it routed before: least outstanding).",
		}, []string{"model", "outcome"}),
		outstanding: prometheus.NewDesc("cosmicac_inference_replica_outstanding_requests",
			"Requests in flight from this proxy to each announced replica head.", []string{"job", "replica", "model"}, nil),
		replicas: rs,
	}
}

// Collector returns proxy-inference's metrics, to register on the
// component's registry (served at /metrics).
func (p *Proxy) Collector() prometheus.Collector { return p.metrics }

// Describe implements prometheus.Collector.
func (m *proxyMetrics) Describe(ch chan<- *prometheus.Desc) {
	m.requests.Describe(ch)
	m.ttfb.Describe(ch)
	m.duration.Describe(ch)
	m.inFlight.Describe(ch)
	m.waiting.Describe(ch)
	m.retries.Describe(ch)
	m.failovers.Describe(ch)
	m.rateLimited.Describe(ch)
	m.tokens.Describe(ch)
	m.agentConns.Describe(ch)
	m.uploads.Describe(ch)
	m.prefix.Describe(ch)
	ch <- m.outstanding
}

// Collect implements prometheus.Collector.
func (m *proxyMetrics) Collect(ch chan<- prometheus.Metric) {
	m.requests.Collect(ch)
	m.ttfb.Collect(ch)
	m.duration.Collect(ch)
	m.inFlight.Collect(ch)
	m.waiting.Collect(ch)
	m.retries.Collect(ch)
	m.failovers.Collect(ch)
	m.rateLimited.Collect(ch)
	m.tokens.Collect(ch)
	m.agentConns.Collect(ch)
	m.uploads.Collect(ch)
	m.prefix.Collect(ch)
	m.replicas.mu.Lock()
	pools := make([]*pool, 0, len(m.replicas.pools))
	for _, p := range m.replicas.pools {
		pools = append(pools, p)
	}
	m.replicas.mu.Unlock()
	for _, p := range pools {
		p.mu.Lock()
		rs := p.order
		p.mu.Unlock()
		for _, r := range rs {
			meta := r.meta.Load()
			ch <- prometheus.MustNewConstMetric(m.outstanding, prometheus.GaugeValue, float64(r.outstanding.Load()),
				p.jobID, strconv.Itoa(meta.Replica), meta.Model)
		}
	}
}

// endpointOf names the endpoint of a path for the endpoint label.
func endpointOf(path string) string {
	switch rest := strings.TrimPrefix(path, Prefix+"/"); {
	case path == "/inference/health":
		return "health"
	case rest == path:
		return "other"
	case rest == "chat/completions", rest == "completions", rest == "embeddings", rest == "responses",
		rest == "audio/transcriptions", rest == "audio/translations":
		return rest
	case rest == "models", strings.HasPrefix(rest, "models/"):
		return "models"
	default:
		return "other"
	}
}

// observedWriter records what the proxy answered, for the metrics.
type observedWriter struct {
	http.ResponseWriter
	start time.Time
	code  int
	model string // set by forward once the request is routed
	wrote bool
	ttfb  time.Duration
}

func (w *observedWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *observedWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	if !w.wrote && len(b) > 0 {
		w.wrote, w.ttfb = true, time.Since(w.start)
	}
	return w.ResponseWriter.Write(b)
}

// Flush implements http.Flusher (the SSE path flushes every event).
func (w *observedWriter) Flush() {
	if fl, ok := w.ResponseWriter.(http.Flusher); ok {
		fl.Flush()
	}
}

// Unwrap lets http.ResponseController reach the server's writer.
func (w *observedWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// setModel labels the request's metrics with the model it was routed to.
func setModel(w http.ResponseWriter, model string) {
	if ow, ok := w.(*observedWriter); ok {
		ow.model = model
	}
}

// observe serves r through h, recording the request's metrics.
func (m *proxyMetrics) observe(h http.Handler, w http.ResponseWriter, r *http.Request) {
	ow := &observedWriter{ResponseWriter: w, start: time.Now()}
	m.inFlight.Inc()
	code := ""
	defer func() {
		m.inFlight.Dec()
		rec := recover()
		if code == "" {
			code = "aborted" // a stream cut after bytes went out
		}
		ep := endpointOf(r.URL.Path)
		m.requests.WithLabelValues(ow.model, ep, code).Inc()
		m.duration.WithLabelValues(ow.model, ep).Observe(time.Since(ow.start).Seconds())
		if ow.wrote && ow.code >= 200 && ow.code < 300 {
			m.ttfb.WithLabelValues(ow.model, ep).Observe(ow.ttfb.Seconds())
		}
		if rec != nil {
			panic(rec)
		}
	}()
	h.ServeHTTP(ow, r)
	if ow.code == 0 {
		ow.code = http.StatusOK
	}
	code = strconv.Itoa(ow.code)
}
