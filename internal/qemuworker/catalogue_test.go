package qemuworker

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/joblog"
	"github.com/cosmicac/cosmicac/internal/qemu"
	"github.com/cosmicac/cosmicac/internal/trust"
	"github.com/cosmicac/cosmicac/internal/worker"
)

type records struct {
	mu   sync.Mutex
	recs []joblog.Record
}

func (r *records) Emit(rec joblog.Record) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, rec)
}

type noReporter struct{}

func (noReporter) Report(context.Context, worker.Report) error { return nil }

// newTestWorker is a worker under TCG's defaults (1 vCPU, 512 MiB) with
// the image debian-12, that boots nothing unless applied a job it runs.
func newTestWorker(t *testing.T) (*Worker, *records) {
	t.Helper()
	id, err := fabric.GenerateIdentity()
	if err != nil {
		t.Fatal(err)
	}
	n, err := fabric.New(fabric.Config{Component: "wrk-qemu", Identity: id, Listen: "127.0.0.1:0", Policy: fabric.NewAllowList()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	// A short directory: a VM's unix sockets live in it (New checks their
	// length; a test's TempDir can be too long).
	dir, err := os.MkdirTemp("", "qw-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	bin := filepath.Join(dir, "cosmicac")
	if err := os.WriteFile(bin, []byte("agent"), 0o700); err != nil {
		t.Fatal(err)
	}
	logs := &records{}
	w, err := New(Config{Rack: "q1", Location: "local", GPUModel: "H100", Nodes: 1, GPUsPerNode: 1, Dir: filepath.Join(dir, "vms"), Accel: "tcg"},
		Options{Images: qemu.Catalogue{"debian-12": {Name: "debian-12", Disk: filepath.Join(dir, "d.qcow2"), Format: "qcow2"}},
			AgentBinary: bin, Relay: []string{"relay"}, Node: n, Keys: trust.NewKeyring(), Reporter: noReporter{}, Logs: logs})
	if err != nil {
		t.Fatal(err)
	}
	return w, logs
}

// TestCapacityReportsTheCatalogue: the rack reports its images, that it
// runs gpu-container jobs only, and the most a VM gets.
func TestCapacityReportsTheCatalogue(t *testing.T) {
	w, _ := newTestWorker(t)
	c, err := w.Capacity(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	cat := c.Catalogue
	if cat == nil || strings.Join(cat.Images, ",") != "debian-12" || len(cat.JobTypes) != 1 || cat.JobTypes[0] != cosmic.TypeGPUContainer ||
		cat.MaxVMCPUs != 1 || cat.MaxVMMemoryMiB != 512 {
		t.Fatalf("catalogue %+v", cat)
	}
}

// TestApplyReportsWhatItRefuses: a job with an image the rack lacks, or a
// managed-inference job, is not an Apply error left to the ork's log:
// each replica is failed at once with rack_refused and its fix, and the
// replica's system log says why. No VM is booted.
func TestApplyReportsWhatItRefuses(t *testing.T) {
	for name, spec := range map[string]cosmic.Spec{
		"image":             {Type: cosmic.TypeGPUContainer, Image: "ubuntu:24.04", Resources: cosmic.Resources{GPU: 1}},
		"managed-inference": {Type: cosmic.TypeManagedInference, Inference: &cosmic.InferenceSpec{Model: "m"}, Resources: cosmic.Resources{GPU: 1}},
	} {
		t.Run(name, func(t *testing.T) {
			w, logs := newTestWorker(t)
			job := cosmic.Job{ID: cosmic.NewJobID(), Team: "t", Spec: spec}
			res := cosmic.Reservation{JobID: job.ID, Rack: "q1", Nodes: []cosmic.NodeAlloc{{Node: "q1-node-0", GPUs: []int{0}}}}
			if err := w.Apply(t.Context(), worker.ApplyParams{Job: job, Reservations: []cosmic.Reservation{res}}); err != nil {
				t.Fatalf("apply: %v; want the refusal reported, not returned", err)
			}
			jobs, err := w.Jobs(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if len(jobs) != 1 || len(jobs[0].Replicas) != 1 {
				t.Fatalf("jobs %+v", jobs)
			}
			rep := jobs[0].Replicas[0]
			if rep.State != cosmic.StateFailed || rep.Reason == nil || rep.Reason.Code != cosmic.ReasonRackRefused || rep.Reason.Fix == "" {
				t.Fatalf("replica %+v (reason %+v), want failed with rack_refused and a fix", rep, rep.Reason)
			}
			logs.mu.Lock()
			defer logs.mu.Unlock()
			if len(logs.recs) != 1 || logs.recs[0].Source != joblog.SourceSystem || logs.recs[0].Step != "refused" || logs.recs[0].JobID != job.ID {
				t.Fatalf("log records %+v, want one system record of step refused", logs.recs)
			}
			if w.replicas[replicaKey{job.ID, 0}].vm != nil {
				t.Fatal("a VM was started")
			}
		})
	}
}

// TestGivenIsTheCappedVM: a replica's report says what its VM gets (the
// job's 8 vCPUs and 64 GiB capped to 1 and 512 MiB, no GPU on a rack that
// declares them for placement only) and why.
func TestGivenIsTheCappedVM(t *testing.T) {
	w, _ := newTestWorker(t)
	spec := cosmic.Spec{Type: cosmic.TypeGPUContainer, Image: "debian-12", Resources: cosmic.Resources{GPU: 1}}
	spec.Default()
	job := cosmic.Job{ID: cosmic.NewJobID(), Spec: spec}
	res := cosmic.Reservation{JobID: job.ID, Rack: "q1", Nodes: []cosmic.NodeAlloc{{Node: "q1-node-0", GPUs: []int{0}}}}
	w.mu.Lock()
	rep := w.reportLocked(&replica{key: replicaKey{job.ID, 0}, job: job, res: res, state: cosmic.StateStarting})
	w.mu.Unlock()
	g := rep.Given
	if g == nil || g.CPUs != 1 || g.MemoryMiB != 512 || g.GPUs != 0 || !strings.Contains(g.Note, "at most 1 vCPU and 512 MiB") || !strings.Contains(g.Note, "placement only") {
		t.Fatalf("given %+v", g)
	}
}

// TestLlamaCPPCatalogue: with an engine the rack lists managed-inference
// of the llama.cpp runtime, and refuses what it cannot serve: another
// runtime, a model its directory lacks; a llama.cpp job of a model it has
// is not refused. Without an engine it runs gpu-container jobs only.
func TestLlamaCPPCatalogue(t *testing.T) {
	w, _ := newTestWorker(t)
	llama := func(model string) cosmic.Job {
		return cosmic.Job{ID: cosmic.NewJobID(), Spec: cosmic.Spec{Type: cosmic.TypeManagedInference,
			Inference: &cosmic.InferenceSpec{Runtime: cosmic.RuntimeLlamaCPP, Model: model}}}
	}
	if got := w.refusal(llama("cosmicac/test-chat")); !strings.Contains(got, "no inference engine") {
		t.Errorf("without an engine: refusal %q", got)
	}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "cosmicac"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cosmicac", "test-chat.gguf"), []byte("GGUF"), 0o644); err != nil {
		t.Fatal(err)
	}
	w.opts.LlamaServer, w.opts.ModelDir = "/usr/bin/true", dir
	cat := w.catalogue()
	if !slices.Equal(cat.JobTypes, []cosmic.JobType{cosmic.TypeGPUContainer, cosmic.TypeManagedInference}) || !slices.Equal(cat.Runtimes, []cosmic.Runtime{cosmic.RuntimeLlamaCPP}) {
		t.Fatalf("catalogue %+v", cat)
	}
	if got := w.refusal(llama("cosmicac/test-chat")); got != "" {
		t.Errorf("a model it has: refused: %s", got)
	}
	if got := w.refusal(llama("cosmicac/missing")); !strings.Contains(got, "no model cosmicac/missing") {
		t.Errorf("a model it lacks: refusal %q", got)
	}
	vllm := llama("Qwen/Qwen3-8B")
	vllm.Spec.Inference.Runtime = cosmic.RuntimeVLLM
	if got := w.refusal(vllm); !strings.Contains(got, "llama.cpp runtime only") {
		t.Errorf("vLLM: refusal %q", got)
	}
	if name, _, err := w.imageOf(llama("cosmicac/test-chat")); err != nil || name != "debian-12" {
		t.Errorf("an inference VM's image: %q, %v", name, err)
	}
}
