package k8sworker

import (
	"slices"
	"strings"
	"testing"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/k8stest"
)

// TestIntegrationRefusedJobFailsAtOnce: a job the rack can never build (a
// GPU model it maps to no resource) is not an Apply error the ork would
// only log and retry until the agent deadline: its replica is reported
// failed with rack_refused and a fix, its system log says why, and no
// object is created.
func TestIntegrationRefusedJobFailsAtOnce(t *testing.T) {
	env := k8stest.Shared(t)
	h := newHarness(t, env, nil)
	h.addNode(h.nodeName(0), 8)
	h.start()

	job := containerJob("team-a")
	job.Spec.Resources.GPUModel = "NOT_A_MODEL_OF_THIS_RACK"
	h.apply(job, h.reservation(job, 0, cosmic.NodeAlloc{Node: h.nodeName(0), GPUs: []int{0}}))
	r := h.waitReport(job.ID, 0, cosmic.StateFailed, reasonIs(cosmic.ReasonRackRefused))
	if !strings.Contains(r.Reason.Message, "NOT_A_MODEL_OF_THIS_RACK") || !strings.Contains(r.Reason.Fix, "cosmicac locations") {
		t.Errorf("reason %+v", r.Reason)
	}
	if !slices.Contains(h.steps(job.ID), "refused") {
		t.Errorf("system log steps %v, want a refused record", h.steps(job.ID))
	}
}
