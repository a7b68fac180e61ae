package inferproxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/appnode"
	"github.com/cosmicac/cosmicac/internal/benchtest"
	"github.com/cosmicac/cosmicac/internal/config"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/simruntime"
	"github.com/cosmicac/cosmicac/internal/store/sqlite"
)

// TestBenchInference measures the whole path (client → proxy → fabric →
// agent → runtime) against calling the runtime directly, next to a plain
// httputil.ReverseProxy, nginx (when installed) with one hop, with two (a
// second nginx in front of the first) and with two that have TLS between
// them (the platform's topology), and two chained Go byte relays without
// and with TLS between them (the least two Go hops cost: the floor), all
// in front of the same runtime (benchtest's baselines), in
// interleaved rounds in one run. CosmicAC's path runs twice: its proxy and
// agent in the test process, and each in a process of its own (hops_test.go),
// as nginx runs. The client and the runtime are in the test process for
// every path. It prints the table of docs/benchmarks.md, "Inference". Run
// it with
//
//	COSMICAC_BENCH=1 go test -run TestBenchInference -v ./internal/inferproxy/
func TestBenchInference(t *testing.T) {
	if os.Getenv("COSMICAC_BENCH") == "" {
		t.Skip("set COSMICAC_BENCH=1 to run the inference benchmark")
	}
	rounds := envInt("COSMICAC_BENCH_ROUNDS", 5)
	seqN := envInt("COSMICAC_BENCH_SEQ", 400)
	parDur := time.Duration(envInt("COSMICAC_BENCH_PAR_MS", 1000)) * time.Millisecond
	streams := envInt("COSMICAC_BENCH_STREAMS", 20)

	// One runtime behind every path. The agent's runtime is the same
	// simruntime, started by its launcher; the direct, ReverseProxy and
	// nginx paths call that very runtime.
	var emitted sync.Map // completion id → []time.Time
	ttft := time.Duration(envInt("COSMICAC_BENCH_TTFT_US", 0)) * time.Microsecond
	sim := simruntime.Config{TTFT: ttft, InterTokenDelay: 2 * time.Millisecond, OnEvent: func(id string, i int, at time.Time) {
		v, _ := emitted.LoadOrStore(id, &eventTimes{})
		v.(*eventTimes).add(i, at)
	}}
	in := benchInference()
	sim.Runtime, sim.Model, sim.ServedModelName = string(in.Runtime), in.Model, in.ServedModelName
	var rt *simruntime.Running
	var err error
	hopLabel("runtime", func() { rt, err = simruntime.Start("127.0.0.1:0", simruntime.New(sim)) })
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	var h *harness
	hopLabel("proxy", func() { h = newHarness(t, Config{MaxConcurrentPerKey: -1, RequestsPerMinute: -1}) })
	h.launcher = runtimeAt(rt.Addr())
	hopLabel("agent", func() { h.addJobSpec(benchJob, benchTeam, in, 1, 1, sim) })
	h.waitReady(benchJob, 1)
	key := h.keys[benchTeam]

	target, _ := url.Parse(rt.URL())
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.FlushInterval = -1
	rp.Transport = &http.Transport{MaxIdleConnsPerHost: 256}
	rpSrv := httptest.NewServer(rp)
	defer rpSrv.Close()

	paths := []benchPath{
		{name: "direct (runtime)", url: rt.URL() + "/v1"},
		{name: "httputil.ReverseProxy", url: rpSrv.URL + "/v1"},
	}
	cert := benchtest.NewCert(t)
	if ng, ok := benchtest.StartNginx(t, rt.Addr(), benchtest.NginxOptions{}); ok {
		name := "nginx " + benchtest.NginxVersion()
		paths = append(paths, benchPath{name: name, url: ng.URL + "/v1", pids: []int{ng.PID}})
		// CosmicAC's path has two hops: so has this one, a second nginx in
		// front of the first.
		ng2, _ := benchtest.StartNginx(t, ng.Addr(), benchtest.NginxOptions{})
		paths = append(paths, benchPath{name: name + ", two hops (nginx → nginx)", url: ng2.URL + "/v1", pids: []int{ng.PID, ng2.PID}})
		// And the platform's topology done by nginx: the hop beside the
		// runtime is reached over TLS (TLS 1.3, the certificate checked,
		// sessions and connections kept), as the proxy reaches the agent.
		in, _ := benchtest.StartNginx(t, rt.Addr(), benchtest.NginxOptions{ServeTLS: cert})
		out, _ := benchtest.StartNginx(t, in.Addr(), benchtest.NginxOptions{UpstreamTLS: cert})
		paths = append(paths, benchPath{name: name + ", two hops, TLS between (nginx → TLS → nginx)", url: out.URL + "/v1", pids: []int{in.PID, out.PID}})
	}
	// The least two Go hops can cost: byte relays with no TLS and no HTTP;
	// then the same with TLS between them, the platform's topology with
	// neither an HTTP parser nor a check.
	relays := benchtest.StartRelay(t, benchtest.StartRelay(t, rt.Addr(), nil, nil), nil, nil)
	paths = append(paths, benchPath{name: "two Go TCP relays (io.Copy → io.Copy)", url: "http://" + relays + "/v1"})
	tlsRelays := benchtest.StartRelay(t, benchtest.StartRelay(t, rt.Addr(), cert, nil), nil, cert)
	paths = append(paths, benchPath{name: "two Go relays, TLS between (io.Copy → TLS → io.Copy)", url: "http://" + tlsRelays + "/v1"})
	hopsURL, hopsKey, hopPIDs := startHops(t, rt.Addr())
	paths = append(paths,
		benchPath{name: "CosmicAC (proxy → fabric → agent), in the test process", url: h.srv.URL + Prefix, key: key},
		benchPath{name: "CosmicAC, proxy and agent each in a process of its own", url: hopsURL, key: hopsKey, pids: hopPIDs})
	// COSMICAC_BENCH_ONLY keeps the direct path and those whose name
	// contains it (to profile one path); the table is then partial.
	if only := os.Getenv("COSMICAC_BENCH_ONLY"); only != "" {
		paths = slices.DeleteFunc(paths, func(p benchPath) bool { return p.name != "direct (runtime)" && !strings.Contains(p.name, only) })
	}

	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256, DisableCompression: true}}
	body := []byte(`{"model":"m","prompt":"hello","max_tokens":1}`)
	streamBody := []byte(`{"model":"m","messages":[{"role":"user","content":"hello"}],"stream":true,"max_tokens":20}`)
	do := func(p *benchPath, path string, b []byte) (*http.Response, error) {
		req, _ := http.NewRequest("POST", p.url+path, bytes.NewReader(b))
		req.Header.Set("Content-Type", "application/json")
		if p.key != "" {
			req.Header.Set("Authorization", "Bearer "+p.key)
		}
		return client.Do(req)
	}
	loadBefore := benchtest.LoadAverage()
	// The client's goroutines (this one, the 8 below, its transport's).
	pprof.SetGoroutineLabels(pprof.WithLabels(context.Background(), pprof.Labels("hop", "client")))
	defer pprof.SetGoroutineLabels(context.Background())
	// Warm up every path (connections, pools).
	for i := range paths {
		for range 200 {
			resp, err := do(&paths[i], "/completions", body)
			if err != nil {
				t.Fatalf("%s: %v", paths[i].name, err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
	for round := 0; round < rounds; round++ {
		for i := range paths {
			p := &paths[i]
			// Sequential latency.
			for range seqN {
				t0 := time.Now()
				resp, err := do(p, "/completions", body)
				if err != nil {
					t.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					t.Fatalf("%s: %s", p.name, resp.Status)
				}
				p.lat = append(p.lat, time.Since(t0))
			}
			// Throughput: 8 clients for parDur.
			var n atomic.Int64
			cpu0 := p.cpuTime()
			stop := time.Now().Add(parDur)
			var wg sync.WaitGroup
			for range 8 {
				wg.Go(func() {
					for time.Now().Before(stop) {
						resp, err := do(p, "/completions", body)
						if err != nil {
							return
						}
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						n.Add(1)
					}
				})
			}
			wg.Wait()
			p.rps = append(p.rps, float64(n.Load())/parDur.Seconds())
			if cpu := p.cpuTime() - cpu0; cpu > 0 && n.Load() > 0 {
				p.cpu = append(p.cpu, float64(cpu.Microseconds())/float64(n.Load()))
			}
			// SSE: the delay from the runtime writing each event to the
			// client reading it.
			for range streams {
				resp, err := do(p, "/chat/completions", streamBody)
				if err != nil {
					t.Fatal(err)
				}
				br := bufio.NewReader(resp.Body)
				idx := 0
				for {
					line, err := br.ReadBytes('\n')
					if err != nil {
						break
					}
					at := time.Now()
					if !bytes.HasPrefix(line, []byte("data: {")) {
						continue
					}
					var c struct{ ID string }
					json.Unmarshal(line[6:], &c)
					if v, ok := emitted.Load(c.ID); ok {
						if e, ok := v.(*eventTimes).get(idx); ok {
							p.event = append(p.event, at.Sub(e))
						}
					}
					idx++
				}
				resp.Body.Close()
			}
		}
	}
	direct := paths[0]
	dp50, dp99 := pct(direct.lat, 50), pct(direct.lat, 99)
	drps := median(direct.rps)
	de50 := pct(direct.event, 50)
	var b strings.Builder
	fmt.Fprintf(&b, "\n%s\n", benchtest.Machine(loadBefore))
	fmt.Fprintf(&b, "runtime time to first token %v; %d interleaved rounds; per round and path: %d sequential requests, 8 clients for %v, %d streams of 20 events\n\n", ttft, rounds, seqN, parDur, streams)
	fmt.Fprintf(&b, "| path | p50 | p99 | added p50 | added p99 | req/s (8 clients) | vs direct | CPU µs/request (8 clients) | added CPU µs/request | SSE event p50 | added per event p50 |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, p := range paths {
		p50, p99 := pct(p.lat, 50), pct(p.lat, 99)
		e50 := pct(p.event, 50)
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %.0f | %.2f | %.0f | %.0f | %s | %s |\n", p.name, us(p50), us(p99), us(p50-dp50), us(p99-dp99),
			median(p.rps), median(p.rps)/drps, median(p.cpu), median(p.cpu)-median(direct.cpu), us(e50), us(e50-de50))
	}
	t.Log(b.String())
}

type benchPath struct {
	name, url, key string
	lat, event     []time.Duration
	pids           []int // processes of the path's own (nginx; CosmicAC's hops), whose CPU counts too
	rps            []float64
	cpu            []float64 // CPU µs per request while 8 clients ran (this process and pids)
}

// cpuTime is the CPU time the test process and the path's own processes
// have used.
func (p *benchPath) cpuTime() time.Duration {
	d := cpuTime(os.Getpid(), false)
	for _, pid := range p.pids {
		d += cpuTime(pid, true)
	}
	return d
}

type eventTimes struct {
	mu sync.Mutex
	t  []time.Time
}

func (e *eventTimes) add(i int, at time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for len(e.t) <= i {
		e.t = append(e.t, time.Time{})
	}
	e.t[i] = at
}

func (e *eventTimes) get(i int) (time.Time, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if i < len(e.t) && !e.t[i].IsZero() {
		return e.t[i], true
	}
	return time.Time{}, false
}

func pct(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

func us(d time.Duration) string { return fmt.Sprintf("%.0f µs", float64(d.Nanoseconds())/1000) }

// hopLabel runs f with the profiler label hop=name, which every goroutine
// f starts inherits: a CPU profile of TestBenchInference (-cpuprofile) then
// splits by where the time went (go tool pprof -tags; -tagfocus
// hop=proxy). The hops of the in-process path are "proxy" (its HTTP server,
// its fabric node, the handler's writes and reads on the stream; also the
// harness's directory node, idle once the replica is found) and "agent"
// (its fabric node and relay); "runtime" and "client" are common to every
// path, and the other paths' hops carry no label.
func hopLabel(name string, f func()) {
	pprof.Do(context.Background(), pprof.Labels("hop", name), func(context.Context) { f() })
}

func envInt(name string, def int) int {
	var v int
	if _, err := fmt.Sscan(os.Getenv(name), &v); err != nil || v <= 0 {
		return def
	}
	return v
}

// cpuTime is the user and system CPU time pid has used, and with children
// that of the children its main thread started (/proc/PID/stat; 0 for pid
// 0 or without /proc). With one worker, nginx's master forks the worker, so
// its children's time counts; the test process's children are paths of
// their own, counted there.
func cpuTime(pid int, children bool) time.Duration {
	if pid == 0 {
		return 0
	}
	var total time.Duration
	pids := []int{pid}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid)); err == nil && children {
		for _, f := range strings.Fields(string(b)) {
			var c int
			if _, err := fmt.Sscan(f, &c); err == nil {
				pids = append(pids, c)
			}
		}
	}
	for _, p := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p))
		if err != nil {
			continue
		}
		// Fields after the command (which may hold spaces): state is
		// field 3, utime and stime fields 14 and 15, in clock ticks
		// (USER_HZ, 100 on Linux).
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) < 13 {
			continue
		}
		var ut, st int64
		fmt.Sscan(f[11], &ut)
		fmt.Sscan(f[12], &st)
		total += time.Duration(ut+st) * 10 * time.Millisecond
	}
	return total
}

// BenchmarkKeyCheck is the API-key check of every request (the proxy's
// authenticate: the key cache, the store read on a miss, the key's times
// and models) against the real SQLite store, for KeyTTL 10s (before
// revocation within a second), 1s (the default) and 0 (no cache: a store
// read per request), in one run. The cache's clock advances 10 ms a
// request: one key sending 100 requests a second, so a 1 s TTL misses
// once in 100 requests and a 10 s TTL once in 1,000. docs/benchmarks.md,
// "API keys".
func BenchmarkKeyCheck(b *testing.B) {
	st, err := sqlite.Open(filepath.Join(b.TempDir(), "db"))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	ctx := b.Context()
	if err := st.CreateTeam(ctx, cosmic.Team{Name: "team-a"}); err != nil {
		b.Fatal(err)
	}
	k, secret, err := appnode.NewAPIKey("bench", "team-a", "ann", time.Now())
	if err != nil {
		b.Fatal(err)
	}
	k.ExpiresAt, k.Models = time.Now().Add(24*time.Hour), []string{"qwen"}
	if err := st.CreateAPIKey(ctx, k); err != nil {
		b.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		ttl  time.Duration
	}{{"ttl=10s", 10 * time.Second}, {"ttl=1s", time.Second}, {"ttl=0", time.Nanosecond}} {
		b.Run(tt.name, func(b *testing.B) {
			p := keyProxy(Config{KeyTTL: config.Duration(tt.ttl)}, st)
			now := time.Now()
			p.keys.now = func() time.Time { return now }
			r := httptest.NewRequest(http.MethodPost, Prefix+"/chat/completions", nil)
			r.Header.Set("Authorization", "Bearer "+secret)
			w := httptest.NewRecorder()
			b.ReportAllocs()
			for b.Loop() {
				now = now.Add(10 * time.Millisecond)
				c, ok := p.authenticate(w, r)
				if !ok || !c.allows(Model{Name: "qwen", Team: c.team}) {
					b.Fatalf("refused: %d %s", w.Code, w.Body)
				}
			}
		})
	}
}

// BenchmarkRequest is one sequential completion through the whole path
// (client → proxy → fabric → agent → runtime) and, in the same run,
// straight to the runtime: the difference in allocs/op and B/op is what the
// two hops allocate per request (client and runtime are in both).
// docs/benchmarks.md, "Inference". COSMICAC_BENCH_TTFT_US sets the
// runtime's time to first token, as for TestBenchInference.
//
//	go test -run '^$' -bench BenchmarkRequest -benchtime 2000x ./internal/inferproxy/
func BenchmarkRequest(b *testing.B) {
	h := newHarness(b, Config{MaxConcurrentPerKey: -1, RequestsPerMinute: -1})
	h.addJob("job-bench", "team-a", "m", cosmic.RuntimeVLLM, 1, 1, true, simruntime.Config{TTFT: time.Duration(envInt("COSMICAC_BENCH_TTFT_US", 0)) * time.Microsecond})
	h.waitReady("job-bench", 1)
	rt := h.agents["job-bench"][0].sim.Runtime()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16, DisableCompression: true}}
	body := []byte(`{"model":"m","prompt":"hello","max_tokens":1}`)
	for _, p := range []benchPath{
		{name: "direct", url: rt.URL() + "/v1"},
		{name: "cosmicac", url: h.srv.URL + Prefix, key: h.keys["team-a"]},
	} {
		b.Run(p.name, func(b *testing.B) {
			do := func() {
				req, _ := http.NewRequest("POST", p.url+"/completions", bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				if p.key != "" {
					req.Header.Set("Authorization", "Bearer "+p.key)
				}
				resp, err := client.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					b.Fatalf("%s: %s", p.name, resp.Status)
				}
			}
			for range 100 {
				do() // warm the pools
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				do()
			}
		})
	}
}

// BenchmarkRequestHead reads a chat body's model and stream, as the proxy
// does for every JSON request, with parseHead and, in the same run, with
// encoding/json into a two-field struct (what it did before), for a short
// chat, a few turns and a long retrieved context. docs/benchmarks.md,
// "Reading the request's head".
//
//	go test -run '^$' -bench BenchmarkRequestHead ./internal/inferproxy/
func BenchmarkRequestHead(b *testing.B) {
	for _, size := range []int{300, 4 << 10, 128 << 10} {
		content := strings.Repeat(`a "quoted" passage, \u00e9, `, size/30)
		body, _ := json.Marshal(map[string]any{"model": "m", "stream": true, "max_tokens": 100,
			"messages": []map[string]string{{"role": "system", "content": "be brief"}, {"role": "user", "content": content}}})
		b.Run(fmt.Sprintf("parseHead/%dB", len(body)), func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if h, err := parseHead(body); err != nil || h.Model != "m" || !h.Stream {
					b.Fatal(h, err)
				}
			}
		})
		b.Run(fmt.Sprintf("encoding-json/%dB", len(body)), func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				var h struct {
					Model  string `json:"model"`
					Stream bool   `json:"stream"`
				}
				if err := json.Unmarshal(body, &h); err != nil || h.Model != "m" || !h.Stream {
					b.Fatal(h, err)
				}
			}
		})
	}
}

// BenchmarkReadBody reads a 136 KB JSON body as the proxy does for every
// JSON request (readBody). docs/benchmarks.md, "Reading the request's head".
//
//	go test -run '^$' -bench BenchmarkReadBody ./internal/inferproxy/
func BenchmarkReadBody(b *testing.B) {
	body := bytes.Repeat([]byte("x"), 136<<10)
	w := httptest.NewRecorder()
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		r := httptest.NewRequest(http.MethodPost, Prefix+"/chat/completions", bytes.NewReader(body))
		if got, ok := readBody(w, r, 1<<20); !ok || len(got) != len(body) {
			b.Fatal(ok, len(got))
		}
	}
}
