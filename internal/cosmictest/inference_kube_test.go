package cosmictest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cosmicac/cosmicac/internal/agent/agentapi"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/inferagent"
	"github.com/cosmicac/cosmicac/internal/inferagent/simlaunch"
	"github.com/cosmicac/cosmicac/internal/k8stest"
	"github.com/cosmicac/cosmicac/internal/k8sworker"
	"github.com/cosmicac/cosmicac/internal/platform"
	"github.com/cosmicac/cosmicac/internal/simruntime"
	"github.com/cosmicac/cosmicac/internal/waittest"
)

// TestInferenceOnKubernetes: a managed-inference job on `cosmicac up
// --kubeconfig`'s rack (a real kube-apiserver; the test plays CDI,
// KubeVirt and the VM). The inference agent runs in process from the
// agent.yaml of the VMI's cloud-init Secret, as the VM's systemd unit
// would, with the simulated runtime in place of vLLM. The job stays
// starting while the agent runs but its runtime does not answer yet, runs
// once the agent reports ready, and the OpenAI SDK gets a chat completion
// through proxy-inference, which reaches the agent over the connection the
// agent opened to it.
func TestInferenceOnKubernetes(t *testing.T) {
	kube := k8stest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := kube.Client
	rc := k8sworker.DefaultRackConfig()
	rc.Rack, rc.Location = "kube-eu-1", "eu"
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: rc.Namespace}}); err != nil {
		t.Fatal(err)
	}
	addGPUNode(t, ctx, c, "gpu-0", corev1.ResourceName("nvidia.com/"+rc.GPUModel), 8)
	e := NewEnv(t, func(cfg *platform.Config) { cfg.Kube = &platform.KubeConfig{Kubeconfig: kube.Kubeconfig, Rack: rc} })
	waittest.NoError(t, func() error {
		racks, err := e.Client.ListRacks(e.Ctx)
		if err != nil || len(racks) != 1 || racks[0].ID != rc.Rack || racks[0].FreeGPUs != 8 {
			return fmt.Errorf("racks %+v (%v), want %s with 8 free GPUs", racks, err, rc.Rack)
		}
		return nil
	}, "the cluster's rack")

	spec := inference("kube-qwen", cosmic.RuntimeVLLM, "Qwen/Qwen3-8B", 1, 2)
	spec.Location = "eu"
	j := e.Create(spec)
	key, err := e.Client.CreateAPIKey(e.Ctx, "sdk", "")
	if err != nil {
		t.Fatal(err)
	}
	j = e.WaitState(j.ID, cosmic.StatePending, cosmic.StateStarting)
	playVMI(t, ctx, c, rc.Namespace, k8sworker.VMIName(j.ID, 0, 0), 2, "gpu-0")
	// The worker saw the VMI Ready and waits for its agent.
	waittest.NoError(t, func() error {
		got, err := e.Client.GetJob(e.Ctx, j.ID)
		if err != nil {
			return err
		}
		if got.Status.State != cosmic.StateStarting || got.Status.Progress == nil || got.Status.Progress.Step != k8sworker.StepAgent {
			return fmt.Errorf("status %s %+v, want starting at step %q", got.Status.State, got.Status.Progress, k8sworker.StepAgent)
		}
		return nil
	}, "the job waits for its agent")

	// Play the VM: its systemd unit runs `cosmicac agent inference --config
	// /etc/cosmicac/agent.yaml`, the file cloud-init wrote from the Secret.
	path, userData := agentFileOf(t, ctx, c, rc.Namespace, j.ID)
	if !strings.Contains(string(userData), "agent inference --config") {
		t.Fatalf("the VMI's user data does not run the inference agent:\n%s", userData)
	}
	acfg, err := inferagent.LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	if acfg.JobID != j.ID || acfg.Replica != 0 || acfg.Placement.VMIIndex != 0 || acfg.Placement.VMICount != 1 || acfg.Placement.GPUs != 2 ||
		acfg.Inference.Model != "Qwen/Qwen3-8B" || acfg.Inference.ServedModelName != "kube-qwen" {
		t.Fatalf("agent config: job %s replica %d placement %+v inference %+v", acfg.JobID, acfg.Replica, acfg.Placement, acfg.Inference)
	}
	if !slices.ContainsFunc(acfg.Peers, func(p inferagent.Peer) bool {
		return p.Role == agentapi.RoleProxy && p.Key == e.P.ProxyNode.PublicKey() && len(p.Addrs) > 0
	}) {
		t.Fatalf("the agent's peers %+v do not name proxy-inference (%s) with an address", acfg.Peers, e.P.ProxyNode.PublicKey())
	}
	// The simulated runtime in place of vLLM; it answers /health 503 until
	// the test clears the fault (weights "loading").
	rt := platform.SimRuntime
	rt.Faults.Unhealthy = true
	launcher := &simlaunch.Launcher{Config: rt}
	acfg.Launcher = launcher
	a := inferagent.New(acfg, nil)
	actx, acancel := context.WithCancel(ctx)
	adone := make(chan error, 1)
	go func() { adone <- a.Run(actx) }()
	defer func() { acancel(); <-adone }()

	// The agent runs, announced in the agents' directory, its runtime
	// started but not answering: the job is still starting.
	waittest.NoError(t, func() error {
		m, err := e.announced(j.ID)
		if err != nil {
			return err
		}
		if got, ok := m[acfg.Identity.PublicKey()]; !ok || got.Ready || got.Role != agentapi.PlacementHead || launcher.Runtime() == nil {
			return fmt.Errorf("announcements %+v, runtime started %v", m, launcher.Runtime() != nil)
		}
		return nil
	}, "the agent announced, not ready")
	got, err := e.Client.GetJob(e.Ctx, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if closed(a.Ready()) {
		t.Fatalf("the agent is ready while its runtime answers /health 503: %+v", a.Status())
	}
	if got.Status.State != cosmic.StateStarting {
		t.Fatalf("before its agent is ready, the job is %s: %+v", got.Status.State, got.Status)
	}

	// The runtime comes up; the agent probes it, reports ready, and only
	// then does the job run.
	launcher.Runtime().SetFaults(simruntime.Faults{})
	j = e.WaitState(j.ID, cosmic.StateRunning)
	if !closed(a.Ready()) {
		t.Fatalf("running before the agent is ready: %+v", a.Status())
	}
	if keys := j.Status.Replicas[0].AgentKeys; len(keys) != 1 || keys[0] != acfg.Identity.PublicKey().String() {
		t.Fatalf("agent keys in the job's status %v, want the agent's %s", keys, acfg.Identity.PublicKey())
	}

	// The OpenAI SDK through proxy-inference, which routes to the agent.
	e.waitReplicas(j.ID, 1)
	oa := e.openAI(key.Key)
	page, err := oa.Models.List(e.Ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Data) != 1 || page.Data[0].ID != "kube-qwen" {
		t.Fatalf("models %+v: want kube-qwen", page.Data)
	}
	cc, err := oa.Chat.Completions.New(e.Ctx, openai.ChatCompletionNewParams{Model: "kube-qwen",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Say hello")}, MaxTokens: openai.Int(4)})
	if err != nil {
		t.Fatal(err)
	}
	if len(cc.Choices) != 1 || len(strings.Fields(cc.Choices[0].Message.Content)) != 4 || cc.Usage.CompletionTokens != 4 ||
		//lint:ignore SA1019 vLLM still sends system_fingerprint; the test checks that it reaches the client
		cc.SystemFingerprint != simruntime.Fingerprint {
		t.Fatalf("chat completion %+v", cc)
	}
	mh, err := e.P.Proxy.JobHealth(e.Ctx, j.ID)
	if err != nil || len(mh.Replicas) != 1 || mh.Replicas[0].Key != acfg.Identity.PublicKey().String() || mh.Replicas[0].Requests != 1 {
		t.Fatalf("the proxy's replicas of the job %+v (%v): want the agent's, with one request", mh, err)
	}
}
