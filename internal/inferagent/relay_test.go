package inferagent_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/agent/agentapi"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/inferagent"
	"github.com/cosmicac/cosmicac/internal/joblog"
	"github.com/cosmicac/cosmicac/internal/waittest"
)

// closingRuntime is a runtime that answers every request with
// Connection: close, as llama-server does after a streamed answer.
type closingRuntime struct {
	srv *httptest.Server
	// conns counts the connections that carried a request (the agent's
	// spare, dialed ahead, carries none until it is taken).
	conns atomic.Int64
	used  sync.Map // net.Conn → true once it carried a request
}

func (r *closingRuntime) Start(_ context.Context, l inferagent.Launch) (inferagent.Process, error) {
	return r, nil
}
func (r *closingRuntime) Addr() string          { return r.srv.Listener.Addr().String() }
func (r *closingRuntime) Done() <-chan struct{} { return nil }
func (r *closingRuntime) Err() error            { return nil }
func (r *closingRuntime) Stop(time.Duration)    {}

// llamaAgent runs an inference agent of a llama.cpp job on rt and answers
// a direct stream to it from a proxy node.
func llamaAgent(t *testing.T, rt *closingRuntime) net.Conn {
	t.Helper()
	return llamaAgentOn(t, rt, func(ctx context.Context, proxy *fabric.Node, key fabric.PublicKey) (net.Conn, error) {
		return agentapi.DialInference(ctx, proxy, key)
	})
}

// llamaAgentOn is llamaAgent with the stream opened by open.
func llamaAgentOn(t *testing.T, rt *closingRuntime, open func(context.Context, *fabric.Node, fabric.PublicKey) (net.Conn, error)) net.Conn {
	t.Helper()
	anyone := fabric.PolicyFunc(func(fabric.PublicKey) fabric.Access { return fabric.AccessFull })
	proxy := node(t, "proxy", "127.0.0.1:0", anyone)
	id, _ := fabric.GenerateIdentity()
	a := inferagent.New(inferagent.Config{JobID: "job1", Team: "t", Placement: inferagent.Placement{VMICount: 1, GPUs: 1},
		Inference: cosmic.InferenceSpec{Runtime: cosmic.RuntimeLlamaCPP, Model: "cosmicac/test-chat", ServedModelName: "tiny"},
		Identity:  id, Logs: joblog.Discard, HealthPoll: 10 * time.Millisecond, Launcher: rt,
		Peers: []inferagent.Peer{{Role: agentapi.RoleProxy, Key: proxy.PublicKey(), Addrs: []string{proxy.Addr()}}}}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-a.Ready():
	case <-time.After(10 * time.Second):
		t.Fatalf("not ready: %+v", a.Status())
	}
	var c net.Conn
	waittest.NoError(t, func() error {
		var err error
		c, err = open(ctx, proxy, id.PublicKey())
		return err
	}, "a stream to the agent")
	t.Cleanup(func() { c.Close() })
	return c
}

// startRuntime serves h as the runtime, counting the connections that
// carry requests.
func startRuntime(t *testing.T, h http.HandlerFunc) *closingRuntime {
	rt := &closingRuntime{}
	rt.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			io.WriteString(w, `{"status":"ok"}`)
			return
		}
		switch r.URL.Path {
		case "/v1/completions": // the readiness probe
			io.WriteString(w, `{"choices":[{"text":"x"}],"usage":{"completion_tokens":1}}`)
		case "/metrics", "/slots": // the load probes
			http.NotFound(w, r)
		default:
			h(w, r)
		}
	}))
	rt.srv.Config.ConnState = func(c net.Conn, s http.ConnState) {
		if s != http.StateActive {
			return
		}
		if _, seen := rt.used.LoadOrStore(c, true); !seen {
			rt.conns.Add(1)
		}
	}
	rt.srv.Start()
	t.Cleanup(func() { rt.srv.CloseClientConnections(); rt.srv.Close() })
	return rt
}

// oneStream is an HTTP client that has only c to send on.
func oneStream(t *testing.T, c net.Conn) *http.Client {
	var streams atomic.Int64
	return &http.Client{Transport: &http.Transport{DialContext: func(context.Context, string, string) (net.Conn, error) {
		if streams.Add(1) > 1 {
			t.Error("the client needed a second stream")
			return nil, errors.New("one stream only")
		}
		return c, nil
	}}}
}

// TestLlamaStreamOutlivesTheRuntimesConnections: for llama.cpp the agent
// relays the proxy's requests one by one, so a runtime that closes its
// connection after every answer does not end the stream: requests go over
// one stream (a runtime connection each), each answered whole, with the
// runtime's status, headers and body as it wrote them, whatever their
// framing; a runtime that does not answer gets the agent's 502, and the
// stream goes on.
func TestLlamaStreamOutlivesTheRuntimesConnections(t *testing.T) {
	var down atomic.Bool
	rt := startRuntime(t, func(w http.ResponseWriter, r *http.Request) {
		if down.Load() {
			panic(http.ErrAbortHandler) // closes the connection unanswered
		}
		w.Header().Set("Connection", "close")
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Runtime", "llama")
		b, _ := io.ReadAll(r.Body)
		if r.URL.Path == "/chunked" {
			w.(http.Flusher).Flush() // no length: chunked
		}
		if r.URL.Path == "/teapot" {
			w.WriteHeader(http.StatusTeapot)
		}
		io.WriteString(w, `{"echo":"`+r.URL.Path+`","body":"`+string(b)+`"}`)
	})
	hc := oneStream(t, llamaAgent(t, rt))
	before := rt.conns.Load()
	for i, c := range []struct {
		method, path, body string
		status             int
	}{
		{"GET", "/v1/models", "", 200},
		{"POST", "/chunked", "hello", 200},
		{"POST", "/teapot", "tea", http.StatusTeapot},
		{"HEAD", "/v1/models", "", 200},
		{"GET", "/v1/models", "", 200},
	} {
		req, _ := http.NewRequest(c.method, "http://agent"+c.path, strings.NewReader(c.body))
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		want := `{"echo":"` + c.path + `","body":"` + c.body + `"}`
		if c.method == "HEAD" {
			want = ""
		}
		if resp.StatusCode != c.status || string(b) != want || resp.Close || resp.Header.Get("X-Runtime") != "llama" {
			t.Fatalf("request %d: %d %q %v (close %v), want %d %q", i, resp.StatusCode, b, resp.Header, resp.Close, c.status, want)
		}
	}
	if n := rt.conns.Load() - before; n != 5 {
		t.Errorf("%d runtime connections for 5 requests, want 5 (it closes each)", n)
	}
	down.Store(true)
	resp, err := hc.Post("http://agent/v1/chat/completions", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(string(b), "runtime did not answer") {
		t.Fatalf("a runtime that broke off: %d %q, want the agent's 502", resp.StatusCode, b)
	}
	down.Store(false)
	resp, err = hc.Get("http://agent/v1/models")
	if err != nil {
		t.Fatalf("after the 502: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("after the 502: %d", resp.StatusCode)
	}
}

// TestLlamaStreamEventsAndCancel: a streamed answer reaches the proxy one
// event at a time, as the runtime writes them (never held back for the
// next), and a proxy that closes its stream mid-answer ends the runtime's
// TestLlamaStreamHeadAtOnce: for llama.cpp the agent passes an event
// stream's head on as the runtime sends it, not with the first event (the
// runtime holds that here); the event follows.
func TestLlamaStreamHeadAtOnce(t *testing.T) {
	release := make(chan struct{})
	rt := startRuntime(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close")
		w.Header().Set("Content-Type", "text/event-stream")
		w.(http.Flusher).Flush() // the head, as llama-server sends it before the first token
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, "data: first\n\n")
	})
	hc := oneStream(t, llamaAgent(t, rt))
	type answer struct {
		resp *http.Response
		err  error
	}
	got := make(chan answer, 1)
	go func() {
		resp, err := hc.Post("http://agent/v1/chat/completions", "application/json", strings.NewReader(`{}`))
		got <- answer{resp, err}
	}()
	var a answer
	select {
	case a = <-got:
	case <-time.After(30 * time.Second):
		close(release)
		t.Fatal("no head reached the proxy's side while the runtime held the first event")
	}
	close(release)
	if a.err != nil {
		t.Fatal(a.err)
	}
	defer a.resp.Body.Close()
	b, err := io.ReadAll(a.resp.Body)
	if a.resp.StatusCode != 200 || string(b) != "data: first\n\n" || err != nil {
		t.Fatalf("%d %q, %v", a.resp.StatusCode, b, err)
	}
}

// TestLlamaExchangesOnAMultiplexedStream: on a stream of the agent's own
// connection (QUIC, or yamux over TCP: what the proxy uses when no direct
// stream can be had), requests go one after another as on a direct one:
// the watch that ends with each answer (a read deadline in the past)
// leaves the stream usable for the next.
func TestLlamaExchangesOnAMultiplexedStream(t *testing.T) {
	rt := startRuntime(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close")
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range 3 {
			fmt.Fprintf(w, "data: %s %d\n\n", r.URL.Path, i)
			w.(http.Flusher).Flush()
		}
	})
	var transport string
	hc := oneStream(t, llamaAgentOn(t, rt, func(ctx context.Context, proxy *fabric.Node, key fabric.PublicKey) (net.Conn, error) {
		s, err := proxy.OpenStream(ctx, key, agentapi.MethodInferenceHTTP, nil, nil)
		if err != nil {
			return nil, err
		}
		transport = s.Transport()
		t.Logf("transport %s", transport)
		return agentapi.NewStreamConn(s, proxy.PublicKey()), nil
	}))
	if transport == fabric.TransportTCPDirect {
		t.Fatalf("the stream is %s, want a multiplexed one", transport)
	}
	for i := range 4 {
		path := fmt.Sprintf("/r%d", i)
		resp, err := hc.Post("http://agent"+path, "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Fatalf("request %d on a %s stream: %v", i, transport, err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		want := fmt.Sprintf("data: %s 0\n\ndata: %s 1\n\ndata: %s 2\n\n", path, path, path)
		if err != nil || string(b) != want {
			t.Fatalf("request %d on a %s stream: %q, %v; want %q", i, transport, b, err, want)
		}
	}
}

// request, which stops generating.
func TestLlamaStreamEventsAndCancel(t *testing.T) {
	next, ended := make(chan struct{}), make(chan struct{})
	rt := startRuntime(t, func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body) // the server hears a client leave only after the body
		w.Header().Set("Content-Type", "text/event-stream")
		for i := 0; ; i++ {
			fmt.Fprintf(w, "data: {\"n\":%d}\n\n", i)
			w.(http.Flusher).Flush()
			select {
			case <-next:
			case <-r.Context().Done():
				close(ended)
				return
			}
		}
	})
	c := llamaAgent(t, rt)
	resp, err := oneStream(t, c).Post("http://agent/v1/chat/completions", "application/json", strings.NewReader(`{"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	for i := range 3 {
		line, err := br.ReadString('\n')
		if err != nil || line != fmt.Sprintf("data: {\"n\":%d}\n", i) {
			t.Fatalf("event %d: %q, %v", i, line, err)
		}
		br.ReadString('\n')
		next <- struct{}{} // the runtime writes the next only now
	}
	c.Close()
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the runtime's request went on after the proxy closed the stream")
	}
}

// TestLoadGauges: the load gauges are read from Prometheus text as the
// runtimes write them (llama.cpp's unlabelled, vLLM's labelled by model,
// summed); a missing one is an error.
func TestLoadGauges(t *testing.T) {
	llama := "# HELP llamacpp:requests_processing Number of requests processing.\n# TYPE llamacpp:requests_processing gauge\nllamacpp:requests_processing 3\nllamacpp:requests_deferred 1\nllamacpp:requests_processing_total 99\n"
	got, err := inferagent.ParseGauges(strings.NewReader(llama), "llamacpp:requests_processing", "llamacpp:requests_deferred")
	if err != nil || got[0] != 3 || got[1] != 1 {
		t.Fatalf("llama.cpp: %v, %v", got, err)
	}
	vllm := "vllm:num_requests_running{engine=\"0\",model_name=\"q\"} 2.0\nvllm:num_requests_running{engine=\"1\",model_name=\"q\"} 1.0\nvllm:num_requests_waiting{model_name=\"q\"} 0.0\n"
	got, err = inferagent.ParseGauges(strings.NewReader(vllm), "vllm:num_requests_running", "vllm:num_requests_waiting")
	if err != nil || got[0] != 3 || got[1] != 0 {
		t.Fatalf("vLLM: %v, %v", got, err)
	}
	if _, err := inferagent.ParseGauges(strings.NewReader(llama), "vllm:num_requests_running"); err == nil {
		t.Fatal("a missing gauge is no error")
	}
}
