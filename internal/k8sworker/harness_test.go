package k8sworker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/workqueue"
	virtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/cosmicac/cosmicac/internal/config"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/joblog"
	"github.com/cosmicac/cosmicac/internal/k8stest"
	"github.com/cosmicac/cosmicac/internal/waittest"
	"github.com/cosmicac/cosmicac/internal/worker"
	"github.com/cosmicac/cosmicac/internal/worker/workertest"
)

func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard())
	code := m.Run()
	k8stest.StopShared()
	os.Exit(code)
}

// fakeReporter collects the worker's reports (workertest.Recorder); while
// fail is set it refuses them, as an ork that is away.
type fakeReporter struct {
	workertest.Recorder
	fail atomic.Bool
}

func (f *fakeReporter) Report(ctx context.Context, r worker.Report) error {
	if f.fail.Load() {
		return errors.New("ork away")
	}
	return f.Recorder.Report(ctx, r)
}

var nsCounter atomic.Int64

// harness is one test's rack: its own namespace and GPU resource name on
// a shared control plane (nodes are cluster-wide, so each test's nodes
// carry a resource no other test's rack maps).
type harness struct {
	t   testing.TB
	env *k8stest.Env
	c   client.Client
	// restCfg is the worker's client config (default: env.Config).
	restCfg *rest.Config
	cfg     RackConfig
	rep     *fakeReporter
	logs    *joblog.Ring
	w       *Worker
	// queue is the worker's queue, counting its reconciliations.
	queue *countingQueue
	// requests records the worker's requests that failed.
	requests *requestLog
	cancel   context.CancelFunc
	done     chan error
	ctx      context.Context
}

func newHarness(t testing.TB, env *k8stest.Env, mut func(*RackConfig)) *harness {
	t.Helper()
	n := nsCounter.Add(1)
	cfg := DefaultRackConfig()
	cfg.Rack = "k8s-test"
	cfg.Namespace = fmt.Sprintf("cosmicac-t%d-%d", os.Getpid()%100000, n)
	cfg.GPUResources = []GPUResource{{Resource: fmt.Sprintf("t%d.example.com/gpu", n), Model: "GH100_H100_SXM5_80GB"}}
	cfg.UnschedulableGrace = config.Duration(0)
	if mut != nil {
		mut(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	h := &harness{t: t, env: env, c: env.Client, cfg: cfg, rep: &fakeReporter{}, logs: joblog.NewRing(10000), requests: newRequestLog(), ctx: ctx}
	if err := h.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: cfg.Namespace}}); err != nil {
		t.Fatal(err)
	}
	return h
}

// start runs a worker (again).
func (h *harness) start() {
	h.t.Helper()
	h.run(nil)
}

// run makes a worker, serving agents on rig when there is one, runs it and
// waits for its informers to sync.
func (h *harness) run(rig *agentRig) {
	h.t.Helper()
	log := slog.New(slog.NewTextHandler(testWriter{h.t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	rc := h.restCfg
	if rc == nil {
		rc = h.env.Config
	}
	rc = rest.CopyConfig(rc)
	rc.Wrap(h.requests.wrap)
	w, err := New(h.cfg, rc, h.rep, h.logs, log)
	if err != nil {
		h.t.Fatal(err)
	}
	if rig != nil {
		if err := w.ServeAgents(AgentOptions{Node: rig.node, Keys: rig.keys}); err != nil {
			h.t.Fatal(err)
		}
	}
	w.retryMin, w.retryMax = 20*time.Millisecond, 200*time.Millisecond
	h.queue = newCountingQueue(w.queue)
	w.queue = h.queue
	ctx, cancel := context.WithCancel(h.ctx)
	h.w, h.cancel, h.done = w, cancel, make(chan error, 1)
	go func() { h.done <- w.Run(ctx) }()
	h.t.Cleanup(h.stop)
	sctx, scancel := context.WithTimeout(h.ctx, 30*time.Second)
	defer scancel()
	if err := w.WaitSynced(sctx); err != nil {
		h.t.Fatalf("worker did not sync: %v", err)
	}
}

// countingQueue is a worker's queue that counts the reconciliations of
// each replica: one begins when Get hands the replica out (before the
// reconciler observes anything) and ends at Done. The queue never hands
// out a replica that is being reconciled, so they follow each other.
type countingQueue struct {
	workqueue.TypedRateLimitingInterface[replicaKey]
	mu           sync.Mutex
	begun, ended map[replicaKey]int
}

func newCountingQueue(q workqueue.TypedRateLimitingInterface[replicaKey]) *countingQueue {
	return &countingQueue{TypedRateLimitingInterface: q, begun: map[replicaKey]int{}, ended: map[replicaKey]int{}}
}

func (q *countingQueue) Get() (replicaKey, bool) {
	k, shutdown := q.TypedRateLimitingInterface.Get()
	if !shutdown {
		q.mu.Lock()
		q.begun[k]++
		q.mu.Unlock()
	}
	return k, shutdown
}

func (q *countingQueue) Done(k replicaKey) {
	q.mu.Lock()
	q.ended[k]++
	q.mu.Unlock()
	q.TypedRateLimitingInterface.Done(k)
}

// settle queues a replica and waits until a reconciliation of it that
// began after the call has ended, and the report it made (if any) has been
// delivered: what the worker's informers showed when settle was called has
// been judged and reported.
func (h *harness) settle(job string, replica int) {
	h.t.Helper()
	k, q := replicaKey{job: job, replica: replica}, h.queue
	q.mu.Lock()
	begun := q.begun[k]
	q.mu.Unlock()
	q.Add(k)
	waittest.Until(h.t, func() bool {
		q.mu.Lock()
		defer q.mu.Unlock()
		return q.ended[k] > begun
	}, "a reconciliation of replica %s", k)
	waittest.Until(h.t, func() bool {
		h.w.mu.Lock()
		defer h.w.mu.Unlock()
		return !h.w.reports.Undelivered(k.ref())
	}, "the report of replica %s delivered", k)
}

// informed waits until the worker's informers show what f asks of them
// (f reads the worker's cache).
func (h *harness) informed(what string, f func(c client.Reader) error) {
	h.t.Helper()
	h.eventually(10*time.Second, "the worker's informers show "+what, func() error { return f(h.w.cache) })
}

// touchAnnotation marks objects for touch; the worker reads no annotation
// of that prefix.
const touchAnnotation = "test.cosmicac.io/touch"

var touches atomic.Int64

// touch annotates obj (its namespace and name) on the apiserver and waits
// until the worker's informer shows the mark: that informer has then seen
// every change of its kind made before.
func (h *harness) touch(obj client.Object) {
	h.t.Helper()
	mark := strconv.FormatInt(touches.Add(1), 10)
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, touchAnnotation, mark)
	key := client.ObjectKeyFromObject(obj)
	h.eventually(10*time.Second, fmt.Sprintf("touch %T %s", obj, key.Name), func() error {
		return h.c.Patch(h.ctx, obj.DeepCopyObject().(client.Object), client.RawPatch(types.MergePatchType, patch))
	})
	h.informed(fmt.Sprintf("%T %s touched", obj, key.Name), func(c client.Reader) error {
		got := obj.DeepCopyObject().(client.Object)
		if err := c.Get(h.ctx, key, got); err != nil {
			return err
		}
		if m := got.GetAnnotations()[touchAnnotation]; m != mark {
			return fmt.Errorf("mark %q, want %q", m, mark)
		}
		return nil
	})
}

// touchReplica touches every object of replica 0 of job (its root, its
// VMI 0's Secret, DataVolume and VMI): each of the worker's informers has
// then seen what was done to them before.
func (h *harness) touchReplica(job string) {
	h.t.Helper()
	meta := func(name string) metav1.ObjectMeta { return metav1.ObjectMeta{Namespace: h.cfg.Namespace, Name: name} }
	h.touch(&corev1.ConfigMap{ObjectMeta: meta(RootName(job))})
	h.touch(&corev1.Secret{ObjectMeta: meta(SecretName(job, 0, 0))})
	h.touch(&cdiv1.DataVolume{ObjectMeta: meta(VMIName(job, 0, 0))})
	h.touch(&virtv1.VirtualMachineInstance{ObjectMeta: meta(VMIName(job, 0, 0))})
}

// requestLog records which of the worker's requests to the apiserver
// failed (no response), by resource, in order.
type requestLog struct {
	mu     sync.Mutex
	seq    int
	failed map[string]int // resource (the path's last element): seq of its last failure
}

func newRequestLog() *requestLog { return &requestLog{failed: map[string]int{}} }

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func (l *requestLog) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(r)
		if err != nil {
			l.mu.Lock()
			l.seq++
			l.failed[path.Base(r.URL.Path)] = l.seq
			l.mu.Unlock()
		}
		return resp, err
	})
}

// mark is the point after which waitFailed looks.
func (l *requestLog) mark() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.seq
}

// informerResources are the resources the worker's informers list and
// watch.
var informerResources = []string{"configmaps", "secrets", "datavolumes", "virtualmachineinstances", "services", "nodes"}

// waitFailed waits until a request for each resource has failed since
// mark: the informers have retried their lists and watches, and failed.
func (h *harness) waitFailed(mark int, resources ...string) {
	h.t.Helper()
	l := h.requests
	h.eventually(20*time.Second, "requests failed for "+fmt.Sprint(resources), func() error {
		l.mu.Lock()
		defer l.mu.Unlock()
		var missing []string
		for _, r := range resources {
			if l.failed[r] <= mark {
				missing = append(missing, r)
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("none failed yet for %v", missing)
		}
		return nil
	})
}

// stop stops the worker and waits for Run to return.
func (h *harness) stop() {
	if h.cancel == nil {
		return
	}
	h.cancel()
	h.cancel = nil
	select {
	case err := <-h.done:
		if err != nil {
			h.t.Errorf("Run: %v", err)
		}
	case <-time.After(20 * time.Second):
		h.t.Error("Run did not return 20s after its context was cancelled")
	}
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

func (h *harness) resource() corev1.ResourceName {
	return corev1.ResourceName(h.cfg.GPUResources[0].Resource)
}

// addNode plays the kubelet and the device plugin: a Ready node with gpus
// allocatable GPUs of the rack's resource.
func (h *harness) addNode(name string, gpus int) {
	h.t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := h.c.Create(h.ctx, n); err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { _ = h.c.Delete(context.Background(), n) })
	q := *resource.NewQuantity(int64(gpus), resource.DecimalSI)
	n.Status.Capacity = corev1.ResourceList{h.resource(): q, corev1.ResourceCPU: resource.MustParse("128")}
	n.Status.Allocatable = n.Status.Capacity.DeepCopy()
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
	if err := h.c.Status().Update(h.ctx, n); err != nil {
		h.t.Fatal(err)
	}
	// The admission plugin TaintNodesByCondition taints new nodes not-ready;
	// play the node lifecycle controller, which lifts it once Ready.
	n.Spec.Taints = nil
	if err := h.c.Update(h.ctx, n); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) nodeName(i int) string { return fmt.Sprintf("%s-node-%d", h.cfg.Namespace, i) }

// containerJob is a 1-GPU container job.
func containerJob(team string) cosmic.Job {
	s := cosmic.Spec{Type: cosmic.TypeGPUContainer, Location: "us", Image: "docker.io/cosmicac/ubuntu-cuda:24.04", DiskGB: 20}
	s.Default()
	return cosmic.NewJob(cosmic.NewJobID(), "ada@example.com", team, s, time.Now())
}

func (h *harness) reservation(job cosmic.Job, replica int, nodes ...cosmic.NodeAlloc) cosmic.Reservation {
	return cosmic.Reservation{JobID: job.ID, Rack: h.cfg.Rack, Replica: replica, Nodes: nodes}
}

func (h *harness) apply(job cosmic.Job, res ...cosmic.Reservation) {
	h.t.Helper()
	if err := h.w.Apply(h.ctx, worker.ApplyParams{Job: job, Reservations: res}); err != nil {
		h.t.Fatalf("Apply: %v", err)
	}
}

// eventually polls f until it returns nil, and fails the test with f's
// last error if it has not within timeout (a bound on failure only).
func (h *harness) eventually(timeout time.Duration, what string, f func() error) {
	h.t.Helper()
	var last error
	waittest.Within(h.t, timeout, func() bool {
		last = f()
		return last == nil
	}, "%s: %v", what, lastError{&last})
}

// lastError prints the error it points to when the failure is written.
type lastError struct{ err *error }

func (e lastError) String() string { return fmt.Sprint(*e.err) }

// waitReport waits for the replica's latest report to be in state.
func (h *harness) waitReport(job string, replica int, state cosmic.State, check func(worker.ReplicaReport) error) worker.ReplicaReport {
	h.t.Helper()
	var got worker.ReplicaReport
	h.eventually(15*time.Second, fmt.Sprintf("replica %d of %s reported %s", replica, job, state), func() error {
		r, ok := h.rep.Last(job, replica)
		if !ok {
			return errors.New("no report")
		}
		if r.State != state {
			return fmt.Errorf("latest report %+v", r)
		}
		if check != nil {
			if err := check(r); err != nil {
				return err
			}
		}
		got = r
		return nil
	})
	return got
}

func progressIs(step string, pct int) func(worker.ReplicaReport) error {
	return func(r worker.ReplicaReport) error {
		if r.Progress == nil || r.Progress.Step != step || r.Progress.Percent != pct {
			return fmt.Errorf("progress %+v, want %s %d%%", r.Progress, step, pct)
		}
		return nil
	}
}

func reasonIs(code cosmic.ReasonCode) func(worker.ReplicaReport) error {
	return func(r worker.ReplicaReport) error {
		if r.Reason == nil || r.Reason.Code != code {
			return fmt.Errorf("reason %+v, want %s", r.Reason, code)
		}
		return nil
	}
}

func (h *harness) key(name string) client.ObjectKey {
	return client.ObjectKey{Namespace: h.cfg.Namespace, Name: name}
}

func (h *harness) vmi(name string) *virtv1.VirtualMachineInstance {
	h.t.Helper()
	var v virtv1.VirtualMachineInstance
	h.eventually(10*time.Second, "VMI "+name+" exists", func() error { return h.c.Get(h.ctx, h.key(name), &v) })
	return &v
}

func (h *harness) dv(name string) *cdiv1.DataVolume {
	h.t.Helper()
	var d cdiv1.DataVolume
	h.eventually(10*time.Second, "DataVolume "+name+" exists", func() error { return h.c.Get(h.ctx, h.key(name), &d) })
	return &d
}

// setDV plays CDI: the DataVolume's status (status subresource).
func (h *harness) setDV(name string, phase cdiv1.DataVolumePhase, progress string, restarts int32) {
	h.t.Helper()
	h.eventually(10*time.Second, "set DataVolume "+name, func() error {
		d := h.dv(name)
		d.Status.Phase, d.Status.Progress, d.Status.RestartCount = phase, cdiv1.DataVolumeProgress(progress), restarts
		if phase == cdiv1.Failed {
			d.Status.Conditions = []cdiv1.DataVolumeCondition{{Type: cdiv1.DataVolumeRunning, Status: corev1.ConditionFalse, Reason: "Error", Message: "Unable to connect to http data source: 404"}}
		}
		return h.c.Status().Update(h.ctx, d)
	})
}

// setVMI plays KubeVirt: the VMI's status (a plain update: the VMI CRD has
// no status subresource).
func (h *harness) setVMI(name string, f func(*virtv1.VirtualMachineInstance)) {
	h.t.Helper()
	h.eventually(10*time.Second, "set VMI "+name, func() error {
		v := h.vmi(name)
		f(v)
		return h.c.Update(h.ctx, v)
	})
}

func running(node string) func(*virtv1.VirtualMachineInstance) {
	return func(v *virtv1.VirtualMachineInstance) {
		v.Status.Phase = virtv1.Running
		v.Status.NodeName = node
		v.Status.Conditions = []virtv1.VirtualMachineInstanceCondition{{Type: virtv1.VirtualMachineInstanceReady, Status: corev1.ConditionTrue}}
	}
}

// runReplica walks a replica's disks and VMIs to Running and Ready.
func (h *harness) runReplica(job string, replica int, nodes ...string) {
	h.t.Helper()
	for i, n := range nodes {
		name := VMIName(job, replica, i)
		h.setDV(name, cdiv1.Succeeded, "100.0%", 0)
		h.setVMI(name, running(n))
	}
	h.waitReport(job, replica, cosmic.StateRunning, nil)
}

// objectsOf lists the job's objects on the apiserver, by kind.
func (h *harness) objectsOf(job string) map[string][]string {
	h.t.Helper()
	out := map[string][]string{}
	sel := client.MatchingLabels{LabelJob: job}
	ns := client.InNamespace(h.cfg.Namespace)
	var cms corev1.ConfigMapList
	var secrets corev1.SecretList
	var dvs cdiv1.DataVolumeList
	var vmis virtv1.VirtualMachineInstanceList
	var svcs corev1.ServiceList
	for kind, l := range map[string]client.ObjectList{"ConfigMap": &cms, "Secret": &secrets, "DataVolume": &dvs, "VirtualMachineInstance": &vmis, "Service": &svcs} {
		if err := h.c.List(h.ctx, l, ns, sel); err != nil {
			h.t.Fatal(err)
		}
		_ = kind
	}
	for _, o := range cms.Items {
		out["ConfigMap"] = append(out["ConfigMap"], o.Name)
	}
	for _, o := range secrets.Items {
		out["Secret"] = append(out["Secret"], o.Name)
	}
	for _, o := range dvs.Items {
		out["DataVolume"] = append(out["DataVolume"], o.Name)
	}
	for _, o := range vmis.Items {
		out["VirtualMachineInstance"] = append(out["VirtualMachineInstance"], o.Name)
	}
	for _, o := range svcs.Items {
		out["Service"] = append(out["Service"], o.Name)
	}
	for k := range out {
		slices.Sort(out[k])
	}
	return out
}

// records is the job's system log records' steps, in order.
func (h *harness) steps(job string) []string {
	var out []string
	for _, r := range h.logs.Job(job) {
		out = append(out, r.Step)
	}
	return out
}

func isNotFound(err error) bool { return apierrors.IsNotFound(err) }

type joblogRecord = joblog.Record

// assertUnavailable checks, with the apiserver away, that Capacity, Jobs
// and Apply fail with unavailable (the ork then marks the rack's jobs
// unknown, never failed); it returns the job and reservation whose Apply
// was refused, to apply once the apiserver is back.
func (h *harness) assertUnavailable() (cosmic.Job, cosmic.Reservation) {
	h.t.Helper()
	h.eventually(10*time.Second, "Capacity unavailable", func() error {
		_, err := h.w.Capacity(h.ctx)
		if fabric.ErrorCode(err) != fabric.CodeUnavailable {
			return fmt.Errorf("Capacity: %v", err)
		}
		return nil
	})
	if _, err := h.w.Jobs(h.ctx); fabric.ErrorCode(err) != fabric.CodeUnavailable {
		h.t.Fatalf("Jobs: %v, want unavailable", err)
	}
	j := containerJob("team-a")
	res := h.reservation(j, 0, cosmic.NodeAlloc{Node: h.nodeName(0), GPUs: []int{7}})
	if err := h.w.Apply(h.ctx, worker.ApplyParams{Job: j, Reservations: []cosmic.Reservation{res}}); fabric.ErrorCode(err) != fabric.CodeUnavailable {
		h.t.Fatalf("Apply: %v, want unavailable", err)
	}
	return j, res
}

// assertAnswersAgain waits until the apiserver is back for the worker:
// Capacity answers with the rack's node.
func (h *harness) assertAnswersAgain() {
	h.t.Helper()
	h.eventually(30*time.Second, "Capacity answers again", func() error {
		c, err := h.w.Capacity(h.ctx)
		if err != nil {
			return err
		}
		if len(c.Nodes) != 1 {
			return fmt.Errorf("nodes %+v", c.Nodes)
		}
		return nil
	})
}
