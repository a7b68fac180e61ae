package k8sworker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/client-go/util/workqueue"
	virtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/joblog"
	"github.com/cosmicac/cosmicac/internal/worker"
)

// FieldManager is the server-side apply field manager of every object the
// worker writes.
const FieldManager = "cosmicac"

// Timing of the worker's loops. Tests shorten some of them.
const (
	healthInterval  = time.Second
	healthTimeout   = 2 * time.Second
	reconcileStale  = time.Second // requeue delay while the apiserver is away
	defaultWorkers  = 4
	maxGraceRequeue = time.Minute
)

// Scheme returns a scheme with client-go's built-in types, KubeVirt core/v1
// and CDI core/v1beta1: every type the worker reads or writes.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(virtv1.AddToScheme(s))
	utilruntime.Must(cdiv1.AddToScheme(s))
	return s
}

// Worker is the Kubernetes rack worker. It implements worker.Worker: Apply,
// Stop, Restart and Delete write to the apiserver (server-side apply,
// retried on conflicts and server errors); status, capacity and drift come
// from watches (informers) and are pushed to the Reporter. Make it with New
// and run it with Run.
type Worker struct {
	// now is the worker's clock: every judgement, record and deadline
	// reads it (tests set it; default time.Now).
	now  func() time.Time
	cfg  RackConfig
	rep  worker.Reporter
	logs joblog.Sink
	log  *slog.Logger

	c      client.Client // writes and the few direct reads, rate limited by cfg.Client
	cache  cache.Cache   // informers: Nodes, root ConfigMaps, Secrets, DataVolumes, VMIs, Services
	health *health
	queue  workqueue.TypedRateLimitingInterface[replicaKey]

	// Loop timing; tests shorten them.
	retryMin, retryMax time.Duration
	workers            int

	synced chan struct{} // closed once the informers have synced

	agents *agentHub // set by ServeAgents

	// problem is what stops the rack from taking jobs (its namespace is
	// missing and the worker may not create it), reported with Capacity.
	problem rackProblem

	mu       sync.Mutex
	replicas map[replicaKey]*replicaMem
	reports  *worker.ReportQueue // undelivered reports, guarded by mu
	// gone holds the replicas last reported Gone, and when: a late event
	// about one (an informer still catching up) must not report it alive
	// again; an Apply of the replica lifts it, and it is forgotten after
	// goneTTL (tombstoneLocked).
	gone       map[replicaKey]time.Time
	gonePruned time.Time
	lastCap    []cosmic.Node
	// lastVols are the standalone volumes last seen (volumesChanged,
	// guarded by mu); volMu orders the computations of them.
	lastVols []cosmic.StoredVolume
	volMu    sync.Mutex
}

// replicaKey names one replica of a job.
type replicaKey struct {
	job     string
	replica int
}

func (k replicaKey) String() string { return fmt.Sprintf("%s/%d", k.job, k.replica) }

func (k replicaKey) ref() worker.ReplicaRef {
	return worker.ReplicaRef{JobID: k.job, Replica: k.replica}
}

// New makes a worker for the rack cfg (validated) on the cluster restCfg
// points at. Requests are rate limited to cfg.Client (QPS and burst, one
// token bucket for every write; the informers get a bucket of their own).
// Reports go to rep, system log records to logs (nil: discarded). Nothing
// talks to the apiserver until Run.
func New(cfg RackConfig, restCfg *rest.Config, rep worker.Reporter, logs joblog.Sink, log *slog.Logger) (*Worker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("rack config: %w", err)
	}
	if restCfg == nil {
		return nil, errors.New("k8sworker: no Kubernetes client config")
	}
	if rep == nil {
		return nil, errors.New("k8sworker: no reporter")
	}
	if logs == nil {
		logs = joblog.Discard
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	scheme := Scheme()
	writeCfg := limited(restCfg, cfg.Client)
	httpClient, err := rest.HTTPClientFor(writeCfg)
	if err != nil {
		return nil, fmt.Errorf("k8sworker: HTTP client: %w", err)
	}
	mapper := restMapper()
	c, err := client.New(writeCfg, client.Options{Scheme: scheme, HTTPClient: httpClient, Mapper: mapper})
	if err != nil {
		return nil, fmt.Errorf("k8sworker: client: %w", err)
	}
	managed := labels.SelectorFromSet(labels.Set{LabelManagedBy: ManagedBy})
	readCfg := limited(restCfg, cfg.Client)
	ca, err := cache.New(readCfg, cache.Options{
		Scheme:               scheme,
		Mapper:               mapper,
		DefaultNamespaces:    map[string]cache.Config{cfg.Namespace: {}},
		DefaultLabelSelector: managed,
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Node{}: {Label: labels.Everything()},
			// Every bound, running pod of the cluster: their requests are
			// taken from the nodes' CPU and memory (RBAC: list and watch
			// pods cluster-wide).
			&corev1.Pod{}: {
				Label:      labels.Everything(),
				Field:      fields.ParseSelectorOrDie("status.phase!=Succeeded,status.phase!=Failed"),
				Namespaces: map[string]cache.Config{cache.AllNamespaces: {}},
			},
		},
	})
	if err != nil {
		return nil, fmt.Errorf("k8sworker: cache: %w", err)
	}
	h, err := newHealth(restCfg)
	if err != nil {
		return nil, err
	}
	w := &Worker{
		now:      time.Now,
		cfg:      cfg,
		rep:      rep,
		logs:     logs,
		log:      log.With("rack", cfg.Rack),
		c:        c,
		cache:    ca,
		health:   h,
		retryMin: worker.ReportRetryMin,
		retryMax: worker.ReportRetryMax,
		workers:  defaultWorkers,
		synced:   make(chan struct{}),
		replicas: make(map[replicaKey]*replicaMem),
		gone:     make(map[replicaKey]time.Time),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[replicaKey](),
			workqueue.TypedRateLimitingQueueConfig[replicaKey]{Name: "k8sworker-" + cfg.Rack}),
	}
	w.reports = worker.NewReportQueue(&w.mu)
	return w, nil
}

// restMapper maps the kinds the worker uses to their resources without
// asking the apiserver (discovery), so that the worker starts, and its
// calls fail cleanly, while the apiserver is away.
func restMapper() meta.RESTMapper {
	m := meta.NewDefaultRESTMapper(nil)
	add := func(gv schema.GroupVersion, kind string, scope meta.RESTScope) {
		plural, singular := meta.UnsafeGuessKindToResource(gv.WithKind(kind))
		m.AddSpecific(gv.WithKind(kind), plural, singular, scope)
		m.AddSpecific(gv.WithKind(kind+"List"), plural, singular, scope)
	}
	add(corev1.SchemeGroupVersion, "Node", meta.RESTScopeRoot)
	add(corev1.SchemeGroupVersion, "Namespace", meta.RESTScopeRoot)
	for _, k := range []string{"Pod", "ConfigMap", "Secret", "Service", "PersistentVolumeClaim"} {
		add(corev1.SchemeGroupVersion, k, meta.RESTScopeNamespace)
	}
	add(virtv1.GroupVersion, "VirtualMachineInstance", meta.RESTScopeNamespace)
	add(cdiv1.SchemeGroupVersion, "DataVolume", meta.RESTScopeNamespace)
	return m
}

// limited is a copy of c with its own token bucket of cc's QPS and burst.
func limited(c *rest.Config, cc ClientConfig) *rest.Config {
	out := rest.CopyConfig(c)
	out.QPS, out.Burst = cc.QPS, cc.Burst
	out.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(cc.QPS, cc.Burst)
	if out.UserAgent == "" {
		out.UserAgent = "cosmicac-wrk-server-k8s-nvidia"
	}
	return out
}

// Config is the rack's configuration.
func (w *Worker) Config() RackConfig { return w.cfg }

// Client is the worker's (rate-limited) client of the cluster.
func (w *Worker) Client() client.Client { return w.c }

// Run runs the worker until ctx is done: the informers, the reconcilers
// that turn what they see into reports (and repair drift), the apiserver
// health probe and report delivery. It returns nil once they have stopped,
// or an error if the informers cannot start.
func (w *Worker) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := w.setupInformers(ctx); err != nil {
		return err
	}
	var wg sync.WaitGroup
	cacheErr := make(chan error, 1)
	wg.Go(func() { cacheErr <- w.cache.Start(ctx) })
	wg.Go(func() { w.health.run(ctx, w.onRecovered) })
	wg.Go(func() { w.namespaceLoop(ctx) })
	wg.Go(func() { w.reportLoop(ctx) })
	wg.Go(func() {
		<-ctx.Done()
		w.queue.ShutDown()
	})
	wg.Go(func() {
		if !w.cache.WaitForCacheSync(ctx) {
			return
		}
		w.afterSync(ctx)
		close(w.synced)
		var rw sync.WaitGroup
		for range w.workers {
			rw.Go(func() { w.processQueue(ctx) })
		}
		rw.Wait()
	})
	var err error
	select {
	case err = <-cacheErr:
		if err != nil && ctx.Err() == nil {
			w.log.Error("informers stopped", "err", err)
		}
		cancel()
	case <-ctx.Done():
	}
	wg.Wait()
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// WaitSynced blocks until the informers have synced (or ctx is done).
func (w *Worker) WaitSynced(ctx context.Context) error {
	select {
	case <-w.synced:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// available refuses calls while the apiserver cannot be reached, or before
// the informers have synced: the ork then marks the rack's jobs unknown
// (never failed).
func (w *Worker) available(ctx context.Context) error {
	select {
	case <-w.synced:
	default:
		return fabric.Errorf(fabric.CodeUnavailable, "rack %s: the worker has not synced with the Kubernetes apiserver yet", w.cfg.Rack)
	}
	if err := w.health.check(ctx); err != nil {
		return fabric.Errorf(fabric.CodeUnavailable, "rack %s: %v", w.cfg.Rack, err)
	}
	return nil
}

// Capacity implements worker.Worker: the rack's GPU nodes from the node
// informer, and its standalone volumes with the jobs that hold them (from
// the DataVolume and VMI informers). It fails with unavailable while the
// apiserver is away.
func (w *Worker) Capacity(ctx context.Context) (worker.Capacity, error) {
	if err := w.available(ctx); err != nil {
		return worker.Capacity{}, err
	}
	nodes, err := w.nodes(ctx)
	if err != nil {
		return worker.Capacity{}, fabric.Errorf(fabric.CodeUnavailable, "rack %s: list nodes: %v", w.cfg.Rack, err)
	}
	vols, err := w.volumes(ctx)
	if err != nil {
		return worker.Capacity{}, fabric.Errorf(fabric.CodeUnavailable, "rack %s: list standalone volumes: %v", w.cfg.Rack, err)
	}
	return worker.Capacity{Rack: w.cfg.Rack, Nodes: nodes, Overhead: KubeVirtOverhead, ObservedAt: w.now(), Problem: w.problem.get(), Catalogue: Catalogue(w.cfg), Volumes: vols}, nil
}

func (w *Worker) nodes(ctx context.Context) ([]cosmic.Node, error) {
	var l corev1.NodeList
	if err := w.cache.List(ctx, &l); err != nil {
		return nil, err
	}
	var pods corev1.PodList
	if err := w.cache.List(ctx, &pods); err != nil {
		return nil, err
	}
	nodes := RackNodes(w.cfg, l.Items)
	used := ForeignRequests(pods.Items)
	byName := map[string]*corev1.Node{}
	for i := range l.Items {
		byName[l.Items[i].Name] = &l.Items[i]
	}
	for i := range nodes {
		if n := byName[nodes[i].Name]; n != nil {
			nodes[i].CPUMilli, nodes[i].MemoryMiB = FreeForJobs(n, used[n.Name])
		}
	}
	if nodes == nil {
		nodes = []cosmic.Node{}
	}
	return nodes, nil
}

// GPUsInUse counts, per node, the GPUs held by CosmicAC's VMIs (from the
// VMI informer).
func (w *Worker) GPUsInUse(ctx context.Context) (map[string]int, error) {
	var l virtv1.VirtualMachineInstanceList
	if err := w.cache.List(ctx, &l, client.InNamespace(w.cfg.Namespace)); err != nil {
		return nil, err
	}
	return GPUsInUse(l.Items), nil
}

// Jobs implements worker.Worker: every replica with objects on the cluster,
// as last observed. It fails with unavailable while the apiserver is away.
func (w *Worker) Jobs(ctx context.Context) ([]worker.JobReport, error) {
	if err := w.available(ctx); err != nil {
		return nil, err
	}
	keys, err := w.allKeys(ctx)
	if err != nil {
		return nil, fabric.Errorf(fabric.CodeUnavailable, "rack %s: %v", w.cfg.Rack, err)
	}
	out := []worker.JobReport{}
	for _, k := range keys {
		m := w.mem(k)
		m.mu.Lock()
		var rep worker.ReplicaReport
		if m.last != nil {
			rep = *m.last
		} else {
			obs, err := w.observe(ctx, k)
			if err != nil {
				m.mu.Unlock()
				return nil, fabric.Errorf(fabric.CodeUnavailable, "rack %s: %v", w.cfg.Rack, err)
			}
			if obs.empty() {
				m.mu.Unlock()
				continue
			}
			rep = judge(w.judgePolicy(), w.view(k, m, obs), w.now()).rep
			rep.Observed = worker.Observe()
		}
		m.mu.Unlock()
		if rep.Gone {
			continue
		}
		if n := len(out); n == 0 || out[n-1].JobID != k.job {
			out = append(out, worker.JobReport{JobID: k.job})
		}
		out[len(out)-1].Replicas = append(out[len(out)-1].Replicas, rep)
	}
	return out, nil
}

// mem is the in-memory record of replica k, made on first use.
func (w *Worker) mem(k replicaKey) *replicaMem {
	w.mu.Lock()
	defer w.mu.Unlock()
	m := w.replicas[k]
	if m == nil {
		m = &replicaMem{seen: map[int]string{}}
		w.replicas[k] = m
	}
	return m
}

// forget drops the in-memory record of k (after it is reported Gone).
func (w *Worker) forget(k replicaKey, m *replicaMem) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.replicas[k] == m {
		delete(w.replicas, k)
	}
}

// memKeys lists the replicas held in memory, of job (or all if job is "").
func (w *Worker) memKeys(job string) []replicaKey {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []replicaKey
	for k := range w.replicas {
		if job == "" || k.job == job {
			out = append(out, k)
		}
	}
	return out
}

func sortKeys(keys []replicaKey) []replicaKey {
	keys = slices.Compact(slices.SortedFunc(slices.Values(keys), func(a, b replicaKey) int {
		return cmp.Or(cmp.Compare(a.job, b.job), cmp.Compare(a.replica, b.replica))
	}))
	return keys
}

func setOf[K comparable](xs []K) map[K]bool {
	m := make(map[K]bool, len(xs))
	for _, x := range xs {
		m[x] = true
	}
	return m
}

var _ worker.Worker = (*Worker)(nil)
