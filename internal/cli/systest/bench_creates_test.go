package systest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/apiv1"
	"github.com/cosmicac/cosmicac/internal/benchtest"
	"github.com/cosmicac/cosmicac/internal/client"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/store/postgres/pgtest"
)

// TestBenchCreates measures creates per second through the API with the
// components as processes (wrk-ork, a simulated rack, one or two
// app-nodes), on SQLite and on PostgreSQL in one run: 16 clients create
// jobs for a fixed time, spread over the app-nodes; each create is
// validated, stored and queued by the ork (the rack fills at once, so
// the rest wait in the queue, as BenchmarkAPI's creates do). It is a
// benchmark, not a test: it runs only with COSMICAC_BENCH=1, without
// -race:
//
//	COSMICAC_BENCH=1 go test -run TestBenchCreates -v ./internal/cli/
func TestBenchCreates(t *testing.T) {
	if os.Getenv("COSMICAC_BENCH") == "" {
		t.Skip("set COSMICAC_BENCH=1 to run the creates benchmark")
	}
	d := 10 * time.Second
	if v := os.Getenv("COSMICAC_BENCH_CREATES_FOR"); v != "" {
		var err error
		if d, err = time.ParseDuration(v); err != nil {
			t.Fatalf("COSMICAC_BENCH_CREATES_FOR: %v", err)
		}
	}
	loadBefore := benchtest.LoadAverage()
	var table strings.Builder
	fmt.Fprintf(&table, "\n| store | app-nodes | clients | creates/s | p50 | p99 | errors |\n|---|---|---|---|---|---|---|\n")
	for _, c := range []struct {
		name string
		pg   bool
		apps int
	}{{"sqlite-1", false, 1}, {"postgres-1", true, 1}, {"postgres-2", true, 2}} {
		t.Run(c.name, func(t *testing.T) {
			var db []string
			store := "SQLite"
			if c.pg {
				db, store = []string{"--database", pgtest.DSN(t)}, "PostgreSQL"
			}
			clients := createsPlatform(t, db, c.apps)
			r := createBurst(t, clients, 16, d)
			fmt.Fprintf(&table, "| %s | %d | 16 | %.0f | %.1f ms | %.1f ms | %d |\n", store, c.apps, r.perSecond,
				ms(r.p50), ms(r.p99), r.errors)
		})
	}
	t.Logf("%s\n%s, %s each", table.String(), benchtest.Machine(loadBefore), d)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// createsPlatform starts wrk-ork, a simulated rack of 4 × 8 GPUs and apps
// app-nodes as processes, the ork and the app-nodes with dbFlags, and
// returns an admin client of each app-node.
func createsPlatform(t *testing.T, dbFlags []string, apps int) []*client.Client {
	t.Helper()
	base := t.TempDir()
	names := []string{"ork", "sim"}
	for i := range apps {
		names = append(names, fmt.Sprint("app", i))
	}
	dirs, keys := identities(t, base, names...)
	orkArgs := []string{"wrk-ork", "--data-dir", dirs["ork"], "--listen", freePort(t), "--heartbeat", "50ms"}
	for i := range apps {
		orkArgs = append(orkArgs, "--app-node-key", keys[fmt.Sprint("app", i)].String())
	}
	ork := component(t, []string{"fabric"}, append(orkArgs, dbFlags...)...)["fabric"]
	sim := component(t, []string{"fabric"}, "wrk-server-sim", "--data-dir", dirs["sim"], "--listen", "127.0.0.1:0",
		"--ork", ork, "--step", "5ms", "--rack", "r1", "--location", "eu", "--nodes", "4", "--gpus-per-node", "8")["fabric"]
	var apis []string
	for i := range apps { // one after the other: the first makes the admin
		apis = append(apis, component(t, []string{"api"}, append([]string{"app-node", "--data-dir", dirs[fmt.Sprint("app", i)],
			"--listen", "127.0.0.1:0", "--ork", ork, "--api-listen", freePort(t)}, dbFlags...)...)["api"])
	}
	tok, err := os.ReadFile(filepath.Join(dirs["app0"], "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	var out []*client.Client
	for _, api := range apis {
		out = append(out, client.New(strings.TrimSuffix(api, "/api/v1"), strings.TrimSpace(string(tok))))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, simAddrs, err := fabric.ParsePeer(sim)
	if err != nil {
		t.Fatal(err)
	}
	rack, err := out[0].RegisterRack(ctx, apiv1.RegisterRack{ID: "r1", Location: "eu", GPUModel: "GH100_H100_SXM5_80GB",
		WorkerKey: keys["sim"].String(), WorkerAddrs: simAddrs})
	if err != nil || !rack.Reachable {
		t.Fatalf("register rack = %+v, %v", rack, err)
	}
	return out
}

type burstResult struct {
	perSecond float64
	p50, p99  time.Duration
	errors    int
}

// createBurst has n goroutines create 8-GPU jobs for d, each through the
// clients in turn, and returns the acknowledged creates per second and
// their latencies.
func createBurst(t *testing.T, clients []*client.Client, n int, d time.Duration) burstResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d+time.Minute)
	defer cancel()
	var (
		mu   sync.Mutex
		lat  []time.Duration
		errs int
		wg   sync.WaitGroup
	)
	start := time.Now()
	end := start.Add(d)
	for g := range n {
		wg.Go(func() {
			for i := 0; time.Now().Before(end); i++ {
				c := clients[(g+i)%len(clients)]
				t0 := time.Now()
				_, err := c.CreateJob(ctx, cosmic.Spec{Type: cosmic.TypeGPUContainer, Name: fmt.Sprintf("b-%d-%d", g, i), Location: "eu",
					Image: "ubuntu:24.04", Resources: cosmic.Resources{GPU: 8}})
				el := time.Since(t0)
				mu.Lock()
				if err != nil {
					if errs++; errs == 1 {
						t.Logf("a create failed: %v", err)
					}
				} else {
					lat = append(lat, el)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	if len(lat) == 0 {
		t.Fatal("no create acknowledged")
	}
	slices.Sort(lat)
	return burstResult{perSecond: float64(len(lat)) / took.Seconds(), p50: lat[len(lat)/2], p99: lat[len(lat)*99/100], errors: errs}
}
