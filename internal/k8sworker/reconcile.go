package k8sworker

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	virtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cosmicac/cosmicac/internal/cosmic"
)

// Informer indexes: objects by "job/replica" and by job.
const (
	indexReplica = "cosmicac.replica"
	indexJob     = "cosmicac.job"
)

// replicaObjects are the kinds of a replica's objects (all but the root).
func replicaObjects() []client.Object {
	return []client.Object{&corev1.Secret{}, &cdiv1.DataVolume{}, &virtv1.VirtualMachineInstance{}, &corev1.Service{}}
}

// keyOf is the replica an object belongs to, from its labels.
func keyOf(o metav1.Object) (replicaKey, bool) {
	l := o.GetLabels()
	job, r := l[LabelJob], l[LabelReplica]
	if job == "" || r == "" {
		return replicaKey{}, false
	}
	n, err := strconv.Atoi(r)
	if err != nil || n < 0 {
		return replicaKey{}, false
	}
	return replicaKey{job: job, replica: n}, true
}

func objectOf(obj any) (client.Object, bool) {
	if t, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	o, ok := obj.(client.Object)
	return o, ok
}

// setupInformers registers the indexes and event handlers. Every change of
// a replica's object queues the replica; a change of a root queues the
// job's replicas; a change of a node, of a standalone volume or of a VMI
// that attaches one recomputes the capacity.
func (w *Worker) setupInformers(ctx context.Context) error {
	for _, o := range replicaObjects() {
		if err := w.cache.IndexField(ctx, o, indexReplica, func(o client.Object) []string {
			if k, ok := keyOf(o); ok {
				return []string{k.String()}
			}
			return nil
		}); err != nil {
			return fmt.Errorf("k8sworker: index %T: %w", o, err)
		}
		if err := w.cache.IndexField(ctx, o, indexJob, func(o client.Object) []string {
			if j := o.GetLabels()[LabelJob]; j != "" {
				return []string{j}
			}
			return nil
		}); err != nil {
			return fmt.Errorf("k8sworker: index %T: %w", o, err)
		}
		inf, err := w.cache.GetInformer(ctx, o)
		if err != nil {
			return fmt.Errorf("k8sworker: informer %T: %w", o, err)
		}
		enqueue := func(obj any) {
			if o, ok := objectOf(obj); ok {
				if k, ok := keyOf(o); ok {
					w.queue.Add(k)
				}
			}
		}
		if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc:    enqueue,
			UpdateFunc: func(_, n any) { enqueue(n) },
			DeleteFunc: enqueue,
		}); err != nil {
			return err
		}
	}
	roots, err := w.cache.GetInformer(ctx, &corev1.ConfigMap{})
	if err != nil {
		return fmt.Errorf("k8sworker: informer ConfigMap: %w", err)
	}
	rootChanged := func(obj any) {
		o, ok := objectOf(obj)
		if !ok || o.GetLabels()[LabelJob] == "" {
			return
		}
		for _, k := range w.keysOfJob(ctx, o.GetLabels()[LabelJob]) {
			w.queue.Add(k)
		}
	}
	if _, err := roots.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    rootChanged,
		UpdateFunc: func(_, n any) { rootChanged(n) },
		DeleteFunc: rootChanged,
	}); err != nil {
		return err
	}
	// A standalone volume's DataVolume, or a VMI that attaches one, coming
	// or going changes the volumes Capacity reports.
	for _, o := range []client.Object{&cdiv1.DataVolume{}, &virtv1.VirtualMachineInstance{}} {
		inf, err := w.cache.GetInformer(ctx, o)
		if err != nil {
			return fmt.Errorf("k8sworker: informer %T: %w", o, err)
		}
		changed := func(obj any) { w.standaloneEvent(ctx, obj) }
		if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc:    changed,
			UpdateFunc: func(_, n any) { changed(n) },
			DeleteFunc: changed,
		}); err != nil {
			return err
		}
	}
	nodes, err := w.cache.GetInformer(ctx, &corev1.Node{})
	if err != nil {
		return fmt.Errorf("k8sworker: informer Node: %w", err)
	}
	nodeChanged := func(any) { w.nodesChanged(ctx) }
	if _, err := nodes.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    nodeChanged,
		UpdateFunc: func(_, _ any) { nodeChanged(nil) },
		DeleteFunc: nodeChanged,
	}); err != nil {
		return err
	}
	return nil
}

// nodesChanged pushes the capacity if the rack's nodes changed.
func (w *Worker) nodesChanged(ctx context.Context) {
	nodes, err := w.nodes(ctx)
	if err != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if slices.Equal(nodes, w.lastCap) {
		return
	}
	w.lastCap = nodes
	w.markCapacityLocked()
}

// afterSync rebuilds the worker's view once the informers have synced: a
// replica that should run has every VMI of its reservation (a missing one
// was deleted while the worker was away: drift), and every replica is
// reported.
func (w *Worker) afterSync(ctx context.Context) {
	var carriers corev1.SecretList
	if err := w.cache.List(ctx, &carriers, client.InNamespace(w.cfg.Namespace)); err == nil {
		for i := range carriers.Items {
			s := &carriers.Items[i]
			st, ok := stateOf(s)
			k, kok := keyOf(s)
			if !ok || !kok || st.Desired != desiredRun || len(st.Replacing) > 0 {
				continue
			}
			m := w.mem(k)
			m.mu.Lock()
			for i := range st.Reservation.Nodes {
				if m.seen[i] == "" {
					m.seen[i] = "before-restart"
				}
			}
			m.mu.Unlock()
		}
	}
	w.enqueueAll(ctx, 0)
	w.nodesChanged(ctx)
	w.volumesChanged(ctx)
	w.mu.Lock()
	w.markCapacityLocked()
	w.mu.Unlock()
}

// onRecovered runs when the apiserver answers again after an outage: every
// replica is looked at again and the capacity reported.
func (w *Worker) onRecovered() {
	w.log.Info("Kubernetes apiserver reachable again")
	ctx := context.Background()
	w.enqueueAll(ctx, 500*time.Millisecond)
	w.mu.Lock()
	w.markCapacityLocked()
	w.mu.Unlock()
}

func (w *Worker) enqueueAll(ctx context.Context, after time.Duration) {
	keys, err := w.allKeys(ctx)
	if err != nil {
		return
	}
	keys = sortKeys(append(keys, w.memKeys("")...))
	for _, k := range keys {
		if after > 0 {
			w.queue.AddAfter(k, after)
		} else {
			w.queue.Add(k)
		}
	}
}

// allKeys lists every replica with objects in the informers' view.
func (w *Worker) allKeys(ctx context.Context) ([]replicaKey, error) {
	var keys []replicaKey
	add := func(o metav1.Object) {
		if k, ok := keyOf(o); ok {
			keys = append(keys, k)
		}
	}
	var secrets corev1.SecretList
	var dvs cdiv1.DataVolumeList
	var vmis virtv1.VirtualMachineInstanceList
	var svcs corev1.ServiceList
	ns := client.InNamespace(w.cfg.Namespace)
	for _, l := range []client.ObjectList{&secrets, &dvs, &vmis, &svcs} {
		if err := w.cache.List(ctx, l, ns); err != nil {
			return nil, err
		}
	}
	for i := range secrets.Items {
		add(&secrets.Items[i])
	}
	for i := range dvs.Items {
		add(&dvs.Items[i])
	}
	for i := range vmis.Items {
		add(&vmis.Items[i])
	}
	for i := range svcs.Items {
		add(&svcs.Items[i])
	}
	return sortKeys(keys), nil
}

// keysOfJob lists the replicas of job with objects (or held in memory).
func (w *Worker) keysOfJob(ctx context.Context, job string) []replicaKey {
	keys := w.memKeys(job)
	var secrets corev1.SecretList
	var dvs cdiv1.DataVolumeList
	var vmis virtv1.VirtualMachineInstanceList
	var svcs corev1.ServiceList
	opts := []client.ListOption{client.InNamespace(w.cfg.Namespace), client.MatchingFields{indexJob: job}}
	for _, l := range []client.ObjectList{&secrets, &dvs, &vmis, &svcs} {
		_ = w.cache.List(ctx, l, opts...)
	}
	add := func(o metav1.Object) {
		if k, ok := keyOf(o); ok {
			keys = append(keys, k)
		}
	}
	for i := range secrets.Items {
		add(&secrets.Items[i])
	}
	for i := range dvs.Items {
		add(&dvs.Items[i])
	}
	for i := range vmis.Items {
		add(&vmis.Items[i])
	}
	for i := range svcs.Items {
		add(&svcs.Items[i])
	}
	return sortKeys(keys)
}

// observation is a replica's objects as the informers show them.
type observation struct {
	carrier  *corev1.Secret
	state    *replicaState
	root     *corev1.ConfigMap
	secrets  []corev1.Secret
	dvs      []cdiv1.DataVolume
	vmis     []virtv1.VirtualMachineInstance
	services []corev1.Service
}

// empty reports whether no object of the replica (the root aside) is left.
func (o observation) empty() bool {
	return len(o.secrets) == 0 && len(o.dvs) == 0 && len(o.vmis) == 0 && len(o.services) == 0
}

func (w *Worker) observe(ctx context.Context, k replicaKey) (observation, error) {
	var o observation
	var secrets corev1.SecretList
	var dvs cdiv1.DataVolumeList
	var vmis virtv1.VirtualMachineInstanceList
	var svcs corev1.ServiceList
	opts := []client.ListOption{client.InNamespace(w.cfg.Namespace), client.MatchingFields{indexReplica: k.String()}}
	for _, l := range []client.ObjectList{&secrets, &dvs, &vmis, &svcs} {
		if err := w.cache.List(ctx, l, opts...); err != nil {
			return o, err
		}
	}
	o.secrets, o.dvs, o.vmis, o.services = secrets.Items, dvs.Items, vmis.Items, svcs.Items
	carrier := SecretName(k.job, k.replica, 0)
	for i := range o.secrets {
		if o.secrets[i].Name == carrier {
			o.carrier = &o.secrets[i]
			if st, ok := stateOf(o.carrier); ok {
				o.state = &st
			}
		}
	}
	var root corev1.ConfigMap
	err := w.cache.Get(ctx, client.ObjectKey{Namespace: w.cfg.Namespace, Name: RootName(k.job)}, &root)
	switch {
	case err == nil:
		o.root = &root
	case !apierrors.IsNotFound(err):
		return o, err
	}
	return o, nil
}

// vmiIndex is an object's VMI index label, or -1.
func vmiIndex(o metav1.Object) int {
	n, err := strconv.Atoi(o.GetLabels()[LabelVMIIndex])
	if err != nil || n < 0 {
		return -1
	}
	return n
}

// processQueue reconciles queued replicas until the queue shuts down.
func (w *Worker) processQueue(ctx context.Context) {
	for {
		k, shutdown := w.queue.Get()
		if shutdown {
			return
		}
		after, err := w.reconcile(ctx, k)
		switch {
		case err != nil && ctx.Err() == nil:
			w.log.Warn("reconcile", "replica", k.String(), "err", err)
			w.queue.AddRateLimited(k)
		default:
			w.queue.Forget(k)
			if after > 0 {
				w.queue.AddAfter(k, after)
			}
		}
		w.queue.Done(k)
	}
}

// reconcile observes replica k, acts on what it finds (fails it, repairs
// drift, deletes replaced VMIs, creates their replacements) and reports it.
// While the apiserver is away it does nothing (and comes back later): the
// informers' view is stale then, and nothing may fail because of it.
func (w *Worker) reconcile(ctx context.Context, k replicaKey) (time.Duration, error) {
	if !w.health.healthy() {
		return reconcileStale, nil
	}
	m := w.mem(k)
	m.mu.Lock()
	defer m.mu.Unlock()
	o, err := w.observe(ctx, k)
	if err != nil {
		return 0, err
	}
	if m.team == "" {
		m.team = teamOf(o)
	}
	if o.empty() && o.root == nil && !m.deleting && m.override == nil {
		// Nothing of the replica (left): nothing to report. (A replica
		// reported Gone is forgotten; a late event must not bring it back.)
		w.forget(k, m)
		return 0, nil
	}
	now := w.now()
	v := w.view(k, m, o)
	d := judge(w.judgePolicy(), v, now)
	var errs []error
	w.syncAgents(k, jobTypeOf(o), d.rep.AgentKeys, d.rep.Gone || m.deleting && o.empty())
	if len(d.drift) > 0 {
		w.recordDrift(k, m, now, d.drift, d.fail)
		for _, n := range d.drift {
			delete(m.seen, n)
		}
	}
	if d.write != nil {
		if d.fail {
			clear(m.seen)
		}
		err := w.writeState(ctx, k, m, *d.write)
		switch {
		case err != nil:
			errs = append(errs, err)
		case d.fail:
			// Its GPUs go back to the ork; its disks and Secrets are kept.
			if err := w.deleteReplicaVMIs(ctx, k, true); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if len(d.create) > 0 && len(errs) == 0 {
		if err := w.createVMIs(ctx, k, o, v.state.Reservation, d.create); err != nil {
			errs = append(errs, err)
		}
	}
	if d.agentsReady {
		w.record(k, m, now, "agent", true, "the agents of replica %d reported ready", k.replica)
	}
	if len(d.watchAgents) > 0 {
		names, next := w.agentsSilent(k, d.watchAgents, now)
		if len(names) > 0 {
			w.record(k, m, now, "agent", false, "the agent of VMI %s has not reported for %s; replica %d stays running (its VM runs; the agent may be restarting)",
				joinNames(names), w.cfg.AgentTimeout.D(), k.replica)
		}
		if next > 0 && (d.requeue == 0 || next < d.requeue) {
			d.requeue = next
		}
	}
	for _, v := range d.remove {
		if err := w.deleteVMI(ctx, v, false); err != nil {
			errs = append(errs, err)
		}
	}
	maps.Copy(m.seen, d.seen)
	w.setReport(k, m, d.rep, o, now)
	if d.rep.Gone {
		w.forget(k, m)
	}
	if err := joinErrs(errs); err != nil {
		return 0, err
	}
	return d.requeue, nil
}

// recordDrift writes the system log record of VMIs deleted behind the
// worker's back, and what the drift policy makes of them.
func (w *Worker) recordDrift(k replicaKey, m *replicaMem, now time.Time, drift []int, fail bool) {
	names := make([]string, len(drift))
	for i, n := range drift {
		names[i] = VMIName(k.job, k.replica, n)
	}
	what := strings.Join(names, ", ")
	if fail {
		w.record(k, m, now, "drift", false, "VMI %s was deleted outside CosmicAC: failing replica %d (driftPolicy %s)", what, k.replica, DriftFail)
		return
	}
	w.record(k, m, now, "drift", true, "VMI %s was deleted outside CosmicAC: recreating it (driftPolicy %s)", what, DriftRecreate)
}

// createVMIs rebuilds the replica's graph from the job kept on its carrier
// and applies the VMIs of the given indices.
func (w *Worker) createVMIs(ctx context.Context, k replicaKey, o observation, res cosmic.Reservation, indices []int) error {
	if o.carrier == nil || o.root == nil || o.root.DeletionTimestamp != nil {
		return nil // not applied yet, or being deleted: nothing to recreate from
	}
	var job cosmic.Job
	if err := json.Unmarshal(o.carrier.Data[JobDataKey], &job); err != nil {
		return fmt.Errorf("replica %s: the job on its carrier: %w", k, err)
	}
	g, err := BuildReplica(w.cfg, job, res, Bootstrap{})
	if err != nil {
		return fmt.Errorf("replica %s: rebuild: %w", k, err)
	}
	// A standalone volume deleted behind the worker's back is made again
	// (empty), rather than leave the VMI waiting for it.
	if err := ensureStandaloneVolumes(ctx, w.c, g.Standalone); err != nil {
		return fmt.Errorf("replica %s: %w", k, err)
	}
	g.SetOwner(o.root)
	objs := make([]Object, 0, len(indices))
	for _, i := range indices {
		if i < len(g.VMIs) {
			objs = append(objs, g.VMIs[i])
		}
	}
	return w.applyAll(ctx, objs)
}

// teamOf is the job's team from its objects' labels or annotations.
func teamOf(o observation) string {
	var meta metav1.Object
	switch {
	case o.carrier != nil:
		meta = o.carrier
	case o.root != nil:
		meta = o.root
	case len(o.vmis) > 0:
		meta = &o.vmis[0]
	default:
		return ""
	}
	if t := meta.GetAnnotations()[AnnotationTeam]; t != "" {
		return t
	}
	return meta.GetLabels()[LabelTeam]
}
