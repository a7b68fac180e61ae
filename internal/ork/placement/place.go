package placement

import (
	"cmp"
	"fmt"
	"math/bits"
	"slices"
	"strings"

	"github.com/cosmicac/cosmicac/internal/cosmic"
)

// Decision is the outcome of Place: Placed, Wait or Impossible.
type Decision interface{ decision() }

// Placed reserves GPUs for the replicas that had none, one reservation per
// replica, ordered by replica. Apply each to commit the decision.
type Placed struct {
	Reservations []cosmic.Reservation
}

// Wait says the job fits the fleet but not its free GPUs now; it stays
// queued. Reason has code no_capacity.
type Wait struct {
	Reason     cosmic.Reason
	WaitingFor string // e.g. "8 × GH100_H100_SXM5_80GB in us"
}

// Impossible says the job can never be placed on this fleet; it fails.
// Reason has code no_such_location, no_such_gpu_model, exceeds_node_gpus,
// exceeds_location_gpus or invalid_spec.
type Impossible struct {
	Reason cosmic.Reason
}

func (Placed) decision()     {}
func (Wait) decision()       {}
func (Impossible) decision() {}

// Place decides where job's replicas run, without changing s. It places
// every replica 0..Replicas()-1 that holds no reservation in s, all or
// nothing. The rules (DESIGN §4):
//
//  1. Only racks of the job's location with the GPU model asked for (any
//     model of the location when resources.gpuModel is empty), and only
//     schedulable, ready nodes.
//  2. A gpu-container job and every non-vLLM replica run on one node.
//  3. A vLLM replica that fits one node (no more GPUs than the largest node
//     of the location holds) runs on one node; a larger one takes k nodes of
//     one rack, g/k GPUs each, with the smallest k that fits now.
//  4. Only free GPUs are used, each once.
//  5. If it fits the fleet but not now: Wait. If it could not fit even with
//     every node of the location empty, schedulable and ready: Impossible.
//
// Ranking: the node with the fewest free GPUs that still fit (bin-packing,
// keeping whole nodes free for big jobs), then rack ID, then node name; the
// lowest free GPU indices of a node.
func Place(s *Snapshot, job cosmic.Job) Decision {
	spec := job.Spec
	g, replicas := spec.GPUsPerReplica(), spec.Replicas()
	if g < 1 || g > cosmic.MaxGPUs {
		return Impossible{cosmic.NewReason(cosmic.ReasonInvalidSpec, fmt.Sprintf("a replica asks for %d GPUs", g))}
	}
	groups, imp := s.matching(spec.Location, spec.Resources.GPUModel)
	if imp != nil {
		return *imp
	}
	maxTotal, anyNodes := 0, false
	for _, gi := range groups {
		maxTotal = max(maxTotal, s.groups[gi].maxTotal)
		anyNodes = anyNodes || len(s.groups[gi].nodes) > 0
	}
	wait := func(note string) Decision {
		what := describe(spec, g, replicas)
		return Wait{Reason: cosmic.NewReason(cosmic.ReasonNoCapacity, what+note), WaitingFor: what}
	}
	if !anyNodes {
		return wait(": no node of the location has reported yet")
	}
	multi := spec.MultiNode() && g > maxTotal
	if g > maxTotal && !multi {
		return Impossible{cosmic.NewReason(cosmic.ReasonExceedsNodeGPUs,
			fmt.Sprintf("a replica asks for %d GPUs on one node; the largest node in %s holds %d", g, spec.Location, maxTotal))}
	}
	var capacity int
	switch {
	case multi:
		capacity = s.multiCapacity(groups, g, replicas)
	case replicas == 1:
		capacity = 1 // g <= maxTotal: some node holds it
	default:
		for _, gi := range groups {
			capacity += s.groups[gi].singleCapacity(g)
		}
	}
	if multi && capacity == 0 {
		return Impossible{cosmic.NewReason(cosmic.ReasonExceedsNodeGPUs,
			fmt.Sprintf("a replica of %d GPUs cannot be split evenly over the nodes of any one rack in %s (largest node: %d GPUs)", g, spec.Location, maxTotal))}
	}
	if capacity < replicas {
		return Impossible{cosmic.NewReason(cosmic.ReasonExceedsLocationGPUs,
			fmt.Sprintf("%d replicas of %d GPUs asked; the nodes of %s hold at most %d of them", replicas, g, spec.Location, capacity))}
	}

	var unplaced []int
	for rep := range replicas {
		if _, ok := s.reserved[resKey{job.ID, rep}]; !ok {
			unplaced = append(unplaced, rep)
		}
	}
	if !multi {
		if out, ok := s.tryPlace(job.ID, unplaced, func() (cosmic.Reservation, bool) { return s.pickSingle(groups, g) }); ok {
			return Placed{Reservations: out}
		}
		return wait("")
	}
	// Every replica of one decision spreads over the same number of nodes
	// k, the smallest that fits now. Several replicas are first ranked by
	// bin-packing; if that strands one, by most free GPUs first, which
	// places as many equal replicas as a rack can hold.
	for k := 2; k <= g; k++ {
		if g%k != 0 || g/k > MaxNodeGPUs {
			continue
		}
		for _, spread := range []bool{false, true} {
			if spread && len(unplaced) < 2 {
				break
			}
			if out, ok := s.tryPlace(job.ID, unplaced, func() (cosmic.Reservation, bool) { return s.pickMulti(groups, g, k, spread) }); ok {
				return Placed{Reservations: out}
			}
		}
	}
	return wait("")
}

// tryPlace picks and applies a reservation for each replica in turn, then
// releases them all again, leaving s as it was. It reports whether every
// replica got one.
func (s *Snapshot) tryPlace(jobID string, replicas []int, pick func() (cosmic.Reservation, bool)) ([]cosmic.Reservation, bool) {
	var out []cosmic.Reservation
	defer func() {
		for _, r := range out {
			_ = s.Release(r) // applied below, so held
		}
	}()
	for _, rep := range replicas {
		r, ok := pick()
		if !ok {
			return nil, false
		}
		r.JobID, r.Replica = jobID, rep
		if err := s.Apply(r); err != nil {
			panic(fmt.Sprintf("placement: picked GPUs that are not free: %v", err))
		}
		out = append(out, r)
	}
	return slices.Clone(out), true
}

// matching returns the groups of location with model (any model when
// empty), or why there are none.
func (s *Snapshot) matching(location, model string) ([]int, *Impossible) {
	all, ok := s.byLocation[location]
	if !ok {
		return nil, &Impossible{cosmic.NewReason(cosmic.ReasonNoSuchLocation, fmt.Sprintf("no rack is registered in location %q", location))}
	}
	if model == "" {
		return all, nil
	}
	for _, gi := range all {
		if s.groups[gi].model == model {
			return []int{gi}, nil
		}
	}
	var have []string
	for _, gi := range all {
		have = append(have, s.groups[gi].model)
	}
	return nil, &Impossible{cosmic.NewReason(cosmic.ReasonNoSuchGPUModel,
		fmt.Sprintf("no rack in %s has %s (it has %s)", location, model, strings.Join(have, ", ")))}
}

func describe(spec cosmic.Spec, g, replicas int) string {
	model := cmp.Or(spec.Resources.GPUModel, "GPU")
	if replicas > 1 {
		return fmt.Sprintf("%d replicas × %d × %s in %s", replicas, g, model, spec.Location)
	}
	return fmt.Sprintf("%d × %s in %s", g, model, spec.Location)
}

// singleCapacity is how many one-node replicas of g GPUs the group's nodes
// hold when empty.
func (gr *group) singleCapacity(g int) int {
	n := 0
	for _, rg := range gr.racks {
		for t := g; t <= MaxNodeGPUs; t++ {
			n += rg.totalHist[t] * (t / g)
		}
	}
	return n
}

// multiCapacity is how many replicas of g GPUs, each spread over k nodes
// of one rack with the same k for all, the groups hold when empty: the
// best k's count (at most want).
func (s *Snapshot) multiCapacity(groups []int, g, want int) int {
	best := 0
	for k := 2; k <= g; k++ {
		per := g / k
		if g%k != 0 || per > MaxNodeGPUs {
			continue
		}
		n := 0
		for _, gi := range groups {
			gr := s.groups[gi]
			for i := range gr.racks {
				n += gr.racks[i].maxReplicas(k, per, want-n)
				if n >= want {
					return want
				}
			}
		}
		best = max(best, n)
	}
	return best
}

// maxReplicas is the most replicas (at most want) of k nodes × per GPUs the
// rack holds when empty: the largest R with Σ min(slots(node), R) ≥ k·R,
// where slots(node) = total/per.
func (rg *rackGroup) maxReplicas(k, per, want int) int {
	fits := func(r int) bool {
		sum := 0
		for t := per; t <= MaxNodeGPUs; t++ {
			sum += rg.totalHist[t] * min(t/per, r)
		}
		return sum >= k*r
	}
	// Σ min(slots, R) − k·R is concave in R and 0 at R = 0, so the feasible
	// R form an interval [0, R*]: binary search for R*.
	lo, hi := 0, want
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if fits(mid) {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}

// pickSingle chooses the usable node with the fewest free GPUs ≥ g (then
// the lowest rack ID and node name) and its lowest free GPUs.
func (s *Snapshot) pickSingle(groups []int, g int) (cosmic.Reservation, bool) {
	bestF, bestNode := MaxNodeGPUs+1, -1
	for _, gi := range groups {
		gr := s.groups[gi]
		for f := g; f <= MaxNodeGPUs && f <= bestF; f++ {
			if gr.count[f] == 0 {
				continue
			}
			for w, word := range gr.buckets[f] {
				if word != 0 {
					ni := gr.nodes[w*64+bits.TrailingZeros64(word)]
					if f < bestF || ni < bestNode {
						bestF, bestNode = f, ni
					}
					break
				}
			}
			break
		}
	}
	if bestNode < 0 {
		return cosmic.Reservation{}, false
	}
	n := &s.nodes[bestNode]
	return cosmic.Reservation{Rack: n.rack, Nodes: []cosmic.NodeAlloc{{Node: n.name, GPUs: indices(n.free, g)}}}, true
}

// pickMulti chooses k usable nodes of one rack with at least per = g/k
// free GPUs each. Bin-packing (spread false): the rack whose k fullest
// fitting nodes leave the fewest free GPUs, then the lowest rack ID, and
// those nodes. Spread: the rack with the most fitting nodes, then the
// lowest rack ID, and its k nodes with the most free GPUs. Ties between
// nodes go to the lowest node name; each node gives its lowest free GPUs.
func (s *Snapshot) pickMulti(groups []int, g, k int, spread bool) (cosmic.Reservation, bool) {
	per := g / k
	var best *rackGroup
	bestScore := 0
	for _, gi := range groups {
		gr := s.groups[gi]
		for i := range gr.racks {
			rg := &gr.racks[i]
			score, need, fit := 0, k, 0
			for f := per; f <= MaxNodeGPUs; f++ {
				fit += rg.freeHist[f]
				take := min(need, rg.freeHist[f])
				score += take * f
				need -= take
			}
			if need > 0 {
				continue
			}
			if spread {
				score = -fit
			}
			if best == nil || score < bestScore || score == bestScore && rg.id < best.id {
				best, bestScore = rg, score
			}
		}
	}
	if best == nil {
		return cosmic.Reservation{}, false
	}
	cands := make([]int, 0, len(best.nodes))
	for _, ni := range best.nodes {
		if n := s.nodes[ni]; n.usable && bits.OnesCount64(n.free) >= per {
			cands = append(cands, ni)
		}
	}
	slices.SortFunc(cands, func(a, b int) int {
		fa, fb := bits.OnesCount64(s.nodes[a].free), bits.OnesCount64(s.nodes[b].free)
		if spread {
			fa, fb = fb, fa
		}
		return cmp.Or(cmp.Compare(fa, fb), cmp.Compare(a, b))
	})
	cands = cands[:k]
	slices.Sort(cands)
	r := cosmic.Reservation{Rack: best.id}
	for _, ni := range cands {
		r.Nodes = append(r.Nodes, cosmic.NodeAlloc{Node: s.nodes[ni].name, GPUs: indices(s.nodes[ni].free, per)})
	}
	return r, true
}
