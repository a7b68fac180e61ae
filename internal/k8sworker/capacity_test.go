package k8sworker

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/cosmicac/cosmicac/internal/cosmic"
)

const h100 = "nvidia.com/GH100_H100_SXM5_80GB"

// node builds a Node: ready unless told otherwise, with allocatable (and
// equal capacity) resources given as name, count pairs.
func node(name string, ready bool, res ...any) corev1.Node {
	n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	n.Status.Allocatable, n.Status.Capacity = corev1.ResourceList{}, corev1.ResourceList{}
	for i := 0; i < len(res); i += 2 {
		q := *resource.NewQuantity(int64(res[i+1].(int)), resource.DecimalSI)
		n.Status.Allocatable[corev1.ResourceName(res[i].(string))] = q
		n.Status.Capacity[corev1.ResourceName(res[i].(string))] = q
	}
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse}, {Type: corev1.NodeReady, Status: st}}
	return n
}

func TestRackNodes(t *testing.T) {
	def := DefaultRackConfig()
	mapped := DefaultRackConfig()
	mapped.GPUModel = "L40S"
	mapped.GPUResources = []GPUResource{{Resource: "nvidia.com/AD102GL_L40S", Model: "L40S"}}
	tolerant := DefaultRackConfig()
	tolerant.Tolerations = []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}

	cordoned := node("cordoned", true, h100, 8)
	cordoned.Spec.Unschedulable = true
	tainted := node("tainted", true, h100, 8)
	tainted.Spec.Taints = []corev1.Taint{{Key: "nvidia.com/gpu", Value: "true", Effect: corev1.TaintEffectNoSchedule}}
	preferNo := node("prefer-no", true, h100, 8)
	preferNo.Spec.Taints = []corev1.Taint{{Key: "x", Effect: corev1.TaintEffectPreferNoSchedule}}
	unhealthy := node("unhealthy", true, h100, 8)
	unhealthy.Status.Allocatable[h100] = *resource.NewQuantity(6, resource.DecimalSI)
	gone := node("plugin-gone", true, h100, 8)
	delete(gone.Status.Allocatable, h100)
	noCond := node("no-conditions", true, h100, 4)
	noCond.Status.Conditions = nil

	tests := map[string]struct {
		cfg   RackConfig
		nodes []corev1.Node
		want  []cosmic.Node
	}{
		"ready and not, sorted, non-GPU nodes left out": {
			cfg: def,
			nodes: []corev1.Node{
				node("gpu-b", false, h100, 8, "cpu", 128),
				node("cpu-only", true, "cpu", 64, "nvidia.com/gpu", 4),
				node("gpu-a", true, h100, 8),
				node("mig", true, "nvidia.com/mig-1g.10gb", 7),
			},
			want: []cosmic.Node{
				{Name: "gpu-a", Rack: def.Rack, GPUModel: "GH100_H100_SXM5_80GB", GPUs: 8, Schedulable: true, Ready: true},
				{Name: "gpu-b", Rack: def.Rack, GPUModel: "GH100_H100_SXM5_80GB", GPUs: 8, Schedulable: true, Ready: false},
			},
		},
		"cordoned, tainted, unhealthy GPUs, no conditions": {
			cfg:   def,
			nodes: []corev1.Node{cordoned, tainted, preferNo, unhealthy, gone, noCond},
			want: []cosmic.Node{
				{Name: "cordoned", Rack: def.Rack, GPUModel: "GH100_H100_SXM5_80GB", GPUs: 8, Schedulable: false, Ready: true},
				{Name: "no-conditions", Rack: def.Rack, GPUModel: "GH100_H100_SXM5_80GB", GPUs: 4, Schedulable: true, Ready: false},
				{Name: "plugin-gone", Rack: def.Rack, GPUModel: "GH100_H100_SXM5_80GB", GPUs: 0, Schedulable: true, Ready: true},
				{Name: "prefer-no", Rack: def.Rack, GPUModel: "GH100_H100_SXM5_80GB", GPUs: 8, Schedulable: true, Ready: true},
				{Name: "tainted", Rack: def.Rack, GPUModel: "GH100_H100_SXM5_80GB", GPUs: 8, Schedulable: false, Ready: true},
				{Name: "unhealthy", Rack: def.Rack, GPUModel: "GH100_H100_SXM5_80GB", GPUs: 6, Schedulable: true, Ready: true},
			},
		},
		"tolerated taint": {
			cfg:   tolerant,
			nodes: []corev1.Node{tainted},
			want:  []cosmic.Node{{Name: "tainted", Rack: def.Rack, GPUModel: "GH100_H100_SXM5_80GB", GPUs: 8, Schedulable: true, Ready: true}},
		},
		"mapped resources only": {
			cfg:   mapped,
			nodes: []corev1.Node{node("h100", true, h100, 8), node("l40s", true, "nvidia.com/AD102GL_L40S", 4)},
			want:  []cosmic.Node{{Name: "l40s", Rack: def.Rack, GPUModel: "L40S", GPUs: 4, Schedulable: true, Ready: true}},
		},
		"two models on a node: the one with more GPUs": {
			cfg:   def,
			nodes: []corev1.Node{node("mixed", true, "nvidia.com/AD102GL_L40S", 2, h100, 4)},
			want:  []cosmic.Node{{Name: "mixed", Rack: def.Rack, GPUModel: "GH100_H100_SXM5_80GB", GPUs: 4, Schedulable: true, Ready: true}},
		},
		"no nodes": {cfg: def},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := RackNodes(tc.cfg, tc.nodes)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("RackNodes (-want +got):\n%s", diff)
			}
		})
	}
}

func TestGPUsInUse(t *testing.T) {
	vmi := func(name, node, annotated string, gpus int, phase virtv1.VirtualMachineInstancePhase, managed bool) virtv1.VirtualMachineInstance {
		v := virtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}, Annotations: map[string]string{}}}
		if managed {
			v.Labels[LabelManagedBy] = ManagedBy
		}
		if annotated != "" {
			v.Annotations[AnnotationNode] = annotated
		}
		for range gpus {
			v.Spec.Domain.Devices.GPUs = append(v.Spec.Domain.Devices.GPUs, virtv1.GPU{Name: "g", DeviceName: h100})
		}
		v.Status.NodeName, v.Status.Phase = node, phase
		return v
	}
	deleting := vmi("deleting", "a", "a", 2, virtv1.Running, true)
	deleting.DeletionTimestamp = &metav1.Time{}
	got := GPUsInUse([]virtv1.VirtualMachineInstance{
		vmi("running", "a", "a", 4, virtv1.Running, true),
		deleting,
		vmi("pending", "", "b", 8, virtv1.Pending, true),
		vmi("crashed", "a", "a", 1, virtv1.Failed, true),
		vmi("done", "b", "b", 1, virtv1.Succeeded, true),
		vmi("not ours", "a", "", 1, virtv1.Running, false),
		vmi("no gpus", "c", "c", 0, virtv1.Running, true),
	})
	if diff := cmp.Diff(map[string]int{"a": 6, "b": 8}, got); diff != "" {
		t.Errorf("GPUsInUse (-want +got):\n%s", diff)
	}
}
