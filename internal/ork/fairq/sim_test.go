package fairq_test

import (
	"container/heap"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/ork/fairq"
	"github.com/cosmicac/cosmicac/internal/ork/placement"
)

const h100 = "GH100_H100_SXM5_80GB"

var usKey = fairq.Key{Location: "us", GPUModel: h100}

// sim drives the queue and placement as the ork does (a pass offers jobs,
// placement decides, the reservation is applied and held), over a
// simulated clock: each placed job ends after its duration.
type sim struct {
	t       *testing.T
	q       *fairq.Queue
	snap    *placement.Snapshot
	rng     *rand.Rand
	now     float64
	jobs    map[string]cosmic.Job
	dur     map[string]float64
	ends    endHeap
	res     map[string]cosmic.Reservation
	team    map[string]string
	used    map[string]int     // GPUs held, by team
	gpuTime map[string]float64 // GPU-time units, by team
	queued  map[string]int     // jobs queued, by team
	quota   int                // each team's quota; 0: none
	next    int
	// reservedAt is when each job first reserved its queue.
	reservedAt map[string]float64
	maxDur     float64
	decisions  int
	completed  int
}

type end struct {
	at float64
	id string
}

type endHeap []end

func (h endHeap) Len() int           { return len(h) }
func (h endHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h endHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *endHeap) Push(x any)        { *h = append(*h, x.(end)) }
func (h *endHeap) Pop() any          { o := *h; x := o[len(o)-1]; *h = o[:len(o)-1]; return x }

func newSim(t *testing.T, nodes, quota int, teams []string) *sim {
	rack := cosmic.Rack{ID: "r1", Type: cosmic.RackTypeServer, Location: "us", GPUModel: h100}
	var ns []cosmic.Node
	for i := range nodes {
		ns = append(ns, cosmic.Node{Name: fmt.Sprintf("n%03d", i), Rack: "r1", GPUs: 8, Schedulable: true, Ready: true})
	}
	snap, err := placement.NewSnapshot([]cosmic.Rack{rack}, ns, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := &sim{t: t, q: fairq.New(), snap: snap, rng: rand.New(rand.NewPCG(7, 11)), jobs: map[string]cosmic.Job{}, dur: map[string]float64{},
		res: map[string]cosmic.Reservation{}, team: map[string]string{}, used: map[string]int{}, gpuTime: map[string]float64{},
		queued: map[string]int{}, quota: quota, reservedAt: map[string]float64{}, maxDur: 100}
	s.q.SetCapacity(map[fairq.Key]int{usKey: nodes * 8, {Location: "us"}: nodes * 8})
	if quota > 0 {
		qs := map[fairq.QuotaKey]int{}
		for _, tm := range teams {
			qs[fairq.QuotaKey{Team: tm, Location: "us", GPUModel: h100}] = quota
		}
		s.q.SetQuotas(qs)
	}
	return s
}

// submit queues a job of team with a random size and duration.
func (s *sim) submit(team string) {
	s.next++
	id := fmt.Sprintf("%s-%d", team, s.next)
	g := []int{1, 1, 2, 2, 4, 8}[s.rng.IntN(6)]
	j := cosmic.Job{ID: id, Team: team, Spec: cosmic.Spec{Type: cosmic.TypeGPUContainer, Location: "us", Image: "i",
		Resources: cosmic.Resources{GPU: g, GPUModel: h100}}}
	s.jobs[id], s.team[id] = j, team
	s.dur[id] = 1 + s.rng.Float64()*(s.maxDur-1)
	s.queued[team]++
	s.q.Push(fairq.Job{ID: id, Team: team, Key: usKey, GPUs: g})
}

func (s *sim) pass() {
	s.q.Pass(func(fj fairq.Job) fairq.Outcome {
		s.decisions++
		j := s.jobs[fj.ID]
		switch d := placement.Place(s.snap, j).(type) {
		case placement.Placed:
			for _, r := range d.Reservations {
				if err := s.snap.Apply(r); err != nil {
					s.t.Fatal(err)
				}
				s.q.Hold(j.ID, r.Replica, j.Team, "us", h100, r.Count())
				s.res[j.ID] = r
				s.used[j.Team] += r.Count()
			}
			if s.quota > 0 && s.used[j.Team] > s.quota {
				s.t.Fatalf("t=%.1f: team %s holds %d GPUs, over its quota %d", s.now, j.Team, s.used[j.Team], s.quota)
			}
			if at, ok := s.reservedAt[j.ID]; ok && s.now-at > s.maxDur {
				s.t.Fatalf("t=%.1f: job %s placed %.1f after it reserved the queue, more than the longest job (%.0f)", s.now, j.ID, s.now-at, s.maxDur)
			}
			s.queued[j.Team]--
			heap.Push(&s.ends, end{s.now + s.dur[j.ID], j.ID})
			return fairq.Placed
		case placement.Wait:
			return fairq.Wait
		default:
			s.t.Fatalf("job %s: %+v", j.ID, d)
			return fairq.Drop
		}
	}, nil)
	s.checkWorkConserving()
}

// checkWorkConserving: after a pass, a job whose team has room under its
// quota waits only behind the reserved job, which does not fit the free
// GPUs (the rule of docs/scheduling.md).
func (s *sim) checkWorkConserving() {
	order := s.q.Order(usKey)
	if len(order) == 0 {
		return
	}
	admissible := false
	for _, j := range order {
		if s.quota == 0 || s.used[j.Team]+j.GPUs <= s.quota {
			admissible = true
			break
		}
	}
	if !admissible {
		return
	}
	r := s.q.Reserved(usKey)
	if r == "" {
		s.t.Fatalf("t=%.1f: jobs wait under quota with no reserved job", s.now)
	}
	if _, ok := placement.Place(s.snap, s.jobs[r]).(placement.Wait); !ok {
		s.t.Fatalf("t=%.1f: the reserved job %s fits, yet it waits", s.now, r)
	}
	if _, ok := s.reservedAt[r]; !ok {
		s.reservedAt[r] = s.now
	}
}

// advance moves the clock to the next end, counting GPU time, and
// releases the jobs that end then.
func (s *sim) advance() {
	e := heap.Pop(&s.ends).(end)
	for tm, u := range s.used {
		s.gpuTime[tm] += float64(u) * (e.at - s.now)
	}
	s.now = e.at
	for {
		r := s.res[e.id]
		if err := s.snap.Release(r); err != nil {
			s.t.Fatal(err)
		}
		s.q.Release(e.id, -1)
		s.used[s.team[e.id]] -= r.Count()
		delete(s.res, e.id)
		s.completed++
		if len(s.ends) == 0 || s.ends[0].at != s.now {
			return
		}
		e = heap.Pop(&s.ends).(end)
	}
}

// TestSimulatedFairShare runs thousands of jobs of random sizes and
// durations from teams that keep the queue saturated, and checks that
// each team's GPU time stays within 10% of an equal share, that no team
// exceeds its quota, that a job waits under quota only behind a reserved
// job that does not fit, and that a reserved job is placed within the
// longest job's duration.
func TestSimulatedFairShare(t *testing.T) {
	for _, tt := range []struct {
		name  string
		teams int
		quota int
	}{
		{"3 teams without quotas", 3, 0},
		{"4 teams with equal quotas over the capacity", 4, 48}, // 4 × 48 > 128
		{"2 teams with equal quotas", 2, 96},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var teams []string
			for i := range tt.teams {
				teams = append(teams, fmt.Sprintf("team-%d", i))
			}
			s := newSim(t, 16, tt.quota, teams) // 128 GPUs
			const backlog = 20
			for s.completed < 5000 {
				for _, tm := range teams {
					for s.queued[tm] < backlog {
						s.submit(tm)
					}
				}
				s.pass()
				if len(s.ends) == 0 {
					t.Fatal("nothing runs and nothing is placed")
				}
				s.advance()
			}
			var total float64
			for _, tm := range teams {
				total += s.gpuTime[tm]
			}
			mean := total / float64(len(teams))
			for _, tm := range teams {
				dev := (s.gpuTime[tm] - mean) / mean
				t.Logf("%s: %.0f GPU-time (%+.1f%% of equal)", tm, s.gpuTime[tm], 100*dev)
				if math.Abs(dev) > 0.10 {
					t.Errorf("%s: GPU time %.0f is %+.1f%% off an equal share %.0f", tm, s.gpuTime[tm], 100*dev, mean)
				}
			}
			t.Logf("%d jobs completed, %d decisions, utilisation %.1f%%", s.completed, s.decisions, 100*total/(s.now*128))
		})
	}
}
