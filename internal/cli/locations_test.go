package cli

import (
	"bytes"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/cosmicac/cosmicac/internal/apiv1"
	"github.com/cosmicac/cosmicac/internal/client"
	"github.com/cosmicac/cosmicac/internal/cosmic"
)

// TestLocationsTable: each location and model with its GPUs, its largest
// node and what its racks run; a catalogue not reported says so.
func TestLocationsTable(t *testing.T) {
	var b bytes.Buffer
	err := writeLocationsTable(&b, apiv1.Fleet{Locations: []apiv1.FleetLocation{
		{Name: "local", GPUModels: []apiv1.FleetGPUModel{{Model: "H100", Nodes: 1, GPUs: 1, Free: 1, MaxPerNode: 1, MaxCPUPerNode: 10, MaxMemoryMiBPerNode: 66 * 1024,
			Catalogue: &cosmic.Catalogue{Images: []string{"debian-12"}, JobTypes: []cosmic.JobType{cosmic.TypeGPUContainer}, MaxVMCPUs: 1, MaxVMMemoryMiB: 512}}}},
		{Name: "us", GPUModels: []apiv1.FleetGPUModel{{Model: "A100", Nodes: 2, GPUs: 16, Free: 8, MaxPerNode: 8}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"LOCATION  GPU MODEL",
		"local     H100       1      1     1     1         10        66Gi",
		"local H100 runs: gpu-container jobs; images debian-12; a VM gets at most 1 vCPU and 0.5Gi",
		"us A100 runs: not reported yet",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("locations lack %q:\n%s", want, out)
		}
	}
}

// TestJobDetailShowsGiven: jobs get shows what each replica got next to
// the resources asked, and why it got less.
func TestJobDetailShowsGiven(t *testing.T) {
	spec := cosmic.Spec{Type: cosmic.TypeGPUContainer, Location: "local", Image: "debian-12", Resources: cosmic.Resources{GPU: 1}}
	spec.Default()
	j := cosmic.Job{ID: cosmic.NewJobID(), Spec: spec, Status: cosmic.Status{State: cosmic.StateRunning, Replicas: []cosmic.ReplicaStatus{{
		Index: 0, State: cosmic.StateRunning, Nodes: []string{"q1-node-0"},
		Given: &cosmic.Given{CPUs: 1, MemoryMiB: 512, Note: "a VM of this rack gets at most 1 vCPU and 512 MiB"},
	}}}}
	var b bytes.Buffer
	if err := writeJobDetail(&b, j, "http://x"); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"8 vCPU, 64 GiB memory, 100 GiB disk (asked",
		"GIVEN",
		"1 vCPU, 0.5Gi, 0 GPUs",
		"replica 0 got less than asked: a VM of this rack gets at most 1 vCPU and 512 MiB",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("jobs get lacks %q:\n%s", want, out)
		}
	}
}

// TestRacksRefusalPointsMembersAtLocations: a member refused `racks list`
// is told what they may run instead.
func TestRacksRefusalPointsMembersAtLocations(t *testing.T) {
	err := membersSee(&client.APIError{Status: http.StatusForbidden, Code: "forbidden", Message: "needs racks.manage"}, "see `cosmicac locations`")
	var ae *client.APIError
	if !errors.As(err, &ae) || !strings.Contains(ae.Message, "needs racks.manage; see `cosmicac locations`") {
		t.Fatalf("%v", err)
	}
	other := &client.APIError{Status: http.StatusNotFound, Message: "x"}
	if membersSee(other, "y") != error(other) {
		t.Fatal("another error was changed")
	}
}

// TestRacksTableShowsCatalogues: racks list says what each rack runs.
func TestRacksTableShowsCatalogues(t *testing.T) {
	var b bytes.Buffer
	err := writeRacksTable(&b, []rackRow{
		{ID: "q1", Location: "local", GPUModel: "H100", Catalogue: &cosmic.Catalogue{Images: []string{"debian-12"}, JobTypes: []cosmic.JobType{cosmic.TypeGPUContainer}}},
		{ID: "s1", Location: "us", GPUModel: "H100", Catalogue: &cosmic.Catalogue{JobTypes: []cosmic.JobType{cosmic.TypeGPUContainer, cosmic.TypeManagedInference}, Runtimes: []cosmic.Runtime{cosmic.RuntimeVLLM}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"rack q1 runs: gpu-container jobs; images debian-12", "rack s1 runs: gpu-container, managed-inference jobs; runtimes vllm; any image"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("racks table lacks %q:\n%s", want, b.String())
		}
	}
}
