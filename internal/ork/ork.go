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
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/cosmicac/cosmicac/internal/config"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/ork/placement"
	"github.com/cosmicac/cosmicac/internal/store"
	"github.com/cosmicac/cosmicac/internal/worker"
)

// Config configures the ork; it is also the ork section of wrk-ork's
// --config file (durations as "2s").
type Config struct {
	// Heartbeat is how often each worker is asked for its capacity and jobs.
	Heartbeat config.Duration `json:"heartbeat"`
	// WorkerTimeout bounds one call to a worker.
	WorkerTimeout config.Duration `json:"workerTimeout"`
}

// DefaultConfig returns the production defaults.
func DefaultConfig() Config {
	return Config{Heartbeat: config.Duration(2 * time.Second), WorkerTimeout: config.Duration(10 * time.Second)}
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
	cfg  Config
	st   Store
	dial Dialer
	log  *slog.Logger
	now  func() time.Time

	mu     sync.Mutex
	racks  map[string]*rackState
	snap   *placement.Snapshot
	queue  []queued              // FIFO; per (location, model) order is what counts
	queued map[string]cosmic.Job // jobs in the queue, by ID
	wait   map[string]string     // job ID → what it waits for
	kick   chan struct{}         // asks the loop for a scheduling pass
	book   peerBook              // the bound keys (watchPeers)
	feed   *changeFeed           // the jobs' version (watchJobs)
	// inflight counts the Applies on their way to workers (KillJob waits).
	inflight applies

	bgMu     sync.Mutex // orders goBackground's Add before Run's Wait
	stopping bool
	wg       sync.WaitGroup
}

type rackState struct {
	StoredRack
	w         worker.Worker
	reachable bool
	seen      bool // answered at least once since the ork started
	// observedAt is when the worker observed the nodes last applied.
	observedAt time.Time
	// observed holds the stamp of each replica's last applied report: an
	// older one (a late answer) is dropped (worker.ReplicaReport.Observed).
	observed map[worker.ReplicaRef]worker.Observation
}

type queued struct {
	id  string
	key string // location + "/" + gpu model
}

func queueKey(s cosmic.Spec) string { return s.Location + "/" + s.Resources.GPUModel }

// New makes an ork over st. Call Start before use.
func New(cfg Config, st Store, dial Dialer, log *slog.Logger) (*Ork, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("ork config: %w", err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	feed := newChangeFeed()
	return &Ork{
		cfg: cfg, st: feedStore{Store: st, feed: feed}, feed: feed, dial: dial, log: log, now: time.Now,
		racks:  make(map[string]*rackState),
		queued: make(map[string]cosmic.Job),
		wait:   make(map[string]string),
		kick:   make(chan struct{}, 1),
		book:   newPeerBook(),
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
	if err := o.rebuildLocked(ctx); err != nil {
		return err
	}
	if err := o.loadBoundLocked(ctx); err != nil {
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
	for i := len(j.Status.History) - 1; i >= 0; i-- {
		if j.Status.History[i].State == cosmic.StateQueued {
			return j.Status.History[i].At
		}
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
		racks []cosmic.Rack
		nodes []cosmic.Node
	)
	for _, r := range o.racks {
		racks = append(racks, r.Rack)
		for _, n := range r.Nodes {
			n.Rack = r.Rack.ID
			nodes = append(nodes, n)
		}
	}
	snap, err := placement.NewSnapshot(racks, nodes, res)
	if err != nil {
		return fmt.Errorf("rebuild placement snapshot: %w", err)
	}
	o.snap = snap
	return nil
}

// Run schedules and heartbeats the workers until ctx ends.
func (o *Ork) Run(ctx context.Context) error {
	o.reconcileAll(ctx)
	o.schedule(ctx)
	tick := time.NewTicker(o.cfg.Heartbeat.D())
	defer tick.Stop()
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
		case <-tick.C:
			o.reconcileAll(ctx)
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

func (o *Ork) enqueueLocked(j cosmic.Job) {
	if _, ok := o.queued[j.ID]; ok {
		o.queued[j.ID] = j
		return
	}
	o.queued[j.ID] = j
	o.queue = append(o.queue, queued{id: j.ID, key: queueKey(j.Spec)})
}

func (o *Ork) dequeueLocked(id string) {
	if _, ok := o.queued[id]; !ok {
		return
	}
	delete(o.queued, id)
	delete(o.wait, id)
	o.queue = slices.DeleteFunc(o.queue, func(q queued) bool { return q.id == id })
}

// position is a queued job's 1-based place among the jobs of its queue.
func (o *Ork) positionLocked(id string) (int, string) {
	key := ""
	for _, q := range o.queue {
		if q.id == id {
			key = q.key
			break
		}
	}
	if key == "" {
		return 0, ""
	}
	pos := 0
	for _, q := range o.queue {
		if q.key == key {
			pos++
		}
		if q.id == id {
			return pos, o.wait[id]
		}
	}
	return 0, ""
}

// annotate fills the fields the ork computes on read: queue position.
func (o *Ork) annotate(j cosmic.Job) cosmic.Job {
	if j.Status.State != cosmic.StateQueued {
		return j
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	j.Status.QueuePosition, j.Status.WaitingFor = o.positionLocked(j.ID)
	return j
}

type applyWork struct {
	rack string
	p    worker.ApplyParams
	// done ends the Apply's count in Ork.inflight (schedule's Applies).
	done func()
}

// schedule places queued jobs in FIFO order per (location, GPU model): the
// head of a queue that does not fit now blocks the jobs behind it.
func (o *Ork) schedule(ctx context.Context) {
	o.mu.Lock()
	var work []applyWork
	blocked := map[string]bool{}
	for _, q := range slices.Clone(o.queue) {
		if blocked[q.key] {
			continue
		}
		job := o.queued[q.id]
		switch d := placement.Place(o.snap, job).(type) {
		case placement.Placed:
			j, err := o.commitPlacementLocked(ctx, job, d.Reservations)
			if err != nil {
				o.log.Error("commit placement", "job_id", job.ID, "err", err)
				blocked[q.key] = true
				continue
			}
			o.dequeueLocked(job.ID)
			byRack := map[string][]cosmic.Reservation{}
			for _, r := range d.Reservations {
				byRack[r.Rack] = append(byRack[r.Rack], r)
			}
			for rack, rs := range byRack {
				work = append(work, applyWork{rack: rack, p: worker.ApplyParams{Job: j, Reservations: rs}, done: o.inflight.start(j.ID)})
			}
		case placement.Wait:
			blocked[q.key] = true
			o.wait[q.id] = d.WaitingFor
		case placement.Impossible:
			if _, err := o.updateJobLocked(ctx, job.ID, func(tx Tx, j *cosmic.Job) error {
				return j.SetState(cosmic.StateFailed, &d.Reason, o.now())
			}); err != nil {
				o.log.Error("fail unplaceable job", "job_id", job.ID, "err", err)
				continue
			}
			o.dequeueLocked(job.ID)
		}
	}
	o.mu.Unlock()
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

// commitPlacementLocked claims the GPUs and moves the job to pending in one
// transaction, then applies the reservations to the snapshot.
func (o *Ork) commitPlacementLocked(ctx context.Context, job cosmic.Job, rs []cosmic.Reservation) (cosmic.Job, error) {
	j, err := o.updateJobLocked(ctx, job.ID, func(tx Tx, j *cosmic.Job) error {
		for _, r := range rs {
			if err := tx.ClaimGPUs(ctx, r); err != nil {
				return err
			}
			setReplica(j, r.Replica, func(rs *cosmic.ReplicaStatus) {
				// The agents of a new placement are not those of the last
				// one: the worker reports them anew.
				rs.State, rs.Reason, rs.Nodes, rs.AgentKeys = cosmic.StatePending, nil, r.NodeNames(), nil
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
			if err := o.rebuildLocked(ctx); err != nil {
				o.log.Error("rebuild snapshot", "err", err)
			}
			break
		}
	}
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
		j.UpdatedAt = o.now()
		out = j
		return tx.PutJob(ctx, j)
	})
	return out, err
}

func (o *Ork) applyOnWorker(ctx context.Context, w applyWork) {
	o.mu.Lock()
	r := o.racks[w.rack]
	o.mu.Unlock()
	if r == nil {
		return
	}
	cctx, cancel := o.workerCtx(ctx)
	defer cancel()
	if err := r.w.Apply(cctx, w.p); err != nil {
		// The heartbeat's reconcile applies it again.
		o.log.Warn("apply on worker", "rack", w.rack, "job_id", w.p.Job.ID, "err", err)
	}
}
