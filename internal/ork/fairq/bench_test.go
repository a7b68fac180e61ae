package fairq_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/ork/fairq"
	"github.com/cosmicac/cosmicac/internal/ork/placement"
)

// benchFleet is placement's benchmark fleet: 50 racks × 100 nodes × 8 GPUs
// (5,000 nodes, 40,000 GPUs) over 2 locations and 2 GPU models.
func benchFleet() ([]cosmic.Rack, []cosmic.Node, map[string]string) {
	var racks []cosmic.Rack
	var nodes []cosmic.Node
	model := map[string]string{}
	for r := range 50 {
		rk := cosmic.Rack{ID: fmt.Sprintf("rack-%02d", r), Type: cosmic.RackTypeServer,
			Location: []string{"us", "eu"}[r%2], GPUModel: []string{h100, "GB200"}[(r/2)%2]}
		racks = append(racks, rk)
		model[rk.ID] = rk.GPUModel
		for n := range 100 {
			nodes = append(nodes, cosmic.Node{Name: fmt.Sprintf("node-%03d", n), Rack: rk.ID, GPUs: 8, Schedulable: true, Ready: true})
		}
	}
	return racks, nodes, model
}

// scheduler is one of the two admission orders benchmarked: the fair
// queue, or the plain FIFO per (location, model) the ork had before it.
type scheduler interface {
	push(j cosmic.Job)
	// pass places what it can and returns the decisions it made.
	pass(place func(cosmic.Job) fairq.Outcome) int
	len() int
}

type fairSched struct{ q *fairq.Queue }

func (f fairSched) push(j cosmic.Job) {
	f.q.Push(fairq.Job{ID: j.ID, Team: j.Team, Key: fairq.Key{Location: j.Spec.Location, GPUModel: j.Spec.Resources.GPUModel}, GPUs: j.Spec.GPUsPerReplica() * j.Spec.Replicas()})
}

func (f fairSched) pass(place func(cosmic.Job) fairq.Outcome) int {
	n := 0
	f.q.Pass(func(fj fairq.Job) fairq.Outcome { n++; return place(jobs[fj.ID]) }, nil)
	return n
}

func (f fairSched) len() int { return f.q.Len() }

// fifoSched is the ork's former loop: one FIFO of every queued job; the
// head of a (location, model) queue that does not fit blocks that queue.
type fifoSched struct{ queue *[]cosmic.Job }

func (f fifoSched) push(j cosmic.Job) { *f.queue = append(*f.queue, j) }
func (f fifoSched) len() int          { return len(*f.queue) }

func (f fifoSched) pass(place func(cosmic.Job) fairq.Outcome) int {
	n := 0
	blocked := map[string]bool{}
	for _, j := range slices.Clone(*f.queue) {
		key := j.Spec.Location + "/" + j.Spec.Resources.GPUModel
		if blocked[key] {
			continue
		}
		n++
		switch place(j) {
		case fairq.Placed:
			*f.queue = slices.DeleteFunc(*f.queue, func(x cosmic.Job) bool { return x.ID == j.ID })
		case fairq.Wait:
			blocked[key] = true
		}
	}
	return n
}

var jobs = map[string]cosmic.Job{}

// BenchmarkSchedule measures scheduling decisions (one job offered to
// placement, and the reservation applied and counted when placed) with 100
// teams, half of them with quotas, on the 5,000-node fleet kept at about
// 90% occupancy with 10,000 jobs queued. Each iteration releases a random
// reservation, queues a job and runs a pass. decisions/s times the passes
// alone; fifo is the ork's former order over the same work.
func BenchmarkSchedule(b *testing.B) {
	for _, name := range []string{"fair", "fifo"} {
		b.Run(name, func(b *testing.B) { benchSchedule(b, name) })
	}
}

func benchSchedule(b *testing.B, name string) {
	racks, nodes, rackModel := benchFleet()
	snap, err := placement.NewSnapshot(racks, nodes, nil)
	if err != nil {
		b.Fatal(err)
	}
	q := fairq.New()
	capacity := map[fairq.Key]int{}
	for _, r := range racks {
		capacity[fairq.Key{Location: r.Location, GPUModel: r.GPUModel}] += 800
		capacity[fairq.Key{Location: r.Location}] += 800
	}
	q.SetCapacity(capacity)
	const teams = 100
	quotas := map[fairq.QuotaKey]int{}
	for t := 0; t < teams; t += 2 {
		for _, loc := range []string{"us", "eu"} {
			quotas[fairq.QuotaKey{Team: fmt.Sprint("team-", t), Location: loc}] = 600
		}
	}
	q.SetQuotas(quotas)
	var s scheduler = fairSched{q}
	if name == "fifo" {
		s = fifoSched{new([]cosmic.Job)}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	clear(jobs)
	next := 0
	newJob := func() cosmic.Job {
		next++
		id := "job-" + strconv.Itoa(next)
		loc := []string{"us", "eu"}[rng.IntN(2)]
		model := []string{h100, "GB200", h100, "GB200", ""}[rng.IntN(5)]
		g := []int{1, 2, 4, 8}[rng.IntN(4)]
		j := cosmic.Job{ID: id, Team: fmt.Sprint("team-", rng.IntN(teams)), Spec: cosmic.Spec{Type: cosmic.TypeGPUContainer,
			Location: loc, Image: "i", Resources: cosmic.Resources{GPU: g, GPUModel: model}}}
		jobs[id] = j
		return j
	}
	var live []cosmic.Reservation
	allocated, total := 0, len(nodes)*8
	place := func(j cosmic.Job) fairq.Outcome {
		switch d := placement.Place(snap, j).(type) {
		case placement.Placed:
			for _, r := range d.Reservations {
				if err := snap.Apply(r); err != nil {
					b.Fatal(err)
				}
				q.Hold(j.ID, r.Replica, j.Team, j.Spec.Location, rackModel[r.Rack], r.Count())
				live = append(live, r)
				allocated += r.Count()
			}
			return fairq.Placed
		case placement.Wait:
			return fairq.Wait
		}
		return fairq.Drop
	}
	release := func() {
		i := rng.IntN(len(live))
		r := live[i]
		if err := snap.Release(r); err != nil {
			b.Fatal(err)
		}
		q.Release(r.JobID, r.Replica)
		allocated -= r.Count()
		live[i] = live[len(live)-1]
		live = live[:len(live)-1]
	}
	// Fill the fleet to 90% and the queue to 10,000 jobs.
	for float64(allocated) < 0.9*float64(total) {
		place(newJob())
	}
	for s.len() < 10000 {
		s.push(newJob())
	}
	s.pass(place)
	var (
		decisions int
		spent     time.Duration
	)
	for b.Loop() {
		for float64(allocated) > 0.9*float64(total) {
			release()
		}
		release()
		s.push(newJob())
		t0 := time.Now()
		decisions += s.pass(place)
		spent += time.Since(t0)
	}
	b.ReportMetric(float64(decisions)/spent.Seconds(), "decisions/s")
	b.ReportMetric(float64(decisions)/float64(b.N), "decisions/pass")
}
