// Package metrics holds what CosmicAC's components share for Prometheus:
// a registry with the Go and process collectors, the HTTP handler serving
// it, and the API's request observer. Each component registers its own
// collectors (the ork's, the monitor's, a log forwarder's) on its registry.
//
// Importers: the CLI wiring, internal/platform and the agents' command
// line (internal/agentcmd).
package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/cosmicac/cosmicac/internal/httpserve"
)

// NewRegistry returns a registry with the Go runtime and process collectors
// and the given ones.
func NewRegistry(cs ...prometheus.Collector) *prometheus.Registry {
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	r.MustRegister(cs...)
	return r
}

// Handler serves the gatherers' metrics in the Prometheus format.
func Handler(g prometheus.Gatherer) http.Handler {
	return promhttp.HandlerFor(g, promhttp.HandlerOpts{})
}

// Listen listens on addr, if one is given, at once (a taken port fails
// the component at its start, with the reason), and returns the func that
// serves reg at http://addr/metrics until its context ends; the caller runs
// it in the component's group. With no addr the func does nothing.
func Listen(addr string, reg prometheus.Gatherer, l httpserve.Limits) (serve func(context.Context) error, err error) {
	if addr == "" {
		return func(context.Context) error { return nil }, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-listen: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", Handler(reg))
	hs := httpserve.New(mux, l, nil)
	return func(ctx context.Context) error {
		stop := context.AfterFunc(ctx, func() { hs.Close() })
		defer stop()
		if err := hs.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	}, nil
}

// APIObserver records the HTTP API's requests: it implements the app-node's
// Observer.
type APIObserver struct {
	duration *prometheus.HistogramVec
}

// NewAPIObserver makes the observer; register it as a collector.
func NewAPIObserver() *APIObserver {
	return &APIObserver{duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "cosmicac", Subsystem: "api", Name: "request_duration_seconds",
		Help:    "Time to answer an API request, by operation and status code.",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
	}, []string{"op", "code"})}
}

// ObserveRequest implements appnode.Observer.
func (o *APIObserver) ObserveRequest(op string, status int, elapsed time.Duration) {
	if op == "" {
		op = "unmatched"
	}
	o.duration.WithLabelValues(op, strconv.Itoa(status)).Observe(elapsed.Seconds())
}

// Describe implements prometheus.Collector.
func (o *APIObserver) Describe(ch chan<- *prometheus.Desc) { o.duration.Describe(ch) }

// Collect implements prometheus.Collector.
func (o *APIObserver) Collect(ch chan<- prometheus.Metric) { o.duration.Collect(ch) }

// Sized is what DirectoryCollector reads (*fabric.Directory).
type Sized interface{ Len() int }

// DirectoryCollector is the agents' directory's size:
// cosmicac_directory_announcements, the announcements it holds (bounded by
// its limits; a flood shows here, docs/security.md).
func DirectoryCollector(d Sized) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "cosmicac", Subsystem: "directory", Name: "announcements",
		Help: "Announcements the agents' directory holds."}, func() float64 { return float64(d.Len()) })
}
