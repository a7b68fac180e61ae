package k8sworker

import (
	corev1 "k8s.io/api/core/v1"
	podresource "k8s.io/component-helpers/resource"

	"github.com/cosmicac/cosmicac/internal/cosmic"
)

// KubeVirtOverhead is the memory and CPU that KubeVirt v1.9 asks for in a
// CosmicAC VMI's virt-launcher pod beyond the guest's own requests, in the
// linear model of cosmic.VMOverhead. It follows
// KvmHypervisorBackend.GetMemoryOverhead (kubevirt/kubevirt v1.9.0,
// pkg/hypervisor/kvm/hypervisorbackend.go), for the VMIs buildVMI makes
// (x86_64, no dedicated CPUs, no probes, TPM, SEV or downward metrics):
//
//   - per VM: VirtLauncherMonitorOverhead 25Mi + VirtLauncherOverhead 100Mi +
//     VirtlogdOverhead 25Mi + VirtqemudOverhead 40Mi + QemuOverhead 30Mi,
//     8Mi for the IOThread, 32Mi of video RAM (buildVMI leaves
//     autoattachGraphicsDevice unset, which KubeVirt reads as true), and 1Gi
//     because the VM has a VFIO device (KubeVirt adds it once per VM, not
//     per device; every CosmicAC VMI has at least one GPU): 1284 MiB;
//   - per vCPU: 8Mi;
//   - per GiB of guest memory: 2 MiB of page tables (1/512 of the request).
//
// It leaves out what the model cannot express: the 128Mi of pflash on
// arm64, the cluster's additionalGuestMemoryOverheadRatio, the network
// binding's memory, and the few MB the support containers request. CPU:
// without dedicated CPUs KubeVirt requests vCPUs/cpuAllocationRatio, but
// buildVMI sets domain.resources.requests.cpu, which KubeVirt copies as is,
// so it adds no CPU of its own (the containerDisk and hook sidecar
// containers request 10m each, left out).
var KubeVirtOverhead = cosmic.VMOverhead{
	MemoryMiB:            25 + 100 + 25 + 40 + 30 + 8 + 32 + 1024,
	MemoryMiBPerVCPU:     8,
	MemoryPerGuestGiBMiB: 2,
}

// PodRequests is what pod takes from its node, as the scheduler counts it:
// the larger of its containers' sum and its largest init container
// (sidecars counted), plus its overhead (k8s.io/component-helpers
// resource.PodRequests, the helper kube-scheduler uses).
func PodRequests(pod *corev1.Pod) (cpuMilli, memMiB int64) {
	r := podresource.PodRequests(pod, podresource.PodResourcesOptions{})
	return r.Cpu().MilliValue(), r.Memory().Value() >> 20
}

// cosmicPod reports whether pod is one of CosmicAC's virt-launcher pods:
// KubeVirt copies the VMI's labels to it, so it carries
// app.kubernetes.io/managed-by=cosmicac. The ork charges those through its
// reservations.
func cosmicPod(pod *corev1.Pod) bool {
	return pod.Labels[LabelManagedBy] == ManagedBy
}

// ForeignRequests sums, per node, the requests of the pods bound to it that
// are not CosmicAC's and have not terminated (Succeeded or Failed).
func ForeignRequests(pods []corev1.Pod) map[string][2]int64 {
	out := map[string][2]int64{}
	for i := range pods {
		p := &pods[i]
		if p.Spec.NodeName == "" || cosmicPod(p) || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		c, m := PodRequests(p)
		s := out[p.Spec.NodeName]
		out[p.Spec.NodeName] = [2]int64{s[0] + c, s[1] + m}
	}
	return out
}

// FreeForJobs is the node's allocatable CPU and memory less used (the
// foreign pods' requests). A resource the node does not report is 0 (not
// limited, as cosmic.Node reads it); one that is all used is 1, the
// least that still says "limited".
func FreeForJobs(n *corev1.Node, used [2]int64) (cpuMilli, memMiB int64) {
	if q, ok := n.Status.Allocatable[corev1.ResourceCPU]; ok {
		cpuMilli = max(q.MilliValue()-used[0], 1)
	}
	if q, ok := n.Status.Allocatable[corev1.ResourceMemory]; ok {
		memMiB = max(q.Value()>>20-used[1], 1)
	}
	return cpuMilli, memMiB
}
