package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/cosmicac/cosmicac/internal/cosmic"
)

// A rack with a problem is listed unhealthy, with the problem and the fix
// under the table.
func TestRacksTableShowsProblem(t *testing.T) {
	p := cosmic.NewReason(cosmic.ReasonRackMisconfigured, `namespace "cosmicac" does not exist on the cluster and the worker may not create it`)
	p.Fix = "Create the namespace (kubectl create namespace cosmicac)."
	var b bytes.Buffer
	if err := writeRacksTable(&b, []rackRow{
		{ID: "k8s-us-1", Location: "us", GPUModel: "H100", Nodes: 1, GPUs: 8, Free: 8, Reachable: true, Problem: &p},
		{ID: "sim-1", Location: "us", GPUModel: "H100", Nodes: 1, GPUs: 8, Free: 8, Reachable: true},
	}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"yes, unhealthy",
		`rack k8s-us-1 is unhealthy (rack_misconfigured): the rack cannot run jobs until an operator fixes its configuration: namespace "cosmicac" does not exist`,
		"  fix: Create the namespace (kubectl create namespace cosmicac).",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("racks table lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "rack sim-1 is unhealthy") {
		t.Errorf("a healthy rack is listed unhealthy:\n%s", out)
	}
}
