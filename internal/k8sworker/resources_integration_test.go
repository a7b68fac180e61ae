package k8sworker

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/k8stest"
)

// A pod that is not CosmicAC's takes its requests from its node's CPU and
// memory in Capacity; CosmicAC's own pods do not; deleting the pod gives
// them back.
func TestIntegrationCapacityLessForeignPods(t *testing.T) {
	h := newHarness(t, k8stest.Shared(t), nil)
	node := h.nodeName(0)
	h.addNode(node, 8) // allocatable cpu 128
	h.start()

	cpuOf := func(want int64) func() error {
		return func() error {
			c, err := h.w.Capacity(h.ctx)
			if err != nil {
				return err
			}
			i := slices.IndexFunc(c.Nodes, func(n cosmic.Node) bool { return n.Name == node })
			if i < 0 || c.Nodes[i].CPUMilli != want {
				return fmt.Errorf("capacity %+v, want %s with %dm CPU", c.Nodes, node, want)
			}
			if c.Overhead != KubeVirtOverhead {
				return fmt.Errorf("overhead %+v, want %+v", c.Overhead, KubeVirtOverhead)
			}
			return nil
		}
	}
	h.eventually(10*time.Second, "capacity of the bare node", cpuOf(128000))

	pod := func(name string, labels map[string]string, cpu string) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: h.cfg.Namespace, Labels: labels},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{
				Name: "c", Image: "example.invalid/c", Resources: reqs(cpu, "1Gi"),
			}}},
		}
		if err := h.c.Create(h.ctx, p); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = h.c.Delete(context.Background(), p) })
		return p
	}
	foreign := pod("foreign", nil, "100")
	pod("ours", map[string]string{LabelManagedBy: ManagedBy}, "20")
	h.eventually(10*time.Second, "capacity less the foreign pod", cpuOf(28000))

	if err := h.c.Delete(h.ctx, foreign, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	h.eventually(10*time.Second, "capacity once the pod is gone", cpuOf(128000))
}
