package ork

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/cosmicac/cosmicac/internal/cosmic"
)

// Drains. A replica that goes while its job serves (the autoscaler takes
// it away, or a rollout replaces it) is drained first: the ork marks it
// (cosmic.ReplicaStatus.Drain) and its placement draining in watchPeers,
// proxy-inference sends it no new request and reports what is still in
// flight there, and once the proxies' reports taken after the drain
// settled say none is (or DrainTimeout has passed), the ork deletes it
// with the drain's reason. So no request in flight is cut by a scale-down
// or a rollout.

// drainSettle is how long after a drain begins a proxy's report counts
// for it: the proxies learn of the drain through the keyring within
// milliseconds, and report every second.
const drainSettle = 1500 * time.Millisecond

// drainReplica starts the drain of replica i of j (running, holding
// GPUs), to be deleted with reason then once drained. It runs inside
// updateJobLocked.
func (o *Ork) drainReplica(j *cosmic.Job, i int, then cosmic.Reason) {
	setReplica(j, i, func(rs *cosmic.ReplicaStatus) { rs.Drain = &cosmic.Drain{Since: o.now(), Then: then} })
}

// noteDrainsLocked brings the book's draining replicas of j (what
// watchPeers says: those drained and those being deleted, which take no
// new request either) and the drains the ork follows in line with j's
// status.
func (o *Ork) noteDrainsLocked(j cosmic.Job) {
	var set map[int]bool
	drains := false
	for _, r := range j.Status.Replicas {
		if r.Drain != nil || r.State == cosmic.StateDeleting {
			if set == nil {
				set = map[int]bool{}
			}
			set[r.Index] = true
		}
		drains = drains || r.Drain != nil
	}
	if drains {
		o.drainingJobs[j.ID] = true
	} else {
		delete(o.drainingJobs, j.ID)
	}
	if maps.Equal(set, o.book.draining[j.ID]) {
		return
	}
	if set == nil {
		delete(o.book.draining, j.ID)
	} else {
		o.book.draining[j.ID] = set
	}
	o.peersChangedLocked()
}

// drainedLocked says whether replica i of job id has drained: every
// proxy that reported when the drain began (within loadFresh) has
// reported since it settled, and those reports say nothing is in flight
// there; or the drain timeout has passed. A proxy that stopped reporting
// holds the drain to its timeout (its requests may still be running).
func (o *Ork) drainedLocked(id string, i int, d *cosmic.Drain, now time.Time) bool {
	if now.Sub(d.Since) >= o.cfg.DrainTimeout.D() {
		return true
	}
	settled := d.Since.Add(drainSettle)
	heard := false
	for _, l := range o.loads {
		if l.at.Before(settled) {
			if d.Since.Sub(l.at) <= loadFresh {
				return false // reporting when the drain began, not since it settled
			}
			continue
		}
		heard = true
		if l.jobs[id].Replicas[i] > 0 {
			return false
		}
	}
	return heard
}

// advanceDrains deletes the drained replicas of the jobs draining some.
// It reads each job first and writes only when a drain has ended.
func (o *Ork) advanceDrains(ctx context.Context) {
	o.mu.Lock()
	ids := slices.Sorted(maps.Keys(o.drainingJobs))
	o.mu.Unlock()
	for _, id := range ids {
		cur, err := o.st.GetJob(ctx, id)
		if err != nil {
			if errors.Is(err, cosmic.ErrNotFound) {
				o.mu.Lock()
				delete(o.drainingJobs, id)
				o.mu.Unlock()
			}
			continue
		}
		o.mu.Lock()
		now := o.now()
		ended := func(j cosmic.Job) bool {
			for i, r := range j.Status.Replicas {
				if r.Drain != nil && o.drainedLocked(id, i, r.Drain, now) {
					return true
				}
			}
			return false
		}
		if !ended(cur) {
			o.noteDrainsLocked(cur)
			o.mu.Unlock()
			continue
		}
		var (
			removed []cosmic.Reservation
			lines   []string
		)
		j, err := o.updateJobLocked(ctx, id, func(_ Tx, j *cosmic.Job) error {
			if !ended(*j) {
				return errUnchanged
			}
			for i := range j.Status.Replicas {
				r := &j.Status.Replicas[i]
				if r.Drain == nil || !o.drainedLocked(id, i, r.Drain, now) {
					continue
				}
				then := r.Drain.Then
				if res, held := o.snap.Reserved(id, i); held {
					removed = append(removed, res)
					r.State, r.Reason = cosmic.StateDeleting, &then
					lines = append(lines, fmt.Sprintf("replica %d drained after %s: deleting it (%s)", i, now.Sub(r.Drain.Since).Round(time.Second), then.Message))
				}
				r.Drain = nil
			}
			trimReplicas(j, func(i int) bool { _, held := o.snap.Reserved(id, i); return held })
			if j.Status.State == cosmic.StateDeleting {
				return nil
			}
			return o.setAggregate(j)
		})
		o.mu.Unlock()
		if err != nil {
			if !errors.Is(err, errUnchanged) {
				o.log.Warn("end a drain", "job_id", id, "err", err)
			}
			continue
		}
		o.deleteOnWorkers(ctx, id, removed)
		for _, l := range lines {
			o.record(j, "drain", l)
		}
	}
}

// errUnchanged ends a read-modify-write that would change nothing.
var errUnchanged = conflictf("unchanged")

// loadDrainsLocked fills the drains the ork follows from the store at
// start.
func (o *Ork) loadDrainsLocked(jobs []cosmic.Job) {
	for _, j := range jobs {
		o.noteDrainsLocked(j)
	}
}
