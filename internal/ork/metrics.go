package ork

import (
	"github.com/prometheus/client_golang/prometheus"
)

var (
	descQueued    = prometheus.NewDesc("cosmicac_ork_queued_jobs", "Jobs waiting in the admission queue.", nil, nil)
	descGPUs      = prometheus.NewDesc("cosmicac_ork_gpus", "GPUs of the registered racks' nodes, by rack and whether free for placement.", []string{"rack", "free"}, nil)
	descReachable = prometheus.NewDesc("cosmicac_ork_rack_reachable", "1 when the rack's worker answered the last heartbeat.", []string{"rack"}, nil)
)

// orkMetrics are the ork's own counters.
type orkMetrics struct {
	scaled *prometheus.CounterVec
}

func newOrkMetrics() orkMetrics {
	return orkMetrics{scaled: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cosmicac_ork_autoscale_decisions_total",
		Help: "Replica counts the autoscaler changed, by direction (up, down).",
	}, []string{"direction"})}
}

// Collector exports the ork's queue, GPU reservations, rack reachability
// and autoscaler decisions.
func (o *Ork) Collector() prometheus.Collector { return orkCollector{o} }

type orkCollector struct{ o *Ork }

func (c orkCollector) Describe(ch chan<- *prometheus.Desc) {
	o := c.o
	ch <- descQueued
	ch <- descGPUs
	ch <- descReachable
	o.metrics.scaled.Describe(ch)
}

func (c orkCollector) Collect(ch chan<- prometheus.Metric) {
	o := c.o
	o.mu.Lock()
	queued := o.fq.Len()
	o.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(descQueued, prometheus.GaugeValue, float64(queued))
	for _, r := range o.ListRacks().Racks {
		ch <- prometheus.MustNewConstMetric(descGPUs, prometheus.GaugeValue, float64(r.GPUs-r.FreeGPUs), r.ID, "false")
		ch <- prometheus.MustNewConstMetric(descGPUs, prometheus.GaugeValue, float64(r.FreeGPUs), r.ID, "true")
		reach := 0.0
		if r.Reachable {
			reach = 1
		}
		ch <- prometheus.MustNewConstMetric(descReachable, prometheus.GaugeValue, reach, r.ID)
	}
	o.metrics.scaled.Collect(ch)
}
