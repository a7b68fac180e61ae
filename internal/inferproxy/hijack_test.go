package inferproxy

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"

	"github.com/cosmicac/cosmicac/internal/agent/agentapi"
	"github.com/cosmicac/cosmicac/internal/config"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/ork/orkapi"
	"github.com/cosmicac/cosmicac/internal/simruntime"
)

// The proxy routes a job's requests only to keys the ork binds as that
// job's replicas' heads, whatever a directory lists: here the harness's
// directory confines no one, and two keys announce themselves as job-qwen's
// ready head (one bound to another job, one bound as job-qwen's worker VMI
// 1); all 20 requests go to the real replica.
func TestRoutesOnlyToBoundHeads(t *testing.T) {
	h := newHarness(t, Config{LookupTTL: config.Duration(50 * time.Millisecond)})
	h.addJob("job-qwen", "team-a", "qwen", cosmic.RuntimeVLLM, 1, 1, true, simruntime.Config{})
	h.waitReady("job-qwen", 1)
	var captured atomic.Int64
	for i, bind := range []orkapi.Placement{
		{Job: "job-other", Team: "team-b", Type: cosmic.TypeManagedInference, Rack: "r1"},
		{Job: "job-qwen", Team: "team-a", Type: cosmic.TypeManagedInference, Rack: "r1"},
	} {
		id, _ := fabric.GenerateIdentity()
		keys := []fabric.PublicKey{id.PublicKey()}
		if i == 1 {
			head, err := fabric.ParsePublicKey(h.agents["job-qwen"][0].a.Status().Key)
			if err != nil {
				t.Fatal(err)
			}
			keys = []fabric.PublicKey{head, id.PublicKey()} // VMI 1: not the head
		}
		h.ring.BindAgents(bind, keys)
		n, err := fabric.New(fabric.Config{Component: "attacker", Identity: id, Policy: fabric.NewAllowList(h.dir.PublicKey(), h.pnode.PublicKey())})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
		n.AddAddrs(h.dir.PublicKey(), h.dir.Addr())
		n.AddAddrs(h.pnode.PublicKey(), h.pnode.Addr())
		n.HandleStream(agentapi.MethodInferenceHTTP, func(context.Context, *fabric.StreamRequest) error {
			captured.Add(1)
			return fabric.Errorf(fabric.CodeUnavailable, "captured")
		})
		ctx := context.Background()
		if err := n.Call(ctx, h.pnode.PublicKey(), fabric.MethodPing, nil, nil); err != nil {
			t.Fatalf("attacker %d: %v", i, err)
		}
		meta, _ := json.Marshal(agentapi.InferenceMeta{JobID: "job-qwen", Role: agentapi.PlacementHead, Model: "qwen", Ready: true})
		if err := n.Announce(ctx, fabric.AnnounceParams{Topic: agentapi.InferenceTopic("job-qwen"), TTLSeconds: 60, Meta: meta}, h.dir.PublicKey()); err != nil {
			t.Fatal(err)
		}
	}
	h.expireLookup("job-qwen") // the proxy sees the announcements
	a := sdk(h, h.keys["team-a"])
	for i := range 20 {
		if _, err := a.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: "qwen",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("a secret")}, MaxTokens: openai.Int(2)}); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	if n := captured.Load(); n != 0 {
		t.Fatalf("%d requests reached keys not bound as the job's head", n)
	}
	if mh, _ := h.proxy.JobHealth(context.Background(), "job-qwen"); len(mh.Replicas) != 1 {
		t.Fatalf("the proxy lists %d replicas of job-qwen, want its one: %+v", len(mh.Replicas), mh.Replicas)
	}
}
