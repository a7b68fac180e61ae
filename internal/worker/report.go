package worker

import (
	"cmp"
	"context"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/cosmicac/cosmicac/internal/backoff"
	"github.com/cosmicac/cosmicac/internal/cosmic"
)

// Report delivery defaults: a failed Report is retried with exponential
// backoff between ReportRetryMin and ReportRetryMax; one attempt may take
// ReportTimeout.
const (
	ReportRetryMin = 100 * time.Millisecond
	ReportRetryMax = 5 * time.Second
	ReportTimeout  = 10 * time.Second
)

// ReportQueue holds what a worker has observed and not yet delivered to the
// ork: the latest report of each replica that changed, and whether the
// rack's capacity changed. Every change takes a new version; a delivered
// change is cleared only if no newer one came meanwhile, so nothing is lost
// to a change made while a Report is in flight. Deliver sends them.
//
// The queue is guarded by its worker's lock: Set, SetGone, SetCapacity and
// Undelivered are called with it held, so that a Report carries all or
// none of what the worker changed under it. Deliver is called without it
// (it takes it itself); Push either way.
type ReportQueue struct {
	push chan struct{} // Deliver: something is dirty

	mu       sync.Locker
	dirty    map[ReplicaRef]queuedReport
	capDirty uint64 // version of the undelivered capacity change; 0: none
	version  uint64
}

type queuedReport struct {
	rep     ReplicaReport
	version uint64
}

// NewReportQueue returns an empty queue guarded by mu, the worker's lock.
func NewReportQueue(mu sync.Locker) *ReportQueue {
	return &ReportQueue{
		mu:    mu,
		push:  make(chan struct{}, 1),
		dirty: make(map[ReplicaRef]queuedReport),
	}
}

// Set queues rep as the latest report of replica ref (ref.Replica is a
// replica, not AllReplicas), replacing any undelivered one.
func (q *ReportQueue) Set(ref ReplicaRef, rep ReplicaReport) {
	q.version++
	q.dirty[ref] = queuedReport{rep: rep, version: q.version}
	q.Push()
}

// SetGone queues the report that every object of replica ref is deleted.
func (q *ReportQueue) SetGone(ref ReplicaRef) {
	q.Set(ref, ReplicaReport{Replica: ref.Replica, State: cosmic.StateStopped, Gone: true, Observed: Observe()})
}

// SetCapacity notes that the rack's capacity changed: the next Report
// carries it.
func (q *ReportQueue) SetCapacity() {
	q.version++
	q.capDirty = q.version
	q.Push()
}

// Undelivered reports whether a report of replica ref waits for delivery.
func (q *ReportQueue) Undelivered(ref ReplicaRef) bool {
	_, ok := q.dirty[ref]
	return ok
}

// Push wakes Deliver to send whatever is undelivered. Set, SetGone and
// SetCapacity push; a worker pushes itself only for what it queued before
// Deliver started, or after Delivery.Ready turned true again.
func (q *ReportQueue) Push() {
	select {
	case q.push <- struct{}{}:
	default:
	}
}

// Delivery is how Deliver sends a worker's reports.
type Delivery struct {
	Rack     string
	Reporter Reporter
	Log      *slog.Logger // nil: discarded

	// RetryMin and RetryMax bound the backoff between failed Reports
	// (zero: ReportRetryMin, ReportRetryMax); Timeout bounds one attempt
	// (zero: ReportTimeout).
	RetryMin, RetryMax, Timeout time.Duration

	// The functions are called without the queue's lock held.
	//
	// Ready, when set, holds every Report back while it returns false (a
	// worker playing unreachable); the worker calls Push once it is ready
	// again.
	Ready func() bool
	// Capacity observes the rack's capacity when a change of it is
	// undelivered. On an error the Report goes without it and the change
	// stays undelivered.
	Capacity func(ctx context.Context) (Capacity, error)
	// Delivered, when set, is called with each Report the reporter
	// accepted, before its changes are cleared.
	Delivered func(Report)
}

// Deliver sends undelivered changes to d.Reporter until ctx is done: on each
// push, Reports of every change (the latest report of each replica, by job
// ID and replica, and the capacity) until none is left, a failed one retried
// with exponential backoff. A worker runs it in a goroutine of its own and
// never waits for it.
func (q *ReportQueue) Deliver(ctx context.Context, d Delivery) {
	retryMin, retryMax, timeout := cmp.Or(d.RetryMin, ReportRetryMin), cmp.Or(d.RetryMax, ReportRetryMax), cmp.Or(d.Timeout, ReportTimeout)
	log := d.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	retry := backoff.Backoff{Min: retryMin, Max: retryMax}
	for {
		select {
		case <-ctx.Done():
			return
		case <-q.push:
		}
		for {
			rep, sent, ok := q.pending(ctx, d)
			if !ok {
				break
			}
			rctx, cancel := context.WithTimeout(ctx, timeout)
			err := d.Reporter.Report(rctx, rep)
			cancel()
			if err == nil {
				if d.Delivered != nil {
					d.Delivered(rep)
				}
				q.delivered(sent)
				retry.Reset()
				continue
			}
			if ctx.Err() != nil {
				return
			}
			wait := retry.Next()
			log.Warn("report failed", "err", err, "retry_in", wait)
			if !backoff.Sleep(ctx, wait) {
				return
			}
		}
	}
}

// sentVersions is what a Report carried, to clear on delivery.
type sentVersions struct {
	replicas map[ReplicaRef]uint64
	capacity uint64 // 0: none
}

// capacityTries bounds how often pending observes a capacity that changes
// while it does.
const capacityTries = 3

// pending builds a Report of every undelivered change; ok is false when
// there is none or d is not ready.
func (q *ReportQueue) pending(ctx context.Context, d Delivery) (Report, sentVersions, bool) {
	if d.Ready != nil && !d.Ready() {
		return Report{}, sentVersions{}, false
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	// The capacity is observed without the lock, then the replicas' reports
	// are taken with it: observe again if the capacity changed meanwhile,
	// so that the Report is of one moment. A change that is not carried
	// stays undelivered.
	var capa *Capacity
	var capVersion uint64 // the capacity change capa carries
	for range capacityTries {
		v := q.capDirty
		if v == 0 || v == capVersion {
			break
		}
		q.mu.Unlock()
		c, err := d.Capacity(ctx)
		q.mu.Lock()
		if err != nil {
			capa, capVersion = nil, 0
			break
		}
		capa, capVersion = &c, v
	}
	if len(q.dirty) == 0 && capa == nil {
		return Report{}, sentVersions{}, false
	}
	rep := Report{Rack: d.Rack, Capacity: capa}
	sent := sentVersions{replicas: make(map[ReplicaRef]uint64, len(q.dirty)), capacity: capVersion}
	refs := slices.SortedFunc(maps.Keys(q.dirty), func(a, b ReplicaRef) int {
		return cmp.Or(cmp.Compare(a.JobID, b.JobID), cmp.Compare(a.Replica, b.Replica))
	})
	for _, ref := range refs {
		e := q.dirty[ref]
		sent.replicas[ref] = e.version
		if n := len(rep.Jobs); n == 0 || rep.Jobs[n-1].JobID != ref.JobID {
			rep.Jobs = append(rep.Jobs, JobReport{JobID: ref.JobID})
		}
		jr := &rep.Jobs[len(rep.Jobs)-1]
		jr.Replicas = append(jr.Replicas, e.rep)
	}
	return rep, sent, true
}

// delivered clears the changes a Report carried, unless newer ones came.
func (q *ReportQueue) delivered(sent sentVersions) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for ref, v := range sent.replicas {
		if e, ok := q.dirty[ref]; ok && e.version == v {
			delete(q.dirty, ref)
		}
	}
	if sent.capacity != 0 && q.capDirty == sent.capacity {
		q.capDirty = 0
	}
}
