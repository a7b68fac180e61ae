package k8sworker

import (
	"encoding/json"
	"testing"

	"github.com/cosmicac/cosmicac/internal/agent/agentapi"
)

// TestInferenceReportDecodes: the worker reads the inference agent's
// reports (agentapi.InferenceStatus) with the shape it reads the instance agent's
// (agentapi.WorkerReport, whose "command" is an agentapi.CommandStatus): a report of a
// ready inference agent decodes, ready, for its VMI, and carries no
// command outcome.
func TestInferenceReportDecodes(t *testing.T) {
	st := agentapi.InferenceStatus{InferenceMeta: agentapi.InferenceMeta{JobID: "job-1", Replica: 1, VMIIndex: 2, Role: agentapi.PlacementWorker, Ready: true},
		Key: "k", Command: "vllm serve Qwen/Qwen3-8B --tensor-parallel-size 8 --headless"}
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	var r agentapi.WorkerReport
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("the worker cannot read an inference agent's report %s: %v", b, err)
	}
	if r.JobID != "job-1" || r.Replica != 1 || r.VMIIndex != 2 || !r.Ready || r.Command != nil {
		t.Fatalf("report %s read as %+v", b, r)
	}
}
