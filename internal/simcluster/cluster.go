package simcluster

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"path/filepath"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/datasync"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/joblog"
	"github.com/cosmicac/cosmicac/internal/worker"
)

// codeConflict is the fabric error code of a request that contradicts the
// replica's current state (the ork's orkapi.CodeConflict spelling).
const codeConflict = "conflict"

// Cluster is a simulated rack. It implements worker.Worker. Make it with
// New, start it with Run.
type Cluster struct {
	cfg  Config
	rep  worker.Reporter
	logs joblog.Sink
	log  *slog.Logger

	// Report retry bounds; tests shorten them.
	retryMin, retryMax time.Duration
	// ackGrace is how long the worker stays on the fabric after accepting
	// simUnreachable, so that the caller gets its ack.
	ackGrace time.Duration

	wake   chan struct{} // the lifecycle loop: a replica has a new due step
	outage chan struct{} // the outage loop: simUnreachable was called

	mu      sync.Mutex
	nodes   []*simNode
	byName  map[string]*simNode
	jobs    map[string]*simJob
	claims  map[gpuKey]replicaKey // every GPU a replica of this cluster holds
	reports *worker.ReportQueue   // undelivered reports, guarded by mu
	// failNextImport arms simFailImport without a job: the next import to
	// start fails.
	failNextImport bool
	offlineUntil   time.Time
	link           Link            // nil: outages inside the cluster only
	worker         Peer            // how its agents reach the rack's worker (Server)
	agents         AgentRunner     // nil: replicas run without agents
	inference      InferenceRunner // nil: managed-inference replicas run without agents
	agentGen       uint64          // generations of started agents
	disks          uint64          // root disks imported, each a new identity
	runCtx         context.Context // Run's: agents live within it
	// holdNextAgent arms simHoldAgent without a job: the next replica to
	// boot never has its agent connect.
	holdNextAgent bool

	// volBytes are the standalone volumes' sizes as last walked, by
	// cosmic.VolumeKey; volBytesMu guards it, apart from mu, as the walks
	// run without the cluster's lock.
	volBytesMu sync.Mutex
	volBytes   map[string]volumeBytes
}

type simNode struct {
	name string
	lost bool
}

type gpuKey struct {
	node  string
	index int
}

type replicaKey struct {
	job     string
	replica int
}

func (k replicaKey) String() string { return fmt.Sprintf("%s/%d", k.job, k.replica) }

func (k replicaKey) ref() worker.ReplicaRef {
	return worker.ReplicaRef{JobID: k.job, Replica: k.replica}
}

type simJob struct {
	job      cosmic.Job
	replicas map[int]*replica
}

// Deps are what a simulated rack is built on. Reporter is required; each
// of the others, left nil, turns its part off as said.
type Deps struct {
	// Reporter takes the replicas' reports to the ork.
	Reporter worker.Reporter
	// Logs takes the system log records (nil: discard).
	Logs joblog.Sink
	Log  *slog.Logger
	// Link is the rack's presence on the fabric, which simUnreachable
	// takes down and brings back (see Endpoint). Without one an outage is
	// played inside the cluster only: worker methods answer "unavailable"
	// and reports stop.
	Link Link
	// Agents runs the gpu-container replicas' instance agents (nil:
	// replicas run once their VMIs boot).
	Agents AgentRunner
	// Inference runs the managed-inference replicas' agents (nil: those
	// replicas run once their VMIs boot).
	Inference InferenceRunner
}

// New makes a simulated rack from cfg (zero fields take their defaults; it
// must Validate) on d. Server serves one on the fabric.
func New(cfg Config, d Deps) (*Cluster, error) {
	if d.Reporter == nil {
		return nil, errors.New("simcluster: a reporter is required")
	}
	cfg = cfg.withDefaults()
	rep, logs, log := d.Reporter, d.Logs, d.Log
	if logs == nil {
		logs = joblog.Discard
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Cluster{
		cfg:       cfg,
		rep:       rep,
		logs:      logs,
		log:       log.With("rack", cfg.Rack),
		retryMin:  worker.ReportRetryMin,
		retryMax:  worker.ReportRetryMax,
		ackGrace:  200 * time.Millisecond,
		wake:      make(chan struct{}, 1),
		outage:    make(chan struct{}, 1),
		byName:    make(map[string]*simNode),
		jobs:      make(map[string]*simJob),
		claims:    make(map[gpuKey]replicaKey),
		link:      d.Link,
		agents:    d.Agents,
		inference: d.Inference,
	}
	for i := range cfg.Nodes {
		n := &simNode{name: cfg.NodeName(i)}
		c.nodes = append(c.nodes, n)
		c.byName[n.name] = n
	}
	c.reports = worker.NewReportQueue(&c.mu)
	return c, nil
}

// Config is the cluster's configuration, defaults filled in.
func (c *Cluster) Config() Config { return c.cfg }

// RootDisk is the identity of the root disk a replica holds ("": none):
// a new import is a new identity, so a disk kept across a stop or a
// restart keeps it (the worker conformance suite checks it, as the
// Kubernetes worker's DataVolume UID).
func (c *Cluster) RootDisk(job string, replica int) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if j := c.jobs[job]; j != nil {
		if r := j.replicas[replica]; r != nil {
			return r.diskID
		}
	}
	return ""
}

// Run plays the rack until ctx is done: the replicas' lifecycles, report
// delivery and outages. It returns nil once its goroutines have stopped.
func (c *Cluster) Run(ctx context.Context) error {
	c.mu.Lock()
	c.runCtx = ctx
	c.mu.Unlock()
	defer c.stopAgents()
	var wg sync.WaitGroup
	wg.Go(func() { c.lifecycleLoop(ctx) })
	wg.Go(func() { c.reportLoop(ctx) })
	wg.Go(func() { c.outageLoop(ctx) })
	// Anything changed before Run is reported now.
	c.reports.Push()
	wg.Wait()
	return nil
}

// stopAgents stops every replica's agent (Run has ended).
func (c *Cluster) stopAgents() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, j := range c.jobs {
		for _, r := range j.replicas {
			c.stopAgent(r)
		}
	}
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// available refuses worker calls while the worker plays unreachable.
func (c *Cluster) available() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.availableLocked(time.Now())
}

func (c *Cluster) availableLocked(now time.Time) error {
	if now.Before(c.offlineUntil) {
		return fabric.Errorf(fabric.CodeUnavailable, "simulated rack %s is unreachable until %s", c.cfg.Rack, c.offlineUntil.Format(time.RFC3339))
	}
	return nil
}

// Capacity implements worker.Worker: every node, Ready unless lost, and
// the standalone volumes, listed after the cluster's lock is let go (a
// volume's size is a walk of its files).
func (c *Cluster) Capacity(ctx context.Context) (worker.Capacity, error) {
	c.mu.Lock()
	now := time.Now()
	if err := c.availableLocked(now); err != nil {
		c.mu.Unlock()
		return worker.Capacity{}, err
	}
	out := c.capacityLocked(now)
	held := c.heldVolumesLocked()
	c.mu.Unlock()
	out.Volumes = c.volumes(held, now)
	return out, nil
}

func (c *Cluster) capacityLocked(now time.Time) worker.Capacity {
	out := worker.Capacity{Rack: c.cfg.Rack, ObservedAt: now, Catalogue: Catalogue(c.cfg)}
	for _, n := range c.nodes {
		out.Nodes = append(out.Nodes, cosmic.Node{
			Name:        n.name,
			Rack:        c.cfg.Rack,
			GPUModel:    c.cfg.GPUModel,
			GPUs:        c.cfg.GPUsPerNode,
			Schedulable: true,
			Ready:       !n.lost,
			CPUMilli:    int64(c.cfg.CPUsPerNode) * 1000,
			MemoryMiB:   int64(c.cfg.MemoryGiBPerNode) * 1024,
		})
	}
	return out
}

// heldVolumesLocked maps each standalone volume (cosmic.VolumeKey) a
// replica's agent runs on to its job.
func (c *Cluster) heldVolumesLocked() map[string]string {
	held := map[string]string{}
	for _, id := range slices.Sorted(maps.Keys(c.jobs)) {
		j := c.jobs[id]
		for _, r := range j.replicas {
			if r.agent == nil {
				continue
			}
			for _, name := range j.job.Spec.StandaloneVolumes() {
				held[cosmic.VolumeKey(j.job.Team, name)] = id
			}
		}
	}
	return held
}

// DeleteVolume implements worker.Worker: it removes the volume's
// directory, unless a replica's agent runs on it.
func (c *Cluster) DeleteVolume(_ context.Context, p worker.VolumeRef) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.availableLocked(time.Now()); err != nil {
		return err
	}
	if c.cfg.VolumesDir == "" {
		return fmt.Errorf("%w: this rack keeps no standalone volumes", cosmic.ErrNotFound)
	}
	held := c.heldVolumesLocked()
	return worker.RemoveVolume(c.cfg.VolumesDir, "", p, func() string { return held[cosmic.VolumeKey(p.Team, p.Name)] })
}

// volumes are the standalone volumes the rack keeps: the directories of
// VolumesDir, each with the job whose replica's agent runs on it (held:
// until it has ended, as a kill's push may still run). Every call lists
// them; a volume's size is walked again once volumeBytesTTL has passed
// since its last walk, or when the job that has it changed (a job that
// ended left its files: its size is then current), so a heartbeat does
// not read every file of every volume.
func (c *Cluster) volumes(held map[string]string, now time.Time) []cosmic.StoredVolume {
	if c.cfg.VolumesDir == "" {
		return nil
	}
	vols, err := worker.ListVolumes(c.cfg.VolumesDir, "", 0)
	if err != nil {
		c.log.Warn("list standalone volumes", "err", err)
	}
	c.volBytesMu.Lock()
	defer c.volBytesMu.Unlock()
	seen := make(map[string]volumeBytes, len(vols))
	for i := range vols {
		key := cosmic.VolumeKey(vols[i].Team, vols[i].Name)
		vols[i].Job = held[key]
		b, ok := c.volBytes[key]
		if !ok || b.job != vols[i].Job || now.Sub(b.at) >= volumeBytesTTL || now.Before(b.at) {
			b = volumeBytes{n: datasync.DirBytes(filepath.Join(c.cfg.VolumesDir, vols[i].Team, vols[i].Name)), at: now, job: vols[i].Job}
		}
		vols[i].Bytes = b.n
		seen[key] = b
	}
	c.volBytes = seen
	return vols
}

// volumeBytesTTL is how long a standalone volume's walked size stands.
const volumeBytesTTL = 30 * time.Second

type volumeBytes struct {
	n   int64
	at  time.Time
	job string // the job that had the volume then
}

// Catalogue is what a simulated rack of cfg runs: any image, both job
// types, the simulated runtimes (vLLM, Parakeet) and llama.cpp where its
// host runs the real engine (cfg.LlamaCPP), in VMs as large as their node.
func Catalogue(cfg Config) *cosmic.Catalogue {
	c := &cosmic.Catalogue{JobTypes: []cosmic.JobType{cosmic.TypeGPUContainer, cosmic.TypeManagedInference},
		Runtimes: []cosmic.Runtime{cosmic.RuntimeVLLM, cosmic.RuntimeParakeet}}
	if cfg.LlamaCPP {
		c.Runtimes = append(c.Runtimes, cosmic.RuntimeLlamaCPP)
	}
	return c
}

// Apply implements worker.Worker. For each reservation whose replica is not
// already alive it starts the replica's lifecycle; a replica alive on the
// same reservation is left alone. A reservation that the simulated hardware
// cannot honour (an unknown or lost node, a GPU index beyond the node, a
// GPU another replica holds) fails its replica with vmi_unschedulable, as a
// real cluster would refuse the VMI: no GPU is ever held twice.
//
// Errors: bad_request for a malformed request (another job's or rack's
// reservation, no GPUs); conflict for a live replica given a different
// reservation, or one being deleted.
func (c *Cluster) Apply(ctx context.Context, p worker.ApplyParams) error {
	if err := worker.CheckApply(p, c.cfg.Rack); err != nil {
		return err
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if err := c.availableLocked(now); err != nil {
		return err
	}
	j := c.jobs[p.Job.ID]
	if j == nil {
		if len(p.Reservations) == 0 {
			return nil
		}
		j = &simJob{replicas: make(map[int]*replica)}
		c.jobs[p.Job.ID] = j
	}
	j.job = p.Job
	var errs []error
	for _, res := range p.Reservations {
		r := j.replicas[res.Replica]
		switch {
		case r == nil:
			r = &replica{key: replicaKey{job: p.Job.ID, replica: res.Replica}}
			j.replicas[res.Replica] = r
		case r.phase == phaseDelete:
			errs = append(errs, fmt.Errorf("replica %d is being deleted", res.Replica))
			continue
		case r.phase == phaseShutdown:
			errs = append(errs, fmt.Errorf("replica %d is powering off (its agent pushes the job's volumes); apply it again once it has stopped", res.Replica))
			continue
		case r.holdsGPUs():
			if !sameReservation(r.res, res) {
				errs = append(errs, fmt.Errorf("replica %d already runs on %s, not %s", res.Replica, describeAllocs(r.res.Nodes), describeAllocs(res.Nodes)))
			}
			continue
		case r.state == cosmic.StateFailed && p.Job.UpdatedAt.Before(r.failedAt):
			// A late Apply of the run that failed (the ork's heartbeat
			// applies what it last saw missing): the ork, having taken the
			// failure, freed the GPUs, and a new run comes with the job as
			// placed again since. Started, it would hold GPUs given to
			// another job. (The ork's clock and the rack's are this
			// process's, or close: a simulator's assumption.)
			continue
		}
		g := cosmic.ShareOf(p.Job.Spec, res)
		r.given = &g
		c.start(j, r, res, now)
	}
	signal(c.wake)
	if len(errs) > 0 {
		return fabric.Errorf(codeConflict, "apply %s: %v", p.Job.ID, errors.Join(errs...))
	}
	return nil
}

// Stop implements worker.Worker (kill): the replicas' VMIs are deleted and
// their GPUs released; their root disks are kept, so a later Apply boots
// from them without importing again. A stopped replica is reported in state
// stopped, not Gone: its disk still exists. Stopping a job or replica the
// cluster does not hold succeeds.
func (c *Cluster) Stop(ctx context.Context, ref worker.ReplicaRef) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if err := c.availableLocked(now); err != nil {
		return err
	}
	j := c.jobs[ref.JobID]
	if j == nil {
		return nil
	}
	for _, r := range selectReplicas(j, ref.Replica) {
		if r.state == cosmic.StateStopped || r.phase == phaseDelete || r.phase == phaseShutdown {
			continue
		}
		if !j.job.Spec.PushesVolumes() || !c.shutDown(r, phaseIdle, now) {
			c.stop(j, r, now)
		}
	}
	signal(c.wake)
	return nil
}

// Restart implements worker.Worker: each replica holding GPUs has its VMIs
// replaced (restarting, then schedule and boot, then running), keeping its
// disk and GPUs. Failed and stopped replicas hold no GPUs: the ork applies
// them again instead. Naming one of them is a conflict; with AllReplicas they
// are skipped. An unknown job or replica is not_found.
func (c *Cluster) Restart(ctx context.Context, ref worker.ReplicaRef) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if err := c.availableLocked(now); err != nil {
		return err
	}
	j := c.jobs[ref.JobID]
	if j == nil {
		return fabric.Errorf(fabric.CodeNotFound, "restart: no job %s on rack %s", ref.JobID, c.cfg.Rack)
	}
	rs := selectReplicas(j, ref.Replica)
	if len(rs) == 0 {
		return fabric.Errorf(fabric.CodeNotFound, "restart: job %s has no replica %d on rack %s", ref.JobID, ref.Replica, c.cfg.Rack)
	}
	for _, r := range rs {
		if !r.holdsGPUs() || r.phase == phaseDelete || r.phase == phaseShutdown {
			if ref.Replica != worker.AllReplicas {
				return fabric.Errorf(codeConflict, "restart: replica %d of job %s is %s and holds no GPUs; apply it again", r.key.replica, ref.JobID, r.stateName())
			}
			continue
		}
		c.restart(j, r, now)
	}
	signal(c.wake)
	return nil
}

// Delete implements worker.Worker: the replicas' VMIs and disks are
// deleted and each is reported Gone. Without Force a replica with VMIs shuts
// down gracefully for one step first (keeping its GPUs until then); with
// Force it goes at once. Deleting what the cluster does not hold succeeds
// (and a named replica is reported Gone again).
func (c *Cluster) Delete(ctx context.Context, p worker.DeleteParams) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if err := c.availableLocked(now); err != nil {
		return err
	}
	j := c.jobs[p.JobID]
	if j == nil {
		if p.Replica != worker.AllReplicas {
			c.markGone(replicaKey{job: p.JobID, replica: p.Replica})
		}
		return nil
	}
	rs := selectReplicas(j, p.Replica)
	if len(rs) == 0 && p.Replica != worker.AllReplicas {
		c.markGone(replicaKey{job: p.JobID, replica: p.Replica})
	}
	for _, r := range rs {
		if r.phase == phaseShutdown {
			// A kill's power-off under way (its agent pushes the job's
			// volumes): the delete, forced or not, follows it.
			if r.then != phaseDelete {
				r.then = phaseDelete
				c.record(r, now, "delete", true, "deleting %s and the root disk once they have powered off", describeVMIs(r.vmis))
			}
			continue
		}
		if p.Force || len(r.vmis) == 0 {
			c.remove(j, r, p.Force, now)
			continue
		}
		if r.phase == phaseDelete {
			continue
		}
		c.record(r, now, "delete", true, "shutting down %s gracefully before deleting them and the root disk", describeVMIs(r.vmis))
		if j.job.Spec.PushesVolumes() && c.shutDown(r, phaseDelete, now) {
			continue
		}
		r.phase, r.due = phaseDelete, now.Add(c.cfg.Step.D())
	}
	signal(c.wake)
	return nil
}

// Jobs implements worker.Worker: every replica the cluster holds (deleted
// ones excepted), by job ID and replica index.
func (c *Cluster) Jobs(ctx context.Context) ([]worker.JobReport, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.availableLocked(time.Now()); err != nil {
		return nil, err
	}
	return c.jobsLocked(), nil
}

func (c *Cluster) jobsLocked() []worker.JobReport {
	out := []worker.JobReport{}
	for _, id := range slices.Sorted(maps.Keys(c.jobs)) {
		j := c.jobs[id]
		jr := worker.JobReport{JobID: id}
		for _, i := range slices.Sorted(maps.Keys(j.replicas)) {
			jr.Replicas = append(jr.Replicas, c.stamped(j.replicas[i]))
		}
		out = append(out, jr)
	}
	return out
}

func selectReplicas(j *simJob, which int) []*replica {
	if which == worker.AllReplicas {
		out := slices.Collect(maps.Values(j.replicas))
		slices.SortFunc(out, func(a, b *replica) int { return cmp.Compare(a.key.replica, b.key.replica) })
		return out
	}
	if r := j.replicas[which]; r != nil {
		return []*replica{r}
	}
	return nil
}

func sameReservation(a, b cosmic.Reservation) bool {
	return a.Rack == b.Rack && slices.EqualFunc(a.Nodes, b.Nodes, func(x, y cosmic.NodeAlloc) bool {
		return x.Node == y.Node && slices.Equal(x.GPUs, y.GPUs)
	})
}

// ---- reports and records

// mark stamps r's current report and queues it for the ork.
func (c *Cluster) mark(r *replica) {
	r.marked = r.report()
	r.marked.Observed = worker.Observe()
	c.reports.Set(r.key.ref(), r.marked)
}

// stamped is r's current report with the stamp of the mark that queued it;
// a change that was not marked (a bug) is marked now, so that the ork,
// which drops reports older than one it applied, still takes it.
func (c *Cluster) stamped(r *replica) worker.ReplicaReport {
	rep := r.report()
	rep.Observed = r.marked.Observed
	if !reflect.DeepEqual(rep, r.marked) {
		c.mark(r)
		rep = r.marked
	}
	return rep
}

func (c *Cluster) markGone(k replicaKey) { c.reports.SetGone(k.ref()) }

func (c *Cluster) markCapacity() { c.reports.SetCapacity() }

// markAll makes the whole state undelivered: after an outage.
func (c *Cluster) markAll() {
	for _, j := range c.jobs {
		for _, r := range j.replicas {
			c.mark(r)
		}
	}
	c.markCapacity()
}

// record writes a system log record of r.
func (c *Cluster) record(r *replica, now time.Time, step string, ok bool, format string, args ...any) {
	c.logs.Emit(joblog.Record{
		Time:    now,
		JobID:   r.key.job,
		Replica: r.key.replica,
		Source:  joblog.SourceSystem,
		Stream:  c.cfg.Rack,
		Step:    step,
		OK:      joblog.Bool(ok),
		Line:    fmt.Sprintf(format, args...),
	})
}
