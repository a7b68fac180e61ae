package k8sworker

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/k8stest"
	"github.com/cosmicac/cosmicac/internal/worker"
)

// A worker pointed at a cluster without its namespace creates it when its
// RBAC allows, and the job goes on.
func TestIntegrationCreatesNamespace(t *testing.T) {
	h := newHarness(t, k8stest.Shared(t), nil)
	h.cfg.Namespace += "-new" // never created
	h.addNode(h.nodeName(0), 8)
	h.start()
	h.eventually(10*time.Second, "namespace created", func() error {
		var ns corev1.Namespace
		if err := h.c.Get(h.ctx, client.ObjectKey{Name: h.cfg.Namespace}, &ns); err != nil {
			return err
		}
		if ns.Labels[LabelManagedBy] != ManagedBy {
			return fmt.Errorf("namespace labels %v", ns.Labels)
		}
		return nil
	})
	job := containerJob("team-a")
	h.apply(job, h.reservation(job, 0, cosmic.NodeAlloc{Node: h.nodeName(0), GPUs: []int{0}}))
	h.waitReport(job.ID, 0, cosmic.StatePending, func(r worker.ReplicaReport) error {
		if r.Reason != nil {
			return fmt.Errorf("reason %+v", r.Reason)
		}
		return nil
	})
}

// A worker that may not create namespaces, on a cluster without its own:
// the rack reports the problem with its fix, the job is pending with it as
// its reason, and both clear once an operator creates the namespace.
func TestIntegrationNamespaceMissingForbidden(t *testing.T) {
	env := k8stest.Shared(t)
	h := newHarness(t, env, nil)
	h.cfg.Namespace += "-missing"
	user := "worker-" + h.cfg.Namespace
	// All the worker uses, but namespaces.
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: user}, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{"", "kubevirt.io", "cdi.kubevirt.io", "k8s.cni.cncf.io"},
		Resources: []string{"nodes", "configmaps", "secrets", "services", "persistentvolumeclaims", "pods", "events",
			"virtualmachineinstances", "datavolumes", "network-attachment-definitions"},
		Verbs: []string{"*"},
	}}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: user},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: user},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}}
	for _, o := range []client.Object{role, binding} {
		if err := h.c.Create(h.ctx, o); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = h.c.Delete(h.ctx, o) })
	}
	h.restCfg = rest.CopyConfig(env.Config)
	h.restCfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	h.addNode(h.nodeName(0), 8)
	h.start()

	job := containerJob("team-a")
	res := h.reservation(job, 0, cosmic.NodeAlloc{Node: h.nodeName(0), GPUs: []int{0}})
	if err := h.w.Apply(h.ctx, worker.ApplyParams{Job: job, Reservations: []cosmic.Reservation{res}}); err == nil {
		t.Fatal("Apply succeeded without a namespace")
	}
	r := h.waitReport(job.ID, 0, cosmic.StatePending, reasonIs(cosmic.ReasonRackMisconfigured))
	if !strings.Contains(r.Reason.Message, `namespace "`+h.cfg.Namespace+`" does not exist`) ||
		!strings.Contains(r.Reason.Fix, "kubectl create namespace "+h.cfg.Namespace) {
		t.Errorf("reason %+v", r.Reason)
	}
	capa, err := h.w.Capacity(h.ctx)
	if err != nil || capa.Problem == nil || *capa.Problem != *r.Reason {
		t.Fatalf("Capacity problem %+v, %v; want %+v", capa.Problem, err, r.Reason)
	}
	if steps := h.steps(job.ID); len(steps) == 0 {
		t.Error("no system log record of the refusal")
	}

	// The operator creates the namespace: the problem clears, the job applies.
	if err := h.c.Create(h.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: h.cfg.Namespace}}); err != nil {
		t.Fatal(err)
	}
	h.eventually(3*namespaceInterval, "problem cleared", func() error {
		c, err := h.w.Capacity(h.ctx)
		if err != nil || c.Problem != nil {
			return fmt.Errorf("problem %+v, %v", c.Problem, err)
		}
		return nil
	})
	h.apply(job, res)
	h.waitReport(job.ID, 0, cosmic.StatePending, func(r worker.ReplicaReport) error {
		if r.Reason != nil {
			return fmt.Errorf("reason %+v", r.Reason)
		}
		return nil
	})
}
