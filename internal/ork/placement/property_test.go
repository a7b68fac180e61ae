package placement

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/cosmicac/cosmicac/internal/cosmic"
)

// world is a random fleet and the oracle's view of it.
type world struct {
	racks []cosmic.Rack
	nodes []cosmic.Node
	rack  map[string]cosmic.Rack
	node  map[[2]string]cosmic.Node
}

func randomWorld(rng *rand.Rand) *world {
	w := &world{rack: map[string]cosmic.Rack{}, node: map[[2]string]cosmic.Node{}}
	locations := 1 + rng.IntN(3)
	for r := range 1 + rng.IntN(5) {
		rk := cosmic.Rack{ID: fmt.Sprintf("r%d", r), Type: cosmic.RackTypeServer,
			Location: fmt.Sprintf("l%d", rng.IntN(locations)), GPUModel: []string{"A", "B"}[rng.IntN(2)]}
		w.racks = append(w.racks, rk)
		w.rack[rk.ID] = rk
		for n := range rng.IntN(7) {
			nd := cosmic.Node{Name: fmt.Sprintf("n%d", n), Rack: rk.ID, GPUs: []int{1, 2, 4, 8, 8, 8, 3}[rng.IntN(7)],
				Schedulable: rng.IntN(10) > 0, Ready: rng.IntN(10) > 0}
			if rng.IntN(8) == 0 {
				nd.GPUModel = "C"
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
	switch rng.IntN(3) {
	case 0:
		return container(id, loc, model, 1+rng.IntN(10))
	case 1:
		return inference(id, loc, model, cosmic.RuntimeParakeet, 1+rng.IntN(2), 1+rng.IntN(2))
	default:
		return vllm(id, loc, model, []int{1, 2, 4, 6, 8, 12, 16, 24, 32}[rng.IntN(9)], 1+rng.IntN(3))
	}
}

// ideal is the fleet with every node schedulable and ready and nothing reserved.
func (w *world) ideal(t *testing.T) *Snapshot {
	nodes := make([]cosmic.Node, len(w.nodes))
	for i, n := range w.nodes {
		n.Schedulable, n.Ready = true, true
		nodes[i] = n
	}
	return snap(t, w.racks, nodes)
}

// checkClaims verifies, apart from the snapshot's own bookkeeping, that no
// GPU is claimed twice and every claim is within its node's capacity.
func (w *world) checkClaims(t *testing.T, live []cosmic.Reservation) {
	t.Helper()
	claimed := map[cosmic.GPURef]string{}
	for _, r := range live {
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
		s := snap(t, w.racks, w.nodes)
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
				var err error
				s, err = NewSnapshot(w.racks, w.nodes, s.Reservations())
				if err != nil {
					t.Fatalf("seed %d op %d: rebuild: %v", seed, op, err)
				}
			}
			if err := s.check(); err != nil {
				t.Fatalf("seed %d op %d: %v", seed, op, err)
			}
			w.checkClaims(t, s.Reservations())
		}
	}
}
