package monitor

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/cosmicac/cosmicac/internal/joblog"
)

type metrics struct {
	reg         *prometheus.Registry
	recordsIn   prometheus.Counter
	recordsOut  prometheus.Counter
	rejected    *prometheus.CounterVec
	truncated   prometheus.Counter
	bufBytes    prometheus.Gauge
	evicted     *prometheus.CounterVec
	followsOut  prometheus.Counter
	viewers     prometheus.Gauge
	cutOff      *prometheus.CounterVec
	lag         prometheus.Histogram
	jobs        prometheus.Gauge
	lokiLatency prometheus.Histogram
	lokiErrors  *prometheus.CounterVec
	lokiRecords prometheus.Counter
	lokiBytes   prometheus.Counter
	lokiDropped *prometheus.CounterVec
	lokiSplits  prometheus.Counter
	spoolBytes  prometheus.Gauge
	history     *prometheus.CounterVec
}

func newMetrics(m *Monitor) *metrics {
	const ns = "cosmicac_monitor"
	x := &metrics{
		reg:        prometheus.NewRegistry(),
		recordsIn:  prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "records_received_total", Help: "Records acknowledged to producers."}),
		recordsOut: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "records_delivered_total", Help: "Records written to live viewers (one per viewer)."}),
		rejected:   prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "records_rejected_total", Help: "Records refused to producers, by reason (invalid, spool: the spool is full, spool_share: the job's share of it is, scope: not the producer's job or rack)."}, []string{"reason"}),
		truncated:  prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "lines_truncated_total", Help: "Records taken with their line cut to maxLineBytes."}),
		bufBytes:   prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "buffer_bytes", Help: "Bytes held in the jobs' in-memory buffers."}),
		evicted: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "buffer_evicted_total",
			Help: "Records evicted from a job's in-memory buffer, by the bound reached (records: bufferPerJob, job_bytes: bufferBytesPerJob, total_bytes: bufferBytes); with Loki, history still has them."}, []string{"reason"}),
		followsOut: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "follows_refused_total", Help: "Follows refused (429): the user had maxFollowsPerUser open."}),
		viewers:    prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "viewers", Help: "Open log streams."}),
		cutOff:     prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "viewers_cut_off_total", Help: "Viewers cut off, by reason (lagged, write)."}, []string{"reason"}),
		lag: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Name: "viewer_lag_records", Help: "Records a viewer was behind when it woke.",
			Buckets: prometheus.ExponentialBuckets(1, 4, 9)}),
		jobs:        prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "jobs_buffered", Help: "Jobs with an in-memory buffer."}),
		lokiLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Name: "loki_push_duration_seconds", Help: "Time of one push to Loki.", Buckets: prometheus.DefBuckets}),
		lokiErrors:  prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "loki_push_errors_total", Help: "Failed pushes to Loki, by HTTP status (error: no answer)."}, []string{"code"}),
		lokiRecords: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "loki_records_sent_total", Help: "Records Loki took."}),
		lokiBytes:   prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "loki_bytes_sent_total", Help: "Compressed push bytes Loki took."}),
		lokiDropped: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "loki_records_dropped_total",
			Help: "Records not stored in Loki, by reason (too_old, too_new, line_too_long: beyond Loki's limits, not pushed or refused; too_far_behind: refused, over 1h behind the stream's newest; refused: any other 400; encode)."}, []string{"reason"}),
		lokiSplits: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "loki_rate_limited_splits_total",
			Help: "Pushes rate limited (429) several times in a row and pushed again as two halves."}),
		spoolBytes: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "spool_bytes", Help: "Bytes in the spool not yet in Loki."}),
		history:    prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "history_reads_total", Help: "History reads, by source (loki, buffer) and result."}, []string{"source", "result"}),
	}
	x.reg.MustRegister(x.recordsIn, x.recordsOut, x.rejected, x.truncated, x.bufBytes, x.evicted, x.followsOut, x.viewers, x.cutOff, x.lag, x.jobs,
		x.lokiLatency, x.lokiErrors, x.lokiRecords, x.lokiBytes, x.lokiDropped, x.lokiSplits, x.spoolBytes, x.history,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return x
}

// MetricsHandler serves the monitor's metrics in the Prometheus format
// (mount it on the component's metrics listener, never on its public HTTP
// address).
func (m *Monitor) MetricsHandler() http.Handler {
	return promhttp.HandlerFor(m.met.reg, promhttp.HandlerOpts{Registry: m.met.reg})
}

// ForwarderCollector exports a producer's joblog.Forwarder counts
// (cosmicac_joblog_forwarder_*): register it on the producer's registry.
func ForwarderCollector(component string, f *joblog.Forwarder) prometheus.Collector {
	return &fwdCollector{f: f, labels: prometheus.Labels{"component": component}}
}

type fwdCollector struct {
	f      *joblog.Forwarder
	labels prometheus.Labels
}

func (c *fwdCollector) desc(name, help string) *prometheus.Desc {
	return prometheus.NewDesc("cosmicac_joblog_forwarder_"+name, help, nil, c.labels)
}

func (c *fwdCollector) Describe(ch chan<- *prometheus.Desc) { prometheus.DescribeByCollect(c, ch) }

func (c *fwdCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.f.Stats()
	ch <- prometheus.MustNewConstMetric(c.desc("records_emitted_total", "Records given to the forwarder."), prometheus.CounterValue, float64(s.Emitted))
	ch <- prometheus.MustNewConstMetric(c.desc("records_sent_total", "Records the monitor acknowledged."), prometheus.CounterValue, float64(s.Sent))
	ch <- prometheus.MustNewConstMetric(c.desc("records_dropped_total", "Records dropped: the buffer was full."), prometheus.CounterValue, float64(s.Dropped))
	ch <- prometheus.MustNewConstMetric(c.desc("records_buffered", "Records waiting for the monitor."), prometheus.GaugeValue, float64(s.Buffered))
	ch <- prometheus.MustNewConstMetric(c.desc("send_failures_total", "Failed calls to the monitor."), prometheus.CounterValue, float64(s.Failures))
}
