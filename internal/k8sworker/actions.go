package k8sworker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	virtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/worker"
)

// codeConflict is the fabric error code of a request that contradicts the
// replica's current state (the ork's orkapi.CodeConflict spelling).
const codeConflict = "conflict"

// writeBackoff retries a write refused by a conflict or a server error:
// 6 tries over about 1.5 s.
var writeBackoff = wait.Backoff{Steps: 6, Duration: 50 * time.Millisecond, Factor: 2, Jitter: 0.2, Cap: time.Second}

// retryable reports whether a write is worth trying again: conflicts, and
// the apiserver's (or etcd's) transient 5xx and 429 answers. An apiserver
// that cannot be reached is not retried here: the caller learns at once
// that it is unavailable.
func retryable(err error) bool {
	return apierrors.IsConflict(err) || apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) ||
		apierrors.IsTooManyRequests(err) || apierrors.IsInternalError(err) ||
		apierrors.IsServiceUnavailable(err) || apierrors.IsUnexpectedServerError(err)
}

func withRetry(fn func() error) error { return retry.OnError(writeBackoff, retryable, fn) }

// fabricError maps an apiserver error to the fabric's codes: a refused
// object is a bad request (the worker built something the cluster's schemas
// refuse), everything else leaves the rack unavailable for now.
func fabricError(op string, err error) error {
	var fe *fabric.Error
	if errors.As(err, &fe) {
		return err
	}
	switch {
	case apierrors.IsInvalid(err) || apierrors.IsBadRequest(err):
		return fabric.Errorf(fabric.CodeBadRequest, "%s: %v", op, err)
	case apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err):
		return fabric.Errorf(fabric.CodeInternal, "%s: the worker's Kubernetes credentials are refused: %v", op, err)
	}
	return fabric.Errorf(fabric.CodeUnavailable, "%s: %v", op, err)
}

// applyObject server-side applies obj (field manager FieldManager, forcing
// ownership) and copies the applied UID and resource version back into it.
func (w *Worker) applyObject(ctx context.Context, obj Object) error {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return err
	}
	delete(u, "status")
	unstructured.RemoveNestedField(u, "metadata", "creationTimestamp")
	var out *unstructured.Unstructured
	err = withRetry(func() error {
		out = &unstructured.Unstructured{Object: runtime.DeepCopyJSON(u)}
		return w.c.Apply(ctx, client.ApplyConfigurationFromUnstructured(out), client.FieldOwner(FieldManager), client.ForceOwnership)
	})
	if err != nil {
		return fmt.Errorf("apply %s %s: %w", obj.GetObjectKind().GroupVersionKind().Kind, obj.GetName(), err)
	}
	obj.SetUID(out.GetUID())
	obj.SetResourceVersion(out.GetResourceVersion())
	return nil
}

// applyAll applies objs concurrently.
func (w *Worker) applyAll(ctx context.Context, objs []Object) error {
	if len(objs) == 1 {
		return w.applyObject(ctx, objs[0])
	}
	errs := make([]error, len(objs))
	var wg sync.WaitGroup
	for i, o := range objs {
		wg.Go(func() { errs[i] = w.applyObject(ctx, o) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// writeState records st on the replica's carrier (a merge patch) and keeps
// it as the replica's state until the informer shows it.
func (w *Worker) writeState(ctx context.Context, k replicaKey, m *replicaMem, st replicaState) error {
	st.Version = max(w.now().UnixNano(), st.Version+1)
	m.override = &st
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": st.annotations()}})
	carrier := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: w.cfg.Namespace, Name: SecretName(k.job, k.replica, 0)}}
	err := withRetry(func() error {
		return w.c.Patch(ctx, carrier, client.RawPatch(types.MergePatchType, patch), client.FieldOwner(FieldManager))
	})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("record the state of replica %s: %w", k, err)
	}
	return nil
}

// deleteVMI deletes one VMI (that UID only; grace period 0 with force).
func (w *Worker) deleteVMI(ctx context.Context, v *virtv1.VirtualMachineInstance, force bool) error {
	opts := []client.DeleteOption{client.Preconditions{UID: &v.UID}, client.PropagationPolicy(metav1.DeletePropagationBackground)}
	if force {
		opts = append(opts, client.GracePeriodSeconds(0))
	}
	obj := &virtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: v.Namespace, Name: v.Name}}
	err := withRetry(func() error { return w.c.Delete(ctx, obj, opts...) })
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) { // gone, or already replaced
		return nil
	}
	return err
}

// deleteReplicaVMIs deletes every VMI of replica k.
func (w *Worker) deleteReplicaVMIs(ctx context.Context, k replicaKey, force bool) error {
	return w.deleteAllOf(ctx, &virtv1.VirtualMachineInstance{}, client.MatchingLabels{LabelJob: k.job, LabelReplica: strconv.Itoa(k.replica)}, force)
}

func (w *Worker) deleteAllOf(ctx context.Context, obj client.Object, sel client.MatchingLabels, force bool) error {
	opts := []client.DeleteAllOfOption{client.InNamespace(w.cfg.Namespace), sel, client.PropagationPolicy(metav1.DeletePropagationBackground)}
	if force {
		opts = append(opts, client.GracePeriodSeconds(0))
	}
	err := withRetry(func() error { return w.c.DeleteAllOf(ctx, obj, opts...) })
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// Apply implements worker.Worker. It builds each reserved replica's graph
// (BuildReplica), server-side applies the job's root, creates the job's
// standalone volumes the cluster does not have yet (owned by no job), makes
// the root the owner of everything else, then applies the Secrets,
// DataVolumes and Services (concurrently) and the VMIs. A replica already
// running on the same reservation is applied again (idempotent: drifted
// objects are repaired); a stopped or failed one starts again, on its kept
// disk, once its old VMIs are gone.
//
// A job whose replicas the rack cannot build is not an error: each replica
// is reported failed with rack_refused (refuseJob).
//
// Errors: bad_request for a malformed request; conflict for a live replica given another reservation, or
// one being deleted; unavailable when the apiserver cannot be reached.
func (w *Worker) Apply(ctx context.Context, p worker.ApplyParams) error {
	if err := worker.CheckApply(p, w.cfg.Rack); err != nil {
		return err
	}
	if len(p.Reservations) == 0 {
		return nil
	}
	if err := w.available(ctx); err != nil {
		return err
	}
	if r := w.problem.get(); r != nil {
		return w.refuseApply(p, r)
	}
	graphs := make([]Graph, len(p.Reservations))
	w.mu.Lock()
	for _, r := range p.Reservations {
		delete(w.gone, replicaKey{job: p.Job.ID, replica: r.Replica})
	}
	w.mu.Unlock()
	for i, r := range p.Reservations {
		boot, err := w.bootstrap(ctx, p.Job.ID, r)
		if err != nil {
			return fabricError("apply "+p.Job.ID, err)
		}
		g, err := BuildReplica(w.cfg, p.Job, r, boot)
		switch {
		case err != nil && specRefused(err):
			// The rack cannot build the job's spec (a GPU model it maps
			// to no resource, no image): it never will, so the job
			// learns it now.
			return w.refuseJob(p, err.Error())
		case err != nil:
			return fabric.Errorf(fabric.CodeBadRequest, "apply %s: %v", p.Job.ID, err)
		}
		graphs[i] = g
	}
	jobJSON, err := json.Marshal(p.Job)
	if err != nil {
		return fabric.Errorf(fabric.CodeBadRequest, "apply %s: encode job: %v", p.Job.ID, err)
	}
	root := graphs[0].Root
	err = w.applyObject(ctx, root)
	if namespaceMissing(err) {
		// Gone since the last check, or the worker may not read
		// namespaces: check (and create) now, and try once more.
		w.ensureNamespace(ctx)
		if w.problem.get() == nil {
			err = w.applyObject(ctx, root)
		}
		if r := w.problem.get(); r != nil {
			return w.refuseApply(p, r)
		}
	}
	if err != nil {
		return fabricError("apply "+p.Job.ID, err)
	}
	// The job's standalone volumes, before the VMIs that attach them
	// (every replica's graph names the same ones).
	if err := ensureStandaloneVolumes(ctx, w.c, graphs[0].Standalone); err != nil {
		return fabricError("apply "+p.Job.ID, err)
	}
	var errs, conflicts []error
	for i, r := range p.Reservations {
		if err := w.applyReplica(ctx, p.Job, r, graphs[i], root, jobJSON); err != nil {
			var ce conflictError
			if errors.As(err, &ce) {
				conflicts = append(conflicts, err)
			} else {
				errs = append(errs, err)
			}
		}
	}
	if len(errs) > 0 {
		return fabricError("apply "+p.Job.ID, errors.Join(append(errs, conflicts...)...))
	}
	if len(conflicts) > 0 {
		return fabric.Errorf(codeConflict, "apply %s: %v", p.Job.ID, errors.Join(conflicts...))
	}
	return nil
}

// specRefused says whether BuildReplica's err is the spec's alone, not
// the reservation's: a malformed reservation is the ork's mistake
// (bad_request), a spec the rack cannot build is the job's (rack_refused).
func specRefused(err error) bool {
	fes := cosmic.FieldErrors(err)
	return len(fes) > 0 && !slices.ContainsFunc(fes, func(fe *cosmic.FieldError) bool { return strings.HasPrefix(fe.Field, "reservation") })
}

type conflictError struct{ msg string }

func (e conflictError) Error() string { return e.msg }

func (w *Worker) applyReplica(ctx context.Context, job cosmic.Job, res cosmic.Reservation, g Graph, root *corev1.ConfigMap, jobJSON []byte) error {
	k := replicaKey{job: job.ID, replica: res.Replica}
	m := w.mem(k)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.deleting {
		return conflictError{fmt.Sprintf("replica %d is being deleted", res.Replica)}
	}
	m.team = job.Team
	o, err := w.observe(ctx, k)
	if err != nil {
		return err
	}
	st, ok := m.current(o.state)
	fresh := !ok || !st.holdsGPUs()
	applyVMIs := true
	var next replicaState
	if fresh {
		// A new replica, or a stopped or failed one starting again: VMIs
		// still there (being deleted) are waited out before new ones are
		// made.
		next = replicaState{Desired: desiredRun, Reservation: res}
		for i := range o.vmis {
			next.Replacing = append(next.Replacing, string(o.vmis[i].UID))
		}
		applyVMIs = len(next.Replacing) == 0
		clear(m.seen)
	} else {
		if !sameReservation(st.Reservation, res) {
			return conflictError{fmt.Sprintf("replica %d already runs on %s, not %s", res.Replica, describeAllocs(st.Reservation.Nodes), describeAllocs(res.Nodes))}
		}
		next = st
		applyVMIs = st.Desired == desiredRun && len(st.Replacing) == 0
	}
	next.Version = max(w.now().UnixNano(), st.Version+1)
	carrier := g.Secrets[0]
	next.setOn(carrier)
	carrier.Data[JobDataKey] = jobJSON
	m.override = &next
	g.SetOwner(root)

	var first []Object
	for _, s := range g.Secrets {
		first = append(first, s)
	}
	for _, dv := range g.DataVolumes {
		first = append(first, dv)
	}
	for _, s := range g.Services {
		first = append(first, s)
	}
	if err := w.applyAll(ctx, first); err != nil {
		return err
	}
	if applyVMIs {
		vmis := make([]Object, len(g.VMIs))
		for i, v := range g.VMIs {
			vmis[i] = v
		}
		if err := w.applyAll(ctx, vmis); err != nil {
			return err
		}
	}
	if fresh {
		w.record(k, m, w.now(), "accept", true, "replica %d accepted: %d × %s on %s; objects applied to namespace %s",
			res.Replica, res.Count(), gpuModelOf(w.cfg, job), describeAllocs(res.Nodes), w.cfg.Namespace)
	}
	w.queue.Add(k)
	return nil
}

func gpuModelOf(cfg RackConfig, job cosmic.Job) string {
	if job.Spec.Resources.GPUModel != "" {
		return job.Spec.Resources.GPUModel
	}
	return cfg.GPUModel
}

// selectKeys are the replicas of job, or the one named (AllReplicas: all).
func (w *Worker) selectKeys(ctx context.Context, job string, replica int) []replicaKey {
	keys := w.keysOfJob(ctx, job)
	if replica == worker.AllReplicas {
		return keys
	}
	for _, k := range keys {
		if k.replica == replica {
			return []replicaKey{k}
		}
	}
	return nil
}

// Stop implements worker.Worker (kill): the replicas' VMIs are deleted;
// their DataVolumes (root disks) and Secrets are kept, so a later Apply
// boots from them without importing again. A stopped replica is reported
// stopped (reason killed), not Gone. Stopping what the rack does not hold
// succeeds.
func (w *Worker) Stop(ctx context.Context, ref worker.ReplicaRef) error {
	if err := w.available(ctx); err != nil {
		return err
	}
	var errs []error
	for _, k := range w.selectKeys(ctx, ref.JobID, ref.Replica) {
		if err := w.stopReplica(ctx, k); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fabricError("stop "+ref.JobID, err)
	}
	return nil
}

func (w *Worker) stopReplica(ctx context.Context, k replicaKey) error {
	m := w.mem(k)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.deleting {
		return nil
	}
	o, err := w.observe(ctx, k)
	if err != nil {
		return err
	}
	st, ok := m.current(o.state)
	if ok && st.Desired == desiredStop && len(o.vmis) == 0 {
		return nil
	}
	if ok {
		st.Desired, st.Replacing, st.Failure, st.ExitCode = desiredStop, nil, nil, nil
		if err := w.writeState(ctx, k, m, st); err != nil {
			return err
		}
	}
	clear(m.seen)
	if err := w.deleteReplicaVMIs(ctx, k, false); err != nil {
		return err
	}
	what := "no VMI to delete"
	if len(o.vmis) > 0 {
		what = describeVMIs(o.vmis) + " deleted"
	}
	w.record(k, m, w.now(), "stop", true, "replica %d stopped: %s; root disk kept", k.replica, what)
	w.queue.Add(k)
	return nil
}

// Restart implements worker.Worker: each replica holding GPUs has its VMIs
// deleted and made again once they are gone (reported restarting until the
// new ones run), keeping its DataVolumes and reservation. Failed and
// stopped replicas hold no GPUs: naming one is a conflict; with AllReplicas
// they are skipped. An unknown job or replica is not_found.
func (w *Worker) Restart(ctx context.Context, ref worker.ReplicaRef) error {
	if err := w.available(ctx); err != nil {
		return err
	}
	keys := w.selectKeys(ctx, ref.JobID, ref.Replica)
	if len(keys) == 0 {
		if ref.Replica == worker.AllReplicas {
			return fabric.Errorf(fabric.CodeNotFound, "restart: no job %s on rack %s", ref.JobID, w.cfg.Rack)
		}
		return fabric.Errorf(fabric.CodeNotFound, "restart: job %s has no replica %d on rack %s", ref.JobID, ref.Replica, w.cfg.Rack)
	}
	var errs []error
	for _, k := range keys {
		if err := w.restartReplica(ctx, k, ref.Replica != worker.AllReplicas); err != nil {
			var fe *fabric.Error
			if errors.As(err, &fe) {
				return err
			}
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fabricError("restart "+ref.JobID, err)
	}
	return nil
}

func (w *Worker) restartReplica(ctx context.Context, k replicaKey, named bool) error {
	m := w.mem(k)
	m.mu.Lock()
	defer m.mu.Unlock()
	o, err := w.observe(ctx, k)
	if err != nil {
		return err
	}
	st, ok := m.current(o.state)
	if m.deleting || !ok || !st.holdsGPUs() {
		if named {
			what := "being deleted"
			if !m.deleting {
				what = "not running"
				if ok {
					what = string(st.Desired)
				}
			}
			return fabric.Errorf(codeConflict, "restart: replica %d of job %s is %s and holds no GPUs; apply it again", k.replica, k.job, what)
		}
		return nil
	}
	// The VMIs as the apiserver has them now (the informer may not show a
	// VMI just created).
	var l virtv1.VirtualMachineInstanceList
	if err := withRetry(func() error {
		return w.c.List(ctx, &l, client.InNamespace(w.cfg.Namespace), client.MatchingLabels{LabelJob: k.job, LabelReplica: strconv.Itoa(k.replica)})
	}); err != nil {
		return err
	}
	old := setOf(st.Replacing)
	for i := range l.Items {
		if uid := string(l.Items[i].UID); !old[uid] {
			st.Replacing = append(st.Replacing, uid)
		}
	}
	st.Desired = desiredReplace
	if err := w.writeState(ctx, k, m, st); err != nil {
		return err
	}
	clear(m.seen)
	for i := range l.Items {
		if err := w.deleteVMI(ctx, &l.Items[i], false); err != nil {
			return err
		}
	}
	what := "no VMI yet"
	if len(l.Items) > 0 {
		what = describeVMIs(l.Items) + " deleted"
	}
	w.record(k, m, w.now(), "restart", true, "restarting replica %d: %s; root disk and GPUs kept", k.replica, what)
	w.queue.Add(k)
	return nil
}

// Delete implements worker.Worker: the replicas' VMIs, DataVolumes (whose
// PVCs the cluster's garbage collector takes), Secrets and Services are
// deleted, and for the whole job its root too (never the job's standalone
// volumes: they carry no job label and no owner, and outlive it); each
// replica is reported Gone once none of its objects (and, for the whole job,
// not the root) is left. The worker deletes the dependents itself rather
// than leaving it to the garbage collector through the root, so deletion
// does not depend on it; the root goes with propagation Background (the
// owner references still let the collector take anything missed). With
// Force, VMIs get grace period 0. Deleting what the rack does not hold
// succeeds (a named replica is reported Gone again).
func (w *Worker) Delete(ctx context.Context, p worker.DeleteParams) error {
	if err := w.available(ctx); err != nil {
		return err
	}
	keys := w.selectKeys(ctx, p.JobID, p.Replica)
	if len(keys) == 0 && p.Replica != worker.AllReplicas {
		w.markGone(replicaKey{job: p.JobID, replica: p.Replica})
	}
	for _, k := range keys {
		m := w.mem(k)
		m.mu.Lock()
		first := !m.deleting
		m.deleting = true
		m.deleteJob = m.deleteJob || p.Replica == worker.AllReplicas
		m.override = nil
		clear(m.seen)
		if first {
			how := "gracefully"
			if p.Force {
				how = "at once (force)"
			}
			w.record(k, m, w.now(), "delete", true, "deleting replica %d %s: VMIs, root disks, Secrets and Services", k.replica, how)
		}
		m.mu.Unlock()
	}
	sel := client.MatchingLabels{LabelJob: p.JobID}
	if p.Replica != worker.AllReplicas {
		sel[LabelReplica] = strconv.Itoa(p.Replica)
	}
	var errs []error
	// VMIs first (with force, at once), so their GPUs go first.
	for _, obj := range []client.Object{&virtv1.VirtualMachineInstance{}, &cdiv1.DataVolume{}, &corev1.Secret{}} {
		if err := w.deleteAllOf(ctx, obj, sel, p.Force && isVMI(obj)); err != nil {
			errs = append(errs, fmt.Errorf("delete %T: %w", obj, err))
		}
	}
	// Services have no deletecollection: one by one.
	var svcs corev1.ServiceList
	if err := withRetry(func() error {
		return w.c.List(ctx, &svcs, client.InNamespace(w.cfg.Namespace), sel)
	}); err != nil {
		errs = append(errs, err)
	}
	for i := range svcs.Items {
		if err := w.deleteNamed(ctx, &svcs.Items[i], false); err != nil {
			errs = append(errs, err)
		}
	}
	if p.Replica == worker.AllReplicas {
		root := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: w.cfg.Namespace, Name: RootName(p.JobID)}}
		if err := w.deleteNamed(ctx, root, p.Force); err != nil {
			errs = append(errs, err)
		}
	}
	for _, k := range keys {
		w.queue.Add(k)
	}
	if err := errors.Join(errs...); err != nil {
		return fabricError("delete "+p.JobID, err)
	}
	return nil
}

func isVMI(o client.Object) bool { _, ok := o.(*virtv1.VirtualMachineInstance); return ok }

func (w *Worker) deleteNamed(ctx context.Context, obj client.Object, force bool) error {
	opts := []client.DeleteOption{client.PropagationPolicy(metav1.DeletePropagationBackground)}
	if force {
		opts = append(opts, client.GracePeriodSeconds(0))
	}
	err := withRetry(func() error { return w.c.Delete(ctx, obj, opts...) })
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

func joinErrs(errs []error) error { return errors.Join(errs...) }

func describeAllocs(as []cosmic.NodeAlloc) string {
	parts := make([]string, len(as))
	for i, a := range as {
		gs := make([]string, len(a.GPUs))
		for j, g := range a.GPUs {
			gs[j] = strconv.Itoa(g)
		}
		parts[i] = fmt.Sprintf("node %s GPUs %s", a.Node, strings.Join(gs, ","))
	}
	return strings.Join(parts, " and ")
}

func describeVMIs(vs []virtv1.VirtualMachineInstance) string {
	parts := make([]string, len(vs))
	for i := range vs {
		node := vs[i].Status.NodeName
		if node == "" {
			node = vs[i].Annotations[AnnotationNode]
		}
		parts[i] = fmt.Sprintf("VMI %s on %s", vs[i].Name, node)
	}
	return strings.Join(parts, ", ")
}
