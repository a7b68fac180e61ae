// Package reference holds independent ports of the placement policies the
// FGD paper compared (Weng et al., "Beware of Fragmentation: Scheduling
// GPU-Sharing Workloads with Fragmentation Gradient Descent", USENIX ATC
// '23), written from its artifact's source
// (github.com/hkust-adsl/kubernetes-scheduler-simulator) and run on a
// replay's fleet and pods, so that CosmicAC's own policies
// (internal/ork/placement) can be measured against them on the very same
// files (hack/placement-openb). Nothing in the platform uses this package.
//
// The ports keep what decides a placement of whole GPUs, and say where
// they read it:
//   - a node passes the filter when it has the pod's GPU model (any, when
//     the pod names none), as many free GPUs, and the free CPU and memory
//     (the scheduler's NodeResourcesFit and the artifact's Open-Gpu-Share
//     filter);
//   - each policy scores a node as an integer from 0 to 100, as the
//     scheduler framework's score plugins do (pkg/simulator/plugin/*.go);
//   - the pod goes to a node of the highest score, drawn at random among
//     the ties, as the framework's selectHost does (seeded here);
//   - the GPUs a pod takes on its node are the lowest free ones (for whole
//     GPUs the artifact's choice among free GPUs changes no later score).
package reference

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/cosmicac/cosmicac/internal/ork/replay"
)

// Policies are the ported policies, by the artifact's names.
var Policies = []string{"FGD", "BestFit", "GpuPacking", "Random"}

// Result is what a reference run measures: the placed pods, and the share
// of the fleet's GPUs unallocated when the pods that arrived first ask for
// all of the fleet's GPUs, as replay.Summary measures it.
type Result struct {
	Policy            string
	Pods, Placed      int
	FleetGPUs         int
	AllocatedGPUs     int
	UnallocatedAtFull float64
	ReachedFull       bool
}

type node struct {
	model            string
	gpus, free       int
	cpuLeft, memLeft int64 // as replay's pods count them: milli-CPU, MiB
}

// typical is one of the workload's typical pods: its size and its share of
// the typical pods (pkg/type/resource.go, TargetPod).
type typical struct {
	cpu   int64
	gpus  int
	model string
	p     float64
}

// Run places pods on f in order by policy, drawing among tied nodes with
// seed. typicalFrom is the workload FGD measures fragmentation against
// (the artifact takes the original pod list, before tuning).
func Run(f replay.Fleet, pods, typicalFrom []replay.Pod, policy string, seed uint64) (Result, error) {
	if !slices.Contains(Policies, policy) {
		return Result{}, fmt.Errorf("unknown policy %q (want one of %v)", policy, Policies)
	}
	// Each node's CPU and memory in the pods' units: replay's fleet is
	// scaled so that placement charges a pod's cpu_milli × 1000 and its
	// memory_mib × 1024 (replay.nodeOf).
	nodes := make([]node, len(f.Nodes))
	res := Result{Policy: policy, Pods: len(pods)}
	models := map[string]string{}
	for _, r := range f.Racks {
		models[r.ID] = r.GPUModel
	}
	for i, n := range f.Nodes {
		nodes[i] = node{model: cmp.Or(n.GPUModel, models[n.Rack]), gpus: n.GPUs, free: n.GPUs, cpuLeft: n.CPUMilli / 1000, memLeft: n.MemoryMiB / 1024}
		res.FleetGPUs += n.GPUs
	}
	typ := typicalPods(typicalFrom)
	rng := rand.New(rand.NewPCG(seed, 0xf6d))
	demand := 0
	for _, p := range pods {
		best := int64(-1)
		ties := 0
		pick := -1
		for i := range nodes {
			n := &nodes[i]
			if n.free < p.GPUs || n.cpuLeft < p.CPUMilli || n.memLeft < p.MemoryMiB || p.GPUModel != "" && p.GPUModel != n.model {
				continue
			}
			var s int64
			switch policy {
			case "FGD":
				s = fgdScore(n, p, typ)
			case "BestFit":
				s = bestFitScore(n, p)
			case "GpuPacking":
				s = packingScore(n, p)
			case "Random":
				s = 0 // every feasible node ties: a uniform draw
			}
			// selectHost: the first of the highest, replaced by each
			// later tie with probability 1/ties (reservoir sampling).
			switch {
			case s > best:
				best, ties, pick = s, 1, i
			case s == best:
				ties++
				if rng.IntN(ties) == 0 {
					pick = i
				}
			}
		}
		if pick >= 0 {
			n := &nodes[pick]
			n.free -= p.GPUs
			n.cpuLeft -= p.CPUMilli
			n.memLeft -= p.MemoryMiB
			res.Placed++
			res.AllocatedGPUs += p.GPUs
		}
		demand += p.GPUs
		if !res.ReachedFull && res.FleetGPUs > 0 && demand >= res.FleetGPUs {
			res.ReachedFull = true
			res.UnallocatedAtFull = 1 - float64(res.AllocatedGPUs)/float64(res.FleetGPUs)
		}
	}
	if !res.ReachedFull && res.FleetGPUs > 0 {
		res.UnallocatedAtFull = 1 - float64(res.AllocatedGPUs)/float64(res.FleetGPUs)
	}
	return res, nil
}

// typicalPods is the artifact's GetTypicalPods (pkg/utils/frag.go) as its
// experiments configure it (scripts/generate_config_and_run.py:
// isInvolvedCpuPods true, podPopularityThreshold 95, podIncreaseStep 1,
// gpuResWeight 0): the pods counted by size (milli-CPU, GPUs, GPU model;
// memory is not part of a typical pod), the most common sizes taken until
// they hold 95% of the pods, their shares renormalised over those.
func typicalPods(pods []replay.Pod) []typical {
	type key struct {
		cpu   int64
		gpus  int
		model string
	}
	count := map[key]float64{}
	for _, p := range pods {
		count[key{p.CPUMilli, p.GPUs, p.GPUModel}]++
	}
	list := make([]typical, 0, len(count))
	for k, c := range count {
		list = append(list, typical{cpu: k.cpu, gpus: k.gpus, model: k.model, p: c})
	}
	// Decreasing count, then decreasing size (sort.Reverse of
	// TargetPodList.Less: count, then PodResource.Less).
	slices.SortFunc(list, func(a, b typical) int {
		return cmp.Or(cmp.Compare(b.p, a.p), cmp.Compare(b.cpu, a.cpu), cmp.Compare(b.gpus, a.gpus), cmp.Compare(b.model, a.model))
	})
	total := float64(len(pods))
	want := 95 * total / 100
	var cum float64
	i := 0
	for cum < want && i < len(list) {
		cum += list[i].p
		i++
	}
	list = list[:i]
	for j := range list {
		list[j].p /= cum
	}
	return list
}

// frag is the artifact's NodeGpuShareFragAmountScore for whole GPUs, in
// milli-GPUs: for each typical pod, the node's free GPUs are a fragment
// unless that pod fits them (enough free GPUs of its model and the CPU);
// a pod without GPUs never uses them (XL and XR both count), weighed by
// each pod's share.
func frag(free int, cpuLeft int64, model string, typ []typical) float64 {
	var f float64
	idle := float64(free * 1000)
	for _, t := range typ {
		fits := t.gpus > 0 && (t.model == "" || t.model == model) && t.gpus <= free && t.cpu <= cpuLeft
		if !fits {
			f += t.p * idle
		}
	}
	return f
}

// fgdScore is FGDScorePlugin.Score (pkg/simulator/plugin/fgd_score.go,
// calculateGpuShareFragExtendScore, whole GPUs): the sigmoid of the
// fragmentation the pod takes away (in GPUs), × 100, truncated.
func fgdScore(n *node, p replay.Pod, typ []typical) int64 {
	before := frag(n.free, n.cpuLeft, n.model, typ)
	after := frag(n.free-p.GPUs, n.cpuLeft-p.CPUMilli, n.model, typ)
	return int64(sigmoid((before-after)/1000) * 100)
}

func sigmoid(x float64) float64 { return 1 / (1 + math.Exp(-x)) }

// bestFitScore is getBestFitScore (pkg/simulator/plugin/best_fit_score.go):
// (1 − ½ free CPU after / 128 cores − ½ free GPU after / 8 GPUs) × 100,
// truncated; its NormalizeScore keeps the highest the highest.
func bestFitScore(n *node, p replay.Pod) int64 {
	s := float64(n.cpuLeft-p.CPUMilli)/128000*0.5 + float64((n.free-p.GPUs)*1000)/8000*0.5
	return int64((1 - s) * 100)
}

// packingScore is getPackingScore (pkg/simulator/plugin/gpu_packing_score.go)
// for whole GPUs: a node already in use scores 50 less the GPUs taken
// (at least 33), an unused one 33 less its GPUs (at least its GPUs); a pod
// without GPUs scores 0.
func packingScore(n *node, p replay.Pod) int64 {
	if p.GPUs == 0 {
		return 0
	}
	if n.free == n.gpus {
		return max(int64(100/3-n.free), int64(n.free))
	}
	return max(int64(100/2-p.GPUs), 100/3)
}
