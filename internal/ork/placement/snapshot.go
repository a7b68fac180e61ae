// Package placement decides where a job's replicas run: which rack, which
// nodes and which GPU indices. It is pure (no I/O, no clock, no randomness)
// and deterministic: the same snapshot and job always give the same
// decision.
//
// A Snapshot is the fleet's capacity at one moment: racks, nodes and the
// GPUs already reserved. Place reads it and returns a Decision (Placed, Wait
// or Impossible) after a chain of filters (location, GPU model, schedulable
// and ready, enough free GPUs) and rankers (bin-packing, then rack ID and
// node name), as Nomad's scheduler does. The ork applies each Placed
// decision to its snapshot with Apply and places the next queued job
// against the result, so sequential placement costs no copy of the fleet.
//
// Only the ork imports this package.
package placement

import (
	"cmp"
	"errors"
	"fmt"
	"math/bits"
	"slices"

	"github.com/cosmicac/cosmicac/internal/cosmic"
)

// MaxNodeGPUs is the most GPUs one node may hold.
const MaxNodeGPUs = 64

// Snapshot is the capacity of a fleet: for each node, which GPUs are free.
//
// Place only reads a Snapshot; Apply and Release change it in place (each is
// all-or-nothing). A Snapshot is not safe for concurrent use: the ork owns
// one, or Clones it to share a frozen copy.
type Snapshot struct {
	nodes  []node         // sorted by rack ID, then node name: the rank order
	byName map[string]int // rack + "\x00" + node → index in nodes
	groups []*group
	// byLocation maps a location to its groups (one per GPU model), sorted by model.
	byLocation map[string][]int
	racks      map[string]cosmic.Rack
	reserved   map[resKey]cosmic.Reservation
}

type resKey struct {
	job     string
	replica int
}

type node struct {
	name, rack string
	total      int
	free       uint64 // bit i set: GPU i is free
	usable     bool   // schedulable and ready
	group      int    // index in Snapshot.groups
	pos        int    // position in group.nodes
	rackGroup  int    // index in group.racks
}

// group is the nodes of one location with one GPU model.
type group struct {
	location, model string
	nodes           []int // indices of Snapshot.nodes, ascending
	// buckets[f] is a bit set over positions in nodes: the usable nodes
	// with exactly f free GPUs; count[f] is its size.
	buckets  [MaxNodeGPUs + 1][]uint64
	count    [MaxNodeGPUs + 1]int
	maxTotal int
	gpus     int // total GPUs of the group's nodes
	racks    []rackGroup
}

// rackGroup is the nodes of one rack within a group.
type rackGroup struct {
	id    string
	nodes []int // indices of Snapshot.nodes, ascending
	// freeHist[f]: usable nodes with f free GPUs; totalHist[t]: all nodes holding t GPUs.
	freeHist  [MaxNodeGPUs + 1]int
	totalHist [MaxNodeGPUs + 1]int
}

func nodeKey(rack, name string) string { return rack + "\x00" + name }

// NewSnapshot builds the capacity snapshot of racks, their nodes and the
// reservations already held. A node's GPU model is its own or, when empty,
// its rack's. It fails when the input breaks an invariant: a node of an
// unknown rack, a node twice, a node with more than MaxNodeGPUs, a
// reservation twice, or reservations that claim a GPU twice or one the node
// does not have. A reservation on a node or rack that is no longer listed
// is kept (Release accepts it) but claims nothing.
func NewSnapshot(racks []cosmic.Rack, nodes []cosmic.Node, reserved []cosmic.Reservation) (*Snapshot, error) {
	s := &Snapshot{
		byName:     make(map[string]int, len(nodes)),
		byLocation: map[string][]int{},
		racks:      make(map[string]cosmic.Rack, len(racks)),
		reserved:   make(map[resKey]cosmic.Reservation, len(reserved)),
	}
	for _, r := range racks {
		if _, dup := s.racks[r.ID]; dup {
			return nil, fmt.Errorf("rack %s listed twice", r.ID)
		}
		s.racks[r.ID] = r
	}
	sorted := slices.Clone(nodes)
	slices.SortFunc(sorted, func(a, b cosmic.Node) int {
		return cmp.Or(cmp.Compare(a.Rack, b.Rack), cmp.Compare(a.Name, b.Name))
	})
	groupIdx := map[[2]string]int{}
	groupOf := func(loc, model string) int {
		k := [2]string{loc, model}
		if g, ok := groupIdx[k]; ok {
			return g
		}
		groupIdx[k] = len(s.groups)
		s.groups = append(s.groups, &group{location: loc, model: model})
		return len(s.groups) - 1
	}
	// Every rack's location and model exists even before its nodes report.
	for _, r := range racks {
		groupOf(r.Location, r.GPUModel)
	}
	s.nodes = make([]node, len(sorted))
	for i, n := range sorted {
		r, ok := s.racks[n.Rack]
		if !ok {
			return nil, fmt.Errorf("node %s of unknown rack %s", n.Name, n.Rack)
		}
		k := nodeKey(n.Rack, n.Name)
		if _, dup := s.byName[k]; dup {
			return nil, fmt.Errorf("node %s of rack %s listed twice", n.Name, n.Rack)
		}
		if n.GPUs < 0 || n.GPUs > MaxNodeGPUs {
			return nil, fmt.Errorf("node %s of rack %s: %d GPUs, want 0 to %d", n.Name, n.Rack, n.GPUs, MaxNodeGPUs)
		}
		s.byName[k] = i
		model := cmp.Or(n.GPUModel, r.GPUModel)
		gi := groupOf(r.Location, model)
		g := s.groups[gi]
		if len(g.racks) == 0 || g.racks[len(g.racks)-1].id != n.Rack {
			g.racks = append(g.racks, rackGroup{id: n.Rack})
		}
		rg := &g.racks[len(g.racks)-1]
		s.nodes[i] = node{
			name: n.Name, rack: n.Rack, total: n.GPUs, free: mask(n.GPUs),
			usable: n.Schedulable && n.Ready, group: gi, pos: len(g.nodes), rackGroup: len(g.racks) - 1,
		}
		g.nodes = append(g.nodes, i)
		rg.nodes = append(rg.nodes, i)
		rg.totalHist[n.GPUs]++
		g.maxTotal = max(g.maxTotal, n.GPUs)
		g.gpus += n.GPUs
	}
	for gi, g := range s.groups {
		words := (len(g.nodes) + 63) / 64
		for f := range g.buckets {
			g.buckets[f] = make([]uint64, words)
		}
		for _, ni := range g.nodes {
			if s.nodes[ni].usable {
				s.track(ni, +1)
			}
		}
		s.byLocation[g.location] = append(s.byLocation[g.location], gi)
	}
	for loc, gs := range s.byLocation {
		slices.SortFunc(gs, func(a, b int) int { return cmp.Compare(s.groups[a].model, s.groups[b].model) })
		s.byLocation[loc] = gs
	}
	for _, r := range reserved {
		if err := s.apply(r, true); err != nil {
			return nil, fmt.Errorf("reservations break an invariant: %w", err)
		}
	}
	return s, nil
}

func mask(n int) uint64 {
	if n >= 64 {
		return ^uint64(0)
	}
	return 1<<uint(n) - 1
}

// track adds (d=+1) or removes (d=-1) usable node ni from the indexes under
// its current free count.
func (s *Snapshot) track(ni, d int) {
	n := &s.nodes[ni]
	g := s.groups[n.group]
	f := bits.OnesCount64(n.free)
	if d > 0 {
		g.buckets[f][n.pos/64] |= 1 << uint(n.pos%64)
	} else {
		g.buckets[f][n.pos/64] &^= 1 << uint(n.pos%64)
	}
	g.count[f] += d
	g.racks[n.rackGroup].freeHist[f] += d
}

// setFree changes node ni's free mask, keeping the indexes current.
func (s *Snapshot) setFree(ni int, free uint64) {
	n := &s.nodes[ni]
	if n.usable {
		s.track(ni, -1)
	}
	n.free = free
	if n.usable {
		s.track(ni, +1)
	}
}

// Errors of Apply and Release; both wrap cosmic sentinels.
var (
	ErrReserved    = fmt.Errorf("replica already reserved: %w", cosmic.ErrConflict)
	ErrGPUTaken    = fmt.Errorf("GPU not free: %w", cosmic.ErrConflict)
	ErrNoSuchGPU   = fmt.Errorf("no such GPU: %w", cosmic.ErrInvalid)
	ErrNotReserved = fmt.Errorf("reservation not held: %w", cosmic.ErrNotFound)
)

// Apply claims r's GPUs. It fails, changing nothing, if the replica is
// already reserved, if a GPU is taken, claimed twice by r, or does not exist.
func (s *Snapshot) Apply(r cosmic.Reservation) error { return s.apply(r, false) }

func (s *Snapshot) apply(r cosmic.Reservation, allowUnknown bool) error {
	k := resKey{r.JobID, r.Replica}
	if _, ok := s.reserved[k]; ok {
		return fmt.Errorf("job %s replica %d: %w", r.JobID, r.Replica, ErrReserved)
	}
	type change struct {
		ni   int
		free uint64
	}
	changes := make([]change, 0, len(r.Nodes))
	for _, a := range r.Nodes {
		ni, ok := s.byName[nodeKey(r.Rack, a.Node)]
		if !ok {
			if allowUnknown {
				continue
			}
			return fmt.Errorf("job %s replica %d: node %s of rack %s: %w", r.JobID, r.Replica, a.Node, r.Rack, ErrNoSuchGPU)
		}
		free := s.nodes[ni].free
		for _, c := range changes {
			if c.ni == ni {
				return fmt.Errorf("job %s replica %d: node %s listed twice: %w", r.JobID, r.Replica, a.Node, ErrGPUTaken)
			}
		}
		for _, i := range a.GPUs {
			switch {
			case i < 0 || i >= s.nodes[ni].total:
				return fmt.Errorf("job %s replica %d: GPU %d of node %s: %w", r.JobID, r.Replica, i, a.Node, ErrNoSuchGPU)
			case free&(1<<uint(i)) == 0:
				return fmt.Errorf("job %s replica %d: GPU %d of node %s: %w", r.JobID, r.Replica, i, a.Node, ErrGPUTaken)
			}
			free &^= 1 << uint(i)
		}
		changes = append(changes, change{ni, free})
	}
	for _, c := range changes {
		s.setFree(c.ni, c.free)
	}
	s.reserved[k] = r
	return nil
}

// Release frees the GPUs of the reservation held by r's job and replica.
func (s *Snapshot) Release(r cosmic.Reservation) error {
	k := resKey{r.JobID, r.Replica}
	held, ok := s.reserved[k]
	if !ok {
		return fmt.Errorf("job %s replica %d: %w", r.JobID, r.Replica, ErrNotReserved)
	}
	for _, a := range held.Nodes {
		ni, ok := s.byName[nodeKey(held.Rack, a.Node)]
		if !ok {
			continue
		}
		free := s.nodes[ni].free
		for _, i := range a.GPUs {
			free |= 1 << uint(i)
		}
		s.setFree(ni, free)
	}
	delete(s.reserved, k)
	return nil
}

// ReleaseJob frees every reservation of a job and returns them.
func (s *Snapshot) ReleaseJob(jobID string) []cosmic.Reservation {
	var out []cosmic.Reservation
	for k, r := range s.reserved {
		if k.job == jobID {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b cosmic.Reservation) int { return cmp.Compare(a.Replica, b.Replica) })
	for _, r := range out {
		_ = s.Release(r) // held, so it cannot fail
	}
	return out
}

// Reserved reports the reservation of a job's replica, if held.
func (s *Snapshot) Reserved(jobID string, replica int) (cosmic.Reservation, bool) {
	r, ok := s.reserved[resKey{jobID, replica}]
	return r, ok
}

// Reservations lists every reservation held, by job ID then replica.
func (s *Snapshot) Reservations() []cosmic.Reservation {
	out := make([]cosmic.Reservation, 0, len(s.reserved))
	for _, r := range s.reserved {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b cosmic.Reservation) int {
		return cmp.Or(cmp.Compare(a.JobID, b.JobID), cmp.Compare(a.Replica, b.Replica))
	})
	return out
}

// Clone returns an independent copy.
func (s *Snapshot) Clone() *Snapshot {
	c := &Snapshot{
		nodes:      slices.Clone(s.nodes),
		byName:     s.byName, // never written after NewSnapshot
		byLocation: s.byLocation,
		racks:      s.racks,
		groups:     make([]*group, len(s.groups)),
		reserved:   make(map[resKey]cosmic.Reservation, len(s.reserved)),
	}
	for i, g := range s.groups {
		ng := *g
		for f := range ng.buckets {
			ng.buckets[f] = slices.Clone(g.buckets[f])
		}
		ng.racks = slices.Clone(g.racks)
		c.groups[i] = &ng
	}
	for k, r := range s.reserved {
		c.reserved[k] = r
	}
	return c
}

// Free returns the free GPU indices of a node, ascending, and whether the
// node is known.
func (s *Snapshot) Free(rack, nodeName string) ([]int, bool) {
	ni, ok := s.byName[nodeKey(rack, nodeName)]
	if !ok {
		return nil, false
	}
	return indices(s.nodes[ni].free, MaxNodeGPUs), true
}

// Usage is the capacity of one rack.
type Usage struct {
	Rack      string
	Location  string
	GPUModel  string
	Nodes     int // all nodes
	GPUs      int // all GPUs
	Free      int // free GPUs on schedulable, ready nodes
	Allocated int // reserved GPUs
}

// Usage reports each rack's capacity, by rack ID.
func (s *Snapshot) Usage() []Usage {
	by := map[string]*Usage{}
	for id, r := range s.racks {
		by[id] = &Usage{Rack: id, Location: r.Location, GPUModel: r.GPUModel}
	}
	for _, n := range s.nodes {
		u := by[n.rack]
		f := bits.OnesCount64(n.free)
		u.Nodes++
		u.GPUs += n.total
		u.Allocated += n.total - f
		if n.usable {
			u.Free += f
		}
	}
	out := make([]Usage, 0, len(by))
	for _, u := range by {
		out = append(out, *u)
	}
	slices.SortFunc(out, func(a, b Usage) int { return cmp.Compare(a.Rack, b.Rack) })
	return out
}

// indices lists the set bits of m, lowest first, at most n of them.
func indices(m uint64, n int) []int {
	out := make([]int, 0, min(bits.OnesCount64(m), n))
	for m != 0 && len(out) < n {
		out = append(out, bits.TrailingZeros64(m))
		m &= m - 1
	}
	return out
}

var errInvariant = errors.New("snapshot index out of step")

// check verifies the snapshot's indexes against its nodes and reservations
// (for tests).
func (s *Snapshot) check() error {
	claimed := map[int]uint64{}
	for _, r := range s.reserved {
		for _, a := range r.Nodes {
			ni, ok := s.byName[nodeKey(r.Rack, a.Node)]
			if !ok {
				continue
			}
			for _, i := range a.GPUs {
				if claimed[ni]&(1<<uint(i)) != 0 {
					return fmt.Errorf("%w: GPU %d of %s claimed twice", errInvariant, i, a.Node)
				}
				claimed[ni] |= 1 << uint(i)
			}
		}
	}
	for ni, n := range s.nodes {
		if n.free != mask(n.total)&^claimed[ni] {
			return fmt.Errorf("%w: node %s free %b, reservations say %b", errInvariant, n.name, n.free, mask(n.total)&^claimed[ni])
		}
	}
	for _, g := range s.groups {
		var hist [MaxNodeGPUs + 1]int
		for _, ni := range g.nodes {
			n := s.nodes[ni]
			f := bits.OnesCount64(n.free)
			in := g.buckets[f][n.pos/64]&(1<<uint(n.pos%64)) != 0
			if in != n.usable {
				return fmt.Errorf("%w: node %s in bucket %d: %v", errInvariant, n.name, f, in)
			}
			if n.usable {
				hist[f]++
			}
		}
		if hist != g.count {
			return fmt.Errorf("%w: group %s/%s counts %v, want %v", errInvariant, g.location, g.model, g.count, hist)
		}
	}
	return nil
}
