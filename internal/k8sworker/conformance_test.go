package k8sworker

import (
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	virtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/k8stest"
	"github.com/cosmicac/cosmicac/internal/worker"
	"github.com/cosmicac/cosmicac/internal/worker/workertest"
)

// TestConformance runs the worker conformance suite against the
// Kubernetes worker on a real kube-apiserver, each check on a rack of its
// own (a namespace and a node of 8 GPUs). With no CDI or KubeVirt
// controllers there, the rack's Play does what they would: it marks the
// replica's DataVolume imported and its VMI running and ready.
func TestConformance(t *testing.T) {
	env := k8stest.Shared(t)
	workertest.Run(t, func(t *testing.T) *workertest.Rack {
		h := newHarness(t, env, nil)
		node := h.nodeName(0)
		h.addNode(node, 8)
		h.start()
		next := 0
		return &workertest.Rack{
			Worker:  h.w,
			Reports: h.rep,
			Job:     func() cosmic.Job { return containerJob("team-a") },
			Place: func(j cosmic.Job, replica int) cosmic.Reservation {
				next++
				return h.reservation(j, replica, cosmic.NodeAlloc{Node: node, GPUs: []int{next % 8}})
			},
			Play: func(job string, replica int) error {
				name := VMIName(job, replica, 0)
				var d cdiv1.DataVolume
				if err := h.c.Get(h.ctx, h.key(name), &d); err != nil {
					return err
				}
				if d.Status.Phase != cdiv1.Succeeded {
					d.Status.Phase, d.Status.Progress = cdiv1.Succeeded, "100.0%"
					if err := h.c.Status().Update(h.ctx, &d); err != nil {
						return err
					}
				}
				var v virtv1.VirtualMachineInstance
				if err := h.c.Get(h.ctx, h.key(name), &v); err != nil || v.Status.Phase == virtv1.Running || v.DeletionTimestamp != nil {
					return err
				}
				running(node)(&v)
				return h.c.Update(h.ctx, &v)
			},
			RootDisk: func(job string, replica int) string {
				var d cdiv1.DataVolume
				err := h.c.Get(h.ctx, h.key(VMIName(job, replica, 0)), &d)
				if apierrors.IsNotFound(err) || err == nil && d.DeletionTimestamp != nil {
					return ""
				}
				if err != nil {
					t.Fatal(err)
				}
				return string(d.UID)
			},
			RestartWorker: func() worker.Worker {
				h.stop()
				h.start()
				return h.w
			},
		}
	})
}
