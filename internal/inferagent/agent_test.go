package inferagent_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/agent/agentapi"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/inferagent"
	"github.com/cosmicac/cosmicac/internal/inferagent/simlaunch"
	"github.com/cosmicac/cosmicac/internal/joblog"
	"github.com/cosmicac/cosmicac/internal/simruntime"
	"github.com/cosmicac/cosmicac/internal/waittest"
)

func node(t *testing.T, name string, listen string, policy fabric.Policy) *fabric.Node {
	t.Helper()
	id, err := fabric.GenerateIdentity()
	if err != nil {
		t.Fatal(err)
	}
	n, err := fabric.New(fabric.Config{Component: name, Identity: id, Listen: listen, Policy: policy})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

// TestAgentServesOverFabric: a dial-only agent with the simulated runtime
// announces itself ready, with its meta, and answers HTTP/1.1 (SSE
// included) over agentapi.MethodInferenceHTTP streams that the proxy side dials.
func TestAgentServesOverFabric(t *testing.T) {
	anyone := fabric.PolicyFunc(func(fabric.PublicKey) fabric.Access { return fabric.AccessFull })
	dir := node(t, "ork", "127.0.0.1:0", anyone)
	fabric.NewDirectory(nil).Register(dir)
	proxy := node(t, "proxy", "127.0.0.1:0", anyone)
	proxy.AddAddrs(dir.PublicKey(), dir.Addr())
	wrk := node(t, "worker", "127.0.0.1:0", anyone)
	id, _ := fabric.GenerateIdentity()
	logs := joblog.NewRing(1000)
	sim := &simlaunch.Launcher{Config: simruntime.Config{InterTokenDelay: time.Millisecond}}
	a := inferagent.New(inferagent.Config{JobID: "job1", Team: "t", Replica: 1, Placement: inferagent.Placement{VMICount: 1, GPUs: 1},
		Inference: cosmic.InferenceSpec{Runtime: cosmic.RuntimeVLLM, Model: "Qwen/Qwen3-8B", ServedModelName: "qwen"},
		Identity:  id, Logs: logs, HealthPoll: 10 * time.Millisecond,
		Launcher: sim,

		Peers: []inferagent.Peer{{Role: agentapi.RoleDirectory, Key: dir.PublicKey(), Addrs: []string{dir.Addr()}},
			{Role: agentapi.RoleProxy, Key: proxy.PublicKey(), Addrs: []string{proxy.Addr()}},
			{Role: agentapi.RoleWorker, Key: wrk.PublicKey(), Addrs: []string{wrk.Addr()}}}}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- a.Run(ctx) }()
	defer func() { cancel(); <-done }()
	select {
	case <-a.Ready():
	case <-time.After(10 * time.Second):
		t.Fatalf("not ready: %+v", a.Status())
	}
	// The system log says the runtime is simulated, never that one started.
	starts := 0
	for _, r := range logs.Job("job1") {
		if r.Step == "runtime_start" {
			starts++
			if !strings.HasPrefix(r.Line, "simulated runtime started:") || !strings.Contains(r.Line, "no model server runs") {
				t.Errorf("runtime_start record %q, want it to say the runtime is simulated", r.Line)
			}
		}
	}
	if starts == 0 {
		t.Error("no runtime_start record")
	}
	var peers []fabric.PeerInfo
	waittest.NoError(t, func() error {
		peers, _ = proxy.Lookup(ctx, agentapi.InferenceTopic("job1"), dir.PublicKey())
		var m agentapi.InferenceMeta
		if len(peers) != 1 || json.Unmarshal(peers[0].Meta, &m) != nil || !m.Ready {
			return fmt.Errorf("announced %+v", peers)
		}
		if m.Model != "qwen" || m.Replica != 1 || m.Role != agentapi.PlacementHead {
			t.Fatalf("meta %+v", m)
		}
		return nil
	}, "the agent announced ready")
	key := peers[0].Key
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return agentapi.DialInference(ctx, proxy, key)
	}}}
	for i := range 3 { // keep-alive: the same stream serves several requests
		resp, err := hc.Post("http://agent/v1/chat/completions", "application/json",
			strings.NewReader(`{"model":"qwen","messages":[{"role":"user","content":"hi"}],"stream":true,"max_tokens":3}`))
		if err != nil {
			t.Fatal(err)
		}
		if resp.Header.Get(simruntime.HeaderSimulated) != "true" {
			t.Fatalf("request %d: headers %v", i, resp.Header)
		}
		sc := bufio.NewScanner(resp.Body)
		var events int
		var last string
		for sc.Scan() {
			if l := sc.Text(); strings.HasPrefix(l, "data: ") {
				events++
				last = l
			}
		}
		resp.Body.Close()
		if sc.Err() != nil {
			t.Fatalf("request %d: %v", i, sc.Err())
		}
		if events != 5 || last != "data: [DONE]" {
			t.Fatalf("request %d: %d events, last %q", i, events, last)
		}
	}
	// The relayed requests are the job's output; the agent's own health
	// checks and probes are not, though the runtime logs them too.
	count := func(what string) int {
		n := 0
		for _, r := range logs.Job("job1") {
			if r.Source == joblog.SourceApplication && strings.Contains(r.Line, what) {
				n++
			}
		}
		return n
	}
	waittest.Until(t, func() bool { return count(`"POST /v1/chat/completions`) == 3 }, "the 3 requests in the application log")
	if n, m := count(`"POST /v1/completions`), count(`"GET /health`); n+m != 0 {
		t.Fatalf("%d probes and %d health checks in the application log: %+v", n, m, logs.Job("job1"))
	}
	var sawUvicorn, sawReady bool
	for _, r := range logs.Job("job1") {
		sawUvicorn = sawUvicorn || r.Source == joblog.SourceApplication && strings.Contains(r.Line, "Uvicorn running")
		sawReady = sawReady || r.Source == joblog.SourceSystem && r.Step == "ready"
	}
	if !sawUvicorn || !sawReady {
		t.Fatalf("records: %+v", logs.Job("job1"))
	}
	// Its worker reads its status; the proxy may not (internal/trust).
	st, err := agentapi.InferenceStatusCall.Call(ctx, wrk, key, struct{}{})
	if err != nil || !st.Ready || !strings.HasPrefix(st.Command, "vllm serve Qwen/Qwen3-8B") {
		t.Fatalf("status %+v %v", st, err)
	}
	if _, err := agentapi.InferenceStatusCall.Call(ctx, proxy, key, struct{}{}); fabric.ErrorCode(err) != fabric.CodeForbidden {
		t.Fatalf("the proxy read the status: %v, want forbidden", err)
	}
	// The runtime dies: the agent reports not ready, restarts it, and is ready again.
	sim.Runtime().Close()
	waittest.NoError(t, func() error {
		if st := a.Status(); st.RuntimeRestarts != 1 || !st.Ready {
			return fmt.Errorf("status %+v", st)
		}
		return nil
	}, "the runtime restarted and ready")
	resp, err := hc.Get("http://agent/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(b), `"qwen"`) {
		t.Fatalf("models: %s", b)
	}
}
