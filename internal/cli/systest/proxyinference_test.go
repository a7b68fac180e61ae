package systest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/agent/agentapi"
	"github.com/cosmicac/cosmicac/internal/apiv1"
	"github.com/cosmicac/cosmicac/internal/client"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/inferagent"
	"github.com/cosmicac/cosmicac/internal/inferagent/simlaunch"
	"github.com/cosmicac/cosmicac/internal/inferproxy/keyapi"
	"github.com/cosmicac/cosmicac/internal/simruntime"
	"github.com/cosmicac/cosmicac/internal/waittest"
	"github.com/cosmicac/cosmicac/internal/worker"
)

// TestProxyInferenceAsProcesses runs wrk-ork, wrk-directory, the app-node
// and proxy-inference as processes, with a rack worker that reports its
// agent's key (as the Kubernetes worker does) and that replica's inference
// agent with the simulated runtime in this process. API keys made through
// the app-node's API are checked by the proxy over the fabric (it opens no
// database): the model list answers 200, a wrong key 401, a chat
// completion reaches the agent, the proxy's metrics count it, and a
// revoked key stops working.
func TestProxyInferenceAsProcesses(t *testing.T) {
	base := t.TempDir()
	dirs, keys := identities(t, base, "ork", "app", "dir", "proxy")
	ork := component(t, []string{"fabric"}, "wrk-ork", "--data-dir", dirs["ork"], "--listen", "127.0.0.1:0",
		"--app-node-key", keys["app"].String(), "--directory-key", keys["dir"].String(), "--proxy-inference-key", keys["proxy"].String(),
		"--heartbeat", "50ms")["fabric"]
	dir := component(t, []string{"fabric"}, "wrk-directory", "--data-dir", dirs["dir"], "--listen", "127.0.0.1:0",
		"--ork", ork, "--app-node-key", keys["app"].String(), "--proxy-inference-key", keys["proxy"].String())["fabric"]
	// The app-node asks the proxy for model health: the proxy's address is
	// picked before either starts, as an operator's config names it.
	proxyAddr := freePort(t)
	appOut := component(t, []string{"fabric", "api"}, "app-node", "--data-dir", dirs["app"], "--listen", "127.0.0.1:0",
		"--ork", ork, "--api-listen", "127.0.0.1:0", "--proxy-inference", keys["proxy"].String()+"@"+proxyAddr)
	app, api := appOut["fabric"], appOut["api"]
	// A config file, overridden by flags: revoked keys are seen quickly.
	cfgPath := filepath.Join(base, "proxy.yaml")
	os.WriteFile(cfgPath, []byte("httpListen: 127.0.0.1:1\nproxy:\n  keyTTL: 100ms\n"), 0o600)
	metricsAddr := freePort(t)
	prox := component(t, []string{"fabric", "inference"}, "proxy-inference", "--config", cfgPath, "--data-dir", dirs["proxy"],
		"--listen", proxyAddr, "--ork", ork, "--directory", dir, "--app-node", app, "--http-listen", "127.0.0.1:0",
		"--metrics-listen", metricsAddr)
	infURL := prox["inference"]

	tok, err := os.ReadFile(filepath.Join(dirs["app"], "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	c := client.New(strings.TrimSuffix(api, "/api/v1"), strings.TrimSpace(string(tok)))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	key, err := c.CreateAPIKey(ctx, "ci", "")
	if err != nil {
		t.Fatal(err)
	}
	do := func(method, path, apiKey, body string) (int, http.Header, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, method, infURL+path, strings.NewReader(body))
		if apiKey != "" {
			req.Header.Set("Authorization", "Bearer "+apiKey)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, string(b)
	}
	if code, _, body := do("GET", "/models", key.Key, ""); code != 200 || !strings.Contains(body, `"data":[]`) {
		t.Fatalf("models with a valid key: %d %s, want 200 and an empty list", code, body)
	}
	for _, bad := range []string{keyapi.KeyPrefix + "wrong", "not-a-key"} {
		if code, _, body := do("GET", "/models", bad, ""); code != 401 || !strings.Contains(body, `"invalid_api_key"`) {
			t.Fatalf("models with key %q: %d %s, want 401 invalid_api_key", bad, code, body)
		}
	}

	// A rack whose worker reports its agent's key, and a managed-inference
	// job on it.
	orkKey, orkAddrs, _ := fabric.ParsePeer(ork)
	wid, _ := fabric.GenerateIdentity()
	agentID, _ := fabric.GenerateIdentity()
	wn, err := fabric.New(fabric.Config{Component: "wrk-test", Identity: wid, Listen: "127.0.0.1:0", Policy: fabric.NewAllowList(orkKey)})
	if err != nil {
		t.Fatal(err)
	}
	defer wn.Close()
	wn.AddAddrs(orkKey, orkAddrs...)
	w := &agentKeyWorker{rack: "k1", rep: worker.NewReporterClient(wn, orkKey), key: agentID.PublicKey(), jobs: map[string]worker.ReplicaReport{}}
	worker.Serve(wn, w)
	if _, err := c.RegisterRack(ctx, apiv1.RegisterRack{ID: "k1", Location: "eu", GPUModel: "GH100_H100_SXM5_80GB",
		WorkerKey: wid.PublicKey().String(), WorkerAddrs: []string{wn.Addr()}}); err != nil {
		t.Fatal(err)
	}
	spec := cosmic.Spec{Type: cosmic.TypeManagedInference, Name: "qwen", Location: "eu",
		Inference: &cosmic.InferenceSpec{Runtime: cosmic.RuntimeVLLM, Model: "Qwen/Qwen3-0.6B", ServedModelName: "qwen", Replicas: 1, GPUsPerReplica: 1}}
	j, err := c.CreateJob(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if j, err = c.WaitJob(ctx, j.ID, client.Settled, nil); err != nil || j.Status.State != cosmic.StateRunning {
		t.Fatalf("job: %s (%v)", j.Status.State, err)
	}

	// The replica's agent, as its VMI would run it: it announces in the
	// directory and dials proxy-inference.
	peer := func(role, s string) inferagent.Peer {
		k, addrs, _ := fabric.ParsePeer(s)
		return inferagent.Peer{Role: role, Key: k, Addrs: addrs}
	}
	ag := inferagent.New(inferagent.Config{JobID: j.ID, Team: j.Team, Placement: inferagent.Placement{VMICount: 1, GPUs: 1},
		Inference: *spec.Inference, Identity: agentID,
		Peers:      []inferagent.Peer{peer(agentapi.RoleDirectory, dir), peer(agentapi.RoleProxy, prox["fabric"])},
		Launcher:   &simlaunch.Launcher{Config: simruntime.Config{TTFT: time.Millisecond}},
		HealthPoll: 20 * time.Millisecond, ProbeInterval: 2 * time.Second, AnnounceTTL: 6 * time.Second}, nil)
	actx, acancel := context.WithCancel(ctx)
	adone := make(chan error, 1)
	go func() { adone <- ag.Run(actx) }()
	defer func() { acancel(); <-adone }()

	chat := `{"model":"qwen","messages":[{"role":"user","content":"Say hello"}],"max_tokens":4}`
	var usage struct{ Prompt, Completion int64 } // the chat's, as its answer said
	waittest.NoError(t, func() error {
		code, h, body := do("POST", "/chat/completions", key.Key, chat)
		if code != 200 {
			return fmt.Errorf("%d %s", code, body)
		}
		var cc struct {
			Choices []struct {
				Message struct{ Content string }
			}
		}
		if err := json.Unmarshal([]byte(body), &cc); err != nil || len(cc.Choices) != 1 || len(strings.Fields(cc.Choices[0].Message.Content)) != 4 ||
			h.Get("X-CosmicAC-Simulated") != "true" {
			t.Fatalf("chat completion %s (%v), headers %v", body, err, h)
		}
		var withUsage struct {
			Usage *struct {
				Prompt     int64 `json:"prompt_tokens"`
				Completion int64 `json:"completion_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal([]byte(body), &withUsage); err != nil || withUsage.Usage == nil || withUsage.Usage.Prompt == 0 {
			t.Fatalf("the chat's usage: %s (%v)", body, err)
		}
		usage.Prompt, usage.Completion = withUsage.Usage.Prompt, withUsage.Usage.Completion
		return nil
	}, "a chat completion through proxy-inference")
	// Its usage reaches the app-node's store over the fabric
	// (inference.recordUsage): GET /api/v1/usage says what the answer did.
	waittest.NoError(t, func() error {
		u, err := c.Usage(ctx, client.UsageQuery{GroupBy: []string{"key", "model"}})
		if err != nil {
			return err
		}
		if len(u.Items) != 1 || u.Items[0].KeyID != key.ID || u.Items[0].Model != "@"+j.Team+"/qwen" || u.Items[0].Requests != 1 ||
			u.Items[0].PromptTokens != usage.Prompt || u.Items[0].CompletionTokens != usage.Completion {
			return fmt.Errorf("usage %+v; the answer said %+v", u.Items, usage)
		}
		return nil
	}, "the chat's usage in the app-node's store")
	if code, _, body := do("GET", "/models", key.Key, ""); code != 200 || !strings.Contains(body, `"id":"qwen"`) || !strings.Contains(body, j.ID) {
		t.Fatalf("models: %d %s", code, body)
	}
	// The standalone app-node fills the job's model health from the proxy
	// (inference.modelHealth), as `cosmicac up` does.
	waittest.NoError(t, func() error {
		got, err := c.GetJob(ctx, j.ID)
		if err != nil {
			return err
		}
		if got.Status.ModelHealth != cosmic.ModelHealthy {
			return fmt.Errorf("modelHealth %q", got.Status.ModelHealth)
		}
		return nil
	}, "the job's model health from the proxy")

	// proxy-inference's metrics, on --metrics-listen.
	resp, err := http.Get("http://" + metricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	mb, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`cosmicac_inference_requests_total{code="200",endpoint="chat/completions",model="qwen"} 1`,
		`cosmicac_inference_requests_total{code="401",endpoint="models",model=""} 2`,
		`cosmicac_inference_time_to_first_byte_seconds_count{endpoint="chat/completions",model="qwen"} 1`,
		`cosmicac_inference_replica_outstanding_requests{job="` + j.ID + `",model="qwen",replica="0"} 0`} {
		if !strings.Contains(string(mb), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	// A revoked key stops working (keyTTL 100ms + FabricKeys' 1 s).
	if err := c.RevokeAPIKey(ctx, key.ID); err != nil {
		t.Fatal(err)
	}
	waittest.NoError(t, func() error {
		if code, _, body := do("GET", "/models", key.Key, ""); code != 401 {
			return fmt.Errorf("%d %s", code, body)
		}
		return nil
	}, "the revoked key refused")
}
