package cosmictest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/gguf/testmodel"
	"github.com/cosmicac/cosmicac/internal/inferproxy"
	"github.com/cosmicac/cosmicac/internal/platform"
)

// BenchmarkPrefixRouting compares the two routing policies on real
// llama.cpp replicas in one run: two jobs of the test chat model, three
// replicas each (the engine on one thread, four slots of 1024 tokens, no
// prompt cache in memory beyond the slots: a replica holds four prompts,
// half of the system prompts below, as a GPU's KV cache holds a part of a
// busy model's conversations), one routed least-outstanding, the other by
// prefix, and two workloads, each sent to both jobs turn by turn (the job
// that goes first alternating):
//
//   - shared: 24 users in conversations of 3 turns over 8 long system
//     prompts (about 700 tokens each; each turn resends the conversation
//     so far), 4 requests at a time;
//   - distinct: 48 requests, each with a system prompt of its own, 4 at a
//     time;
//   - shared8, distinct8: the same with prompts of their own, 8 at a
//     time;
//   - open50, open75, open100: an open loop, 48 users in conversations of
//     3 turns over 8 system prompts of its own, the requests arriving as a
//     Poisson process (the same arrivals for both policies) at half, three
//     quarters and all of least-outstanding's capacity on shared8.
//
// Each request streams 8 tokens. It reports, per workload and policy, the
// mean and p99 time to first token, tokens a second over the workload's
// time, the share of prompt tokens the engine took from its cache
// (llama-server's timings: cache_n / (cache_n + prompt_n)), and the mean
// time to first token of the requests that took at least half of their
// prompt from the cache (hits) and of the others (misses).
// docs/benchmarks.md, "Prefix-cache-aware routing".
//
//	COSMICAC_LLAMA_SERVER=$(hack/build-llama.sh --print-dest)/bin/llama-server \
//	  go test -run '^$' -bench PrefixRouting -benchtime 1x ./internal/cosmictest
func BenchmarkPrefixRouting(b *testing.B) {
	e := NewEnv(b, withLlama(b), atDefaultHeartbeat, func(c *platform.Config) { c.Proxy.RequestsPerMinute = -1 }) // the open loop's rates are above the default limit
	args := map[string]string{"ctx-size": "4096", "parallel": "4", "threads": "1", "threads-batch": "1", "cache-ram": "0"}
	if v := os.Getenv("COSMICAC_BENCH_LLAMA_THREADS"); v != "" {
		args["threads"], args["threads-batch"] = v, v
	}
	if v := os.Getenv("COSMICAC_BENCH_CACHE_RAM"); v != "" {
		args["cache-ram"] = v // MiB of prompt cache in memory beside the slots
	}
	policies := []cosmic.Routing{cosmic.RoutingLeastOutstanding, cosmic.RoutingPrefix}
	var jobs []cosmic.Job
	for _, pol := range policies {
		spec := inference(string(pol), cosmic.RuntimeLlamaCPP, testmodel.ChatModel, 3, 1)
		spec.Inference.Args, spec.Inference.Routing = args, pol
		jobs = append(jobs, e.Create(spec))
	}
	key, err := e.Client.CreateAPIKey(e.Ctx, "bench", "")
	if err != nil {
		b.Fatal(err)
	}
	for _, j := range jobs {
		e.WaitState(j.ID, cosmic.StateRunning)
		e.waitReplicas(j.ID, 3)
	}
	url := e.P.URL + inferproxy.Prefix + "/chat/completions"
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	for b.Loop() {
		var capacity float64 // least-outstanding's requests a second, 8 at a time, shared prefixes
		for _, conc := range []int{4, 8} {
			shared, distinct := prefixWorkloads(uint64(conc))
			for _, w := range []struct {
				name  string
				turns [][][]chatTurn
			}{{"shared", shared}, {"distinct", distinct}} {
				if conc != 4 {
					w.name += strconv.Itoa(conc)
				}
				got := make([]routeStats, len(policies))
				for t, reqs := range w.turns {
					for k := range policies {
						i := (t + k) % len(policies) // who goes first alternates
						t0 := time.Now()
						got[i].add(runRequests(e.Ctx, hc, url, "Bearer "+key.Key, string(policies[i]), reqs, conc))
						got[i].took += time.Since(t0)
					}
				}
				for i, pol := range policies {
					reportRoute(b, w.name+"-"+string(pol), got[i])
				}
				if w.name == "shared8" {
					capacity = float64(len(got[0].ttft)) / got[0].took.Seconds()
				}
			}
		}
		// The open loop: requests arrive at a rate (Poisson, the same
		// arrivals for both policies), as a service's users send them,
		// at half, three quarters and all of least-outstanding's capacity
		// measured above. At each rate 48 users over 8 system prompts of
		// its own, 3 turns each.
		b.ReportMetric(capacity, "least-outstanding-capacity-req/s")
		for k, share := range []float64{0.5, 0.75, 1} {
			shared, _ := prefixWorkloadsOf(uint64(16+k), 48)
			var reqs [][]chatTurn
			for _, turn := range shared {
				reqs = append(reqs, turn...)
			}
			got := make([]routeStats, len(policies))
			for j := range policies {
				i := (k + j) % len(policies)
				t0 := time.Now()
				got[i] = openLoop(e.Ctx, hc, url, "Bearer "+key.Key, string(policies[i]), reqs, share*capacity, uint64(k))
				got[i].took = time.Since(t0)
			}
			for i, pol := range policies {
				reportRoute(b, fmt.Sprintf("open%d-%s", int(share*100), pol), got[i])
			}
		}
	}
	for _, o := range []string{"hit", "over_bound", "miss"} {
		b.ReportMetric(e.metricSum(`cosmicac_inference_prefix_routed_total{model="prefix",outcome="`+o+`"}`), "prefix-picks-"+o)
	}
}

// reportRoute reports a policy's measurements over a workload as metrics
// named after it.
func reportRoute(b *testing.B, name string, g routeStats) {
	if g.errs > 0 {
		b.Errorf("%s: %d requests failed, the first: %s", name, g.errs, g.firstErr)
	}
	b.ReportMetric(ms(mean(g.ttft)), name+"-ttft-mean-ms")
	b.ReportMetric(ms(pct(g.ttft, 99)), name+"-ttft-p99-ms")
	b.ReportMetric(float64(g.tokens)/g.took.Seconds(), name+"-tok/s")
	b.ReportMetric(float64(g.cached)/float64(max(g.cached+g.prompt, 1)), name+"-cached-share")
	b.ReportMetric(float64(g.engineErrs), name+"-engine-errors")
	b.ReportMetric(ms(mean(g.hitTTFT)), name+"-hit-ttft-mean-ms")
	b.ReportMetric(ms(mean(g.missTTFT)), name+"-miss-ttft-mean-ms")
	b.ReportMetric(float64(len(g.hitTTFT)), name+"-hits")
}

// openLoop streams each of reqs as a chat of model, in order, the next
// one arriving after an exponentially distributed gap of mean 1/rate
// seconds (a Poisson process of rate a second, drawn from seed), whatever
// the ones before are doing.
func openLoop(ctx context.Context, hc *http.Client, url, auth, model string, reqs [][]chatTurn, rate float64, seed uint64) routeStats {
	var (
		mu  sync.Mutex
		out routeStats
		wg  sync.WaitGroup
	)
	r := rand.New(rand.NewPCG(seed, 11))
	next := time.Now()
	for _, msgs := range reqs {
		time.Sleep(time.Until(next))
		wg.Go(func() {
			s := chatStream(ctx, hc, url, auth, model, msgs)
			mu.Lock()
			out.add(s)
			mu.Unlock()
		})
		next = next.Add(time.Duration(r.ExpFloat64() / rate * float64(time.Second)))
	}
	wg.Wait()
	return out
}

// chatTurn is a chat message.
type chatTurn struct{ Role, Content string }

// prefixWorkloads are the benchmark's two workloads, by turn, each a list
// of requests (their messages), of prompts of their own for each seed:
// shared, 24 users in conversations of 3 turns over 8 system prompts of
// about 700 tokens (each turn resends the conversation so far); distinct,
// 48 requests in 3 turns, each with a system prompt of its own.
func prefixWorkloads(seed uint64) (shared, distinct [][][]chatTurn) {
	return prefixWorkloadsOf(seed, 24)
}

// prefixWorkloadsOf are prefixWorkloads with users in the shared one.
func prefixWorkloadsOf(seed uint64, users int) (shared, distinct [][][]chatTurn) {
	systems := make([]string, 8)
	for i := range systems {
		systems[i] = prose(fmt.Sprintf("You are assistant %d of the Example company (%d). ", i, seed), 2600, seed*100+uint64(i))
	}
	shared = make([][][]chatTurn, 3)
	for u := range users {
		var history []chatTurn
		for t := range 3 {
			msgs := []chatTurn{{"system", systems[u%len(systems)]}}
			msgs = append(msgs, history...)
			q := chatTurn{"user", fmt.Sprintf("User %d asks question %d: %s", u, t, prose("", 200, seed*10000+uint64(u*10+t)))}
			msgs = append(msgs, q)
			shared[t] = append(shared[t], msgs)
			history = append(history, q, chatTurn{"assistant", "Noted; here is my answer."})
		}
	}
	distinct = make([][][]chatTurn, 3)
	for i := range 48 {
		distinct[i%3] = append(distinct[i%3], []chatTurn{{"system", prose(fmt.Sprintf("Request %d (%d), a prompt of its own. ", i, seed), 2600, seed*100000+uint64(i))},
			{"user", "Summarize the above."}})
	}
	return shared, distinct
}

// routeStats are a policy's measurements over a workload.
type routeStats struct {
	ttft                         []time.Duration
	hitTTFT, missTTFT            []time.Duration // by whether the engine took most of the prompt from its cache
	tokens, cached, prompt, errs int
	// engineErrs are the engine's own error events: the test model's noise,
	// generated past its end of turn (ignore_eos), now and then fails
	// llama.cpp's parse of a chat answer ("does not match the expected
	// peg-native format"), under either policy.
	engineErrs int
	took       time.Duration
	firstErr   string
}

func (s *routeStats) add(o routeStats) {
	s.ttft = append(s.ttft, o.ttft...)
	s.hitTTFT = append(s.hitTTFT, o.hitTTFT...)
	s.missTTFT = append(s.missTTFT, o.missTTFT...)
	s.tokens += o.tokens
	s.cached += o.cached
	s.prompt += o.prompt
	s.errs += o.errs
	s.engineErrs += o.engineErrs
	if s.firstErr == "" {
		s.firstErr = o.firstErr
	}
}

// runRequests streams each of reqs as a chat of model, conc at a time.
func runRequests(ctx context.Context, hc *http.Client, url, auth, model string, reqs [][]chatTurn, conc int) routeStats {
	var (
		mu  sync.Mutex
		out routeStats
		wg  sync.WaitGroup
	)
	next := make(chan []chatTurn)
	for range conc {
		wg.Go(func() {
			for msgs := range next {
				s := chatStream(ctx, hc, url, auth, model, msgs)
				mu.Lock()
				out.add(s)
				mu.Unlock()
			}
		})
	}
	for _, r := range reqs {
		next <- r
	}
	close(next)
	wg.Wait()
	return out
}

// chatStream streams one chat of 8 tokens and measures it.
func chatStream(ctx context.Context, hc *http.Client, url, auth, model string, msgs []chatTurn) routeStats {
	type msg struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	// include_usage: llama-server's timings (what it took from its cache)
	// come in the usage chunk, which the proxy drops unless asked for.
	type streamOptions struct {
		IncludeUsage bool `json:"include_usage"`
	}
	body := struct {
		Model         string        `json:"model"`
		Messages      []msg         `json:"messages"`
		MaxTokens     int           `json:"max_tokens"`
		IgnoreEOS     bool          `json:"ignore_eos"`
		Stream        bool          `json:"stream"`
		StreamOptions streamOptions `json:"stream_options"`
	}{Model: model, MaxTokens: 8, IgnoreEOS: true, Stream: true, StreamOptions: streamOptions{IncludeUsage: true}}
	for _, m := range msgs {
		body.Messages = append(body.Messages, msg(m))
	}
	raw, _ := json.Marshal(body)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(string(raw)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", auth)
	t0 := time.Now()
	resp, err := hc.Do(req)
	if err != nil {
		return routeStats{errs: 1, firstErr: err.Error()}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return routeStats{errs: 1, firstErr: resp.Status + ": " + string(b)}
	}
	var s routeStats
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var lines []string
	for sc.Scan() {
		if len(lines) < 6 {
			lines = append(lines, sc.Text())
		}
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || !strings.HasPrefix(data, "{") {
			continue
		}
		if strings.Contains(data, `"content":"`) {
			if s.tokens == 0 {
				s.ttft = append(s.ttft, time.Since(t0))
			}
			s.tokens++
		}
		if strings.HasPrefix(data, `{"error":`) && strings.Contains(data, "expected peg-native format") {
			s.engineErrs++
			return s
		}
		if strings.Contains(data, `"timings"`) {
			var ev struct {
				Timings struct {
					CacheN  int `json:"cache_n"`
					PromptN int `json:"prompt_n"`
				} `json:"timings"`
			}
			if json.Unmarshal([]byte(data), &ev) == nil {
				s.cached, s.prompt = ev.Timings.CacheN, ev.Timings.PromptN
			}
		}
	}
	if len(s.ttft) == 1 && s.cached+s.prompt > 0 { // the engine's timings came
		if s.cached >= s.prompt {
			s.hitTTFT = s.ttft
		} else {
			s.missTTFT = s.ttft
		}
	}
	if sc.Err() != nil || s.tokens == 0 {
		s.errs, s.firstErr = 1, fmt.Sprintf("%d tokens, %v: %.600s", s.tokens, sc.Err(), strings.Join(lines, " | "))
	}
	return s
}

// prose is about n bytes of English-like text after head, the same for
// the same seed.
func prose(head string, n int, seed uint64) string {
	words := strings.Fields(`the of and to in is was that for it as with be on not he by this are or his from at which but
		have an they you were her she there been one all we their has would when if so no what up out who them some could
		model answer question careful clear short long example company customer order invoice policy account team
		report data system service request time number people work first year way day thing world life hand part place`)
	r := rand.New(rand.NewPCG(seed, 7))
	var sb strings.Builder
	sb.WriteString(head)
	for sb.Len() < n {
		sb.WriteString(words[r.IntN(len(words))])
		if r.IntN(12) == 0 {
			sb.WriteString(". ")
		} else {
			sb.WriteByte(' ')
		}
	}
	return sb.String()
}

// mean is the mean of ds.
func mean(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return sum / time.Duration(len(ds))
}
