package k8sworker

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/k8stest"
	"github.com/cosmicac/cosmicac/internal/worker"
)

// benchJobs is the number of jobs of each benchmark.
const benchJobs = 200

// benchJobsOn makes n 1-GPU container jobs with reservations spread over
// the harness's nodes (8 GPUs each).
func benchJobsOn(h *harness, n int) []worker.ApplyParams {
	out := make([]worker.ApplyParams, n)
	for i := range out {
		j := containerJob("bench")
		out[i] = worker.ApplyParams{Job: j, Reservations: []cosmic.Reservation{
			h.reservation(j, 0, cosmic.NodeAlloc{Node: h.nodeName(i / 8), GPUs: []int{i % 8}}),
		}}
	}
	return out
}

// BenchmarkApplyLatency: job accepted (Apply called) → every object of the
// job created on the apiserver (Apply returns once they are), jobs one
// after the other, with a client rate limit that is not the bottleneck
// (1000 QPS). Reports p50 and p99 over 200 jobs.
func BenchmarkApplyLatency(b *testing.B) {
	env := k8stest.Shared(b)
	for b.Loop() {
		h := newHarness(b, env, func(c *RackConfig) { c.Client = ClientConfig{QPS: 1000, Burst: 2000} })
		for i := range benchJobs / 8 {
			h.addNode(h.nodeName(i), 8)
		}
		h.start()
		jobs := benchJobsOn(h, benchJobs)
		lat := make([]time.Duration, len(jobs))
		for i, p := range jobs {
			t0 := time.Now()
			if err := h.w.Apply(h.ctx, p); err != nil {
				b.Fatal(err)
			}
			lat[i] = time.Since(t0)
		}
		slices.Sort(lat)
		p50, p99 := lat[len(lat)/2], lat[len(lat)*99/100]
		b.ReportMetric(float64(p50.Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(p99.Microseconds())/1000, "p99-ms")
		b.ReportMetric(float64(lat[len(lat)-1].Microseconds())/1000, "max-ms")
		h.stop()
	}
}

// BenchmarkApplyRate: 200 jobs applied at once (16 callers) under the
// default client rate limit (50 QPS, burst 100): objects created per second
// after the burst, against the configured QPS.
func BenchmarkApplyRate(b *testing.B) {
	env := k8stest.Shared(b)
	for b.Loop() {
		cfg := DefaultRackConfig().Client
		h := newHarness(b, env, nil)
		for i := range benchJobs / 8 {
			h.addNode(h.nodeName(i), 8)
		}
		h.start()
		jobs := benchJobsOn(h, benchJobs)
		perJob := 4 // root, Secret, DataVolume, VMI
		ch := make(chan worker.ApplyParams)
		var wg sync.WaitGroup
		t0 := time.Now()
		for range 16 {
			wg.Go(func() {
				for p := range ch {
					if err := h.w.Apply(h.ctx, p); err != nil {
						b.Error(err)
					}
				}
			})
		}
		for _, p := range jobs {
			ch <- p
		}
		close(ch)
		wg.Wait()
		elapsed := time.Since(t0)
		objects := benchJobs * perJob
		got := h.objectsOfAll()
		if got != objects {
			b.Fatalf("%d objects on the apiserver, want %d", got, objects)
		}
		rate := float64(objects-cfg.Burst) / elapsed.Seconds()
		b.ReportMetric(float64(objects)/elapsed.Seconds(), "objects/s")
		b.ReportMetric(rate, "objects/s-after-burst")
		b.ReportMetric(rate/float64(cfg.QPS), "x-qps")
		b.Logf("%d jobs, %d objects in %v at %g QPS (burst %d): %.1f objects/s after the burst = %.3f× QPS",
			benchJobs, objects, elapsed.Round(time.Millisecond), cfg.QPS, cfg.Burst, rate, rate/float64(cfg.QPS))
		h.stop()
	}
}

// objectsOfAll counts the job objects in the harness's namespace.
func (h *harness) objectsOfAll() int {
	n := 0
	keys, err := h.w.allKeys(h.ctx)
	if err != nil {
		h.t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, k := range keys {
		if seen[k.job] {
			continue
		}
		seen[k.job] = true
		for _, objs := range h.objectsOf(k.job) {
			n += len(objs)
		}
	}
	return n
}
