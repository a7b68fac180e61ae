package reference

import (
	"strings"
	"testing"

	"github.com/cosmicac/cosmicac/internal/ork/replay"
)

// TestFGDScoresByHand pins the ported score to figures worked by hand from
// the artifact's formulas: typical pods half 1-GPU, half 4-GPU (both
// 8 cores). A 1-GPU pod on a node with 4 GPUs free leaves 3, a fragment
// for the 4-GPU half: 0.5 × 3000 milli-GPUs more; sigmoid(−1.5) × 100 =
// 18.2, truncated to 18. On a node with 1 free it takes away the fragment
// it sat in (0.5 × 1000): sigmoid(0.5) × 100 = 62.2 → 62. On 8 free, the
// 7 left still fit both: 50.
func TestFGDScoresByHand(t *testing.T) {
	typ := []typical{{cpu: 8000, gpus: 1, p: 0.5}, {cpu: 8000, gpus: 4, p: 0.5}}
	pod := replay.Pod{GPUs: 1, CPUMilli: 8000}
	for _, tt := range []struct {
		free int
		want int64
	}{{4, 18}, {1, 62}, {8, 50}} {
		n := &node{gpus: 8, free: tt.free, cpuLeft: 64000, memLeft: 1 << 20}
		if got := fgdScore(n, pod, typ); got != tt.want {
			t.Errorf("free %d: score %d, want %d", tt.free, got, tt.want)
		}
	}
	// Too little CPU left for the typical pods after: the node's free GPUs
	// are all fragment (Q4, lack of CPU): 8 free, 12 cores, the pod takes
	// 8 of them; before, 0; after, 7 GPUs for both halves: sigmoid(−7).
	n := &node{gpus: 8, free: 8, cpuLeft: 12000, memLeft: 1 << 20}
	if got := fgdScore(n, pod, typ); got != 0 {
		t.Errorf("CPU-starved: score %d, want 0", got)
	}
}

// TestTypicalPods: the most common sizes until 95% of the pods, shares
// renormalised over them; memory is not part of a size.
func TestTypicalPods(t *testing.T) {
	var pods []replay.Pod
	add := func(n, gpus int, cpu, mem int64) {
		for range n {
			pods = append(pods, replay.Pod{GPUs: gpus, CPUMilli: cpu, MemoryMiB: mem})
		}
	}
	add(60, 1, 4000, 1000)
	add(30, 1, 4000, 2000) // the same size as the 60: 90 in all
	add(6, 8, 64000, 0)
	add(4, 2, 8000, 0) // beyond 95%: left out
	typ := typicalPods(pods)
	if len(typ) != 2 || typ[0].gpus != 1 || typ[1].gpus != 8 {
		t.Fatalf("typical pods %+v, want the 1-GPU then the 8-GPU size", typ)
	}
	if got, want := typ[0].p, 90.0/96; got != want {
		t.Errorf("share of the 1-GPU size %v, want %v", got, want)
	}
}

// TestRunPoliciesOnAKnownFleet: two nodes, 8 and 2 GPUs; pods of 1, 8 and
// 1 GPUs, which ask the fleet's 10 in all. FGD (typical: the two sizes),
// BestFit and GpuPacking put the first 1-GPU pod on the 2-GPU node, so the
// 8 fits: nothing is left unallocated. Random, over seeds, sometimes puts
// it on the 8-GPU node and strands the 8-GPU pod.
func TestRunPoliciesOnAKnownFleet(t *testing.T) {
	fleet, err := replay.ReadNodes(strings.NewReader("name,gpus,gpu_model,cpu_milli,memory_mib\nbig,8,G,64,256\nsmall,2,G,16,64\n"), "nodes.csv")
	if err != nil {
		t.Fatal(err)
	}
	pods := []replay.Pod{{Name: "a", GPUs: 1, CPUMilli: 4, MemoryMiB: 8}, {Name: "b", GPUs: 8, CPUMilli: 32, MemoryMiB: 64}, {Name: "c", GPUs: 1, CPUMilli: 4, MemoryMiB: 8}}
	for _, p := range []string{"FGD", "GpuPacking", "BestFit"} {
		res, err := Run(fleet, pods, pods, p, 1)
		if err != nil {
			t.Fatal(err)
		}
		if res.Placed != 3 || res.AllocatedGPUs != 10 || !res.ReachedFull || res.UnallocatedAtFull != 0 {
			t.Errorf("%s: %+v, want all 3 placed and nothing unallocated", p, res)
		}
	}
	stranded := false
	for seed := range uint64(32) {
		res, err := Run(fleet, pods, pods, "Random", seed)
		if err != nil {
			t.Fatal(err)
		}
		stranded = stranded || res.Placed < 3
	}
	if !stranded {
		t.Error("Random never put the 1-GPU pod on the 8-GPU node in 32 seeds")
	}
	if _, err := Run(fleet, pods, pods, "WorstFit", 1); err == nil {
		t.Error("an unknown policy ran")
	}
}
