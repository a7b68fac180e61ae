package ork

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"maps"
	"slices"
	"time"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/ork/orkapi"
	"github.com/cosmicac/cosmicac/internal/trust"
	"github.com/cosmicac/cosmicac/internal/worker"
)

// The bound keys of the trust graph (internal/trust): the ork is where a
// rack's worker key is registered and where a worker's report says which
// keys it issued to a replica's agents, so it is the ork that tells the
// other components (watchPeers, long-polled by trust.Keyring.Follow). A
// replica's agents are bound while it holds GPUs; a new placement starts
// with none until its worker reports them, so a key of a replica's last
// run is not admitted again.

// peerBook is what watchPeers answers from, kept under Ork.mu.
type peerBook struct {
	epoch   string
	version uint64
	changed chan struct{} // closed (and replaced) on every change
	jobs    map[string]boundJob
	// draining are the replicas of each job being drained (drain.go).
	draining map[string]map[int]bool
	// stopping are the stopped jobs whose agents stay bound, for their
	// volumes' push alone, while their VMs power off (boundStoppingLocked).
	stopping map[string]stoppingJob
	// ring, when set, is the ork's own keyring: its racks' workers are
	// bound there as they are registered.
	ring *trust.Keyring
}

// boundJob is what the book knows of a job holding GPUs.
type boundJob struct {
	team string
	typ  cosmic.JobType
	keys map[int][]string // replica → its agents' keys, as reported
}

// stoppingJob is a stopped job whose replicas' agents push its RW volumes
// back as their VMs power off.
type stoppingJob struct {
	bound    boundJob
	racks    map[int]string // replica → its rack
	until    time.Time
	placedAt uint64 // the book's version when it began, so a timer of an earlier stop leaves a later one alone
}

func newPeerBook() peerBook {
	b := make([]byte, 8)
	rand.Read(b)
	return peerBook{epoch: hex.EncodeToString(b), changed: make(chan struct{}), jobs: map[string]boundJob{}, draining: map[string]map[int]bool{},
		stopping: map[string]stoppingJob{}}
}

// bindRackLocked binds key (a worker key's string; "" unbinds) as rack's
// worker in the ork's keyring.
func (o *Ork) bindRackLocked(rack, key string) {
	if o.book.ring == nil {
		return
	}
	var pk fabric.PublicKey
	if key != "" {
		pk, _ = fabric.ParsePublicKey(key)
	}
	o.book.ring.BindRack(rack, pk)
}

// peersChangedLocked wakes the watchers.
func (o *Ork) peersChangedLocked() {
	o.book.version++
	close(o.book.changed)
	o.book.changed = make(chan struct{})
}

// boundPlacedLocked records a job's new placement: its replicas' agents
// are unknown until the worker reports them.
func (o *Ork) boundPlacedLocked(j cosmic.Job, rs []cosmic.Reservation) {
	b, ok := o.book.jobs[j.ID]
	if !ok {
		b = boundJob{team: j.Team, typ: j.Spec.Type, keys: map[int][]string{}}
		o.book.jobs[j.ID] = b
	}
	for _, r := range rs {
		delete(b.keys, r.Replica)
	}
	o.peersChangedLocked()
}

// boundStoppingLocked keeps the agents of a job being stopped bound, for
// pushing its volumes alone (trust.StoppingMethods), while its VMs power
// off: until its racks report its replicas ended (stoppedReportedLocked)
// or orkapi.StopPushWait passes. Called before the job's GPUs and keys are
// released; a job that pushes nothing keeps nothing.
func (o *Ork) boundStoppingLocked(j cosmic.Job) {
	b, ok := o.book.jobs[j.ID]
	if !ok || len(b.keys) == 0 || !j.Spec.PushesVolumes() {
		return
	}
	s := stoppingJob{bound: boundJob{team: b.team, typ: b.typ, keys: map[int][]string{}}, racks: map[int]string{},
		until: o.now().Add(orkapi.StopPushWait), placedAt: o.book.version}
	for replica, keys := range b.keys {
		if res, held := o.snap.Reserved(j.ID, replica); held {
			s.bound.keys[replica], s.racks[replica] = slices.Clone(keys), res.Rack
		}
	}
	if len(s.racks) == 0 {
		return
	}
	o.book.stopping[j.ID] = s
	o.peersChangedLocked()
	time.AfterFunc(orkapi.StopPushWait, func() {
		o.mu.Lock()
		defer o.mu.Unlock()
		if cur, ok := o.book.stopping[j.ID]; ok && cur.placedAt == s.placedAt {
			delete(o.book.stopping, j.ID)
			o.peersChangedLocked()
		}
	})
}

// stoppedReportedLocked unbinds the agents of each replica of a stopping
// job that its rack reports stopped, failed or gone: its VM is off. A
// report names only the replicas that changed; the job's entry goes with
// its last replica.
func (o *Ork) stoppedReportedLocked(rack string, jr worker.JobReport) {
	s, ok := o.book.stopping[jr.JobID]
	if !ok {
		return
	}
	changed := false
	for _, r := range jr.Replicas {
		if s.racks[r.Replica] == rack && (r.Gone || r.State == cosmic.StateStopped || r.State == cosmic.StateFailed) {
			delete(s.racks, r.Replica)
			delete(s.bound.keys, r.Replica)
			changed = true
		}
	}
	if len(s.racks) == 0 {
		delete(o.book.stopping, jr.JobID)
	}
	if changed {
		o.peersChangedLocked()
	}
}

// boundReleasedLocked forgets a replica's agents (replica < 0: the job's).
func (o *Ork) boundReleasedLocked(jobID string, replica int) {
	if replica < 0 {
		delete(o.book.jobs, jobID)
	} else if b, ok := o.book.jobs[jobID]; ok {
		delete(b.keys, replica)
	}
	o.peersChangedLocked()
}

// boundKeysLocked takes the agent keys a worker reported for a replica.
func (o *Ork) boundKeysLocked(j cosmic.Job, replica int, keys []string) {
	b, ok := o.book.jobs[j.ID]
	if !ok {
		b = boundJob{team: j.Team, typ: j.Spec.Type, keys: map[int][]string{}}
		o.book.jobs[j.ID] = b
	}
	if slices.Equal(b.keys[replica], keys) {
		return
	}
	b.keys[replica] = slices.Clone(keys)
	o.peersChangedLocked()
}

// loadBoundLocked fills the book from the store at start: the jobs
// holding GPUs and the agent keys their status lists.
func (o *Ork) loadBoundLocked(ctx context.Context) error {
	held := map[string]bool{}
	for _, r := range o.snap.Reservations() {
		held[r.JobID] = true
	}
	o.book.jobs = map[string]boundJob{}
	for id := range held {
		j, err := o.st.GetJob(ctx, id)
		if err != nil {
			continue // a reservation of a vanished job: nothing to bind
		}
		if poweringOff(j, func(i int) bool { _, held := o.snap.Reserved(id, i); return held }) {
			o.loadPoweringOffLocked(j)
			continue
		}
		b := boundJob{team: j.Team, typ: j.Spec.Type, keys: map[int][]string{}}
		for _, rs := range j.Status.Replicas {
			if _, ok := o.snap.Reserved(id, rs.Index); ok && len(rs.AgentKeys) > 0 {
				b.keys[rs.Index] = slices.Clone(rs.AgentKeys)
			}
		}
		o.book.jobs[id] = b
	}
	o.peersChangedLocked()
	return nil
}

// peersLocked is the book's answer now.
func (o *Ork) peersLocked() orkapi.Peers {
	p := orkapi.Peers{Epoch: o.book.epoch, Version: o.book.version, Racks: []orkapi.RackPeer{}, Placements: []orkapi.Placement{}}
	for _, id := range keys(o.racks) {
		p.Racks = append(p.Racks, orkapi.RackPeer{Rack: id, WorkerKey: o.racks[id].Rack.WorkerKey})
	}
	for _, r := range o.snap.Reservations() {
		if _, off := o.poweringOff[r.JobID]; off {
			continue // stopped, its VMs powering off: bound as stopping below
		}
		b := o.book.jobs[r.JobID]
		p.Placements = append(p.Placements, orkapi.Placement{Job: r.JobID, Team: b.team, Type: b.typ, Replica: r.Replica,
			Rack: r.Rack, AgentKeys: slices.Clone(b.keys[r.Replica]), Draining: o.book.draining[r.JobID][r.Replica]})
	}
	for _, id := range keys(o.book.stopping) {
		s := o.book.stopping[id]
		for _, replica := range slices.Sorted(maps.Keys(s.racks)) {
			p.Placements = append(p.Placements, orkapi.Placement{Job: id, Team: s.bound.team, Type: s.bound.typ, Replica: replica,
				Rack: s.racks[replica], AgentKeys: slices.Clone(s.bound.keys[replica]), Stopping: true})
		}
	}
	return p
}

// WatchPeers answers watchPeers: the bound keys, at once when the caller
// has another epoch or an older version, else when they change or the
// wait (at most orkapi.MaxWatchWait) ends.
func (o *Ork) WatchPeers(ctx context.Context, p orkapi.WatchPeersParams) (orkapi.Peers, error) {
	wait := min(time.Duration(p.WaitMillis)*time.Millisecond, orkapi.MaxWatchWait)
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		o.mu.Lock()
		if p.Epoch != o.book.epoch || p.Since < o.book.version || wait <= 0 {
			out := o.peersLocked()
			o.mu.Unlock()
			return out, nil
		}
		ch := o.book.changed
		o.mu.Unlock()
		select {
		case <-ch:
		case <-timer.C:
			wait = 0
		case <-ctx.Done():
			return orkapi.Peers{}, ctx.Err()
		}
	}
}
