package platform

import (
	"errors"
	"fmt"
	"net"
	"net/http"

	"github.com/cosmicac/cosmicac/internal/httpserve"
	"github.com/cosmicac/cosmicac/internal/metrics"
)

// DefaultMetricsListen is `cosmicac up`'s metrics address: loopback, so
// that only the host (a Prometheus there, or a tunnel) reads them, on
// 9464 rather than Prometheus's own 9090, so that a Prometheus on the same
// host can scrape it.
const DefaultMetricsListen = "127.0.0.1:9464"

// serveMetrics serves /metrics (p.Metrics) and /monitor/metrics (the
// monitor's registry) on cfg.MetricsListen, if set, with the API's limits.
// The API's address answers neither: they are the operator's, not the
// public's.
func (p *Platform) serveMetrics(cfg Config) error {
	if cfg.MetricsListen == "" {
		return nil
	}
	ln, err := net.Listen("tcp", cfg.MetricsListen)
	if err != nil {
		return fmt.Errorf("listen for metrics on %s: %w", cfg.MetricsListen, err)
	}
	p.MetricsURL = "http://" + ln.Addr().String()
	mux := http.NewServeMux()
	mux.Handle("/metrics", metrics.Handler(p.Metrics))
	mux.Handle("/monitor/metrics", p.Monitor.MetricsHandler())
	p.metricsHTTP = httpserve.New(mux, cfg.HTTP, p.log)
	hs := p.metricsHTTP
	p.goRun("metrics", func() error {
		if err := hs.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
	return nil
}
