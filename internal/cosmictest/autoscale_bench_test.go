package cosmictest

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/gguf/testmodel"
	"github.com/cosmicac/cosmicac/internal/inferproxy"
	"github.com/cosmicac/cosmicac/internal/platform"
	"github.com/cosmicac/cosmicac/internal/waittest"
)

// BenchmarkAutoscale runs one load ramp, in one run, against three jobs of
// the test chat model on real llama.cpp replicas (the engine on one
// thread, two slots), one job after the other so that they do not share
// the cores: fixed at one replica, fixed at three, and autoscaled from one
// to three (target 2 requests per replica, 10 s cool-down, minimum 0). The
// ramp holds 1, 2, 4, 6, then 2 streams for 6 s each, each a chat of a
// prompt of its own streaming 8 tokens. It reports, per job, the mean and
// p99 time to first token over the ramp and during its peak (4 and 6
// streams), failed requests, and the replica-seconds held (what the job's
// GPUs cost: replicas in the spec, sampled every 250 ms, from the ramp's
// start to its end); for the autoscaled job, how long after the ramp's
// end it was at zero replicas, and the wake time of 3 requests to it at
// zero replicas (request to first token). docs/benchmarks.md,
// "Autoscaling".
//
//	COSMICAC_LLAMA_SERVER=$(hack/build-llama.sh --print-dest)/bin/llama-server \
//	  go test -run '^$' -bench Autoscale -benchtime 1x ./internal/cosmictest
func BenchmarkAutoscale(b *testing.B) {
	// The ramp sends more than a key's default 600 requests a minute.
	e := NewEnv(b, withLlama(b), atDefaultHeartbeat, func(c *platform.Config) { c.Proxy.RequestsPerMinute = -1 })
	args := map[string]string{"ctx-size": "2048", "parallel": "2", "threads": "1", "threads-batch": "1"}
	type variant struct {
		name string
		spec cosmic.Spec
	}
	var vs []variant
	for _, v := range []struct {
		name     string
		replicas int
		auto     *cosmic.Autoscaling
	}{{"fixed1", 1, nil}, {"fixed3", 3, nil}, {"auto", 1, &cosmic.Autoscaling{MinReplicas: 0, MaxReplicas: 3, TargetInFlight: 2, ScaleDownDelay: 10}}} {
		spec := inference(v.name, cosmic.RuntimeLlamaCPP, testmodel.ChatModel, v.replicas, 1)
		spec.Inference.Args, spec.Inference.Autoscaling = args, v.auto
		vs = append(vs, variant{v.name, spec})
	}
	key, err := e.Client.CreateAPIKey(e.Ctx, "bench", "")
	if err != nil {
		b.Fatal(err)
	}
	url := e.P.URL + inferproxy.Prefix + "/chat/completions"
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	ramp := []int{1, 2, 4, 6, 2}
	const step = 6 * time.Second
	for b.Loop() {
		for _, v := range vs {
			j := e.Create(v.spec)
			e.WaitState(j.ID, cosmic.StateRunning)
			e.waitReplicas(j.ID, v.spec.Inference.Replicas)
			// Sample the replicas the job holds while the ramp runs.
			var held atomic.Int64 // replica-milliseconds
			sctx, stopSampling := context.WithCancel(e.Ctx)
			var sampling sync.WaitGroup
			sampling.Go(func() {
				t := time.NewTicker(250 * time.Millisecond)
				defer t.Stop()
				for {
					select {
					case <-sctx.Done():
						return
					case <-t.C:
						if got, err := e.Client.GetJob(e.Ctx, j.ID); err == nil {
							held.Add(int64(got.Spec.Replicas()) * 250)
						}
					}
				}
			})
			var all, peak routeStats
			n := 0
			for _, conc := range ramp {
				var mu sync.Mutex
				var got routeStats
				stepCtx, cancel := context.WithTimeout(e.Ctx, step)
				var wg sync.WaitGroup
				for c := range conc {
					wg.Go(func() {
						for i := 0; stepCtx.Err() == nil; i++ {
							msgs := []chatTurn{{"user", fmt.Sprintf("Request %d.%d.%d: %s", n, c, i, prose("", 400, uint64(n*1000+c*100+i)))}}
							s := chatStream(e.Ctx, hc, url, "Bearer "+key.Key, v.name, msgs)
							mu.Lock()
							got.add(s)
							mu.Unlock()
						}
					})
				}
				wg.Wait()
				cancel()
				n++
				all.add(got)
				if conc >= 4 {
					peak.add(got)
				}
			}
			stopSampling()
			sampling.Wait()
			if all.errs > 0 {
				b.Errorf("%s: %d requests failed, the first: %s", v.name, all.errs, all.firstErr)
			}
			b.ReportMetric(ms(mean(all.ttft)), v.name+"-ttft-mean-ms")
			b.ReportMetric(ms(pct(all.ttft, 99)), v.name+"-ttft-p99-ms")
			b.ReportMetric(ms(pct(peak.ttft, 99)), v.name+"-peak-ttft-p99-ms")
			b.ReportMetric(float64(len(all.ttft)), v.name+"-requests")
			b.ReportMetric(float64(all.errs), v.name+"-failed")
			b.ReportMetric(float64(held.Load())/1000, v.name+"-replica-s")
			if v.spec.Inference.Autoscaling == nil {
				e.deleteJob(j.ID)
				continue
			}
			// Idle: to zero replicas, then three wakes.
			t0 := time.Now()
			e.waitZero(j.ID)
			b.ReportMetric(time.Since(t0).Seconds(), v.name+"-to-zero-s")
			var wakes []time.Duration
			for i := range 3 {
				if i > 0 {
					e.waitZero(j.ID)
				}
				s := chatStream(e.Ctx, hc, url, "Bearer "+key.Key, v.name, []chatTurn{{"user", fmt.Sprintf("Wake %d.", i)}})
				if s.errs > 0 || len(s.ttft) != 1 {
					b.Fatalf("wake %d: %s", i, s.firstErr)
				}
				wakes = append(wakes, s.ttft[0])
			}
			b.ReportMetric(ms(mean(wakes)), v.name+"-wake-mean-ms")
			b.ReportMetric(ms(pct(wakes, 100)), v.name+"-wake-max-ms")
			e.deleteJob(j.ID)
		}
	}
}

// waitZero waits until the autoscaled job is at zero replicas.
func (e *Env) waitZero(id string) {
	e.T.Helper()
	waittest.NoErrorWithin(e.T, 2*time.Minute, func() error {
		if j := e.job(id); j.Spec.Replicas() != 0 || len(j.Status.Replicas) != 0 {
			return fmt.Errorf("%d replicas", j.Spec.Replicas())
		}
		return nil
	}, "job %s at zero replicas", id)
}

// deleteJob kills and deletes a job and waits for it to go.
func (e *Env) deleteJob(id string) {
	e.T.Helper()
	if _, err := e.Client.KillJob(e.Ctx, id); err != nil {
		e.T.Fatal(err)
	}
	if _, err := e.Client.DeleteJob(e.Ctx, id, false); err != nil {
		e.T.Fatal(err)
	}
	e.WaitGone(id)
}
