package replay

import (
	"testing"

	"github.com/cosmicac/cosmicac/internal/cosmic"
)

// overcommits replays placements against the fleet's real CPU and memory
// and counts those that land on a node without the room they ask for.
func overcommits(f Fleet, pods []Pod, ps []Placement) int {
	cpu, mem := map[string]int64{}, map[string]int64{}
	for _, n := range f.Nodes {
		cpu[n.Rack+"/"+n.Name], mem[n.Rack+"/"+n.Name] = n.CPUMilli/1000, n.MemoryMiB/1024
	}
	bad := 0
	for i, p := range ps {
		if p.Node == "" {
			continue
		}
		k := p.Rack + "/" + p.Node
		cpu[k] -= pods[i].CPUMilli
		mem[k] -= pods[i].MemoryMiB
		if cpu[k] < 0 || mem[k] < 0 {
			bad++
		}
	}
	return bad
}

// TestSyntheticTrace replays the synthetic trace with each policy: no
// placement overcommits a node; a GPU-only placement (CPU and memory left
// out) does, which is the bug CPU-aware placement fixes. The figures are
// logged for docs/benchmarks.md (go test -v -run TestSyntheticTrace).
func TestSyntheticTrace(t *testing.T) {
	for seed := range uint64(3) {
		f, pods := Synthetic(seed + 1)
		t.Logf("seed %d:", seed+1)
		syntheticTrace(t, f, pods)
	}
}

func syntheticTrace(t *testing.T, f Fleet, pods []Pod) {
	for _, policy := range []string{cosmic.PolicyBestFit, cosmic.PolicyFGD} {
		ps, sum, err := Run(f, pods, Options{Policy: policy})
		if err != nil {
			t.Fatal(err)
		}
		if n := overcommits(f, pods, ps); n != 0 {
			t.Errorf("%s: %d placements overcommit their node", policy, n)
		}
		if !sum.ReachedFull || sum.Placed == 0 {
			t.Errorf("%s: %+v", policy, sum)
		}
		t.Logf("%-8s pods %d, placed %d, GPUs %d of %d allocated, unallocated at 100%% demand %.2f%%, %.0f decisions/s",
			policy, sum.Pods, sum.Placed, sum.AllocatedGPUs, sum.FleetGPUs, 100*sum.UnallocatedAtFull, sum.DecisionsPerSecond())
	}
	gpuOnly := make([]Pod, len(pods))
	for i, p := range pods {
		p.CPUMilli, p.MemoryMiB = 0, 0
		gpuOnly[i] = p
	}
	ps, sum, err := Run(f, gpuOnly, Options{Policy: cosmic.PolicyBestFit})
	if err != nil {
		t.Fatal(err)
	}
	n := overcommits(f, pods, ps)
	if n == 0 {
		t.Errorf("GPU-only placement overcommitted no node: the trace does not test CPU and memory")
	}
	t.Logf("GPU-only best-fit: placed %d, %d of them (%.1f%%) on nodes without their CPU or memory; unallocated at 100%% demand %.2f%%",
		sum.Placed, n, 100*float64(n)/float64(sum.Placed), 100*sum.UnallocatedAtFull)
}
