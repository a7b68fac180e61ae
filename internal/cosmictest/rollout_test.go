package cosmictest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"

	"github.com/cosmicac/cosmicac/internal/apiv1"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/gguf/testmodel"
	"github.com/cosmicac/cosmicac/internal/simcluster/simapi"
	"github.com/cosmicac/cosmicac/internal/waittest"
)

// steadyLoad streams completions of model from n clients until stop is
// called, which answers how many were answered and the errors of those
// that were not. Every request is the same greedy completion of one
// prompt, whose answer the engine parses: the test model's noise, on
// other prompts, now and then fails llama.cpp's own parse of what it
// generated ("does not match the expected … format"), an error of the
// engine's under any routing (docs/benchmarks.md, "Prefix-cache-aware
// routing"), not the platform's.
func (e *Env) steadyLoad(key, model string, n int) (stop func() (int, []error)) {
	oa := e.openAI(key)
	ctx, cancel := context.WithCancel(e.Ctx)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
		ok   atomic.Int64
	)
	for c := range n {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				s := oa.Completions.NewStreaming(ctx, openai.CompletionNewParams{Model: openai.CompletionNewParamsModel(model), MaxTokens: openai.Int(8),
					Temperature: openai.Float(0), Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")}})
				chunks := 0
				for s.Next() {
					chunks++
				}
				switch err := s.Err(); {
				case ctx.Err() != nil:
				case err != nil:
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				case chunks == 0:
					mu.Lock()
					errs = append(errs, fmt.Errorf("request %d of client %d: an empty stream", i, c))
					mu.Unlock()
				default:
					ok.Add(1)
				}
			}
		})
	}
	return func() (int, []error) {
		cancel()
		wg.Wait()
		return int(ok.Load()), errs
	}
}

// TestRollingUpdateUnderLoad: a llama.cpp job of two real replicas,
// updated (its engines' slots, "parallel", 1 → 2) while two clients
// stream chats without a pause: the update rolls out one replica at a
// time and not one request fails; every replica then runs the new spec,
// as its engine says.
func TestRollingUpdateUnderLoad(t *testing.T) {
	e := NewEnv(t, withLlama(t))
	spec := inference("tiny", cosmic.RuntimeLlamaCPP, testmodel.ChatModel, 2, 1)
	spec.Inference.Args = map[string]string{"ctx-size": "1024", "parallel": "1"}
	j, key := e.serving(spec, "rollout")
	stop := e.steadyLoad(key, "tiny", 2)
	next := j.Spec
	in := *next.Inference
	in.Args = map[string]string{"ctx-size": "1024", "parallel": "2"}
	next.Inference = &in
	got, err := e.Client.UpdateJob(e.Ctx, j.ID, next)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.Rollout == nil || got.Status.Generation != 1 {
		t.Fatalf("no rollout started: %+v, generation %d", got.Status.Rollout, got.Status.Generation)
	}
	var done cosmic.Job
	waittest.NoErrorWithin(t, 3*time.Minute, func() error {
		done = e.job(j.ID)
		if done.Status.Rollout != nil || done.Status.LastRollout == nil {
			return fmt.Errorf("rolling out: %s", describeReplicas(done))
		}
		return nil
	}, "the rollout to end")
	answered, errs := stop()
	if len(errs) > 0 {
		t.Fatalf("%d requests failed during the rollout (%d answered); the first: %v", len(errs), answered, errs[0])
	}
	if lr := done.Status.LastRollout; lr.Outcome != cosmic.RolloutDone {
		t.Fatalf("the rollout %s: %+v", lr.Outcome, lr.Reason)
	}
	t.Logf("rolled out in %v; %d requests answered meanwhile, none failed", done.Status.LastRollout.Ended.Sub(done.Status.LastRollout.Started), answered)
	if len(done.Status.Replicas) != 2 || done.Spec.Inference.Replicas != 2 {
		t.Fatalf("after the rollout: %s", describeReplicas(done))
	}
	for i, r := range done.Status.Replicas {
		if r.Generation != 1 || r.State != cosmic.StateRunning {
			t.Fatalf("replica %d: generation %d, %s", i, r.Generation, r.State)
		}
		e.waitReplicas(j.ID, 2)
		agents := e.P.InferenceAgents(j.ID, i)
		if len(agents) != 1 {
			t.Fatalf("%d agents of replica %d", len(agents), i)
		}
		waittest.NoError(t, func() error {
			if l := agents[0].Status().Load; l == nil || l.Slots != 2 {
				return fmt.Errorf("the engine's load %+v", l)
			}
			return nil
		}, "replica %d's engine to have the new spec's 2 slots", i)
	}
}

// TestRollbackWithTheRealEngine: an update whose first replica never
// starts (its agent never connects: the rack's agent deadline, 1 s here,
// fails it) rolls the job back while it serves, with no failed request:
// the spec before is the job's again, and the last rollout says why.
func TestRollbackWithTheRealEngine(t *testing.T) {
	e := NewEnv(t, withLlama(t))
	spec := inference("tiny", cosmic.RuntimeLlamaCPP, testmodel.ChatModel, 1, 1)
	spec.Inference.Args = map[string]string{"ctx-size": "1024", "parallel": "1"}
	j, key := e.serving(spec, "rollback")
	racks, err := e.Client.ListRacks(e.Ctx)
	if err != nil || len(racks) != 1 {
		t.Fatalf("list racks: %v %v", racks, err)
	}
	r := racks[0]
	if _, err := e.Client.RegisterRack(e.Ctx, apiv1.RegisterRack{ID: r.ID, Location: r.Location, GPUModel: r.GPUModel,
		WorkerKey: r.WorkerKey, WorkerAddrs: r.WorkerAddrs, AgentDeadline: 1}); err != nil {
		t.Fatal(err)
	}
	stop := e.steadyLoad(key, "tiny", 1)
	e.Fault(simapi.MethodHoldAgent, simapi.ReplicaParams{}) // the next replica to start: the surge
	next := j.Spec
	in := *next.Inference
	in.Args = map[string]string{"ctx-size": "2048", "parallel": "1"}
	next.Inference = &in
	if _, err := e.Client.UpdateJob(e.Ctx, j.ID, next); err != nil {
		t.Fatal(err)
	}
	var done cosmic.Job
	waittest.NoErrorWithin(t, 3*time.Minute, func() error {
		done = e.job(j.ID)
		if done.Status.Rollout != nil || done.Status.LastRollout == nil {
			return fmt.Errorf("%s", describeReplicas(done))
		}
		return nil
	}, "the rollback to end")
	answered, errs := stop()
	if len(errs) > 0 {
		t.Fatalf("%d requests failed during the rollback (%d answered); the first: %v", len(errs), answered, errs[0])
	}
	lr := done.Status.LastRollout
	if lr.Outcome != cosmic.RolloutRolledBack || lr.Reason == nil || lr.Reason.Code != cosmic.ReasonRolloutFailed || !strings.Contains(lr.Reason.Message, "agent") {
		t.Fatalf("last rollout %+v (%+v)", lr, lr.Reason)
	}
	if done.Spec.Inference.Args["ctx-size"] != "1024" || len(done.Status.Replicas) != 1 || done.Status.State != cosmic.StateRunning {
		t.Fatalf("after the rollback: args %v, %s", done.Spec.Inference.Args, describeReplicas(done))
	}
	t.Logf("rolled back: %s; %d requests answered meanwhile, none failed", lr.Reason.Message, answered)
}

// describeReplicas is the job's state and its replicas', for a failure.
func describeReplicas(j cosmic.Job) string {
	s := fmt.Sprintf("%s, generation %d:", j.Status.State, j.Status.Generation)
	for _, r := range j.Status.Replicas {
		s += fmt.Sprintf(" [%d %s g%d", r.Index, r.State, r.Generation)
		if r.Drain != nil {
			s += " draining"
		}
		s += "]"
	}
	return s
}
