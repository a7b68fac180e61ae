package placement

import (
	"cmp"
	"fmt"
	"math/bits"
	"slices"
	"strconv"
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
// exceeds_node_cpu, exceeds_node_memory, exceeds_location_gpus or
// invalid_spec.
type Impossible struct {
	Reason cosmic.Reason
}

func (Placed) decision()     {}
func (Wait) decision()       {}
func (Impossible) decision() {}

// Place decides where job's replicas run, without changing s. It places
// every replica 0..Replicas()-1 that holds no reservation in s, all or
// nothing. The rules (docs/placement.md):
//
//  1. Only racks of the job's location with the GPU model asked for (any
//     model of the location when resources.gpuModel is empty), and only
//     schedulable, ready nodes.
//  2. A gpu-container job and every non-vLLM replica run on one node.
//  3. A vLLM replica that fits one node (no more GPUs than the largest node
//     of the location holds) runs on one node; a larger one takes k nodes of
//     one rack, g/k GPUs each, with the smallest k that fits now.
//  4. Only free GPUs are used, each once, and only nodes with the free CPU
//     and memory the replica's VM takes there (its share of the job's
//     resources.cpu and resources.memory plus the rack's VM overhead).
//  5. If it fits the fleet but not now: Wait. If it could not fit even with
//     every node of the location empty, schedulable and ready: Impossible.
//
// Ranking of one-node replicas, by the location's policy: best-fit, the
// node with the fewest free GPUs that still fit (bin-packing, keeping whole
// nodes free for big jobs); fgd, the node where the replica least
// fragments the location for the job sizes it holds, then as best-fit.
// Then rack ID, then node name; the lowest free GPU indices of a node.
// Multi-node replicas rank as best-fit whatever the policy.
func Place(s *Snapshot, job cosmic.Job) Decision { return PlaceOn(s, job, "") }

// PlaceOn is Place with the job's replicas kept to one rack when rack is
// not empty: the rack that keeps a standalone volume the job mounts
// (docs/data.md). Only a one-node replica may be kept to a rack (a
// gpu-container job's). A rack not in s (gone, or not reported yet) is
// waited for.
func PlaceOn(s *Snapshot, job cosmic.Job, rack string) Decision {
	spec := job.Spec
	g, replicas := spec.GPUsPerReplica(), spec.Replicas()
	pin := -1
	if rack != "" {
		ri, ok := s.rackIdx[rack]
		if !ok {
			what := describe(spec, g, replicas) + " on rack " + rack
			return Wait{Reason: cosmic.NewReason(cosmic.ReasonNoCapacity, what+": the rack that keeps the job's standalone volume has not reported"), WaitingFor: what}
		}
		if spec.MultiNode() {
			return Impossible{cosmic.NewReason(cosmic.ReasonInvalidSpec, "a replica that may span nodes cannot be kept to one rack's standalone volume")}
		}
		pin = ri
	}
	if g < 1 || g > cosmic.MaxGPUs {
		return Impossible{cosmic.NewReason(cosmic.ReasonInvalidSpec, fmt.Sprintf("a replica asks for %d GPUs", g))}
	}
	if spec.Resources.CPU < 0 || spec.Resources.Memory < 0 {
		return Impossible{cosmic.NewReason(cosmic.ReasonInvalidSpec, "negative CPU or memory")}
	}
	groups, imp := s.matching(spec.Location, spec.Resources.GPUModel)
	if imp != nil {
		return *imp
	}
	if pin >= 0 && !slices.ContainsFunc(groups, func(gi int) bool {
		return slices.ContainsFunc(s.groups[gi].racks, func(rg rackGroup) bool { return rg.ri == pin })
	}) {
		return Impossible{cosmic.NewReason(cosmic.ReasonInvalidSpec, fmt.Sprintf("the job's standalone volume is kept on rack %s, which is not in %s with %s: create the job there",
			rack, spec.Location, cmp.Or(spec.Resources.GPUModel, "GPUs")))}
	}
	maxTotal, anyNodes := 0, false
	for _, gi := range groups {
		maxTotal = max(maxTotal, s.groups[gi].maxTotal)
		anyNodes = anyNodes || len(s.groups[gi].nodes) > 0
	}
	wait := func(note string) Decision {
		what := describe(spec, g, replicas)
		if strings.HasPrefix(note, ": waiting for") {
			// CPU or memory: what it waits for says which.
			what += note
			return Wait{Reason: cosmic.NewReason(cosmic.ReasonNoCapacity, what), WaitingFor: what}
		}
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
	var (
		capacity int
		short    *cosmic.Reason
	)
	if multi {
		capacity, short = s.multiCapacity(groups, spec, g, replicas)
	} else {
		capacity, short = s.singleCapacity(groups, spec, g, replicas, pin)
	}
	if capacity == 0 && short != nil {
		return Impossible{*short}
	}
	if multi && capacity == 0 {
		return Impossible{cosmic.NewReason(cosmic.ReasonExceedsNodeGPUs,
			fmt.Sprintf("a replica of %d GPUs cannot be split evenly over the nodes of any one rack in %s (largest node: %d GPUs)", g, spec.Location, maxTotal))}
	}
	if capacity < replicas && pin >= 0 {
		return Impossible{cosmic.NewReason(cosmic.ReasonExceedsNodeGPUs,
			fmt.Sprintf("no node of rack %s, which keeps the job's standalone volume, holds a replica of %d GPUs", rack, g))}
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
		pick := func() (cosmic.Reservation, bool) { return s.pickSingle(groups, spec, g, pin) }
		if s.Policy(spec.Location) == cosmic.PolicyFGD {
			pick = func() (cosmic.Reservation, bool) { return s.pickFGD(groups, spec, g, pin) }
		}
		if out, ok := s.tryPlace(job.ID, unplaced, pick); ok {
			return Placed{Reservations: out}
		}
		return wait(s.shortNow(groups, spec, g, g, pin))
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
			if out, ok := s.tryPlace(job.ID, unplaced, func() (cosmic.Reservation, bool) { return s.pickMulti(groups, spec, g, k, spread) }); ok {
				return Placed{Reservations: out}
			}
		}
	}
	return wait("")
}

// charge is what the part of a replica of g GPUs with gpus of them takes
// on a node of rack ri: CPU millicores and MiB.
func (s *Snapshot) charge(spec cosmic.Spec, ri, gpus, g int) (int64, int64) {
	vcpus, mem := spec.NodeShare(gpus, g)
	return s.rackList[ri].overhead.Charge(vcpus, mem, gpus)
}

// shortNow says what a one-node part of per GPUs waits for when some usable
// node has the GPUs free but none also has the CPU or memory: a note for
// the Wait reason ("" when GPUs are what it waits for).
func (s *Snapshot) shortNow(groups []int, spec cosmic.Spec, per, g, pin int) string {
	gpus, cpu, mem := false, false, false
	var cpuAsk, memAsk, cpuBest, memBest int64
	for _, gi := range groups {
		gr := s.groups[gi]
		for _, ni := range gr.nodes {
			n := &s.nodes[ni]
			if !n.usable || bits.OnesCount64(n.free) < per || pin >= 0 && n.ri != pin {
				continue
			}
			gpus = true
			c, m := s.charge(spec, n.ri, per, g)
			cpuAsk, memAsk = c, m
			cpuBest, memBest = max(cpuBest, n.cpuFree()), max(memBest, n.memFree())
			if n.fits(c, m) {
				return ""
			}
			cpu = cpu || n.cpuFree() >= c
			mem = mem || n.memFree() >= m
		}
	}
	switch {
	case !gpus:
		return ""
	case !cpu:
		return fmt.Sprintf(": waiting for CPU: nodes with %d free GPUs have at most %s free, %s asked", per, milli(cpuBest), milli(cpuAsk))
	case !mem:
		return fmt.Sprintf(": waiting for memory: nodes with %d free GPUs have at most %d MiB free, %d MiB asked", per, memBest, memAsk)
	default:
		return fmt.Sprintf(": waiting for CPU and memory together: no node with %d free GPUs has both %s and %d MiB free", per, milli(cpuAsk), memAsk)
	}
}

// milli writes millicores as vCPUs.
func milli(m int64) string {
	if m%1000 == 0 {
		return fmt.Sprintf("%d vCPU", m/1000)
	}
	return fmt.Sprintf("%.3g vCPU", float64(m)/1000)
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
		return nil, &Impossible{cosmic.NewReason(cosmic.ReasonNoSuchLocation, strconv.Quote(location))}
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

// slots is how many parts of per GPUs of a replica of g GPUs a node of
// shape sh on rack ri holds when empty, and, when none for want of CPU or
// memory, which.
func (s *Snapshot) slots(sh shape, ri int, spec cosmic.Spec, per, g int) (int, cosmic.ReasonCode) {
	n := sh.gpus / per
	if n == 0 {
		return 0, ""
	}
	c, m := s.charge(spec, ri, per, g)
	if sh.cpu > 0 && c > 0 {
		if n = min(n, int(sh.cpu/c)); n == 0 {
			return 0, cosmic.ReasonExceedsNodeCPU
		}
	}
	if sh.mem > 0 && m > 0 {
		if n = min(n, int(sh.mem/m)); n == 0 {
			return 0, cosmic.ReasonExceedsNodeMemory
		}
	}
	return n, ""
}

// singleCapacity is how many one-node replicas of g GPUs the groups' nodes
// hold when empty (counting stops at want) and, when none for want of CPU
// or memory, why.
func (s *Snapshot) singleCapacity(groups []int, spec cosmic.Spec, g, want, pin int) (int, *cosmic.Reason) {
	n := 0
	var (
		why              cosmic.ReasonCode
		cpuBest, memBest int64
	)
	for _, gi := range groups {
		for _, rg := range s.groups[gi].racks {
			if pin >= 0 && rg.ri != pin {
				continue
			}
			for _, sh := range rg.shapes {
				k, w := s.slots(sh, rg.ri, spec, g, g)
				if n += sh.count * k; n >= want {
					return n, nil
				}
				if w != "" {
					why = cmp.Or(why, w)
					cpuBest, memBest = max(cpuBest, sh.cpu), max(memBest, sh.mem)
				}
			}
		}
	}
	if n > 0 || why == "" {
		return n, nil
	}
	c, m := s.charge(spec, 0, g, g)
	if len(groups) > 0 && len(s.groups[groups[0]].racks) > 0 {
		c, m = s.charge(spec, s.groups[groups[0]].racks[0].ri, g, g)
	}
	return 0, shortReason(why, spec, g, c, m, cpuBest, memBest)
}

func shortReason(why cosmic.ReasonCode, spec cosmic.Spec, g int, c, m, cpuBest, memBest int64) *cosmic.Reason {
	var r cosmic.Reason
	if why == cosmic.ReasonExceedsNodeCPU {
		r = cosmic.NewReason(why, fmt.Sprintf("a replica's VM takes %s with its overhead on a node with %d of its GPUs; the largest such node in %s gives %s",
			milli(c), g, spec.Location, milli(cpuBest)))
	} else {
		r = cosmic.NewReason(why, fmt.Sprintf("a replica's VM takes %d MiB with its overhead on a node with %d of its GPUs; the largest such node in %s gives %d MiB",
			m, g, spec.Location, memBest))
	}
	return &r
}

// multiCapacity is how many replicas of g GPUs, each spread over k nodes
// of one rack with the same k for all, the groups hold when empty: the
// best k's count (at most want), and, when none for want of CPU or memory,
// why.
func (s *Snapshot) multiCapacity(groups []int, spec cosmic.Spec, g, want int) (int, *cosmic.Reason) {
	best := 0
	var (
		why              cosmic.ReasonCode
		cpuBest, memBest int64
		askC, askM       int64
		askPer           int
	)
	for k := 2; k <= g; k++ {
		per := g / k
		if g%k != 0 || per > MaxNodeGPUs {
			continue
		}
		n := 0
		for _, gi := range groups {
			gr := s.groups[gi]
			for i := range gr.racks {
				rg := &gr.racks[i]
				var hist [MaxNodeGPUs + 1]int
				for _, sh := range rg.shapes {
					sl, w := s.slots(sh, rg.ri, spec, per, g)
					hist[sl] += sh.count
					if w != "" && why == "" {
						why, askPer = w, per
						askC, askM = s.charge(spec, rg.ri, per, g)
					}
					if w != "" {
						cpuBest, memBest = max(cpuBest, sh.cpu), max(memBest, sh.mem)
					}
				}
				n += maxReplicas(&hist, k, want-n)
				if n >= want {
					return want, nil
				}
			}
		}
		best = max(best, n)
	}
	if best > 0 || why == "" {
		return best, nil
	}
	return 0, shortReason(why, spec, askPer, askC, askM, cpuBest, memBest)
}

// maxReplicas is the most replicas (at most want) of k nodes, one part
// each, that nodes with slots[s] nodes holding s parts hold: the largest R
// with Σ min(s, R)·slots[s] ≥ k·R.
func maxReplicas(slots *[MaxNodeGPUs + 1]int, k, want int) int {
	fits := func(r int) bool {
		sum := 0
		for sl := 1; sl <= MaxNodeGPUs; sl++ {
			sum += slots[sl] * min(sl, r)
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

// pickSingle chooses, by best-fit, the usable node with the fewest free
// GPUs ≥ g that has the free CPU and memory too (then the lowest rack ID
// and node name), and its lowest free GPUs.
func (s *Snapshot) pickSingle(groups []int, spec cosmic.Spec, g, pin int) (cosmic.Reservation, bool) {
	bestF, bestNode := MaxNodeGPUs+1, -1
	for _, gi := range groups {
		gr := s.groups[gi]
		for f := g; f <= MaxNodeGPUs && f <= bestF; f++ {
			if gr.count[f] == 0 {
				continue
			}
			found := false
			for w, word := range gr.buckets[f] {
				for word != 0 {
					ni := gr.nodes[w*64+bits.TrailingZeros64(word)]
					word &= word - 1
					n := &s.nodes[ni]
					if pin >= 0 && n.ri != pin {
						continue
					}
					if c, m := s.charge(spec, n.ri, g, g); !n.fits(c, m) {
						continue
					}
					if f < bestF || ni < bestNode {
						bestF, bestNode = f, ni
					}
					found = true
					break
				}
				if found {
					break
				}
			}
			if found {
				break
			}
		}
	}
	if bestNode < 0 {
		return cosmic.Reservation{}, false
	}
	return s.reserve(bestNode, spec, g), true
}

// reserve is the reservation of g GPUs of node ni for a one-node replica.
func (s *Snapshot) reserve(ni int, spec cosmic.Spec, g int) cosmic.Reservation {
	n := &s.nodes[ni]
	c, m := s.charge(spec, n.ri, g, g)
	return cosmic.Reservation{Rack: n.rack, Nodes: []cosmic.NodeAlloc{{Node: n.name, GPUs: indices(n.free, g), CPUMilli: c, MemoryMiB: m}}}
}

// pickFGD chooses, by fragmentation gradient descent, the usable node
// where a one-node replica of g GPUs least raises the location's expected
// fragmentation: for each job size of the mix (the most common sizes held
// or waiting, and this job's), the free GPUs of a node are fragmented when
// that size does not fit the node on GPUs or CPU; weighed by how common the
// size is. Beside the mix, a job of a whole node of the largest size is
// weighed as one in twenty (wholeNodePrior): what the mix does not tell,
// the fleet's shape does; where the mix gives no reason to choose, a
// replica goes where it leaves whole nodes whole. Ties go to the fewest
// free GPUs, then the lowest rack ID and node name. Nodes in one state
// score alike, so it scores states, not nodes.
func (s *Snapshot) pickFGD(groups []int, spec cosmic.Spec, g, pin int) (cosmic.Reservation, bool) {
	largest := 0
	for _, gi := range groups {
		largest = max(largest, s.groups[gi].maxTotal)
	}
	fm := s.meter(largest)
	var (
		bestD          int64
		bestF, bestPos int
		best           *group
	)
	for _, gi := range groups {
		gr := s.groups[gi]
		for k, st := range gr.states {
			if k.free < g || pin >= 0 && k.ri != pin {
				continue
			}
			c, m := s.charge(spec, k.ri, g, g)
			if k.cpu < c || k.mem < m {
				continue
			}
			own := class{g, c}
			d := fm.frag(own, k.free-g, k.cpu-c) - fm.frag(own, k.free, k.cpu)
			if best != nil && (d > bestD || d == bestD && k.free > bestF) {
				continue
			}
			pos := st.first()
			if best != nil && d == bestD && k.free == bestF && gr.nodes[pos] > best.nodes[bestPos] {
				continue
			}
			best, bestD, bestF, bestPos = gr, d, k.free, pos
		}
	}
	if best == nil {
		return cosmic.Reservation{}, false
	}
	return s.reserve(best.nodes[bestPos], spec, g), true
}

// wholeNodePrior is the weight fgd gives a job of a whole node of the
// largest size, in percent of the mix's: on the openb trace, 5% takes the
// GPUs unallocated at full demand from 0.47% to 0.05% (default workload)
// and from 2.12% to 0.37% (multigpu50), where 2% and 10% do about as well
// and 50% worse (docs/placement.md).
const wholeNodePrior = 5

// fragMeter measures a node's expected fragmentation over a mix: for each
// count of free GPUs f, the mix's sizes of at most f GPUs by CPU, with the
// running sum of their weights, so that the weight of the sizes that fit a
// node is one binary search.
type fragMeter struct {
	total int64     // the mix's weight and the prior's, in hundredths of a job
	cpu   [][]int64 // [f]: the CPUs of the sizes of ≤ f GPUs, ascending
	gpus  [][]int   // [f][i]: the GPUs of the size at cpu[f][i]
	sum   [][]int64 // [f][i]: the weight of cpu[f][:i+1]
	// jobs is the mix's weight in jobs; prior the whole node's weight,
	// at priorAt in the last row.
	jobs, prior int64
	priorAt     int
}

// meter is the fragMeter of the mix's most common sizes and a whole node
// of largest GPUs, cached until the mix's top changes (a count that moves
// within it adjusts the cached meters: bumpMix).
func (s *Snapshot) meter(largest int) *fragMeter {
	mix := s.topClasses()
	if fm := s.meters[largest]; fm != nil {
		return fm
	}
	fm := buildMeter(mix, largest)
	if s.meters == nil {
		s.meters = map[int]*fragMeter{}
	}
	s.meters[largest] = fm
	return fm
}

func buildMeter(mix []weighted, largest int) *fragMeter {
	// Weights in hundredths of a job, so that the prior is its share of
	// even a mix of a few jobs.
	type entry struct {
		weighted
		prior bool
	}
	ws := make([]entry, 0, len(mix)+1)
	fm := &fragMeter{cpu: make([][]int64, largest+1), gpus: make([][]int, largest+1), sum: make([][]int64, largest+1), priorAt: -1}
	for _, w := range mix {
		ws = append(ws, entry{weighted{w.class, w.w * 100}, false})
		fm.jobs += w.w
	}
	fm.prior = max(1, fm.jobs*wholeNodePrior)
	ws = append(ws, entry{weighted{class{largest, 0}, fm.prior}, true})
	for _, w := range ws {
		fm.total += w.w
	}
	slices.SortFunc(ws, func(a, b entry) int { return cmp.Compare(a.cpu, b.cpu) })
	n := (largest + 1) * len(ws)
	cpus, gpus, sums := make([]int64, 0, n), make([]int, 0, n), make([]int64, 0, n)
	for f := range largest + 1 {
		from := len(cpus)
		var run int64
		for _, w := range ws {
			if w.gpus <= f {
				if w.prior {
					fm.priorAt = len(cpus) - from
				}
				run += w.w
				cpus = append(cpus, w.cpu)
				gpus = append(gpus, w.gpus)
				sums = append(sums, run)
			}
		}
		fm.cpu[f], fm.gpus[f], fm.sum[f] = cpus[from:len(cpus):len(cpus)], gpus[from:len(gpus):len(gpus)], sums[from:len(sums):len(sums)]
	}
	return fm
}

// adjust moves the count of c, a size the meter holds, by d jobs (and the
// prior with the mix's weight). It reports false if c is not there.
func (fm *fragMeter) adjust(c class, d int64) bool {
	last := len(fm.cpu) - 1
	for f := c.gpus; f <= last; f++ {
		j, _ := slices.BinarySearch(fm.cpu[f], c.cpu)
		for j < len(fm.cpu[f]) && fm.cpu[f][j] == c.cpu && (fm.gpus[f][j] != c.gpus || f == last && j == fm.priorAt) {
			j++
		}
		if j == len(fm.cpu[f]) || fm.cpu[f][j] != c.cpu {
			return false
		}
		for k := j; k < len(fm.sum[f]); k++ {
			fm.sum[f][k] += d * 100
		}
	}
	fm.total += d * 100
	fm.jobs += d
	if p := max(1, fm.jobs*wholeNodePrior); p != fm.prior {
		for k := fm.priorAt; k < len(fm.sum[last]); k++ {
			fm.sum[last][k] += p - fm.prior
		}
		fm.total += p - fm.prior
		fm.prior = p
	}
	return true
}

// fit is the weight of the sizes that fit a node with free GPUs and cpu
// free (free at most the meter's largest).
func (fm *fragMeter) fit(free int, cpu int64) int64 {
	if i, _ := slices.BinarySearch(fm.cpu[free], cpu+1); i > 0 {
		return fm.sum[free][i-1]
	}
	return 0
}

// frag is the expected fragmentation of a node with free GPUs and cpu
// free over the mix and one more job of size own: Σ weight × free GPUs
// over the sizes that do not fit.
func (fm *fragMeter) frag(own class, free int, cpu int64) int64 {
	if free <= 0 {
		return 0
	}
	// The sizes of ≤ free GPUs with CPU ≤ cpu: a prefix of their row.
	miss := fm.total - fm.fit(min(free, len(fm.cpu)-1), cpu)
	if own.gpus > free || own.cpu > cpu {
		miss += 100
	}
	return miss * int64(free)
}

// pickMulti chooses k usable nodes of one rack with at least per = g/k
// free GPUs each and the free CPU and memory of its part. Bin-packing
// (spread false): the rack whose k fullest fitting nodes leave the fewest
// free GPUs, then the lowest rack ID, and those nodes. Spread: the rack
// with the most fitting nodes, then the lowest rack ID, and its k nodes
// with the most free GPUs. Ties between nodes go to the lowest node name;
// each node gives its lowest free GPUs.
func (s *Snapshot) pickMulti(groups []int, spec cosmic.Spec, g, k int, spread bool) (cosmic.Reservation, bool) {
	per := g / k
	var (
		best      *rackGroup
		bestScore int
		c, m      int64
	)
	fitting := func(ni int) bool {
		n := &s.nodes[ni]
		return n.usable && bits.OnesCount64(n.free) >= per && n.fits(c, m)
	}
	for _, gi := range groups {
		gr := s.groups[gi]
		for i := range gr.racks {
			rg := &gr.racks[i]
			c, m = s.charge(spec, rg.ri, per, g)
			hist := &rg.freeHist
			if rg.limited {
				// Too few nodes with the GPUs: no need to look at CPU.
				fit := 0
				for f := per; f <= MaxNodeGPUs; f++ {
					fit += rg.freeHist[f]
				}
				if fit < k {
					continue
				}
				hist = new([MaxNodeGPUs + 1]int)
				for _, ni := range rg.nodes {
					if fitting(ni) {
						hist[bits.OnesCount64(s.nodes[ni].free)]++
					}
				}
			}
			score, need, fit := 0, k, 0
			for f := per; f <= MaxNodeGPUs; f++ {
				fit += hist[f]
				take := min(need, hist[f])
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
	c, m = s.charge(spec, best.ri, per, g)
	cands := make([]int, 0, len(best.nodes))
	for _, ni := range best.nodes {
		if fitting(ni) {
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
		r.Nodes = append(r.Nodes, cosmic.NodeAlloc{Node: s.nodes[ni].name, GPUs: indices(s.nodes[ni].free, per), CPUMilli: c, MemoryMiB: m})
	}
	return r, true
}
