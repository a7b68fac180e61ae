package cosmictest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	virtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/k8stest"
	"github.com/cosmicac/cosmicac/internal/k8sworker"
	"github.com/cosmicac/cosmicac/internal/platform"
	"github.com/cosmicac/cosmicac/internal/waittest"
)

// A node whose CPU is taken by another pod receives no job that needs it:
// two nodes with free GPUs, one with 100 of its 128 CPUs requested by a pod
// that is not CosmicAC's. A job of 64 vCPUs lands on the other node (its
// VMI's node affinity names it); one of 100 vCPUs fits neither now (28
// free on one, 64 on the other) and waits, saying it waits for CPU.
func TestUpWithKubeconfigPlacesOnFreeCPU(t *testing.T) {
	kube := k8stest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := kube.Client
	rc := k8sworker.DefaultRackConfig()
	rc.Rack, rc.Location = "kube-eu-1", "eu"
	for i := range 2 {
		addGPUNode(t, ctx, c, fmt.Sprintf("gpu-%d", i), corev1.ResourceName("nvidia.com/"+rc.GPUModel), 8)
	}
	busy := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "busy", Namespace: "default"},
		Spec: corev1.PodSpec{NodeName: "gpu-0", Containers: []corev1.Container{{
			Name: "c", Image: "example.invalid/c",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100")}},
		}}},
	}
	if err := c.Create(ctx, busy); err != nil {
		t.Fatal(err)
	}
	e := NewEnv(t, func(cfg *platform.Config) { cfg.Kube = &platform.KubeConfig{Kubeconfig: kube.Kubeconfig, Rack: rc} })

	waittest.NoError(t, func() error {
		racks, err := e.Client.ListRacks(e.Ctx)
		if err != nil || len(racks) != 1 || racks[0].FreeGPUs != 16 {
			return fmt.Errorf("racks %+v (%v), want one with 16 free GPUs", racks, err)
		}
		return nil
	}, "the cluster's rack")

	spec := Container("needs-cpu", 1)
	spec.Location = "eu"
	spec.Resources.CPU, spec.Resources.Memory = 64, 8
	j := e.Create(spec)
	name := k8sworker.VMIName(j.ID, 0, 0)
	waittest.NoError(t, func() error {
		var v virtv1.VirtualMachineInstance
		if err := c.Get(ctx, client.ObjectKey{Namespace: rc.Namespace, Name: name}, &v); err != nil {
			return err
		}
		if node := v.Annotations[k8sworker.AnnotationNode]; node != "gpu-1" {
			return fmt.Errorf("VMI reserved on %q, want gpu-1", node)
		}
		terms := v.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
		if len(terms) != 1 || len(terms[0].MatchFields) != 1 || terms[0].MatchFields[0].Values[0] != "gpu-1" {
			return fmt.Errorf("VMI affinity %+v, want gpu-1", terms)
		}
		return nil
	}, "the job's VMI on the node with free CPU")

	spec = Container("waits-for-cpu", 1)
	spec.Location = "eu"
	spec.Resources.CPU, spec.Resources.Memory = 100, 8
	big := e.Create(spec)
	waittest.NoError(t, func() error {
		got, err := e.Client.GetJob(e.Ctx, big.ID)
		if err != nil {
			return err
		}
		msg := got.Status.Message + " " + got.Status.WaitingFor
		if got.Status.Reason != nil {
			msg += " " + got.Status.Reason.Message
		}
		if got.Status.State != cosmic.StateQueued || !strings.Contains(msg, "waiting for CPU") {
			return fmt.Errorf("status %s %q, want queued waiting for CPU", got.Status.State, msg)
		}
		return nil
	}, "the job that fits no node waits for CPU")
}
