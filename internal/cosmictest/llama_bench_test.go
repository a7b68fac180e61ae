package cosmictest

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/benchtest"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/gguf/testmodel"
	"github.com/cosmicac/cosmicac/internal/inferproxy"
	"github.com/cosmicac/cosmicac/internal/ork"
	"github.com/cosmicac/cosmicac/internal/platform"
)

// BenchmarkLlamaStreams measures streamed chat completions from a real
// llama-server (the simulated rack's llama.cpp replica, on the test chat
// model) six ways in one run: direct to the engine's own socket (no
// platform at all); through the standard library's reverse proxy (the
// ideal baseline of one gateway hop, on the engine's host); through two of
// them with TLS between (the ideal baseline of the platform's topology: a
// gateway reaching an engine on another host over an encrypted link,
// through a hop beside the engine); through nginx the same two ways (when
// nginx is installed: hack/bench.sh installs it); and through proxy-inference (the
// gateway path: API key, routing, limits, the fabric stream to the agent,
// the agent's relay). Each op is a round of c concurrent streams of 32
// tokens on each path in turn (ignore_eos, so every stream is as long); it
// reports time to first token and between tokens (p50, p99 over the run's
// streams) and tokens a second, for each path, and the connections the
// proxy opened to the agent (agent-conns: one per concurrent stream, kept
// alive across the rounds). A stream that fails fails the benchmark on the
// proxy's path; on a baseline's it is logged and counted (PATH-failed),
// and left out of the figures. docs/benchmarks.md, "Inference on a real
// engine".
//
//	COSMICAC_LLAMA_SERVER=$(hack/build-llama.sh --print-dest)/bin/llama-server \
//	  go test -run '^$' -bench LlamaStreams -benchtime 60x ./internal/cosmictest
func BenchmarkLlamaStreams(b *testing.B) {
	e := NewEnv(b, withLlama(b), atDefaultHeartbeat)
	chat := inference("bench", cosmic.RuntimeLlamaCPP, testmodel.ChatModel, 1, 1)
	chat.Inference.Args = map[string]string{"ctx-size": "4096", "parallel": "16"}
	// COSMICAC_BENCH_LLAMA_THREADS leaves the platform cores of its own:
	// on a CPU engine the proxy path and the engine share the machine,
	// which a GPU engine does not.
	if v := os.Getenv("COSMICAC_BENCH_LLAMA_THREADS"); v != "" {
		chat.Inference.Args["threads"], chat.Inference.Args["threads-batch"] = v, v
	}
	j, key := e.serving(chat, "bench")
	socket := ""
	for _, r := range e.P.Logs.Job(j.ID) {
		if r.Step == "runtime_start" {
			if f := strings.Fields(r.Line); slices.Contains(f, "--host") {
				socket = f[slices.Index(f, "--host")+1]
			}
		}
	}
	if !strings.HasSuffix(socket, ".sock") {
		b.Fatalf("no socket in the runtime's start: %q", socket)
	}
	var dials atomic.Int64 // connections opened to the engine's socket, by the direct path and the baseline proxy
	// A connection per request to the engine, as the agent does:
	// llama-server closes its connections after a streamed answer, and a
	// POST on a connection it has just closed fails.
	toEngine := &http.Transport{DisableKeepAlives: true,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			dials.Add(1)
			return (&net.Dialer{}).DialContext(ctx, "unix", socket)
		}}
	direct := &http.Client{Transport: toEngine}
	// The ideal baseline of a gateway: the standard library's reverse
	// proxy on loopback in front of the engine, flushing every write, with
	// no key, no routing and no fabric.
	rp := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) { r.Out.URL.Scheme, r.Out.URL.Host = "http", "llama" },
		Transport: toEngine, FlushInterval: -1}
	rpSrv := httptest.NewServer(rp)
	defer rpSrv.Close()
	// The ideal baseline of the same topology: a gateway that reaches an
	// engine on another host (in a tenant's VM) over an encrypted link,
	// through a hop beside the engine. Two of those reverse proxies, TLS
	// between them (keep-alive), the second on the engine's socket.
	side := httptest.NewTLSServer(rp)
	defer side.Close()
	tlsTr := side.Client().Transport.(*http.Transport).Clone()
	tlsTr.MaxIdleConnsPerHost = 64
	sideURL, _ := url.Parse(side.URL)
	gw := httptest.NewServer(&httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(sideURL) },
		Transport: tlsTr, FlushInterval: -1})
	defer gw.Close()
	client := func() *http.Client { return &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}} }
	type path struct {
		name  string
		c     *http.Client
		url   string
		model string
		auth  string
	}
	paths := []path{
		{"direct", direct, "http://llama/v1/chat/completions", "bench", ""},
		{"reverseproxy", client(), rpSrv.URL + "/v1/chat/completions", "bench", ""},
		{"two-reverseproxies-tls", client(), gw.URL + "/v1/chat/completions", "bench", ""},
	}
	// nginx (Debian's, when installed) the same two ways: one hop on the
	// engine's socket, and two with TLS between them (TLS 1.3, the
	// certificate checked, sessions and connections kept).
	if ng, ok := benchtest.StartNginx(b, "unix:"+socket, benchtest.NginxOptions{}); ok {
		cert := benchtest.NewCert(b)
		in, _ := benchtest.StartNginx(b, "unix:"+socket, benchtest.NginxOptions{ServeTLS: cert})
		out, _ := benchtest.StartNginx(b, in.Addr(), benchtest.NginxOptions{UpstreamTLS: cert})
		paths = append(paths, path{"nginx", client(), ng.URL + "/v1/chat/completions", "bench", ""},
			path{"two-nginx-tls", client(), out.URL + "/v1/chat/completions", "bench", ""})
	}
	paths = append(paths, path{"proxy", client(), e.P.URL + inferproxy.Prefix + "/chat/completions", "bench", "Bearer " + key})
	const tokens = 32
	for _, conc := range []int{1, 4, 16} {
		b.Run(fmt.Sprintf("streams=%d", conc), func(b *testing.B) {
			type stats struct {
				ttft, itl []time.Duration
				tokens    int
				took      time.Duration
				failed    int
			}
			got := make([]stats, len(paths))
			var mu sync.Mutex
			for round := 0; b.Loop(); round++ {
				// One round on each path, in turn, each round starting at
				// the next path: what loads the machine meanwhile, and
				// what a round leaves the engine in, weigh on all alike.
				for k := range paths {
					i := (round + k) % len(paths)
					p := paths[i]
					body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"Tell me a story."}],"max_tokens":%d,"ignore_eos":true,"stream":true}`, p.model, tokens)
					t0 := time.Now()
					var wg sync.WaitGroup
					for range conc {
						wg.Go(func() {
							first, gaps, n, err := stream(e.Ctx, p.c, p.url, p.auth, body)
							if err != nil {
								if p.name == "proxy" {
									b.Error(err)
									return
								}
								// A baseline's failure is counted and said,
								// not the run's end: the standard library's
								// reverse proxy in front of llama-server
								// has cut a stream now and then ("use of
								// closed network connection" reading the
								// engine's socket; docs/benchmarks.md).
								b.Logf("%s: %v", p.name, err)
								mu.Lock()
								got[i].failed++
								mu.Unlock()
								return
							}
							mu.Lock()
							got[i].ttft = append(got[i].ttft, first)
							got[i].itl = append(got[i].itl, gaps...)
							got[i].tokens += n
							mu.Unlock()
						})
					}
					wg.Wait()
					got[i].took += time.Since(t0)
				}
			}
			b.ReportMetric(float64(dials.Load()), "engine-dials")
			b.ReportMetric(e.metricSum("cosmicac_inference_agent_connections_total"), "agent-conns")
			for i, p := range paths {
				g := got[i]
				b.ReportMetric(ms(pct(g.ttft, 50)), p.name+"-ttft-p50-ms")
				b.ReportMetric(ms(pct(g.ttft, 99)), p.name+"-ttft-p99-ms")
				b.ReportMetric(ms(pct(g.itl, 50)), p.name+"-itl-p50-ms")
				b.ReportMetric(ms(pct(g.itl, 99)), p.name+"-itl-p99-ms")
				b.ReportMetric(float64(g.tokens)/g.took.Seconds(), p.name+"-tok/s")
				if g.failed > 0 {
					b.ReportMetric(float64(g.failed), p.name+"-failed")
				}
			}
		})
	}
}

// atDefaultHeartbeat runs the ork at its default heartbeat: the test
// environment's 50 ms reconciles twenty times a second, work that no
// serving path does and that a serving benchmark would measure.
func atDefaultHeartbeat(c *platform.Config) { c.Ork.Heartbeat = ork.DefaultConfig().Heartbeat }

// stream posts a streamed chat and answers the time to its first content
// event, the gaps between the content events after it, and their count.
func stream(ctx context.Context, c *http.Client, url, auth, body string) (time.Duration, []time.Duration, int, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	t0 := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, nil, 0, fmt.Errorf("%s: %s", url, resp.Status)
	}
	var (
		first time.Duration
		gaps  []time.Duration
		last  time.Time
		n     int
	)
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "data: {") || !strings.Contains(line, `"content":"`) {
			continue
		}
		now := time.Now()
		if n == 0 {
			first = now.Sub(t0)
		} else {
			gaps = append(gaps, now.Sub(last))
		}
		last = now
		n++
	}
	return first, gaps, n, sc.Err()
}

// pct is the p-th percentile of ds (nearest rank).
func pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, (len(s)*p+99)/100-1)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// metricSum sums a metric's samples on the platform's /metrics: those of
// name, which may end in a whole label set.
func (e *Env) metricSum(name string) float64 {
	e.T.Helper()
	resp, err := http.Get(e.P.MetricsURL + "/metrics")
	if err != nil {
		e.T.Fatal(err)
	}
	defer resp.Body.Close()
	sum := 0.0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, name); ok && rest != "" && (rest[0] == ' ' || rest[0] == '{') {
			f := strings.Fields(line)
			v, err := strconv.ParseFloat(f[len(f)-1], 64)
			if err != nil {
				e.T.Fatalf("%s: %v", line, err)
			}
			sum += v
		}
	}
	return sum
}
