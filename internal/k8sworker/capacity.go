package k8sworker

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/cosmicac/cosmicac/internal/cosmic"
)

// RackNodes maps the cluster's nodes to the rack's GPU nodes, sorted by
// name. A node is a GPU node when it has a GPU resource of cfg (in
// allocatable or capacity); nodes without one are left out. For each:
//
//   - GPUModel and GPUs: the mapped resource with the most allocatable
//     devices (ties: the first resource name), GPUs its allocatable count
//     (a device plugin reports unhealthy GPUs as capacity, not allocatable);
//   - Ready: the NodeReady condition is True;
//   - Schedulable: not cordoned (spec.unschedulable) and no NoSchedule or
//     NoExecute taint that cfg.Tolerations do not tolerate.
func RackNodes(cfg RackConfig, nodes []corev1.Node) []cosmic.Node {
	var out []cosmic.Node
	for i := range nodes {
		n := &nodes[i]
		gpu, count, ok := nodeGPUs(cfg, n)
		if !ok {
			continue
		}
		out = append(out, cosmic.Node{
			Name:        n.Name,
			Rack:        cfg.Rack,
			GPUModel:    gpu.model(),
			GPUs:        count,
			Schedulable: schedulable(cfg, n),
			Ready:       nodeReady(n),
		})
	}
	slices.SortFunc(out, func(a, b cosmic.Node) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// nodeGPUs picks the node's GPU resource and its allocatable count.
func nodeGPUs(cfg RackConfig, n *corev1.Node) (GPUResource, int, bool) {
	var (
		best  GPUResource
		count int64 = -1
	)
	seen := map[corev1.ResourceName]bool{}
	var names []corev1.ResourceName
	for _, l := range []corev1.ResourceList{n.Status.Allocatable, n.Status.Capacity} {
		for name := range l {
			if !seen[name] {
				seen[name] = true
				names = append(names, name)
			}
		}
	}
	slices.Sort(names)
	for _, name := range names {
		g, ok := cfg.gpuForResource(name)
		if !ok {
			continue
		}
		var c int64
		if q, ok := n.Status.Allocatable[name]; ok {
			c = max(q.Value(), 0)
		}
		if c > count {
			best, count = g, c
		}
	}
	return best, int(count), count >= 0
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func schedulable(cfg RackConfig, n *corev1.Node) bool {
	if n.Spec.Unschedulable {
		return false
	}
	for i := range n.Spec.Taints {
		t := &n.Spec.Taints[i]
		if t.Effect != corev1.TaintEffectNoSchedule && t.Effect != corev1.TaintEffectNoExecute {
			continue
		}
		if !slices.ContainsFunc(cfg.Tolerations, func(tol corev1.Toleration) bool { return tolerates(tol, t) }) {
			return false
		}
	}
	return true
}

// tolerates reports whether tol tolerates t (the Exists and Equal operators;
// the numeric comparison operators are never used by the rack's config).
func tolerates(tol corev1.Toleration, t *corev1.Taint) bool {
	if tol.Effect != "" && tol.Effect != t.Effect {
		return false
	}
	switch tol.Operator {
	case corev1.TolerationOpExists:
		return tol.Key == "" || tol.Key == t.Key
	case corev1.TolerationOpEqual, "":
		return tol.Key == t.Key && tol.Value == t.Value
	}
	return false
}

// GPUsInUse counts, per node, the GPUs passed through to CosmicAC's VMIs
// (labelled app.kubernetes.io/managed-by=cosmicac) that hold them: every
// VMI not yet Succeeded or Failed, including those being deleted (their
// GPUs are free only once they are gone). A VMI counts on the node it runs
// on (status.nodeName) or, before it is scheduled, its reserved node.
func GPUsInUse(vmis []virtv1.VirtualMachineInstance) map[string]int {
	out := map[string]int{}
	for i := range vmis {
		v := &vmis[i]
		if v.Labels[LabelManagedBy] != ManagedBy || v.Status.Phase == virtv1.Succeeded || v.Status.Phase == virtv1.Failed {
			continue
		}
		node := v.Status.NodeName
		if node == "" {
			node = v.Annotations[AnnotationNode]
		}
		if node == "" || len(v.Spec.Domain.Devices.GPUs) == 0 {
			continue
		}
		out[node] += len(v.Spec.Domain.Devices.GPUs)
	}
	return out
}

// Catalogue is what a Kubernetes rack runs: any image (its disk is imported
// from the registry reference the spec gives), both job types and every
// runtime, in VMs as large as their node.
func Catalogue(cfg RackConfig) *cosmic.Catalogue {
	c := &cosmic.Catalogue{JobTypes: []cosmic.JobType{cosmic.TypeGPUContainer, cosmic.TypeManagedInference},
		Runtimes: []cosmic.Runtime{cosmic.RuntimeVLLM, cosmic.RuntimeParakeet}}
	if cfg.Images.LlamaCPP != "" && cfg.Images.EngineDisk != "" {
		c.Runtimes = append(c.Runtimes, cosmic.RuntimeLlamaCPP)
	}
	return c
}
