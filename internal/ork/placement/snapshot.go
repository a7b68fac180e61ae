// Package placement decides where a job's replicas run: which rack, which
// nodes and which GPU indices. It is pure (no I/O, no clock, no randomness)
// and deterministic: the same snapshot and job always give the same
// decision.
//
// A Snapshot is the fleet's capacity at one moment: racks, nodes and the
// GPUs, CPU and memory already reserved. Place reads it and returns a
// Decision (Placed, Wait or Impossible) after a chain of filters (location,
// GPU model, schedulable and ready, enough free GPUs, CPU and memory) and
// a ranker chosen by the location's policy (best-fit or fgd, then rack ID
// and node name), as Nomad's scheduler does. The ork applies each Placed
// decision to its snapshot with Apply and places the next queued job
// against the result, so sequential placement costs no copy of the fleet.
//
// Only the ork imports this package.
package placement

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"math"
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
	// rackList is the racks by ID, each with its VM overhead; node.ri
	// indexes it.
	rackList []rackInfo
	rackIdx  map[string]int
	// policy is each location's placement policy.
	policy   map[string]string
	reserved map[resKey]cosmic.Reservation
	// mix counts the per-node parts of the reservations held, and of the
	// replicas of the jobs waiting for GPUs (Want), by size: the job-size
	// mix the fgd policy measures fragmentation against. Counting only
	// what is held would weigh against the jobs that do not fit: the more
	// fragmented the fleet, the fewer large jobs held, the less fgd keeps
	// room for them (docs/placement.md).
	mix map[class]int64
	// wanted is each waiting job's count in mix.
	wanted map[string]wantedJob
	// top caches the most common classes of mix, and meters fgd's
	// measures of them by the largest node's GPUs (nil: stale).
	top    []weighted
	meters map[int]*fragMeter
}

type rackInfo struct {
	id       string
	overhead cosmic.VMOverhead
}

// Option configures NewSnapshot.
type Option func(*options)

type options struct {
	overheads map[string]cosmic.VMOverhead
	policy    string
}

// WithOverheads gives each rack's VM overhead, by rack ID (none: zero).
func WithOverheads(o map[string]cosmic.VMOverhead) Option {
	return func(opts *options) { opts.overheads = o }
}

// WithDefaultPolicy is the policy of a location whose racks name none
// (without it: DefaultPolicy).
func WithDefaultPolicy(p string) Option { return func(opts *options) { opts.policy = p } }

// DefaultPolicy is the placement policy when neither the ork nor a rack
// names one, chosen on the Alibaba GPU trace of 2023 (docs/placement.md).
const DefaultPolicy = cosmic.PolicyFGD

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
	ri         int    // index in Snapshot.rackList
	// cpu and mem are the node's CPU (millicores) and memory (MiB) for
	// jobs, 0 when not reported (not limited); cpuUsed and memUsed what
	// reservations hold. Used may pass the total when the node shrank.
	cpu, mem         int64
	cpuUsed, memUsed int64
}

// unlimited stands for the free CPU or memory of a node that does not
// report it.
const unlimited = math.MaxInt64 / 4

func (n *node) cpuFree() int64 {
	if n.cpu == 0 {
		return unlimited
	}
	return n.cpu - n.cpuUsed
}

func (n *node) memFree() int64 {
	if n.mem == 0 {
		return unlimited
	}
	return n.mem - n.memUsed
}

// fits says whether the node's free CPU and memory hold c and m.
func (n *node) fits(c, m int64) bool { return n.cpuFree() >= c && n.memFree() >= m }

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
	// states indexes the usable nodes by what fgd scores: free GPUs, CPU
	// and memory, and rack; nil when the location places by best-fit.
	// spare are empty sets to reuse.
	states map[stateKey]*stateSet
	spare  []*stateSet
}

type stateKey struct {
	free     int
	cpu, mem int64 // free (unlimited when not reported)
	ri       int
}

// stateSet is the usable nodes of a group in one state: a bit set over
// positions in group.nodes.
type stateSet struct {
	bits []uint64
	n    int
}

// first is the lowest position in the set.
func (st *stateSet) first() int {
	for w, word := range st.bits {
		if word != 0 {
			return w*64 + bits.TrailingZeros64(word)
		}
	}
	return -1
}

// rackGroup is the nodes of one rack within a group.
type rackGroup struct {
	id    string
	nodes []int // indices of Snapshot.nodes, ascending
	// freeHist[f]: usable nodes with f free GPUs.
	freeHist [MaxNodeGPUs + 1]int
	// limited: some node of the rack reports CPU or memory.
	limited bool
	// shapes counts the rack's nodes (usable or not) by size: what could
	// be placed were they all empty.
	shapes []shape
	ri     int // index in Snapshot.rackList
}

// shape is a size of node and how many of a rack's nodes have it.
type shape struct {
	gpus     int
	cpu, mem int64 // 0: not reported
	count    int
}

func nodeKey(rack, name string) string { return rack + "\x00" + name }

// NewSnapshot builds the capacity snapshot of racks, their nodes and the
// reservations already held. A node's GPU model is its own or, when empty,
// its rack's. It fails when the input breaks an invariant: a node of an
// unknown rack, a node twice, a node with more than MaxNodeGPUs, a
// reservation twice, or reservations that claim a GPU twice or one the node
// does not have. A reservation on a node or rack that is no longer listed
// is kept (Release accepts it) but claims nothing.
//
// A node's CPU and memory may be less than its reservations hold (it shrank
// since they were made): they are kept, and the node takes no more until
// they go.
func NewSnapshot(racks []cosmic.Rack, nodes []cosmic.Node, reserved []cosmic.Reservation, opt ...Option) (*Snapshot, error) {
	var opts options
	for _, o := range opt {
		o(&opts)
	}
	s := &Snapshot{
		byName:     make(map[string]int, len(nodes)),
		byLocation: map[string][]int{},
		racks:      make(map[string]cosmic.Rack, len(racks)),
		rackIdx:    make(map[string]int, len(racks)),
		policy:     map[string]string{},
		reserved:   make(map[resKey]cosmic.Reservation, len(reserved)),
		mix:        map[class]int64{},
	}
	for _, r := range racks {
		if _, dup := s.racks[r.ID]; dup {
			return nil, fmt.Errorf("rack %s listed twice", r.ID)
		}
		s.racks[r.ID] = r
	}
	for _, id := range slices.Sorted(maps.Keys(s.racks)) {
		r := s.racks[id]
		s.rackIdx[id] = len(s.rackList)
		s.rackList = append(s.rackList, rackInfo{id: id, overhead: opts.overheads[id]})
		// The location's policy is the first one its racks (by ID) name.
		if _, set := s.policy[r.Location]; !set && r.PlacementPolicy != "" {
			s.policy[r.Location] = r.PlacementPolicy
		}
	}
	def := cmp.Or(opts.policy, DefaultPolicy)
	if !cosmic.ValidPolicy(def) {
		return nil, fmt.Errorf("placement policy %q: want %s or %s", def, cosmic.PolicyBestFit, cosmic.PolicyFGD)
	}
	fgd := false
	for _, r := range racks {
		if _, set := s.policy[r.Location]; !set {
			s.policy[r.Location] = def
		}
		fgd = fgd || s.policy[r.Location] == cosmic.PolicyFGD
	}
	if !fgd {
		s.mix = nil // only fgd weighs the mix
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
		if n.CPUMilli < 0 || n.MemoryMiB < 0 {
			return nil, fmt.Errorf("node %s of rack %s: negative CPU or memory", n.Name, n.Rack)
		}
		s.byName[k] = i
		model := cmp.Or(n.GPUModel, r.GPUModel)
		gi := groupOf(r.Location, model)
		g := s.groups[gi]
		ri := s.rackIdx[n.Rack]
		if len(g.racks) == 0 || g.racks[len(g.racks)-1].id != n.Rack {
			g.racks = append(g.racks, rackGroup{id: n.Rack, ri: ri})
		}
		rg := &g.racks[len(g.racks)-1]
		s.nodes[i] = node{
			name: n.Name, rack: n.Rack, total: n.GPUs, free: mask(n.GPUs),
			usable: n.Schedulable && n.Ready, group: gi, pos: len(g.nodes), rackGroup: len(g.racks) - 1,
			ri: ri, cpu: n.CPUMilli, mem: n.MemoryMiB,
		}
		g.nodes = append(g.nodes, i)
		rg.nodes = append(rg.nodes, i)
		rg.addShape(shape{gpus: n.GPUs, cpu: n.CPUMilli, mem: n.MemoryMiB, count: 1})
		rg.limited = rg.limited || n.CPUMilli > 0 || n.MemoryMiB > 0
		g.maxTotal = max(g.maxTotal, n.GPUs)
		g.gpus += n.GPUs
	}
	for gi, g := range s.groups {
		words := (len(g.nodes) + 63) / 64
		for f := range g.buckets {
			g.buckets[f] = make([]uint64, words)
		}
		if s.policy[g.location] == cosmic.PolicyFGD {
			g.states = map[stateKey]*stateSet{}
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

// addShape counts one more node of a shape.
func (rg *rackGroup) addShape(sh shape) {
	for i := range rg.shapes {
		if p := &rg.shapes[i]; p.gpus == sh.gpus && p.cpu == sh.cpu && p.mem == sh.mem {
			p.count += sh.count
			return
		}
	}
	rg.shapes = append(rg.shapes, sh)
}

func mask(n int) uint64 {
	if n >= 64 {
		return ^uint64(0)
	}
	return 1<<uint(n) - 1
}

// track adds (d=+1) or removes (d=-1) usable node ni from the indexes under
// its current free GPUs, CPU and memory.
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
	if g.states == nil {
		return // best-fit: no state index
	}
	k := stateKey{free: f, cpu: n.cpuFree(), mem: n.memFree(), ri: n.ri}
	st := g.states[k]
	if st == nil {
		if last := len(g.spare) - 1; last >= 0 {
			st, g.spare = g.spare[last], g.spare[:last]
		} else {
			st = &stateSet{bits: make([]uint64, (len(g.nodes)+63)/64)}
		}
		g.states[k] = st
	}
	if d > 0 {
		st.bits[n.pos/64] |= 1 << uint(n.pos%64)
	} else {
		st.bits[n.pos/64] &^= 1 << uint(n.pos%64)
	}
	st.n += d
	if st.n == 0 {
		// Empty (so all bits clear): kept for the next state.
		delete(g.states, k)
		g.spare = append(g.spare, st)
	}
}

// setFree changes node ni's free mask and what its reservations hold of
// its CPU and memory, keeping the indexes current.
func (s *Snapshot) setFree(ni int, free uint64, cpuUsed, memUsed int64) {
	n := &s.nodes[ni]
	if n.usable {
		s.track(ni, -1)
	}
	n.free, n.cpuUsed, n.memUsed = free, cpuUsed, memUsed
	if n.usable {
		s.track(ni, +1)
	}
}

// class is the size of one reservation's part on one node, as fgd weighs
// it: its GPUs and CPU. Memory is not part of it, as in the FGD paper's
// typical pods (the filter holds it): sizes that differ in memory alone are
// one, so the most common sizes cover more of the jobs (on the openb
// trace's multi-GPU workload, shuffled, 0.17–0.21% of the GPUs unallocated
// at full demand; 0.50–1.57% with memory in the key; docs/placement.md).
type class struct {
	gpus int
	cpu  int64
}

// wantedJob is what a waiting job adds to the mix: n parts of class c.
type wantedJob struct {
	c class
	n int64
}

type weighted struct {
	class
	w int64
}

// countMix adds (d=+1) or removes (d=-1) r's parts on known nodes from the
// job-size mix.
func (s *Snapshot) countMix(r cosmic.Reservation, d int64) {
	if s.mix == nil {
		return
	}
	for _, a := range r.Nodes {
		if _, ok := s.byName[nodeKey(r.Rack, a.Node)]; !ok {
			continue
		}
		s.bumpMix(class{len(a.GPUs), a.CPUMilli}, d)
	}
}

// bumpMix adds d to c's count in the mix and keeps topClasses' cache as a
// recount would make it: a count that grows can only move its class up
// (into the top, when it passes the last); one that shrinks inside the top
// moves down, or out, which needs a recount unless the top holds every
// class. Every change of the top drops fgd's meters.
func (s *Snapshot) bumpMix(c class, d int64) {
	s.mix[c] += d
	n := s.mix[c]
	if n <= 0 {
		delete(s.mix, c)
	}
	if s.top == nil {
		return
	}
	i := slices.IndexFunc(s.top, func(w weighted) bool { return w.class == c })
	inTop := i >= 0
	switch {
	case d > 0 && i >= 0:
		s.top[i].w = n
	case d > 0 && (len(s.top) < mixClasses || mixLess(weighted{c, n}, s.top[len(s.top)-1])):
		if len(s.top) == mixClasses {
			s.top = s.top[:len(s.top)-1]
		}
		s.top = append(s.top, weighted{c, n})
		i = len(s.top) - 1
	case d < 0 && i >= 0:
		before := len(s.mix)
		if n <= 0 {
			before++ // c was a class of its own
		}
		if before > len(s.top) {
			// A class outside the top may now pass c: recount.
			s.top, s.meters = nil, nil
			return
		}
		// The top holds every class: it stays so.
		if n <= 0 {
			s.top = slices.Delete(s.top, i, i+1)
			s.meters = nil
			return
		}
		s.top[i].w = n
	default:
		return // c is not in the top and does not enter it
	}
	// Move c to its place (the rest stays in order).
	for i > 0 && mixLess(s.top[i], s.top[i-1]) {
		s.top[i], s.top[i-1] = s.top[i-1], s.top[i]
		i--
	}
	for i+1 < len(s.top) && mixLess(s.top[i+1], s.top[i]) {
		s.top[i], s.top[i+1] = s.top[i+1], s.top[i]
		i++
	}
	if !inTop {
		s.meters = nil // a size entered the top
		return
	}
	for largest, fm := range s.meters {
		if !fm.adjust(c, d) {
			delete(s.meters, largest)
		}
	}
}

// mixLess orders the mix's classes for topClasses: the most common first,
// then the smallest.
func mixLess(a, b weighted) bool {
	if a.w != b.w {
		return a.w > b.w
	}
	return cmp.Or(cmp.Compare(a.gpus, b.gpus), cmp.Compare(a.cpu, b.cpu)) < 0
}

// Want counts that many replicas of job, which waits for GPUs, in the
// job-size mix fgd weighs (replacing what Want said of it before; 0 or
// less: as Unwant). A replica's part is counted as one node's share of the
// job's request, without a rack's VM overhead. The ork wants each job it
// queues and unwants it when it leaves the queue; a replay wants each pod
// that does not fit.
func (s *Snapshot) Want(job cosmic.Job, replicas int) {
	if s.mix == nil {
		return
	}
	s.Unwant(job.ID)
	if replicas <= 0 {
		return
	}
	g := job.Spec.GPUsPerReplica()
	vcpus, mem := job.Spec.NodeShare(g, g)
	c, _ := cosmic.VMOverhead{}.Charge(vcpus, mem, g)
	w := wantedJob{class{g, c}, int64(replicas)}
	if s.wanted == nil {
		s.wanted = map[string]wantedJob{}
	}
	s.wanted[job.ID] = w
	s.bumpMix(w.c, w.n)
}

// Unwant takes a job Want counted out of the mix.
func (s *Snapshot) Unwant(id string) {
	w, ok := s.wanted[id]
	if !ok {
		return
	}
	delete(s.wanted, id)
	s.bumpMix(w.c, -w.n)
}

// topClasses is the mix's mixClasses most common classes, by count, then
// size: the job sizes fgd weighs.
func (s *Snapshot) topClasses() []weighted {
	if s.top != nil {
		return s.top
	}
	top := make([]weighted, 0, mixClasses+1)
	for c, w := range s.mix {
		x := weighted{c, w}
		if len(top) == mixClasses && !mixLess(x, top[len(top)-1]) {
			continue
		}
		i := len(top)
		for i > 0 && mixLess(x, top[i-1]) {
			i--
		}
		top = slices.Insert(top, i, x)
		if len(top) > mixClasses {
			top = top[:mixClasses]
		}
	}
	s.top = top
	return top
}

// mixClasses is how many of the most common job sizes fgd weighs: on the
// openb trace, 32 do as well as 128 (docs/placement.md).
const mixClasses = 32

// Errors of Apply and Release; both wrap cosmic sentinels.
var (
	ErrReserved    = fmt.Errorf("replica already reserved: %w", cosmic.ErrConflict)
	ErrGPUTaken    = fmt.Errorf("GPU not free: %w", cosmic.ErrConflict)
	ErrNoSuchGPU   = fmt.Errorf("no such GPU: %w", cosmic.ErrInvalid)
	ErrNotReserved = fmt.Errorf("reservation not held: %w", cosmic.ErrNotFound)
	ErrNoRoom      = fmt.Errorf("not enough free CPU or memory: %w", cosmic.ErrConflict)
)

// Apply claims r's GPUs, CPU and memory. It fails, changing nothing, if the
// replica is already reserved, if a GPU is taken, claimed twice by r, or
// does not exist, or if a node lacks the free CPU or memory.
func (s *Snapshot) Apply(r cosmic.Reservation) error { return s.apply(r, false) }

func (s *Snapshot) apply(r cosmic.Reservation, allowUnknown bool) error {
	k := resKey{r.JobID, r.Replica}
	if _, ok := s.reserved[k]; ok {
		return fmt.Errorf("job %s replica %d: %w", r.JobID, r.Replica, ErrReserved)
	}
	type change struct {
		ni               int
		free             uint64
		cpuUsed, memUsed int64
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
		n := &s.nodes[ni]
		if a.CPUMilli < 0 || a.MemoryMiB < 0 {
			return fmt.Errorf("job %s replica %d: node %s: negative CPU or memory: %w", r.JobID, r.Replica, a.Node, ErrNoSuchGPU)
		}
		// Reservations being restored are kept even on a node that shrank.
		if !allowUnknown && a.CPUMilli > n.cpuFree() {
			return fmt.Errorf("job %s replica %d: node %s: %dm CPU asked, %dm free: %w", r.JobID, r.Replica, a.Node, a.CPUMilli, n.cpuFree(), ErrNoRoom)
		}
		if !allowUnknown && a.MemoryMiB > n.memFree() {
			return fmt.Errorf("job %s replica %d: node %s: %d MiB memory asked, %d MiB free: %w", r.JobID, r.Replica, a.Node, a.MemoryMiB, n.memFree(), ErrNoRoom)
		}
		changes = append(changes, change{ni, free, n.cpuUsed + a.CPUMilli, n.memUsed + a.MemoryMiB})
	}
	for _, c := range changes {
		s.setFree(c.ni, c.free, c.cpuUsed, c.memUsed)
	}
	s.reserved[k] = r
	s.countMix(r, +1)
	return nil
}

// Release frees the GPUs, CPU and memory of the reservation held by r's job and replica.
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
		n := &s.nodes[ni]
		free := n.free
		for _, i := range a.GPUs {
			free |= 1 << uint(i)
		}
		s.setFree(ni, free, n.cpuUsed-a.CPUMilli, n.memUsed-a.MemoryMiB)
	}
	s.countMix(held, -1)
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
		rackList:   s.rackList,
		rackIdx:    s.rackIdx,
		policy:     s.policy,
		groups:     make([]*group, len(s.groups)),
		reserved:   make(map[resKey]cosmic.Reservation, len(s.reserved)),
		mix:        maps.Clone(s.mix),
		wanted:     maps.Clone(s.wanted),
	}
	for i, g := range s.groups {
		ng := *g
		for f := range ng.buckets {
			ng.buckets[f] = slices.Clone(g.buckets[f])
		}
		ng.racks = slices.Clone(g.racks)
		ng.spare = nil
		if g.states != nil {
			ng.states = make(map[stateKey]*stateSet, len(g.states))
			for k, st := range g.states {
				ng.states[k] = &stateSet{bits: slices.Clone(st.bits), n: st.n}
			}
		}
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

// Used reports the CPU (millicores) and memory (MiB) reservations hold on a
// node, and whether the node is known.
func (s *Snapshot) Used(rack, nodeName string) (cpuMilli, memMiB int64, ok bool) {
	ni, ok := s.byName[nodeKey(rack, nodeName)]
	if !ok {
		return 0, 0, false
	}
	return s.nodes[ni].cpuUsed, s.nodes[ni].memUsed, true
}

// Policy is the placement policy of a location.
func (s *Snapshot) Policy(location string) string {
	return cmp.Or(s.policy[location], DefaultPolicy)
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
	cpu, mem := map[int]int64{}, map[int]int64{}
	mix := map[class]int64{}
	for _, w := range s.wanted {
		mix[w.c] += w.n
	}
	for _, r := range s.reserved {
		for _, a := range r.Nodes {
			ni, ok := s.byName[nodeKey(r.Rack, a.Node)]
			if !ok {
				continue
			}
			cpu[ni] += a.CPUMilli
			mem[ni] += a.MemoryMiB
			mix[class{len(a.GPUs), a.CPUMilli}]++
			for _, i := range a.GPUs {
				if claimed[ni]&(1<<uint(i)) != 0 {
					return fmt.Errorf("%w: GPU %d of %s claimed twice", errInvariant, i, a.Node)
				}
				claimed[ni] |= 1 << uint(i)
			}
		}
	}
	if s.top != nil {
		cached := s.top
		s.top = nil
		if fresh := s.topClasses(); !slices.Equal(cached, fresh) {
			return fmt.Errorf("%w: the mix's most common sizes cached as %v, a recount says %v", errInvariant, cached, fresh)
		}
		for largest, fm := range s.meters {
			fresh := buildMeter(s.top, largest)
			if fm.total != fresh.total {
				return fmt.Errorf("%w: fgd's meter for %d GPUs weighs %d, a rebuild %d", errInvariant, largest, fm.total, fresh.total)
			}
			for f := range fresh.cpu {
				for _, c := range fresh.cpu[f] {
					if a, b := fm.fit(f, c), fresh.fit(f, c); a != b {
						return fmt.Errorf("%w: fgd's meter for %d GPUs gives %d GPUs and %d CPU %d, a rebuild %d", errInvariant, largest, f, c, a, b)
					}
				}
			}
		}
	}
	if s.mix != nil && !maps.Equal(mix, s.mix) {
		return fmt.Errorf("%w: job-size mix %v, reservations say %v", errInvariant, s.mix, mix)
	}
	for ni, n := range s.nodes {
		if n.free != mask(n.total)&^claimed[ni] {
			return fmt.Errorf("%w: node %s free %b, reservations say %b", errInvariant, n.name, n.free, mask(n.total)&^claimed[ni])
		}
		if n.cpuUsed != cpu[ni] || n.memUsed != mem[ni] {
			return fmt.Errorf("%w: node %s holds %dm CPU and %d MiB, reservations say %dm and %d MiB", errInvariant, n.name, n.cpuUsed, n.memUsed, cpu[ni], mem[ni])
		}
	}
	for _, g := range s.groups {
		states := 0
		for k, st := range g.states {
			states += st.n
			for pos := range g.nodes {
				if st.bits[pos/64]&(1<<uint(pos%64)) == 0 {
					continue
				}
				n := &s.nodes[g.nodes[pos]]
				if !n.usable || bits.OnesCount64(n.free) != k.free || n.cpuFree() != k.cpu || n.memFree() != k.mem || n.ri != k.ri {
					return fmt.Errorf("%w: node %s in the wrong state %+v", errInvariant, n.name, k)
				}
			}
		}
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
		usable := 0
		for _, c := range hist {
			usable += c
		}
		if g.states != nil && states != usable {
			return fmt.Errorf("%w: group %s/%s: %d nodes in states, %d usable", errInvariant, g.location, g.model, states, usable)
		}
	}
	return nil
}
