package cosmictest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/cosmicac/cosmicac/internal/agent/agentapi"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/inferagent"
	"github.com/cosmicac/cosmicac/internal/platform"
	"github.com/cosmicac/cosmicac/internal/simruntime"
	"github.com/cosmicac/cosmicac/internal/waittest"
)

// agentHTTP sends one HTTP request straight to an inference agent over a
// fabric stream opened from proxy-inference's node (the agent admits the
// proxy, and reaches it over the connection it opened), bypassing the
// proxy's routing: what the proxy would get if it sent the request there.
func (e *Env) agentHTTP(key fabric.PublicKey, method, path, body string) (*http.Response, []byte) {
	e.T.Helper()
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return agentapi.DialInference(ctx, e.P.ProxyNode, key)
	}}
	defer tr.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(e.Ctx, 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, "http://agent"+path, strings.NewReader(body))
	if err != nil {
		e.T.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := tr.RoundTrip(req)
	if err != nil {
		e.T.Fatalf("%s %s to agent %s: %v", method, path, key.Short(), err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.T.Fatalf("%s %s to agent %s: %v", method, path, key.Short(), err)
	}
	return resp, b
}

// announced returns the announcements under the job's inference topic in
// the platform's agents' directory, by key.
func (e *Env) announced(jobID string) (map[fabric.PublicKey]agentapi.InferenceMeta, error) {
	ctx, cancel := context.WithTimeout(e.Ctx, 5*time.Second)
	defer cancel()
	peers, err := e.P.ProxyNode.Lookup(ctx, agentapi.InferenceTopic(jobID), e.P.DirectoryNode.PublicKey())
	if err != nil {
		return nil, err
	}
	out := map[fabric.PublicKey]agentapi.InferenceMeta{}
	for _, p := range peers {
		var m agentapi.InferenceMeta
		if err := json.Unmarshal(p.Meta, &m); err != nil {
			return nil, fmt.Errorf("announcement of %s: %v", p.Key.Short(), err)
		}
		out[p.Key] = m
	}
	return out, nil
}

// flagValue is the word after flag in a command line ("" without it).
func flagValue(cmd, flag string) string {
	f := strings.Fields(cmd)
	if i := slices.Index(f, flag); i >= 0 && i+1 < len(f) {
		return f[i+1]
	}
	return ""
}

func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// TestInferenceMultiNodeReplica: a vLLM replica of 16 GPUs on the simulated
// rack's 2 nodes × 8 runs one inference agent per VMI. The agents elect VMI
// 0 as head without a message (docs/inference.md, "Multi-node vLLM"); their
// command lines are the ones inferagent.BuildCommand documents for the
// placement (tensor parallel 8 = the GPUs of a node, pipeline parallel 2 =
// the nodes, the worker joining the head's master address headless). The
// worker is ready once it joined, but the replica stays starting, and the
// proxy answers no_ready_replica, until the head's runtime answers its
// probe; the worker VMI itself answers 503 X-CosmicAC-Retry: safe. Then the
// replica runs, the model is listed once, and every chat completion of the
// OpenAI SDK is answered through the head: the proxy's only replica of the
// job is the head's key, and it counts every request.
func TestInferenceMultiNodeReplica(t *testing.T) {
	rt := platform.SimRuntime
	rt.Faults.Unhealthy = true // the head's runtime "loads" until the test clears it
	e := NewEnv(t, func(c *platform.Config) {
		c.SimRuntime = rt
		c.Proxy.ReadyWait = -1 // answer no_ready_replica at once while the head loads
	})
	spec := inference("big", cosmic.RuntimeVLLM, "deepseek-ai/DeepSeek-V3", 1, 16)
	j := e.Create(spec)
	key, err := e.Client.CreateAPIKey(e.Ctx, "sdk", "")
	if err != nil {
		t.Fatal(err)
	}

	var agents []*inferagent.Agent
	waittest.NoError(t, func() error {
		agents = e.P.InferenceAgents(j.ID, 0)
		if len(agents) != 2 {
			return fmt.Errorf("%d agents, want one per VMI (2)", len(agents))
		}
		for _, a := range agents {
			if a.Node() == nil || a.Status().Command == "" {
				return errors.New("an agent has not started")
			}
		}
		return nil
	}, "the replica's inference agents")
	head, worker := agents[0], agents[1]
	hs, ws := head.Status(), worker.Status()
	if hs.VMIIndex != 0 || hs.Role != agentapi.PlacementHead || ws.VMIIndex != 1 || ws.Role != agentapi.PlacementWorker ||
		hs.Replica != 0 || ws.Replica != 0 || hs.Key == ws.Key {
		t.Fatalf("head %+v\nworker %+v\nwant VMI 0 head, VMI 1 worker, one key each", hs.InferenceMeta, ws.InferenceMeta)
	}
	master := flagValue(hs.Command, "--master-addr")
	if master == "" {
		t.Fatalf("head command %q has no --master-addr", hs.Command)
	}
	for i, st := range []agentapi.InferenceStatus{hs, ws} {
		// Only Hosts[0] (the master address) appears in the command.
		want, err := inferagent.BuildCommand(*spec.Inference, inferagent.Placement{VMIIndex: i, VMICount: 2, GPUs: 8, Hosts: []string{master, "vmi-1"}})
		if err != nil {
			t.Fatal(err)
		}
		if st.Command != want.String() {
			t.Errorf("VMI %d command\n got %s\nwant %s", i, st.Command, want)
		}
		for _, w := range []string{"vllm serve deepseek-ai/DeepSeek-V3 --served-model-name big ",
			" --tensor-parallel-size 8 --pipeline-parallel-size 2 ", " --distributed-executor-backend mp --nnodes 2 ",
			fmt.Sprintf(" --node-rank %d --master-addr %s", i, master)} {
			if !strings.Contains(st.Command, w) {
				t.Errorf("VMI %d command %q lacks %q", i, st.Command, w)
			}
		}
		if headless := strings.HasSuffix(st.Command, " --headless"); headless != (i == 1) {
			t.Errorf("VMI %d (%s) command %q: headless %v", i, st.Role, st.Command, headless)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	// The worker joined; the head's runtime does not answer /health yet.
	select {
	case <-worker.Ready():
	case <-time.After(20 * time.Second):
		t.Fatalf("the worker VMI's agent is not ready: %+v", worker.Status())
	}
	waittest.NoError(t, func() error {
		for _, r := range e.P.Logs.Job(j.ID) {
			if r.Step == "agent" && strings.Contains(r.Line, "waiting for the head inference agent of replica 0") {
				return nil
			}
		}
		return errors.New("no record of the wait")
	}, "the rack waits for the head agent")
	waittest.NoError(t, func() error {
		m, err := e.announced(j.ID)
		if err != nil {
			return err
		}
		h, w := m[head.Node().PublicKey()], m[worker.Node().PublicKey()]
		if len(m) != 2 || h.Role != agentapi.PlacementHead || h.Ready || w.Role != agentapi.PlacementWorker || !w.Ready {
			return fmt.Errorf("announcements %+v: want the head not ready, the worker ready", m)
		}
		return nil
	}, "both agents announced")
	got, err := e.Client.GetJob(e.Ctx, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if closed(head.Ready()) {
		t.Fatalf("the head is ready while its runtime answers /health 503: %+v", head.Status())
	}
	if got.Status.State != cosmic.StateStarting {
		t.Fatalf("with the worker ready and the head not, the job is %s, want starting: %+v", got.Status.State, got.Status)
	}
	mh, _ := e.P.Proxy.JobHealth(e.Ctx, j.ID)
	if len(mh.Replicas) != 1 || mh.Replicas[0].Key != hs.Key || mh.Replicas[0].Ready {
		t.Fatalf("the proxy's replicas of the job %+v: want only the head (%s), not ready", mh.Replicas, hs.Key)
	}
	a := e.openAI(key.Key)
	msg := []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Say hello")}
	_, err = a.Chat.Completions.New(e.Ctx, openai.ChatCompletionNewParams{Model: "big", Messages: msg, MaxTokens: openai.Int(3)})
	wantOpenAIError(t, "the worker ready, the head not", err, http.StatusServiceUnavailable, "no_ready_replica")
	if c, err := agentapi.DialInference(e.Ctx, e.P.ProxyNode, worker.Node().PublicKey()); fabric.ErrorCode(err) != fabric.CodeUnavailable || !strings.Contains(err.Error(), "headless worker") {
		if c != nil {
			c.Close()
		}
		t.Fatalf("the worker VMI asked directly for an HTTP connection: %v, want refused as a headless worker", err)
	}

	// The head's runtime finishes loading (the fault is cleared through the
	// head agent, as the proxy reaches it): the head probes it, and only
	// then does the replica run.
	if resp, body := e.agentHTTP(head.Node().PublicKey(), http.MethodPost, "/sim/faults", `{}`); resp.StatusCode != http.StatusOK {
		t.Fatalf("clear the head runtime's faults: %s %s", resp.Status, body)
	}
	j = e.WaitState(j.ID, cosmic.StateRunning)
	if !closed(head.Ready()) {
		t.Fatalf("running before the head is ready: %+v", head.Status())
	}
	if h := History(j); len(h) < 2 || h[len(h)-2] != cosmic.StateStarting || h[len(h)-1] != cosmic.StateRunning ||
		slices.ContainsFunc(h, func(s cosmic.State) bool {
			return s == cosmic.StateFailed || s == cosmic.StateDegraded || s == cosmic.StateRestarting
		}) {
		t.Fatalf("history %v: want starting, then running, and nothing failed", h)
	}
	if len(j.Status.Replicas) != 1 || len(j.Status.Replicas[0].Nodes) != 2 {
		t.Fatalf("replicas %+v: want one on two nodes", j.Status.Replicas)
	}
	e.waitReplicas(j.ID, 1)

	// One endpoint: the model once in the list, every answer through the head.
	page, err := a.Models.List(e.Ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Data) != 1 || page.Data[0].ID != "big" {
		t.Fatalf("models %+v: want big once", page.Data)
	}
	const n = 5
	for i := range n {
		var hr *http.Response
		cc, err := a.Chat.Completions.New(e.Ctx, openai.ChatCompletionNewParams{Model: "big", Messages: msg, MaxTokens: openai.Int(3)},
			option.WithResponseInto(&hr))
		if err != nil {
			t.Fatalf("chat %d: %v", i, err)
		}
		//lint:ignore SA1019 vLLM still sends system_fingerprint; the test checks that it reaches the client
		if len(cc.Choices) != 1 || len(strings.Fields(cc.Choices[0].Message.Content)) != 3 || cc.SystemFingerprint != simruntime.Fingerprint ||
			hr.Header.Get("X-CosmicAC-Replica") != "0" {
			t.Fatalf("chat %d: %+v (replica header %q)", i, cc, hr.Header.Get("X-CosmicAC-Replica"))
		}
	}
	mh, err = e.P.Proxy.JobHealth(e.Ctx, j.ID)
	if err != nil || len(mh.Replicas) != 1 {
		t.Fatalf("the proxy's replicas of the job %+v (%v): want one", mh, err)
	}
	if r := mh.Replicas[0]; r.Key != hs.Key || r.Requests != n || r.ErrorRate != 0 || r.Health != "healthy" {
		t.Fatalf("the proxy's replica %+v: want the head %s with %d requests, none failed", r, hs.Key, n)
	}
	if m, err := e.announced(j.ID); err != nil || len(m) != 2 || !m[head.Node().PublicKey()].Ready || m[worker.Node().PublicKey()].Role != agentapi.PlacementWorker {
		t.Fatalf("announcements once running %+v (%v)", m, err)
	}
}
