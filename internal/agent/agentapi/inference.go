package agentapi

import (
	"path/filepath"
	"time"

	"github.com/cosmicac/cosmicac/internal/fabric"
)

// Fabric methods of the inference agent.
const (
	// MethodInferenceHTTP is a stream carrying HTTP/1.1 to the local runtime: the
	// opener writes requests, the agent answers each (keep-alive), streaming
	// response bodies as the runtime produces them.
	MethodInferenceHTTP = "inference.http"
	// MethodInferenceStatus is a call answered with InferenceStatus (read-only access).
	MethodInferenceStatus = "inference.status"
	// MethodInferenceReport is the event carrying InferenceStatus to the worker peers, on
	// every change and every ReportInterval.
	MethodInferenceReport = "inference.report"
)

// InferenceStatusCall is MethodInferenceStatus, typed.
var InferenceStatusCall = fabric.Method[struct{}, InferenceStatus]{Name: MethodInferenceStatus}

// InferenceTopic is the directory topic the inference agents of a job announce under.
func InferenceTopic(jobID string) string { return "inference/" + jobID }

// InferenceMeta is what an inference agent announces under InferenceTopic (its directory meta).
type InferenceMeta struct {
	JobID    string `json:"jobId"`
	Team     string `json:"team,omitempty"`
	Replica  int    `json:"replica"`
	VMIIndex int    `json:"vmiIndex"`
	Role     string `json:"role"`
	// Model is the served model name; Runtime vllm or parakeet.
	Model   string `json:"model"`
	Runtime string `json:"runtime"`
	// Ready: the runtime answered a real probe (head), or joined (worker).
	Ready bool `json:"ready"`
	// ProbeMs is the last probe's latency.
	ProbeMs float64 `json:"probeMs,omitempty"`
	// Error is why the replica is not ready, when known.
	Error string `json:"error,omitempty"`
}

// InferenceStatus is what MethodInferenceStatus answers and MethodInferenceReport carries.
//
// The Kubernetes worker reads the reports of both agents with one shape
// (jobId, replica, vmiIndex, ready, and the instance agent's "command", an
// agentapi.CommandStatus object), so the runtime's command line is
// "commandLine": under "command" the worker could not decode a report, and
// a managed-inference replica on Kubernetes never turned running.
type InferenceStatus struct {
	InferenceMeta
	Key             string    `json:"key"`
	Version         string    `json:"version"`
	StartedAt       time.Time `json:"startedAt"`
	Command         string    `json:"commandLine"`
	RuntimeRestarts int       `json:"runtimeRestarts"`
	LastProbeAt     time.Time `json:"lastProbeAt,omitzero"`
	// Load is the runtime's own account of its work, read with each
	// passing probe (nil: the runtime gives none, as the simulated one).
	Load *RuntimeLoad `json:"load,omitempty"`
}

// RuntimeLoad is what a runtime says it is doing: requests being
// generated and waiting (llama.cpp's llamacpp:requests_processing and
// requests_deferred, vLLM's vllm:num_requests_running and
// num_requests_waiting, from their /metrics), and llama.cpp's slots and
// how many are busy (its /slots).
type RuntimeLoad struct {
	Running   int       `json:"running"`
	Waiting   int       `json:"waiting"`
	Slots     int       `json:"slots,omitempty"`
	SlotsBusy int       `json:"slotsBusy,omitempty"`
	At        time.Time `json:"at"`
}

// Roles of a VMI in an inference replica (InferenceMeta.Role).
const (
	// PlacementHead runs the runtime's API server (the only role of a
	// single-VMI replica).
	PlacementHead = "head"
	// PlacementWorker joins the head of a multi-node vLLM replica (headless).
	PlacementWorker = "worker"
)

// DefaultModelDir is where a node keeps the GGUF models the llama.cpp
// runtime serves: the model ORG/NAME is the file ORG/NAME.gguf there.
const DefaultModelDir = "/var/lib/cosmicac/models"

// ModelFile is the GGUF file of model in dir (DefaultModelDir when empty),
// where the inference agent runs it from and a rack that brings the model
// (the QEMU rack's engine disk) finds it. The model's name was validated
// (cosmic: NAME or ORG/NAME, no path of its own), so the file is inside
// dir.
func ModelFile(dir, model string) string {
	if dir == "" {
		dir = DefaultModelDir
	}
	return filepath.Join(dir, filepath.FromSlash(model)+".gguf")
}
