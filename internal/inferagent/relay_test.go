package inferagent_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
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
	srv   *httptest.Server
	conns atomic.Int64
}

func (r *closingRuntime) Start(_ context.Context, l inferagent.Launch) (inferagent.Process, error) {
	return r, nil
}
func (r *closingRuntime) Addr() string          { return r.srv.Listener.Addr().String() }
func (r *closingRuntime) Done() <-chan struct{} { return nil }
func (r *closingRuntime) Err() error            { return nil }
func (r *closingRuntime) Stop(time.Duration)    {}

// TestLlamaStreamOutlivesTheRuntimesConnections: for llama.cpp the agent
// serves the proxy's HTTP on the fabric stream, so a runtime that closes
// its connection after every answer does not end the stream: three
// requests go over one stream (three runtime connections), each answered
// whole, with the runtime's body as it wrote it.
func TestLlamaStreamOutlivesTheRuntimesConnections(t *testing.T) {
	rt := &closingRuntime{}
	rt.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close")
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/health":
			io.WriteString(w, `{"status":"ok"}`)
		case "/v1/completions":
			io.WriteString(w, `{"choices":[{"text":"x"}],"usage":{"completion_tokens":1}}`)
		default:
			io.WriteString(w, `{"echo":"`+r.URL.Path+`"}`)
		}
	}))
	rt.srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			rt.conns.Add(1)
		}
	}
	rt.srv.Start()
	defer rt.srv.Close()

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
	defer func() { cancel(); <-done }()
	select {
	case <-a.Ready():
	case <-time.After(10 * time.Second):
		t.Fatalf("not ready: %+v", a.Status())
	}
	var c net.Conn
	waittest.NoError(t, func() error {
		var err error
		c, err = agentapi.DialInference(ctx, proxy, id.PublicKey())
		return err
	}, "a stream to the agent")
	defer c.Close()
	before := rt.conns.Load()
	var streams atomic.Int64
	hc := &http.Client{Transport: &http.Transport{DialContext: func(context.Context, string, string) (net.Conn, error) {
		if streams.Add(1) > 1 {
			t.Error("the client needed a second stream")
		}
		return c, nil
	}}}
	for i := range 3 {
		resp, err := hc.Get("http://agent/v1/models")
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || string(b) != `{"echo":"/v1/models"}` || resp.Close {
			t.Fatalf("request %d: %d %q (close %v)", i, resp.StatusCode, b, resp.Close)
		}
	}
	if n := rt.conns.Load() - before; n != 3 {
		t.Errorf("%d runtime connections for 3 requests, want 3 (it closes each)", n)
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
