package ork_test

import (
	"testing"
	"testing/synctest"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/ork/orkapi"
)

// TestSetRequireAuth: a running managed-inference job's "require
// authorization" is turned off and on in the store, each change bumps the
// jobs' version and leaves the job running; a gpu-container job is a
// conflict and an unknown one not found.
func TestSetRequireAuth(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorker(t, "r1", 8)
		e := newEnv(t, w)
		j := e.createSpec(cosmic.Spec{Type: cosmic.TypeManagedInference, Name: "m", Location: "eu",
			Inference: &cosmic.InferenceSpec{Runtime: cosmic.RuntimeVLLM, Model: "Qwen/Qwen3-32B", Replicas: 1, GPUsPerReplica: 4}})
		e.push(w, w.observe(j.ID, 0, cosmic.StateRunning))
		e.wantState(j.ID, cosmic.StateRunning, cosmic.StateRunning)
		for _, on := range []bool{false, true} {
			before, _ := e.o.WatchJobs(e.ctx, orkapi.WatchJobsParams{})
			got, err := e.o.SetRequireAuth(e.ctx, orkapi.SetRequireAuthParams{ID: j.ID, RequireAuth: on})
			if err != nil {
				t.Fatal(err)
			}
			if got.Spec.Inference.AuthRequired() != on {
				t.Fatalf("answer: requireAuth %v, want %v", got.Spec.Inference.AuthRequired(), on)
			}
			stored, err := e.o.GetJob(e.ctx, j.ID)
			if err != nil || stored.Spec.Inference.AuthRequired() != on || stored.Status.State != cosmic.StateRunning {
				t.Fatalf("stored: requireAuth %v state %s (%v), want %v running", stored.Spec.Inference.AuthRequired(), stored.Status.State, err, on)
			}
			if after, _ := e.o.WatchJobs(e.ctx, orkapi.WatchJobsParams{}); after.Version <= before.Version {
				t.Errorf("jobs version %d after the change, want past %d", after.Version, before.Version)
			}
		}
		c := e.create(1)
		if _, err := e.o.SetRequireAuth(e.ctx, orkapi.SetRequireAuthParams{ID: c.ID}); cosmic.CodeOf(err) != cosmic.CodeConflict {
			t.Errorf("a gpu-container job: %v, want a conflict", err)
		}
		if _, err := e.o.SetRequireAuth(e.ctx, orkapi.SetRequireAuthParams{ID: "00000000-0000-4000-8000-000000000000"}); cosmic.CodeOf(err) != cosmic.CodeNotFound {
			t.Errorf("an unknown job: %v, want not found", err)
		}
		e.checkBooks()
	})
}
