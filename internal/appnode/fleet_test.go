package appnode

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/cosmicac/cosmicac/internal/apiv1"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/ork/orkapi"
)

func rack(id, location, model string, nodes ...cosmic.Node) orkapi.RackInfo {
	for i := range nodes {
		nodes[i].Rack = id
	}
	return orkapi.RackInfo{Rack: cosmic.Rack{ID: id, Type: cosmic.RackTypeServer, Location: location, GPUModel: model,
		WorkerKey: strings.Repeat("ab", 32)}, Nodes: nodes, Reachable: true}
}

func node(name string, gpus, free int) cosmic.Node {
	return cosmic.Node{Name: name, GPUs: gpus, UsedGPUs: gpus - free, FreeGPUs: free, Schedulable: true, Ready: true}
}

// TestFleetOut: the racks summed up by location and GPU model (a node's
// own model first), sorted, naming no rack, node or worker.
func TestFleetOut(t *testing.T) {
	for _, tc := range []struct {
		name  string
		racks []orkapi.RackInfo
		want  apiv1.Fleet
	}{
		{"no racks", nil, apiv1.Fleet{Locations: []apiv1.FleetLocation{}}},
		{"a rack whose nodes have not reported", []orkapi.RackInfo{rack("r1", "us", "H100")},
			apiv1.Fleet{Locations: []apiv1.FleetLocation{{Name: "us", GPUModels: []apiv1.FleetGPUModel{{Model: "H100"}}}}}},
		{"two racks of a model, a node of another model, two locations", []orkapi.RackInfo{
			rack("r2", "us", "H100", node("n1", 8, 3), node("n2", 8, 8)),
			rack("r1", "us", "H100", node("n1", 4, 4), cosmic.Node{Name: "n3", GPUModel: "A100", GPUs: 2, FreeGPUs: 0, Ready: false}),
			rack("r3", "eu", "L4", node("n1", 1, 0)),
		}, apiv1.Fleet{Locations: []apiv1.FleetLocation{
			{Name: "eu", GPUModels: []apiv1.FleetGPUModel{{Model: "L4", Nodes: 1, GPUs: 1, Free: 0, MaxPerNode: 1, MaxFreePerNode: 0}}},
			{Name: "us", GPUModels: []apiv1.FleetGPUModel{
				{Model: "A100", Nodes: 1, GPUs: 2, Free: 0, MaxPerNode: 2, MaxFreePerNode: 0},
				{Model: "H100", Nodes: 3, GPUs: 20, Free: 15, MaxPerNode: 8, MaxFreePerNode: 8},
			}},
		}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := fleetOut(tc.racks)
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Fatalf("fleet (-want +got):\n%s", d)
			}
			b, _ := json.Marshal(got)
			for _, secret := range []string{`"r1"`, `"r2"`, `"n1"`, strings.Repeat("ab", 32)} {
				if strings.Contains(string(b), secret) {
					t.Errorf("the fleet names %s: %s", secret, b)
				}
			}
		})
	}
}

// TestFleetCatalogues: a location's GPU model shows what its racks run
// together: one rack taking any image makes the images any, one rack
// without a cap lifts the cap; a rack that has not reported its catalogue
// leaves it unknown. The nodes' largest CPU and memory show too.
func TestFleetCatalogues(t *testing.T) {
	qemu := rack("q1", "local", "H100", cosmic.Node{Name: "n1", GPUs: 1, Ready: true, Schedulable: true, CPUMilli: 10000, MemoryMiB: 66 * 1024})
	qemu.Catalogue = &cosmic.Catalogue{Images: []string{"debian-12"}, JobTypes: []cosmic.JobType{cosmic.TypeGPUContainer}, MaxVMCPUs: 1, MaxVMMemoryMiB: 512}
	sim := rack("s1", "us", "H100", node("n1", 8, 8))
	sim.Catalogue = &cosmic.Catalogue{JobTypes: []cosmic.JobType{cosmic.TypeManagedInference, cosmic.TypeGPUContainer}, Runtimes: []cosmic.Runtime{cosmic.RuntimeVLLM}}
	q2 := qemu
	q2.Rack.ID, q2.Location = "q2", "us"
	silent := rack("x1", "eu", "H100", node("n1", 8, 8))

	got := fleetOut([]orkapi.RackInfo{qemu, sim, q2, silent})
	want := map[string]*cosmic.Catalogue{
		"eu":    nil,
		"local": qemu.Catalogue,
		"us":    {JobTypes: []cosmic.JobType{cosmic.TypeGPUContainer, cosmic.TypeManagedInference}, Runtimes: []cosmic.Runtime{cosmic.RuntimeVLLM}},
	}
	for _, l := range got.Locations {
		if d := cmp.Diff(want[l.Name], l.GPUModels[0].Catalogue); d != "" {
			t.Errorf("%s (-want +got):\n%s", l.Name, d)
		}
		if l.Name == "local" && (l.GPUModels[0].MaxCPUPerNode != 10 || l.GPUModels[0].MaxMemoryMiBPerNode != 66*1024) {
			t.Errorf("local: %+v, want the node's 10 vCPUs and 66 GiB", l.GPUModels[0])
		}
	}
}
