package trust

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cosmicac/cosmicac/internal/agent/agentapi"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/ork/orkapi"
)

// Principal is what a key is: its role and, for a bound key, what it is
// bound to.
type Principal struct {
	Role Role
	// Rack is the rack a worker serves, or the rack an agent's replica is
	// placed on (when known).
	Rack string
	// Job, Team, Replica and VMI bind an agent's key: the agent of VMI
	// VMI of replica Replica of job Job (of team Team). VMI 0 is the head,
	// the only one serving a replica's HTTP.
	Job     string
	Team    string
	Replica int
	VMI     int
	// Stopping says the agent's replica was stopped and its VM powers
	// off: it may call StoppingMethods only (orkapi.Placement.Stopping).
	Stopping bool
}

// Head reports whether p is the head agent of its replica.
func (p Principal) Head() bool { return p.Role.IsAgent() && p.VMI == 0 }

// String names the principal for logs and errors.
func (p Principal) String() string {
	switch {
	case p.Role == Worker:
		return fmt.Sprintf("the worker of rack %s", p.Rack)
	case p.Role.IsAgent():
		return fmt.Sprintf("the %s of job %s replica %d VMI %d", p.Role, p.Job, p.Replica, p.VMI)
	}
	return string(p.Role)
}

// CallerOf returns the principal a trust Policy admitted for the request
// ctx belongs to; false outside such a request.
func CallerOf(ctx context.Context) (Principal, bool) {
	p, ok := fabric.GrantFrom(ctx).(*Principal)
	if !ok || p == nil {
		return Principal{}, false
	}
	return *p, true
}

// AgentRole is the role of the agents of a job type.
func AgentRole(t cosmic.JobType) Role {
	if t == cosmic.TypeManagedInference {
		return InferenceAgent
	}
	return InstanceAgent
}

// AgentTopic is the directory topic the agents of role announce job under
// (agentapi.Topic or agentapi.InferenceTopic).
func AgentTopic(role Role, jobID string) string {
	if role == InferenceAgent {
		return agentapi.InferenceTopic(jobID)
	}
	return agentapi.Topic(jobID)
}

// rackGrace is how long a worker may still write a job's records after the
// job left its rack (a killed replica's VMIs are deleted after its GPUs
// are released).
const rackGrace = 10 * time.Minute

// Keyring says what each key is. Configured keys (the components' and the
// operators') are added with Add; racks' workers and jobs' agents are
// bound either by whoever issued them (BindRack, BindAgents: the ork for
// its racks, a rack worker for its agents) or by following the ork
// (Follow), which replaces them all on every change. Keys that lose their
// binding are handed to the OnRevoke functions, which close their
// connections. Safe for concurrent use; lookups take a read lock.
type Keyring struct {
	mu sync.RWMutex
	// Principals are held by pointer, never changed once stored: a
	// policy hands the pointer to handlers as the request's grant without
	// an allocation.
	static  map[fabric.PublicKey]*Principal
	workers map[fabric.PublicKey]*Principal // worker key → its rack's worker
	racks   map[string]fabric.PublicKey
	agents  map[fabric.PublicKey]*Principal
	slots   map[replicaRef][]fabric.PublicKey
	placed  map[jobRack]bool // the ork's placements (Apply)
	// draining are the replicas a rollout drains (Apply, Draining).
	draining map[replicaRef]bool
	former   map[jobRack]time.Time // placements gone, and until when they count
	epoch    string
	version  uint64
	revoke   []func(fabric.PublicKey)
	now      func() time.Time
	synced   chan struct{}

	src       PeerSource
	syncAsked atomic.Uint64 // Sync calls so far
	syncMu    sync.Mutex    // one read at a time
	syncDone  uint64        // the Sync calls the last read covers
	syncErr   error
}

type replicaRef struct {
	job     string
	replica int
}

type jobRack struct{ job, rack string }

// NewKeyring makes an empty keyring.
func NewKeyring() *Keyring {
	return &Keyring{
		static: map[fabric.PublicKey]*Principal{}, workers: map[fabric.PublicKey]*Principal{},
		racks: map[string]fabric.PublicKey{}, agents: map[fabric.PublicKey]*Principal{},
		slots: map[replicaRef][]fabric.PublicKey{}, placed: map[jobRack]bool{}, former: map[jobRack]time.Time{},
		now: time.Now, synced: make(chan struct{}),
	}
}

// Add gives keys a configured role (a platform component or an operator).
// A key has one role: adding it again with another is an error.
func (k *Keyring) Add(role Role, keys ...fabric.PublicKey) error {
	if role.Bound() {
		return fmt.Errorf("trust: %s keys are bound, not configured", role)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, key := range keys {
		if p, ok := k.static[key]; ok && p.Role != role {
			return fmt.Errorf("trust: key %s is configured as %s and as %s", key.Short(), p.Role, role)
		}
		k.static[key] = &Principal{Role: role}
	}
	return nil
}

// OnRevoke calls f with every key that loses its binding (or changes it),
// after the keyring no longer admits it: a node's Revoke closes its
// connections.
func (k *Keyring) OnRevoke(f func(fabric.PublicKey)) {
	k.mu.Lock()
	k.revoke = append(k.revoke, f)
	k.mu.Unlock()
}

func (k *Keyring) revoked(keys []fabric.PublicKey) {
	if len(keys) == 0 {
		return
	}
	k.mu.RLock()
	fs := slices.Clone(k.revoke)
	k.mu.RUnlock()
	for _, key := range keys {
		for _, f := range fs {
			f(key)
		}
	}
}

// Principal returns what key is.
func (k *Keyring) Principal(key fabric.PublicKey) (Principal, bool) {
	if p := k.lookup(key); p != nil {
		return *p, true
	}
	return Principal{}, false
}

// lookup is Principal's shared, immutable record, or nil.
func (k *Keyring) lookup(key fabric.PublicKey) *Principal {
	k.mu.RLock()
	defer k.mu.RUnlock()
	if p := k.static[key]; p != nil {
		return p
	}
	if p := k.workers[key]; p != nil {
		return p
	}
	return k.agents[key]
}

// IsAgent reports whether key is bound as the agent of the job's replica's
// VMI.
func (k *Keyring) IsAgent(key fabric.PublicKey, jobID string, replica, vmi int) bool {
	p, ok := k.Principal(key)
	return ok && p.Role.IsAgent() && p.Job == jobID && p.Replica == replica && p.VMI == vmi
}

// OnRack reports whether a replica of the job is placed on rack as the ork
// lists it (Apply), or was within the last ten minutes.
func (k *Keyring) OnRack(jobID, rack string) bool {
	k.mu.RLock()
	defer k.mu.RUnlock()
	if k.placed[jobRack{jobID, rack}] {
		return true
	}
	until, ok := k.former[jobRack{jobID, rack}]
	return ok && k.now().Before(until)
}

// BindRack binds key as the worker of rack (replacing the rack's former
// key, which is revoked); a zero key unbinds the rack.
func (k *Keyring) BindRack(rack string, key fabric.PublicKey) {
	k.mu.Lock()
	old, had := k.racks[rack]
	if had {
		delete(k.workers, old)
		delete(k.racks, rack)
	}
	if key != (fabric.PublicKey{}) {
		k.racks[rack] = key
		k.workers[key] = &Principal{Role: Worker, Rack: rack}
	}
	k.mu.Unlock()
	if had && old != key {
		k.revoked([]fabric.PublicKey{old})
	}
}

// BindAgents binds keys (by VMI index) as the agents of the replica of a
// job, placed on rack; nil keys unbind the replica. Keys the replica had
// and no longer has are revoked.
func (k *Keyring) BindAgents(p orkapi.Placement, keys []fabric.PublicKey) {
	k.mu.Lock()
	ref := replicaRef{p.Job, p.Replica}
	old := k.slots[ref]
	for _, key := range old {
		delete(k.agents, key)
	}
	if len(keys) == 0 {
		delete(k.slots, ref)
	} else {
		k.slots[ref] = slices.Clone(keys)
		for i, key := range keys {
			k.agents[key] = &Principal{Role: AgentRole(p.Type), Rack: p.Rack, Job: p.Job, Team: p.Team, Replica: p.Replica, VMI: i}
		}
	}
	var gone []fabric.PublicKey
	for _, key := range old {
		if !slices.Contains(keys, key) {
			gone = append(gone, key)
		}
	}
	k.mu.Unlock()
	k.revoked(gone)
}

// UnbindAgents unbinds the replica's agents if they are still keys (a
// replica bound anew since keeps its new keys).
func (k *Keyring) UnbindAgents(jobID string, replica int, keys []fabric.PublicKey) {
	k.mu.Lock()
	ref := replicaRef{jobID, replica}
	if !slices.Equal(k.slots[ref], keys) {
		k.mu.Unlock()
		return
	}
	for _, key := range keys {
		delete(k.agents, key)
	}
	delete(k.slots, ref)
	k.mu.Unlock()
	k.revoked(keys)
}

// Apply replaces every bound key with what the ork lists (Follow calls
// it): the racks' workers and the placed replicas' agents. Keys that lose
// their binding are revoked; placements that go away still count for
// OnRack for ten minutes.
func (k *Keyring) Apply(p orkapi.Peers) {
	workers := make(map[fabric.PublicKey]*Principal, len(p.Racks))
	racks := make(map[string]fabric.PublicKey, len(p.Racks))
	for _, r := range p.Racks {
		if key, err := fabric.ParsePublicKey(r.WorkerKey); err == nil {
			workers[key], racks[r.Rack] = &Principal{Role: Worker, Rack: r.Rack}, key
		}
	}
	agents := map[fabric.PublicKey]*Principal{}
	slots := map[replicaRef][]fabric.PublicKey{}
	placed := map[jobRack]bool{}
	draining := map[replicaRef]bool{}
	for _, pl := range p.Placements {
		placed[jobRack{pl.Job, pl.Rack}] = true
		if pl.Draining {
			draining[replicaRef{pl.Job, pl.Replica}] = true
		}
		var keys []fabric.PublicKey
		for i, s := range pl.AgentKeys {
			key, err := fabric.ParsePublicKey(s)
			if err != nil {
				continue
			}
			keys = append(keys, key)
			agents[key] = &Principal{Role: AgentRole(pl.Type), Rack: pl.Rack, Job: pl.Job, Team: pl.Team, Replica: pl.Replica, VMI: i, Stopping: pl.Stopping}
		}
		if len(keys) > 0 && !pl.Stopping { // a stopping replica's agents serve nothing: the slot is the new run's
			slots[replicaRef{pl.Job, pl.Replica}] = keys
		}
	}
	k.mu.Lock()
	now := k.now()
	var gone []fabric.PublicKey
	for key, w := range k.workers {
		if racks[w.Rack] != key {
			gone = append(gone, key)
		}
	}
	for key, old := range k.agents {
		if n, ok := agents[key]; !ok || *n != *old {
			gone = append(gone, key)
		}
	}
	for jr := range k.placed {
		if !placed[jr] {
			k.former[jr] = now.Add(rackGrace)
		}
	}
	for jr, until := range k.former {
		if placed[jr] || !now.Before(until) {
			delete(k.former, jr)
		}
	}
	k.workers, k.racks, k.agents, k.slots, k.placed, k.draining = workers, racks, agents, slots, placed, draining
	k.epoch, k.version = p.Epoch, p.Version
	select {
	case <-k.synced:
	default:
		close(k.synced)
	}
	k.mu.Unlock()
	k.revoked(gone)
}

// Draining says whether the ork drains the replica of the job (a rollout
// replaces it once its requests end): it takes no new requests. It is
// apart from the agents' principals, which it does not change: a
// draining replica's keys stay bound, and its connections open.
func (k *Keyring) Draining(job string, replica int) bool {
	k.mu.RLock()
	defer k.mu.RUnlock()
	return k.draining[replicaRef{job, replica}]
}

// Synced is closed once the keyring has applied the ork's list once.
func (k *Keyring) Synced() <-chan struct{} { return k.synced }
