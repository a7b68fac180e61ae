package placement

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/cosmicac/cosmicac/internal/cosmic"
)

// world is a random fleet and the oracle's view of it.
type world struct {
	racks     []cosmic.Rack
	nodes     []cosmic.Node
	rack      map[string]cosmic.Rack
	node      map[[2]string]cosmic.Node
	overheads map[string]cosmic.VMOverhead
	policy    string // the default
}

func (w *world) options() []Option {
	return []Option{WithOverheads(w.overheads), WithDefaultPolicy(w.policy)}
}

func (w *world) snapshot(t *testing.T, nodes []cosmic.Node, res []cosmic.Reservation) *Snapshot {
	t.Helper()
	s, err := NewSnapshot(w.racks, nodes, res, w.options()...)
	if err != nil {
		t.Fatalf("NewSnapshot: %v", err)
	}
	return s
}

func randomWorld(rng *rand.Rand) *world {
	w := &world{rack: map[string]cosmic.Rack{}, node: map[[2]string]cosmic.Node{}, overheads: map[string]cosmic.VMOverhead{},
		policy: []string{cosmic.PolicyBestFit, cosmic.PolicyFGD}[rng.IntN(2)]}
	locations := 1 + rng.IntN(3)
	for r := range 1 + rng.IntN(5) {
		rk := cosmic.Rack{ID: fmt.Sprintf("r%d", r), Type: cosmic.RackTypeServer,
			Location: fmt.Sprintf("l%d", rng.IntN(locations)), GPUModel: []string{"A", "B"}[rng.IntN(2)],
			PlacementPolicy: []string{"", "", cosmic.PolicyBestFit, cosmic.PolicyFGD}[rng.IntN(4)]}
		w.racks = append(w.racks, rk)
		w.rack[rk.ID] = rk
		if rng.IntN(2) == 0 {
			w.overheads[rk.ID] = cosmic.VMOverhead{CPUMilli: int64(rng.IntN(500)), MemoryMiB: int64(rng.IntN(300)),
				MemoryMiBPerVCPU: int64(rng.IntN(10)), MemoryMiBPerGPU: int64(rng.IntN(1024)), MemoryPerGuestGiBMiB: int64(rng.IntN(3))}
		}
		for n := range rng.IntN(7) {
			nd := cosmic.Node{Name: fmt.Sprintf("n%d", n), Rack: rk.ID, GPUs: []int{1, 2, 4, 8, 8, 8, 3}[rng.IntN(7)],
				Schedulable: rng.IntN(10) > 0, Ready: rng.IntN(10) > 0}
			if rng.IntN(8) == 0 {
				nd.GPUModel = "C"
			}
			// Most nodes report CPU and memory, from scarce to ample.
			if rng.IntN(6) > 0 {
				nd.CPUMilli = int64(nd.GPUs) * int64([]int{2000, 8000, 16000, 32000}[rng.IntN(4)])
				nd.MemoryMiB = int64(nd.GPUs) * int64([]int{16, 64, 128, 256}[rng.IntN(4)]) * 1024
			}
			w.nodes = append(w.nodes, nd)
			w.node[[2]string{nd.Rack, nd.Name}] = nd
		}
	}
	return w
}

func randomJob(rng *rand.Rand, id string) cosmic.Job {
	loc := fmt.Sprintf("l%d", rng.IntN(4)) // l3 never exists
	model := []string{"", "", "A", "B", "C", "D"}[rng.IntN(6)]
	var j cosmic.Job
	switch rng.IntN(3) {
	case 0:
		j = container(id, loc, model, 1+rng.IntN(10))
	case 1:
		j = inference(id, loc, model, cosmic.RuntimeParakeet, 1+rng.IntN(2), 1+rng.IntN(2))
	default:
		j = vllm(id, loc, model, []int{1, 2, 4, 6, 8, 12, 16, 24, 32}[rng.IntN(9)], 1+rng.IntN(3))
	}
	// CPU and memory: none, the defaults per GPU, or CPU- or memory-heavy.
	g := j.Spec.GPUsPerReplica()
	switch rng.IntN(4) {
	case 0:
		j.Spec.Resources.CPU, j.Spec.Resources.Memory = 0, 0
	case 1:
		j.Spec.Resources.CPU, j.Spec.Resources.Memory = cosmic.DefaultCPUPerGPU*g, cosmic.DefaultMemoryPerGPU*g
	case 2:
		j.Spec.Resources.CPU = g * (1 + rng.IntN(40))
	default:
		j.Spec.Resources.Memory = g * (1 + rng.IntN(300))
	}
	return j
}

// ideal is the fleet with every node schedulable and ready and nothing reserved.
func (w *world) ideal(t *testing.T) *Snapshot {
	nodes := make([]cosmic.Node, len(w.nodes))
	for i, n := range w.nodes {
		n.Schedulable, n.Ready = true, true
		nodes[i] = n
	}
	return w.snapshot(t, nodes, nil)
}

// checkClaims verifies, apart from the snapshot's own bookkeeping, that no
// GPU is claimed twice and every claim is within its node's capacity: GPUs,
// CPU and memory.
func (w *world) checkClaims(t *testing.T, live []cosmic.Reservation) {
	t.Helper()
	claimed := map[cosmic.GPURef]string{}
	cpu, mem := map[[2]string]int64{}, map[[2]string]int64{}
	for _, r := range live {
		for _, a := range r.Nodes {
			k := [2]string{r.Rack, a.Node}
			cpu[k] += a.CPUMilli
			mem[k] += a.MemoryMiB
			n := w.node[k]
			if n.CPUMilli > 0 && cpu[k] > n.CPUMilli || n.MemoryMiB > 0 && mem[k] > n.MemoryMiB {
				t.Fatalf("node %s/%s overcommitted: %dm of %dm CPU, %d of %d MiB", r.Rack, a.Node, cpu[k], n.CPUMilli, mem[k], n.MemoryMiB)
			}
		}
		for _, g := range r.GPUs() {
			n, ok := w.node[[2]string{g.Rack, g.Node}]
			if !ok || g.Index < 0 || g.Index >= n.GPUs {
				t.Fatalf("%s replica %d claims %s beyond capacity", r.JobID, r.Replica, g)
			}
			if other, dup := claimed[g]; dup {
				t.Fatalf("%s claimed by %s and %s replica %d", g, other, r.JobID, r.Replica)
			}
			claimed[g] = r.JobID
		}
	}
}

// checkPlaced verifies a decision's reservations against the rules.
func (w *world) checkPlaced(t *testing.T, s *Snapshot, j cosmic.Job, p Placed) {
	t.Helper()
	spec := j.Spec
	g := spec.GPUsPerReplica()
	if len(p.Reservations) != spec.Replicas() {
		t.Fatalf("%s: %d reservations for %d replicas", j.ID, len(p.Reservations), spec.Replicas())
	}
	maxTotal := 0
	for _, n := range w.nodes {
		m := n.GPUModel
		if m == "" {
			m = w.rack[n.Rack].GPUModel
		}
		if w.rack[n.Rack].Location == spec.Location && (spec.Resources.GPUModel == "" || m == spec.Resources.GPUModel) {
			maxTotal = max(maxTotal, n.GPUs)
		}
	}
	for i, r := range p.Reservations {
		if r.JobID != j.ID || r.Replica != i || r.Count() != g {
			t.Fatalf("%s: bad reservation %+v", j.ID, r)
		}
		rk := w.rack[r.Rack]
		if rk.Location != spec.Location {
			t.Fatalf("%s: rack %s is in %s, not %s", j.ID, r.Rack, rk.Location, spec.Location)
		}
		if len(r.Nodes) > 1 && (!spec.MultiNode() || g <= maxTotal) {
			t.Fatalf("%s: a replica that must run on one node spans %d", j.ID, len(r.Nodes))
		}
		seen := map[string]bool{}
		for _, a := range r.Nodes {
			n, ok := w.node[[2]string{r.Rack, a.Node}]
			if !ok || !n.Schedulable || !n.Ready || seen[a.Node] {
				t.Fatalf("%s: node %s/%s unknown, unusable or used twice", j.ID, r.Rack, a.Node)
			}
			seen[a.Node] = true
			m := n.GPUModel
			if m == "" {
				m = rk.GPUModel
			}
			if spec.Resources.GPUModel != "" && m != spec.Resources.GPUModel {
				t.Fatalf("%s: node %s has %s, not %s", j.ID, a.Node, m, spec.Resources.GPUModel)
			}
			if len(a.GPUs) != len(r.Nodes[0].GPUs) {
				t.Fatalf("%s: uneven split %+v", j.ID, r)
			}
			vcpus, memGiB := spec.NodeShare(len(a.GPUs), g)
			wantCPU, wantMem := w.overheads[r.Rack].Charge(vcpus, memGiB, len(a.GPUs))
			if a.CPUMilli != wantCPU || a.MemoryMiB != wantMem {
				t.Fatalf("%s: node %s charged %dm CPU and %d MiB, want %dm and %d MiB", j.ID, a.Node, a.CPUMilli, a.MemoryMiB, wantCPU, wantMem)
			}
			free, _ := s.Free(r.Rack, a.Node)
			freeSet := map[int]bool{}
			for _, f := range free {
				freeSet[f] = true
			}
			for _, i := range a.GPUs {
				if !freeSet[i] {
					t.Fatalf("%s: GPU %d of %s was not free", j.ID, i, a.Node)
				}
			}
		}
	}
}

func TestPlacementProperties(t *testing.T) {
	seeds := 300
	if testing.Short() {
		seeds = 30
	}
	for seed := range uint64(seeds) {
		rng := rand.New(rand.NewPCG(seed, 42))
		w := randomWorld(rng)
		s := w.snapshot(t, w.nodes, nil)
		ideal := w.ideal(t)
		var jobs []string
		for op := range 200 {
			switch x := rng.IntN(10); {
			case x < 6:
				id := fmt.Sprintf("j%d", op)
				j := randomJob(rng, id)
				d := Place(s, j)
				if err := s.check(); err != nil {
					t.Fatalf("seed %d op %d: Place broke the snapshot: %v", seed, op, err)
				}
				idealD := Place(ideal, j)
				switch d := d.(type) {
				case Placed:
					w.checkPlaced(t, s, j, d)
					for _, r := range d.Reservations {
						if err := s.Apply(r); err != nil {
							t.Fatalf("seed %d op %d: Apply: %v", seed, op, err)
						}
					}
					jobs = append(jobs, id)
				case Wait:
					if iw, ok := idealD.(Wait); ok && strings.HasSuffix(iw.Reason.Message, "has reported yet") {
						break // a location whose racks have no nodes yet waits for them
					}
					if _, ok := idealD.(Placed); !ok {
						t.Fatalf("seed %d op %d: %+v waits but an empty fleet says %#v (it would wait forever)", seed, op, j.Spec, idealD)
					}
				case Impossible:
					if _, ok := idealD.(Impossible); !ok {
						t.Fatalf("seed %d op %d: %+v impossible but an empty fleet says %#v", seed, op, j.Spec, idealD)
					}
				}
			case x < 9 && len(jobs) > 0:
				i := rng.IntN(len(jobs))
				if len(s.ReleaseJob(jobs[i])) == 0 {
					t.Fatalf("seed %d op %d: job %s held nothing", seed, op, jobs[i])
				}
				jobs = append(jobs[:i], jobs[i+1:]...)
			default:
				// The ork restarts: rebuild from the reservations it stored.
				// The rebuilt snapshot decides as the live one did.
				rebuilt := w.snapshot(t, w.nodes, s.Reservations())
				probe := randomJob(rng, "probe")
				if diff := cmp.Diff(Place(s, probe), Place(rebuilt, probe)); diff != "" {
					t.Fatalf("seed %d op %d: a rebuilt snapshot decides otherwise (-live +rebuilt):\n%s", seed, op, diff)
				}
				s = rebuilt
			}
			if err := s.check(); err != nil {
				t.Fatalf("seed %d op %d: %v", seed, op, err)
			}
			w.checkClaims(t, s.Reservations())
		}
	}
}
