// Package ork is cosmicac-wrk-ork: the rack registry and its capacity, the
// admission queue, GPU reservations and placement, routing of work to the
// racks' workers, and the aggregation of their reports into job statuses.
//
// The ork is the only writer of jobs, reservations and racks. Every change
// that must agree with another (a reservation and the job's state) is one
// store transaction, and the in-memory placement snapshot is changed only
// after that transaction commits, so a crash at any point leaves the store
// consistent and a restart rebuilds the snapshot from it (Start). Workers are
// driven level-triggered: the ork tells them the desired state (idempotent
// Apply/Stop/Restart/Delete) and reconciles what they report, on every push
// and on a heartbeat that also pulls their whole state.
//
// Importers: the CLI wiring. It imports the domain, placement, the worker
// and orkapi contracts, and the fabric.
package ork

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/cosmicac/cosmicac/internal/config"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/joblog"
	"github.com/cosmicac/cosmicac/internal/ork/fairq"
	"github.com/cosmicac/cosmicac/internal/ork/placement"
	"github.com/cosmicac/cosmicac/internal/store"
	"github.com/cosmicac/cosmicac/internal/trust"
	"github.com/cosmicac/cosmicac/internal/worker"
)

// Config configures the ork; it is also the ork section of wrk-ork's
// --config file (durations as "2s").
type Config struct {
	// Heartbeat is how often each worker is asked for its capacity and jobs.
	Heartbeat config.Duration `json:"heartbeat"`
	// WorkerTimeout bounds one call to a worker.
	WorkerTimeout config.Duration `json:"workerTimeout"`
	// PlacementPolicy ranks nodes in locations whose racks name no policy
	// (cosmic.PolicyBestFit or cosmic.PolicyFGD; empty:
	// placement.DefaultPolicy).
	PlacementPolicy string `json:"placementPolicy,omitempty"`
	// MaxJobsPerTeam bounds the jobs one team holds, in any state (0: no
	// bound; DefaultConfig: 1000): a create beyond it is refused
	// forbidden, so that one team cannot fill the store, the queue and
	// every job list for all. A stopped or failed job counts until it is
	// deleted.
	MaxJobsPerTeam int `json:"maxJobsPerTeam,omitempty"`
	// AutoscaleEvery is how often the autoscaler sizes the autoscaled
	// jobs to the proxies' load reports (default 1s).
	AutoscaleEvery config.Duration `json:"autoscaleEvery,omitempty"`
	// DrainTimeout bounds how long the ork waits for a drained replica's
	// requests to end (a replica a scale-down takes away or a rollout
	// replaces) before it deletes it anyway (default 2m).
	DrainTimeout config.Duration `json:"drainTimeout,omitempty"`
	// RolloutDeadline is how long a rollout may go without a step (a
	// replica of the new spec that waits for GPUs or quota, say) before
	// it rolls back, or, rolling back, is abandoned (default 10m).
	RolloutDeadline config.Duration `json:"rolloutDeadline,omitempty"`
	// GPUMeterEvery is how often the GPUs each job holds are sampled into
	// the usage store as GPU-seconds (default 10s, whole seconds; gpumeter.go).
	GPUMeterEvery config.Duration `json:"gpuMeterEvery,omitempty"`
	// IsolationTimeout, when not zero, makes a leader that reached peers
	// in its term and then reaches none (no fabric connection, no rack's
	// worker answering) for this long yield its lease, so that a follower
	// that reaches them leads (Lead; docs/store.md). Orks that share a
	// database set it; 0 (the default of one ork alone) never yields.
	IsolationTimeout config.Duration `json:"isolationTimeout,omitempty"`
}

// DefaultPlacementPolicy is the placement policy of a location when
// neither its racks nor Config.PlacementPolicy name one.
const DefaultPlacementPolicy = placement.DefaultPolicy

// DefaultConfig returns the production defaults.
func DefaultConfig() Config {
	return Config{Heartbeat: config.Duration(2 * time.Second), WorkerTimeout: config.Duration(10 * time.Second), MaxJobsPerTeam: 1000}
}

// Validate reports every problem of the config.
func (c Config) Validate() error {
	var errs []error
	if c.Heartbeat <= 0 {
		errs = append(errs, errors.New("heartbeat must be positive"))
	}
	if c.WorkerTimeout <= 0 {
		errs = append(errs, errors.New("worker timeout must be positive"))
	}
	if c.AutoscaleEvery < 0 || c.DrainTimeout < 0 || c.RolloutDeadline < 0 {
		errs = append(errs, errors.New("autoscaleEvery, drainTimeout and rolloutDeadline must not be negative (0: their defaults)"))
	}
	if c.IsolationTimeout < 0 {
		errs = append(errs, errors.New("isolationTimeout must not be negative (0: never yield)"))
	}
	if c.GPUMeterEvery < 0 || c.GPUMeterEvery.D()%time.Second != 0 {
		errs = append(errs, errors.New("gpuMeterEvery must be whole seconds, not negative (0: its default)"))
	}
	if c.MaxJobsPerTeam < 0 {
		errs = append(errs, errors.New("maxJobsPerTeam must not be negative (0: no bound)"))
	}
	if c.PlacementPolicy != "" && !cosmic.ValidPolicy(c.PlacementPolicy) {
		errs = append(errs, fmt.Errorf("placement policy %q: want %s or %s", c.PlacementPolicy, cosmic.PolicyBestFit, cosmic.PolicyFGD))
	}
	return errors.Join(errs...)
}

// Dialer returns the Worker of a rack given its worker's key and addresses.
type Dialer func(key fabric.PublicKey, addrs []string) worker.Worker

// FabricDialer reaches workers over a fabric node. The node's policy admits
// them once the ork binds their keys to their racks (SetKeyring).
func FabricDialer(n *fabric.Node) Dialer {
	return func(key fabric.PublicKey, addrs []string) worker.Worker {
		n.AddAddrs(key, addrs...)
		return worker.NewClient(n, key)
	}
}

// Ork is the orchestrator.
type Ork struct {
	cfg Config
	// usage is where GPU metering records (the store, when it keeps
	// usage; nil: none).
	usage usageRecorder
	st    Store
	dial  Dialer
	log   *slog.Logger
	now   func() time.Time

	mu     sync.Mutex
	racks  map[string]*rackState
	snap   *placement.Snapshot
	fq     *fairq.Queue          // the queue's order, the teams' quotas and held GPUs
	queued map[string]cosmic.Job // jobs in the queue, by ID
	wait   map[string]waitInfo   // job ID → what it waits for, as of the last pass
	// nodeModel is the GPU model of each node (rack + "\x00" + node),
	// and jobTeam the team of each job holding GPUs: what a reservation
	// counts against (rebuildLocked, holdLocked).
	nodeModel map[string]string
	jobTeam   map[string]string
	// jobVolumes are the standalone volumes (cosmic.VolumeKey) of each
	// job holding GPUs that mounts any (volumes.go).
	jobVolumes map[string][]string
	// volumesDeleting are the standalone volumes (cosmic.VolumeKey) a
	// rack is asked to delete now: no job that mounts one is placed.
	volumesDeleting map[string]bool
	// poweringOff are the stopped jobs that keep GPUs while their VMs
	// power off, each with when they are released at the latest
	// (poweroff.go).
	poweringOff map[string]time.Time
	kick        chan struct{} // asks the loop for a scheduling pass
	book        peerBook      // the bound keys (watchPeers)
	feed        *changeFeed   // the jobs' version (watchJobs)
	// inflight counts the Applies on their way to workers (KillJob waits).
	inflight applies
	// The autoscaler's (autoscale.go): the proxies' last load reports,
	// its memory of each job, and the kick of a report with requests
	// waiting.
	loads   map[fabric.PublicKey]proxyLoad
	scalers map[string]scaler
	// autoscaled are the autoscaled jobs the autoscaler follows, as of
	// its last store list (at scaledListed) and the creates since.
	autoscaled   map[string]bool
	scaledListed time.Time
	// rolling are the jobs rolling out an update (rollout.go), and
	// drainingJobs those draining a replica (drain.go).
	rolling      map[string]bool
	drainingJobs map[string]bool
	scaleKick    chan struct{}
	records      joblog.Sink
	metrics      orkMetrics

	bgMu     sync.Mutex // orders goBackground's Add before Run's Wait
	stopping bool
	wg       sync.WaitGroup
}

type rackState struct {
	StoredRack
	w         worker.Worker
	reachable bool
	seen      bool // answered at least once since the ork started
	// problem is what the worker last said stops the rack from taking
	// jobs (worker.Capacity.Problem), shown with the rack.
	problem *cosmic.Reason
	// note is the worker's worker.Capacity.Note, shown with the rack.
	note string
	// volumes are the standalone volumes the rack keeps
	// (worker.Capacity.Volumes), as of its last report.
	volumes []cosmic.StoredVolume
	// volumesGone are the standalone volumes (cosmic.VolumeKey) the ork
	// deleted on the rack: a report listed before the delete, arriving
	// after it, does not bring one back; the first list without it, or
	// a job placed that mounts it (it is made anew), ends the entry.
	volumesGone map[string]bool
	// catalogue is the worker's worker.Capacity.Catalogue: what the rack
	// runs (nil until it reports one). CreateJob checks jobs against it.
	catalogue *cosmic.Catalogue
	// observedAt is when the worker observed the nodes last applied.
	observedAt time.Time
	// observed holds the stamp of each replica's last applied report: an
	// older one (a late answer) is dropped (worker.ReplicaReport.Observed).
	observed map[worker.ReplicaRef]worker.Observation
}

// waitInfo is what a queued job waits for: GPUs to free up (no_capacity)
// or its team's quota (team_quota).
type waitInfo struct {
	what   string
	reason cosmic.Reason
}

func queueKey(s cosmic.Spec) fairq.Key {
	return fairq.Key{Location: s.Location, GPUModel: s.Resources.GPUModel}
}

// Deps are what an ork is built on. Store and Dial are required.
type Deps struct {
	// Store keeps racks, jobs, reservations and quotas (behind a lease's
	// fence where orks share a database).
	Store Store
	// Dial reaches a rack's worker (FabricDialer).
	Dial Dialer
	// Keys, when set, is the keyring of the ork's own policy: its racks'
	// workers are bound there as they are registered and removed.
	Keys *trust.Keyring
	// Records, when set, takes the ork's system records of jobs (its
	// autoscaler's decisions): a joblog.Forwarder to wrk-monitor.
	Records joblog.Sink
	// Log is nil: discard.
	Log *slog.Logger
}

// New makes an ork of cfg on d. Call Start before use.
func New(cfg Config, d Deps) (*Ork, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("ork config: %w", err)
	}
	if d.Store == nil || d.Dial == nil {
		return nil, errors.New("ork: a store and a dialer are required")
	}
	st, dial, log := d.Store, d.Dial, d.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.AutoscaleEvery == 0 {
		cfg.AutoscaleEvery = config.Duration(time.Second)
	}
	if cfg.DrainTimeout == 0 {
		cfg.DrainTimeout = config.Duration(2 * time.Minute)
	}
	if cfg.RolloutDeadline == 0 {
		cfg.RolloutDeadline = config.Duration(10 * time.Minute)
	}
	if cfg.GPUMeterEvery == 0 {
		cfg.GPUMeterEvery = config.Duration(10 * time.Second)
	}
	usage, _ := d.Store.(usageRecorder)
	records := d.Records
	if records == nil {
		records = joblog.Discard
	}
	book := newPeerBook()
	book.ring = d.Keys
	feed := newChangeFeed()
	return &Ork{
		cfg: cfg, st: feedStore{Store: st, feed: feed}, feed: feed, dial: dial, log: log, now: time.Now, usage: usage,
		racks:           make(map[string]*rackState),
		fq:              fairq.New(),
		queued:          make(map[string]cosmic.Job),
		wait:            make(map[string]waitInfo),
		nodeModel:       make(map[string]string),
		jobTeam:         make(map[string]string),
		jobVolumes:      make(map[string][]string),
		poweringOff:     make(map[string]time.Time),
		volumesDeleting: make(map[string]bool),
		kick:            make(chan struct{}, 1),
		book:            book,
		loads:           make(map[fabric.PublicKey]proxyLoad),
		scalers:         make(map[string]scaler),
		autoscaled:      make(map[string]bool),
		rolling:         make(map[string]bool),
		drainingJobs:    make(map[string]bool),
		scaleKick:       make(chan struct{}, 1),
		records:         records,
		metrics:         newOrkMetrics(),
	}, nil
}

// Start loads racks, reservations and the queue from the store and rebuilds
// the placement snapshot. Then Run keeps it current.
func (o *Ork) Start(ctx context.Context) error {
	racks, err := o.st.Racks(ctx)
	if err != nil {
		return fmt.Errorf("load racks: %w", err)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, r := range racks {
		key, err := fabric.ParsePublicKey(r.Rack.WorkerKey)
		if err != nil {
			return fmt.Errorf("rack %s: %w", r.Rack.ID, err)
		}
		o.racks[r.Rack.ID] = &rackState{StoredRack: r, w: o.dial(key, r.WorkerAddrs)}
		o.bindRackLocked(r.Rack.ID, r.Rack.WorkerKey)
	}
	if err := o.loadQuotasLocked(ctx); err != nil {
		return err
	}
	if err := o.rebuildLocked(ctx); err != nil {
		return err
	}
	if err := o.loadBoundLocked(ctx); err != nil {
		return err
	}
	if err := o.loadRollingLocked(ctx); err != nil {
		return err
	}
	// The queue: jobs still creating (admission was cut short) or queued,
	// and live jobs with a replica queued (restarted or deleted on its own
	// without GPUs), in the order they entered the queue.
	jobs, err := listAll(ctx, o.st, store.ListJobsQuery{States: []cosmic.State{cosmic.StateCreating, cosmic.StateQueued}, Sort: store.SortCreatedAt, Order: store.OrderAsc})
	if err != nil {
		return fmt.Errorf("load queue: %w", err)
	}
	live, err := listAll(ctx, o.st, store.ListJobsQuery{States: []cosmic.State{cosmic.StatePending, cosmic.StateStarting,
		cosmic.StateRunning, cosmic.StateDegraded, cosmic.StateRestarting, cosmic.StateUnknown}, Sort: store.SortCreatedAt, Order: store.OrderAsc})
	if err != nil {
		return fmt.Errorf("load queue: %w", err)
	}
	for _, j := range live {
		if slices.ContainsFunc(j.Status.Replicas, func(r cosmic.ReplicaStatus) bool { return r.State == cosmic.StateQueued }) {
			jobs = append(jobs, j)
		}
	}
	slices.SortStableFunc(jobs, func(a, b cosmic.Job) int { return queuedAt(a).Compare(queuedAt(b)) })
	for _, j := range jobs {
		o.enqueueLocked(j)
	}
	return nil
}

// queuedAt is when the job last entered the queue.
func queuedAt(j cosmic.Job) time.Time {
	if at, ok := j.EnteredAt(cosmic.StateQueued); ok {
		return at
	}
	return j.CreatedAt
}

// rebuildLocked makes a new snapshot from the racks' nodes and the store's
// reservations.
func (o *Ork) rebuildLocked(ctx context.Context) error {
	res, err := o.st.Reservations(ctx)
	if err != nil {
		return fmt.Errorf("load reservations: %w", err)
	}
	var (
		racks     []cosmic.Rack
		nodes     []cosmic.Node
		overheads = map[string]cosmic.VMOverhead{}
	)
	for _, r := range o.racks {
		racks = append(racks, r.Rack)
		overheads[r.Rack.ID] = r.Overhead
		for _, n := range r.Nodes {
			n.Rack = r.Rack.ID
			nodes = append(nodes, n)
		}
	}
	snap, err := placement.NewSnapshot(racks, nodes, res, placement.WithOverheads(overheads),
		placement.WithDefaultPolicy(cmp.Or(o.cfg.PlacementPolicy, placement.DefaultPolicy)))
	if err != nil {
		return fmt.Errorf("rebuild placement snapshot: %w", err)
	}
	o.snap = snap
	// The jobs waiting are in the new snapshot's job-size mix as in the
	// old one's.
	for _, j := range o.queued {
		snap.Want(j, o.waitingLocked(j))
	}
	// The fair queue counts the reservations again, against the teams of
	// their jobs, and takes the fleet's capacity.
	capacity := map[fairq.Key]int{}
	clear(o.nodeModel)
	for _, r := range o.racks {
		for _, n := range r.Nodes {
			model := cmp.Or(n.GPUModel, r.Rack.GPUModel)
			o.nodeModel[r.Rack.ID+"\x00"+n.Name] = model
			capacity[fairq.Key{Location: r.Rack.Location, GPUModel: model}] += n.GPUs
			capacity[fairq.Key{Location: r.Rack.Location}] += n.GPUs
		}
	}
	o.fq.SetCapacity(capacity)
	o.fq.ReleaseAll()
	holding := map[string]bool{}
	for _, r := range snap.Reservations() {
		holding[r.JobID] = true
		team, ok := o.jobTeam[r.JobID]
		if !ok {
			j, err := o.st.GetJob(ctx, r.JobID)
			if err != nil {
				return fmt.Errorf("rebuild placement snapshot: team of job %s: %w", r.JobID, err)
			}
			team = j.Team
			o.holdVolumesLocked(j)
		}
		o.holdLocked(team, r)
	}
	maps.DeleteFunc(o.jobTeam, func(id, _ string) bool { return !holding[id] })
	maps.DeleteFunc(o.jobVolumes, func(id string, _ []string) bool { return !holding[id] })
	return nil
}

// holdLocked counts reservation r of a job of team in the fair queue,
// against the location and GPU model of its nodes.
func (o *Ork) holdLocked(team string, r cosmic.Reservation) {
	rs := o.racks[r.Rack]
	if rs == nil || len(r.Nodes) == 0 {
		return // on a rack no longer listed: it claims nothing
	}
	o.jobTeam[r.JobID] = team
	o.fq.Hold(r.JobID, r.Replica, team, rs.Rack.Location, o.modelOfLocked(r), r.Count())
}

// modelOfLocked is the GPU model of the nodes of a reservation (all of one
// rack and model).
func (o *Ork) modelOfLocked(r cosmic.Reservation) string {
	if m, ok := o.nodeModel[r.Rack+"\x00"+r.Nodes[0].Node]; ok {
		return m
	}
	if rs := o.racks[r.Rack]; rs != nil {
		return rs.Rack.GPUModel
	}
	return ""
}

// releaseHeldLocked uncounts a job's replica (AllReplicas: every one)
// from the fair queue and the holders of standalone volumes, after the
// snapshot released it.
func (o *Ork) releaseHeldLocked(jobID string, replica int) {
	o.fq.Release(jobID, replica)
	if replica < 0 {
		delete(o.jobTeam, jobID) // else pruned by the next rebuild
	}
	if _, ok := o.snap.Reserved(jobID, 0); replica < 0 || !ok {
		// A job with standalone volumes has one replica (a gpu-container
		// job's): released, it holds them no more.
		delete(o.jobVolumes, jobID)
	}
}

// Run schedules and heartbeats the workers until ctx ends.
func (o *Ork) Run(ctx context.Context) error {
	o.reconcileAll(ctx)
	o.enforceDeadlines(ctx)
	o.releasePoweredOff(ctx)
	o.schedule(ctx)
	tick := time.NewTicker(o.cfg.Heartbeat.D())
	defer tick.Stop()
	scale := time.NewTicker(o.cfg.AutoscaleEvery.D())
	defer scale.Stop()
	meter := time.NewTicker(o.cfg.GPUMeterEvery.D())
	defer meter.Stop()
	defer func() {
		// No background work starts once Run is ending (a report handled
		// meanwhile leaves its repair to the next heartbeat), so that Wait
		// never races an Add.
		o.bgMu.Lock()
		o.stopping = true
		o.bgMu.Unlock()
		o.wg.Wait()
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-o.kick:
			o.schedule(ctx)
		case <-scale.C:
			o.autoscale(ctx)
			o.advanceRollouts(ctx)
			o.advanceDrains(ctx)
		case <-o.scaleKick:
			o.autoscale(ctx)
		case now := <-meter.C:
			o.meterGPUs(ctx, now)
		case <-tick.C:
			o.reconcileAll(ctx)
			o.enforceDeadlines(ctx)
			o.releasePoweredOff(ctx)
			o.schedule(ctx)
		}
	}
}

// poke asks Run for a scheduling pass.
func (o *Ork) poke() {
	select {
	case o.kick <- struct{}{}:
	default:
	}
}

// goBackground runs f on a goroutine that Run waits for, unless Run is
// ending.
func (o *Ork) goBackground(f func()) {
	o.bgMu.Lock()
	defer o.bgMu.Unlock()
	if o.stopping {
		return
	}
	o.wg.Add(1)
	go func() {
		defer o.wg.Done()
		f()
	}()
}

func (o *Ork) workerCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, o.cfg.WorkerTimeout.D())
}

// ---- queue and placement

// errStalePlacement is a placement of a replica the job no longer has.
var errStalePlacement = errors.New("the queued job is older than the stored one")

// requeueLocked brings the queue in line with job j as it is now: queued
// (its copy replaced, keeping its place) while a replica within its count
// waits to be placed, else out of the queue. Every change of a job's
// replica count calls it, so that the queue never places a replica the
// job no longer has.
func (o *Ork) requeueLocked(j cosmic.Job) {
	for i := range j.Spec.Replicas() {
		if _, held := o.snap.Reserved(j.ID, i); !held && i < len(j.Status.Replicas) && j.Status.Replicas[i].State == cosmic.StateQueued {
			o.enqueueLocked(j)
			return
		}
	}
	o.dequeueLocked(j.ID)
}

// holdsAnyLocked says whether a replica of job holds GPUs.
func (o *Ork) holdsAnyLocked(job cosmic.Job) bool {
	for i := range max(job.Spec.Replicas(), len(job.Status.Replicas)) {
		if _, held := o.snap.Reserved(job.ID, i); held {
			return true
		}
	}
	return false
}

// enqueueLocked queues j (or updates it, keeping its place) with the GPUs
// its replicas without a reservation need.
func (o *Ork) enqueueLocked(j cosmic.Job) {
	o.queued[j.ID] = j
	waiting := o.waitingLocked(j)
	// The replicas waiting are part of the demand fgd keeps room for.
	o.snap.Want(j, waiting)
	o.fq.Push(fairq.Job{ID: j.ID, Team: j.Team, Key: queueKey(j.Spec), GPUs: waiting * j.Spec.GPUsPerReplica()})
}

// waitingLocked is how many of j's replicas hold no reservation.
func (o *Ork) waitingLocked(j cosmic.Job) int {
	n := 0
	for i := range j.Spec.Replicas() {
		if _, held := o.snap.Reserved(j.ID, i); !held {
			n++
		}
	}
	return n
}

func (o *Ork) dequeueLocked(id string) {
	if _, ok := o.queued[id]; !ok {
		return
	}
	delete(o.queued, id)
	o.snap.Unwant(id)
	delete(o.wait, id)
	o.fq.Remove(id)
}

// positionLocked is a queued job's 1-based place among the jobs of its
// queue, in the order the fair queue would place them (fairq.Position),
// and what it waits for.
func (o *Ork) positionLocked(id string) (int, waitInfo) {
	pos := o.fq.Position(id)
	if pos == 0 {
		return 0, waitInfo{}
	}
	return pos, o.wait[id]
}

// annotate fills the fields the ork computes on read: queue position, what
// the job waits for and, while its team's quota or another job's hold of
// a standalone volume holds it back, the reason (team_quota,
// volume_in_use).
func (o *Ork) annotate(j cosmic.Job) cosmic.Job {
	if j.Status.State != cosmic.StateQueued {
		return j
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	pos, w := o.positionLocked(j.ID)
	j.Status.QueuePosition, j.Status.WaitingFor = pos, w.what
	if w.reason.Code == cosmic.ReasonTeamQuota || w.reason.Code == cosmic.ReasonVolumeInUse {
		r := w.reason
		j.Status.Reason, j.Status.Message = &r, r.Message
	}
	return j
}

type applyWork struct {
	rack string
	p    worker.ApplyParams
	// done ends the Apply's count in Ork.inflight (schedule's Applies).
	done func()
}

// schedule places queued jobs in the fair queue's order (fairq): per
// (location, GPU model) queue, the oldest job of the team furthest below
// its share, teams over quota skipped; the job chosen that does not fit
// now reserves its queue, blocking the jobs behind it.
func (o *Ork) schedule(ctx context.Context) {
	o.mu.Lock()
	var (
		work   []applyWork
		capped []cappedJob
		stale  []string
	)
	clear(o.wait)
	o.fq.Pass(func(fj fairq.Job) fairq.Outcome {
		job := o.queued[fj.ID]
		vu := o.volumeUseLocked(job)
		if vu.busy != nil {
			// Another job holds a volume: this one waits without holding
			// up the jobs behind it, its team's included, which need no
			// such thing.
			o.wait[job.ID] = waitInfo{what: vu.waitingFor, reason: *vu.busy}
			return fairq.Defer
		}
		var d placement.Decision
		if vu.impossible != nil {
			d = placement.Impossible{Reason: *vu.impossible}
		} else {
			d = placement.PlaceOn(o.snap, job, vu.rack)
		}
		switch d := d.(type) {
		case placement.Placed:
			if job.Spec.Resources.GPUModel == "" {
				// Placement chose the model: its quota has a say too.
				if b, ok := o.admitsLocked(job, d.Reservations); !ok {
					o.wait[job.ID] = quotaWait(b)
					return fairq.Skip
				}
			}
			j, err := o.commitPlacementLocked(ctx, job, d.Reservations)
			if errors.Is(err, errStalePlacement) {
				stale = append(stale, job.ID)
				return fairq.Skip
			}
			if err != nil {
				o.log.Error("commit placement", "job_id", job.ID, "err", err)
				return fairq.Stop
			}
			o.dequeueLocked(job.ID)
			byRack := map[string][]cosmic.Reservation{}
			for _, r := range d.Reservations {
				byRack[r.Rack] = append(byRack[r.Rack], r)
			}
			for rack, rs := range byRack {
				work = append(work, applyWork{rack: rack, p: worker.ApplyParams{Job: j, Reservations: rs}, done: o.inflight.start(j.ID)})
			}
			return fairq.Placed
		case placement.Wait:
			o.wait[job.ID] = waitInfo{what: d.WaitingFor, reason: d.Reason}
			if vu.rack != "" {
				return fairq.Defer // it waits for one rack: the others' GPUs may go to the jobs behind it
			}
			return fairq.Wait
		case placement.Impossible:
			if o.holdsAnyLocked(job) {
				// The job serves on what it holds: only the replicas the
				// location can never hold are taken back, after the pass
				// (a scale-up capped; a rollout's replica failed, which
				// rolls it back). A job holding GPUs is never failed here.
				capped = append(capped, cappedJob{job, d.Reason})
				return fairq.Skip
			}
			if _, err := o.updateJobLocked(ctx, job.ID, func(tx Tx, j *cosmic.Job) error {
				return j.SetState(cosmic.StateFailed, &d.Reason, o.now())
			}); err != nil {
				o.log.Error("fail unplaceable job", "job_id", job.ID, "err", err)
				return fairq.Skip
			}
			o.dequeueLocked(job.ID)
			return fairq.Drop
		}
		return fairq.Stop
	}, func(fj fairq.Job, b fairq.Block) {
		o.wait[fj.ID] = quotaWait(b)
	})
	for _, c := range capped {
		if err := o.takeBackLocked(ctx, c.job, c.why); err != nil {
			o.log.Error("take back replicas the location cannot hold", "job_id", c.job.ID, "err", err)
		}
	}
	for _, id := range stale {
		if j, err := o.st.GetJob(ctx, id); err == nil {
			o.requeueLocked(j)
		} else {
			o.dequeueLocked(id)
		}
	}
	o.mu.Unlock()
	if len(capped) > 0 || len(stale) > 0 {
		o.poke()
	}
	// Workers are told in the background: a slow or unreachable worker must
	// not hold up the caller (an API create), and the heartbeat's reconcile
	// applies again what does not arrive.
	for _, w := range work {
		o.goBackground(func() {
			defer w.done()
			o.applyOnWorker(context.WithoutCancel(ctx), w)
		})
	}
}

func quotaWait(b fairq.Block) waitInfo {
	return waitInfo{what: b.Message(), reason: cosmic.NewReason(cosmic.ReasonTeamQuota, b.Message())}
}

// admitsLocked checks the GPUs placement chose for a job that asked for
// any model against its team's quotas of the models chosen.
func (o *Ork) admitsLocked(job cosmic.Job, rs []cosmic.Reservation) (fairq.Block, bool) {
	byModel := map[string]int{}
	for _, r := range rs {
		if len(r.Nodes) > 0 {
			byModel[o.modelOfLocked(r)] += r.Count()
		}
	}
	for _, model := range keys(byModel) {
		if b, ok := o.fq.Admits(job.Team, job.Spec.Location, model, byModel[model]); !ok {
			return b, false
		}
	}
	return fairq.Block{}, true
}

// commitPlacementLocked claims the GPUs and moves the job to pending in one
// transaction, then applies the reservations to the snapshot.
func (o *Ork) commitPlacementLocked(ctx context.Context, job cosmic.Job, rs []cosmic.Reservation) (cosmic.Job, error) {
	j, err := o.updateJobLocked(ctx, job.ID, func(tx Tx, j *cosmic.Job) error {
		for _, r := range rs {
			if r.Replica >= j.Spec.Replicas() {
				// The queue's copy of the job is older than the job: a
				// scale-down or an update took the replica away since.
				return errStalePlacement
			}
			if err := tx.ClaimGPUs(ctx, r); err != nil {
				return err
			}
			deadline := o.now().Add(o.agentDeadlineLocked(r.Rack))
			setReplica(j, r.Replica, func(rs *cosmic.ReplicaStatus) {
				// The agents of a new placement are not those of the last
				// one: the worker reports them anew.
				rs.State, rs.Reason, rs.Nodes, rs.AgentKeys = cosmic.StatePending, nil, r.NodeNames(), nil
				rs.AgentDeadline, rs.Progress = deadline, nil
				rs.Generation = j.Status.Generation
			})
		}
		return o.setAggregate(j)
	})
	if err != nil {
		return j, err
	}
	for _, r := range rs {
		if err := o.snap.Apply(r); err != nil {
			// The store took the claim, so the snapshot is stale: rebuild.
			o.log.Error("snapshot disagrees with store; rebuilding", "job_id", job.ID, "err", err)
			o.jobTeam[job.ID] = job.Team
			o.holdVolumesLocked(job)
			if err := o.rebuildLocked(ctx); err != nil {
				o.log.Error("rebuild snapshot", "err", err)
			}
			break
		}
		o.holdLocked(job.Team, r)
	}
	o.holdVolumesLocked(job)
	o.boundPlacedLocked(j, rs)
	return j, nil
}

// setReplica edits replica i's status, creating the entries up to it.
func setReplica(j *cosmic.Job, i int, f func(*cosmic.ReplicaStatus)) {
	for len(j.Status.Replicas) <= i {
		j.Status.Replicas = append(j.Status.Replicas, cosmic.ReplicaStatus{Index: len(j.Status.Replicas), State: cosmic.StateQueued})
	}
	f(&j.Status.Replicas[i])
}

// setAggregate moves the job to the state its replicas add up to.
func (o *Ork) setAggregate(j *cosmic.Job) error {
	ignored, err := aggregate(j, o.now())
	if ignored != nil {
		o.log.Warn("ignoring illegal aggregate transition", "job_id", j.ID, "from", ignored.From, "to", ignored.To)
	}
	return err
}

// updateJobLocked runs a read-modify-write of one job in a transaction.
func (o *Ork) updateJobLocked(ctx context.Context, id string, f func(Tx, *cosmic.Job) error) (cosmic.Job, error) {
	var out cosmic.Job
	err := o.st.Update(ctx, func(tx Tx) error {
		j, err := tx.GetJob(ctx, id)
		if err != nil {
			return err
		}
		if err := f(tx, &j); err != nil {
			return err
		}
		j.SyncAgentDeadlines()
		j.SyncDrains()
		j.UpdatedAt = o.now()
		out = j
		return tx.PutJob(ctx, j)
	})
	if err == nil {
		o.noteDrainsLocked(out)
	}
	return out, err
}

// applyOnWorker asks the rack's worker to run w, and returns its error,
// logged: the heartbeat's reconcile applies it again.
func (o *Ork) applyOnWorker(ctx context.Context, w applyWork) error {
	o.mu.Lock()
	r := o.racks[w.rack]
	o.mu.Unlock()
	if r == nil {
		return nil
	}
	cctx, cancel := o.workerCtx(ctx)
	defer cancel()
	err := r.w.Apply(cctx, w.p)
	if err != nil {
		o.log.Warn("apply on worker", "rack", w.rack, "job_id", w.p.Job.ID, "err", err)
	}
	return err
}
