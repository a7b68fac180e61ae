package k8sworker

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cosmicac/cosmicac/internal/cosmic"
)

func reqs(cpu, mem string) corev1.ResourceRequirements {
	return corev1.ResourceRequirements{Requests: corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem),
	}}
}

func TestForeignRequests(t *testing.T) {
	pod := func(name, node string, phase corev1.PodPhase, labels map[string]string, spec corev1.PodSpec) corev1.Pod {
		spec.NodeName = node
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Spec: spec, Status: corev1.PodStatus{Phase: phase}}
	}
	two := corev1.PodSpec{Containers: []corev1.Container{{Name: "a", Resources: reqs("500m", "256Mi")}, {Name: "b", Resources: reqs("250m", "256Mi")}}}
	bigInit := corev1.PodSpec{
		InitContainers: []corev1.Container{{Name: "i", Resources: reqs("2", "128Mi")}},
		Containers:     []corev1.Container{{Name: "a", Resources: reqs("1", "1Gi")}},
		Overhead:       corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
	}
	pods := []corev1.Pod{
		pod("two", "n1", corev1.PodRunning, nil, two),
		pod("init", "n1", corev1.PodPending, nil, bigInit),
		pod("done", "n1", corev1.PodSucceeded, nil, two),
		pod("failed", "n1", corev1.PodFailed, nil, two),
		pod("ours", "n1", corev1.PodRunning, map[string]string{LabelManagedBy: ManagedBy}, two),
		pod("other", "n2", corev1.PodRunning, nil, two),
		pod("unbound", "", corev1.PodPending, nil, two),
	}
	got := ForeignRequests(pods)
	want := map[string][2]int64{
		// two: 750m, 512Mi; init: max(2, 1)+100m, max(128Mi, 1Gi)+64Mi.
		"n1": {750 + 2100, 512 + 1088},
		"n2": {750, 512},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("ForeignRequests (-want +got):\n%s", d)
	}
}

func TestFreeForJobs(t *testing.T) {
	n := &corev1.Node{Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("16Gi"),
	}}}
	for name, tc := range map[string]struct {
		node          *corev1.Node
		used          [2]int64
		wantC, wantMi int64
	}{
		"free":         {n, [2]int64{}, 8000, 16384},
		"some used":    {n, [2]int64{2850, 1600}, 5150, 14784},
		"all used":     {n, [2]int64{9000, 20000}, 1, 1},
		"not reported": {&corev1.Node{}, [2]int64{100, 100}, 0, 0},
	} {
		c, m := FreeForJobs(tc.node, tc.used)
		if c != tc.wantC || m != tc.wantMi {
			t.Errorf("%s: FreeForJobs = %d, %d; want %d, %d", name, c, m, tc.wantC, tc.wantMi)
		}
	}
}

func TestKubeVirtOverhead(t *testing.T) {
	// KubeVirt v1.9 for a 16-vCPU, 128 GiB VMI with GPUs: 220Mi of processes,
	// 8Mi IOThread, 32Mi video, 1Gi VFIO, 16×8Mi, 128Gi/512.
	_, mem := KubeVirtOverhead.Charge(16, 128, 2)
	if want := int64(128*1024 + 220 + 8 + 32 + 1024 + 128 + 256); mem != want {
		t.Errorf("memory charged = %d MiB, want %d", mem, want)
	}
	if KubeVirtOverhead.CPUMilli != 0 {
		t.Errorf("CPU overhead = %dm, want 0: the VMI's CPU request is copied as is", KubeVirtOverhead.CPUMilli)
	}
	_ = cosmic.VMOverhead{}
}
