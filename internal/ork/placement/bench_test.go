package placement

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/cosmic"
)

// benchFleet is 50 racks × 100 nodes × 8 GPUs (5,000 nodes, 40,000 GPUs)
// over 2 locations and 2 GPU models.
func benchFleet() ([]cosmic.Rack, []cosmic.Node) {
	var racks []cosmic.Rack
	var nodes []cosmic.Node
	for r := range 50 {
		rk := cosmic.Rack{ID: fmt.Sprintf("rack-%02d", r), Type: cosmic.RackTypeServer,
			Location: []string{"us", "eu"}[r%2], GPUModel: []string{h100, "GB200"}[(r/2)%2]}
		racks = append(racks, rk)
		for n := range 100 {
			nodes = append(nodes, cosmic.Node{Name: fmt.Sprintf("node-%03d", n), Rack: rk.ID, GPUs: 8, Schedulable: true, Ready: true})
		}
	}
	return racks, nodes
}

// benchJob draws from a realistic mix: 1, 2, 4 and 8-GPU containers and
// 16-GPU vLLM replicas, in either location, usually naming a model.
func benchJob(rng *rand.Rand, id string) cosmic.Job { return benchJobGPUs(rng, id) }

func benchJobGPUs(rng *rand.Rand, id string) cosmic.Job {
	loc := []string{"us", "eu"}[rng.IntN(2)]
	model := []string{h100, "GB200", h100, "GB200", ""}[rng.IntN(5)]
	switch x := rng.IntN(100); {
	case x < 30:
		return container(id, loc, model, 1)
	case x < 50:
		return container(id, loc, model, 2)
	case x < 70:
		return container(id, loc, model, 4)
	case x < 90:
		return container(id, loc, model, 8)
	default:
		return vllm(id, loc, model, 16, 1)
	}
}

type benchState struct {
	s         *Snapshot
	live      []cosmic.Reservation
	allocated int
	capacity  int
}

func (st *benchState) apply(d Decision) {
	if p, ok := d.(Placed); ok {
		for _, r := range p.Reservations {
			if err := st.s.Apply(r); err != nil {
				panic(err)
			}
			st.live = append(st.live, r)
			st.allocated += r.Count()
		}
	}
}

// trim releases random reservations until occupancy is at most target.
func (st *benchState) trim(rng *rand.Rand, target float64) {
	for float64(st.allocated) > target*float64(st.capacity) {
		i := rng.IntN(len(st.live))
		r := st.live[i]
		if err := st.s.Release(r); err != nil {
			panic(err)
		}
		st.allocated -= r.Count()
		st.live[i] = st.live[len(st.live)-1]
		st.live = st.live[:len(st.live)-1]
	}
}

// BenchmarkPlace measures one placement decision (Place, then Apply when
// placed) on a 5,000-node fleet held at about 70% (and 95%) occupancy: each
// iteration places a job of the mix and releases random reservations to
// stay there. The decisions/s, p50-ns and p99-ns metrics time the
// decision alone; ns/op also counts drawing the job and releasing.
//
// resources=gpus is the fleet and jobs without CPU or memory (the figures
// before issue 17); resources=cpu+memory gives each node a DGX H100's 224
// vCPUs and 2 TiB, each rack KubeVirt's VM overhead, and each job its
// defaults per GPU (8 vCPUs, 64 GiB), one in five CPU-heavy (28 vCPUs and
// 128 GiB a GPU), for each policy.
func BenchmarkPlace(b *testing.B) {
	for _, res := range []string{"gpus", "cpu+memory"} {
		for _, policy := range []string{cosmic.PolicyBestFit, cosmic.PolicyFGD} {
			for _, occ := range []float64{0.70, 0.95} {
				b.Run(fmt.Sprintf("resources=%s/policy=%s/occupancy=%.0f%%", res, policy, occ*100), func(b *testing.B) {
					benchPlace(b, occ, policy, res == "cpu+memory")
				})
			}
		}
	}
}

func benchPlace(b *testing.B, occupancy float64, policy string, withCPU bool) {
	racks, nodes := benchFleet()
	over := map[string]cosmic.VMOverhead{}
	if withCPU {
		for i := range nodes {
			nodes[i].CPUMilli, nodes[i].MemoryMiB = 224000, 2048*1024
		}
		for _, r := range racks {
			over[r.ID] = cosmic.VMOverhead{MemoryMiB: 1284, MemoryMiBPerVCPU: 8, MemoryPerGuestGiBMiB: 2}
		}
	}
	s, err := NewSnapshot(racks, nodes, nil, WithDefaultPolicy(policy), WithOverheads(over))
	if err != nil {
		b.Fatal(err)
	}
	benchJob := benchJob
	if withCPU {
		benchJob = func(rng *rand.Rand, id string) cosmic.Job {
			j := benchJobGPUs(rng, id)
			g := j.Spec.GPUsPerReplica()
			j.Spec.Resources.CPU, j.Spec.Resources.Memory = 8*g, 64*g
			if rng.IntN(5) == 0 {
				j.Spec.Resources.CPU, j.Spec.Resources.Memory = 28*g, 128*g
			}
			return j
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	st := &benchState{s: s, capacity: len(nodes) * 8}
	next := 0
	newID := func() string { next++; return "job-" + strconv.Itoa(next) }
	for float64(st.allocated) < occupancy*float64(st.capacity) {
		st.apply(Place(s, benchJob(rng, newID())))
	}
	durs := make([]time.Duration, 0, 1<<20)
	var placed, waited int
	var total time.Duration
	for b.Loop() {
		j := benchJob(rng, newID())
		t0 := time.Now()
		d := Place(s, j)
		st.apply(d)
		dt := time.Since(t0)
		durs = append(durs, dt)
		total += dt
		if _, ok := d.(Placed); ok {
			placed++
		} else {
			waited++
		}
		st.trim(rng, occupancy)
	}
	slices.Sort(durs)
	q := func(p float64) float64 {
		return float64(durs[min(len(durs)-1, int(p*float64(len(durs))))].Nanoseconds())
	}
	b.ReportMetric(float64(len(durs))/total.Seconds(), "decisions/s")
	b.ReportMetric(q(0.50), "p50-ns")
	b.ReportMetric(q(0.99), "p99-ns")
	b.ReportMetric(float64(placed)/float64(len(durs)), "placed-ratio")
	if err := s.check(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkNewSnapshot measures building the 5,000-node snapshot with
// 70% of its GPUs reserved (what the ork does at start).
func BenchmarkNewSnapshot(b *testing.B) {
	racks, nodes := benchFleet()
	s, _ := NewSnapshot(racks, nodes, nil)
	rng := rand.New(rand.NewPCG(1, 2))
	st := &benchState{s: s, capacity: len(nodes) * 8}
	for i := 0; float64(st.allocated) < 0.7*float64(st.capacity); i++ {
		st.apply(Place(s, benchJob(rng, "job-"+strconv.Itoa(i))))
	}
	res := s.Reservations()
	for b.Loop() {
		if _, err := NewSnapshot(racks, nodes, res); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkClone measures copying the 5,000-node snapshot.
func BenchmarkClone(b *testing.B) {
	racks, nodes := benchFleet()
	s, _ := NewSnapshot(racks, nodes, nil)
	for b.Loop() {
		_ = s.Clone()
	}
}
