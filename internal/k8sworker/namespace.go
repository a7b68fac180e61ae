package k8sworker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/worker"
)

// The rack's namespace. A cluster without it cannot take a job: the worker
// creates it when its RBAC allows (and logs that it did); otherwise the
// rack has a problem (rack_misconfigured, naming the namespace and the
// fix) that Capacity reports (the ork shows it in `racks list`) and that
// every replica Apply could not apply is pending with. The worker checks
// again every namespaceInterval, so the problem clears once an operator
// creates the namespace.

// namespaceInterval is how often the worker checks the namespace.
const namespaceInterval = 5 * time.Second

// rackProblem is what stops the rack from taking jobs, if anything.
type rackProblem struct {
	mu     sync.Mutex
	reason *cosmic.Reason
}

func (p *rackProblem) get() *cosmic.Reason {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.reason == nil {
		return nil
	}
	r := *p.reason
	return &r
}

func (p *rackProblem) set(r *cosmic.Reason) (changed bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	changed = (p.reason == nil) != (r == nil) || (r != nil && *p.reason != *r)
	p.reason = r
	return changed
}

// namespaceReason is the problem of a namespace that is missing (or going
// away) and that the worker may not create.
func namespaceReason(ns, why string) *cosmic.Reason {
	r := cosmic.NewReason(cosmic.ReasonRackMisconfigured, fmt.Sprintf("namespace %q %s", ns, why))
	r.Fix = fmt.Sprintf("Create the namespace (kubectl create namespace %s), or let the worker's account create namespaces, or set namespace: in the rack config to one that exists. Jobs start once it exists.", ns)
	return &r
}

// ensureNamespace checks the rack's namespace, creates it when it is
// missing and the worker may, and records the problem when it may not.
// Errors of an apiserver that is away change nothing (health reports
// those).
func (w *Worker) ensureNamespace(ctx context.Context) {
	ns := w.cfg.Namespace
	exists, err := w.namespaceExists(ctx)
	switch {
	case errors.Is(err, errTerminating):
		w.setProblem(namespaceReason(ns, "is being deleted on the cluster"))
		return
	case err != nil:
		return
	case exists:
		w.setProblem(nil)
		return
	}
	err = w.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name:   ns,
		Labels: map[string]string{LabelManagedBy: ManagedBy},
	}})
	switch {
	case err == nil:
		w.log.Info("namespace created", "namespace", ns)
		w.setProblem(nil)
	case apierrors.IsAlreadyExists(err):
		w.setProblem(nil)
	case apierrors.IsForbidden(err):
		w.setProblem(namespaceReason(ns, "does not exist on the cluster and the worker may not create it ("+err.Error()+")"))
	}
}

var errTerminating = errors.New("namespace is terminating")

// namespaceExists says whether the rack's namespace exists. A worker that
// may not read namespaces asks the apiserver to create a ConfigMap there
// without saving it (a dry run): only a missing namespace refuses that
// with namespaces "NAME" not found.
func (w *Worker) namespaceExists(ctx context.Context) (bool, error) {
	var got corev1.Namespace
	err := w.c.Get(ctx, client.ObjectKey{Name: w.cfg.Namespace}, &got)
	switch {
	case err == nil && got.DeletionTimestamp != nil:
		return true, errTerminating
	case err == nil:
		return true, nil
	case apierrors.IsNotFound(err):
		return false, nil
	case !apierrors.IsForbidden(err):
		return false, err
	}
	probe := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cosmicac-namespace-probe", Namespace: w.cfg.Namespace}}
	err = w.c.Create(ctx, probe, client.DryRunAll)
	switch {
	case err == nil, apierrors.IsAlreadyExists(err):
		return true, nil
	case namespaceMissing(err):
		return false, nil
	}
	return false, err
}

// setProblem records the rack's problem, logging when it changes.
func (w *Worker) setProblem(r *cosmic.Reason) {
	if !w.problem.set(r) {
		return
	}
	if r != nil {
		w.log.Warn("rack misconfigured", "rack", w.cfg.Rack, "problem", r.Message, "fix", r.Fix)
	} else {
		w.log.Info("rack configuration fixed", "rack", w.cfg.Rack)
	}
	w.mu.Lock()
	w.markCapacityLocked()
	w.mu.Unlock()
}

// namespaceLoop checks the namespace at start and every namespaceInterval.
func (w *Worker) namespaceLoop(ctx context.Context) {
	t := time.NewTicker(namespaceInterval)
	defer t.Stop()
	for {
		w.ensureNamespace(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// namespaceMissing says whether err is the apiserver's answer to a write
// into a namespace that does not exist.
func namespaceMissing(err error) bool {
	var st apierrors.APIStatus
	if !errors.As(err, &st) || !apierrors.IsNotFound(err) {
		return false
	}
	d := st.Status().Details
	return d != nil && d.Kind == "namespaces"
}

// refuseJob answers an Apply of a job the rack can never run (its replicas
// cannot be built here, why in detail): each replica is reported failed
// with reason rack_refused and a system log record of step refused, and
// the Apply succeeds, so that the ork releases its GPUs at once instead of
// applying it again every heartbeat until its agent deadline.
func (w *Worker) refuseJob(p worker.ApplyParams, detail string) error {
	now := w.now()
	for _, res := range p.Reservations {
		k := replicaKey{job: p.Job.ID, replica: res.Replica}
		m := w.mem(k)
		m.mu.Lock()
		m.team = p.Job.Team
		rep := worker.Refused(res.Replica, detail)
		m.last = &rep
		w.record(k, m, now, "refused", false, "rack %s cannot run replica %d: %s", w.cfg.Rack, res.Replica, detail)
		w.mu.Lock()
		w.reports.Set(k.ref(), rep)
		w.mu.Unlock()
		m.mu.Unlock()
	}
	return nil
}

// refuseApply answers an Apply on a rack with a problem: each replica is
// reported pending with the problem as its reason (the job's status shows
// it), written once to the replica's system log, and the Apply fails (the
// ork applies it again later, which succeeds once the problem is fixed).
func (w *Worker) refuseApply(p worker.ApplyParams, r *cosmic.Reason) error {
	now := w.now()
	for _, res := range p.Reservations {
		k := replicaKey{job: p.Job.ID, replica: res.Replica}
		m := w.mem(k)
		m.mu.Lock()
		if m.last != nil && (m.last.State != cosmic.StatePending || (m.last.Reason != nil && *m.last.Reason == *r)) {
			m.mu.Unlock()
			continue // running on (the problem came later), or told already
		}
		m.team = p.Job.Team
		rep := worker.ReplicaReport{Replica: res.Replica, State: cosmic.StatePending, Reason: r, Observed: worker.Observe()}
		m.last = &rep
		w.record(k, m, now, "accept", false, "replica %d not applied: %s. %s", res.Replica, r.Message, r.Fix)
		w.mu.Lock()
		w.reports.Set(k.ref(), rep)
		w.mu.Unlock()
		m.mu.Unlock()
	}
	return fabric.Errorf(fabric.CodeUnavailable, "rack %s: %s", w.cfg.Rack, r.Message)
}
