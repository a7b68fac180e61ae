package fairq

import (
	"fmt"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const h100 = "GH100_H100_SXM5_80GB"

var us = Key{"us", h100}

// pool plays placement for the rules' tests: one queue's free GPUs, taken
// by any job that fits them.
type pool struct {
	q      *Queue
	free   map[Key]int
	placed []string
	waited []string
	blocks []Block
}

func (p *pool) pass() {
	p.q.Pass(func(j Job) Outcome {
		if j.GPUs > p.free[j.Key] {
			p.waited = append(p.waited, j.ID)
			return Wait
		}
		p.free[j.Key] -= j.GPUs
		p.q.Hold(j.ID, 0, j.Team, j.Key.Location, j.Key.GPUModel, j.GPUs)
		p.placed = append(p.placed, j.ID)
		return Placed
	}, func(j Job, b Block) { p.blocks = append(p.blocks, b) })
}

type held struct {
	team string
	key  Key
	gpus int
}

func TestRules(t *testing.T) {
	tests := []struct {
		name     string
		quotas   map[QuotaKey]int
		capacity int // of us (and of the location)
		held     []held
		free     int
		queue    []Job // in arrival order
		// between passes: quota changes, then GPUs freed
		then       func(q *Queue, p *pool)
		wantPlaced []string
		wantWaited []string
		wantBlocks []Block
	}{
		{
			name: "FIFO within a team", capacity: 8, free: 8,
			queue:      []Job{{"a1", "a", us, 2}, {"a2", "a", us, 2}, {"a3", "a", us, 2}},
			wantPlaced: []string{"a1", "a2", "a3"},
		},
		{
			name: "lowest share first, ties to the older job", capacity: 16, free: 4,
			held:       []held{{"a", us, 4}},
			queue:      []Job{{"a1", "a", us, 1}, {"a2", "a", us, 1}, {"b1", "b", us, 1}, {"c1", "c", us, 1}},
			wantPlaced: []string{"b1", "c1", "a1", "a2"},
		},
		{
			name: "the team furthest below its share first, weighted by quota", capacity: 64, free: 2,
			quotas:     map[QuotaKey]int{{"a", "us", h100}: 8, {"b", "us", h100}: 16},
			held:       []held{{"a", us, 4}, {"b", us, 6}}, // a at 1/2, b at 3/8
			queue:      []Job{{"a1", "a", us, 1}, {"b1", "b", us, 1}, {"b2", "b", us, 1}},
			wantPlaced: []string{"b1", "b2"}, // b: 7/16, 8/16
			wantWaited: []string{"a1"},       // a tie at 1/2, and older
		},
		{
			name: "a team without a quota is entitled to the pool", capacity: 64, free: 1,
			quotas:     map[QuotaKey]int{{"a", "us", h100}: 8},
			held:       []held{{"a", us, 4}, {"b", us, 16}}, // a at 1/2, b at 16/64
			queue:      []Job{{"a1", "a", us, 1}, {"b1", "b", us, 1}},
			wantPlaced: []string{"b1"},
			wantWaited: []string{"a1"},
		},
		{
			name: "over quota: the team is skipped and told the numbers", capacity: 64, free: 16,
			quotas:     map[QuotaKey]int{{"ml", "us", h100}: 16},
			held:       []held{{"ml", us, 14}},
			queue:      []Job{{"ml1", "ml", us, 4}, {"ml2", "ml", us, 1}, {"web1", "web", us, 4}},
			wantPlaced: []string{"web1"},
			wantBlocks: []Block{{Team: "ml", Location: "us", GPUModel: h100, Used: 14, Quota: 16, Need: 4}},
		},
		{
			name: "a job needing more than its quota waits for the quota", capacity: 64, free: 64,
			quotas:     map[QuotaKey]int{{"ml", "us", h100}: 2},
			queue:      []Job{{"ml1", "ml", us, 4}},
			wantBlocks: []Block{{Team: "ml", Location: "us", GPUModel: h100, Used: 0, Quota: 2, Need: 4}},
		},
		{
			name: "a location-wide quota counts every model", capacity: 64, free: 8,
			quotas:     map[QuotaKey]int{{"a", "us", ""}: 8},
			held:       []held{{"a", Key{"us", "GB200"}, 6}},
			queue:      []Job{{"a1", "a", us, 4}, {"a2", "a", Key{"us", ""}, 2}},
			wantPlaced: []string{"a2"},
			wantBlocks: []Block{{Team: "a", Location: "us", Used: 6, Quota: 8, Need: 4}},
		},
		{
			name: "quota raised: the job is placed", capacity: 64, free: 16,
			quotas: map[QuotaKey]int{{"ml", "us", h100}: 16},
			held:   []held{{"ml", us, 14}},
			queue:  []Job{{"ml1", "ml", us, 4}},
			then: func(q *Queue, p *pool) {
				q.SetQuota(QuotaKey{"ml", "us", h100}, 18)
			},
			wantPlaced: []string{"ml1"},
			wantBlocks: []Block{{Team: "ml", Location: "us", GPUModel: h100, Used: 14, Quota: 16, Need: 4}},
		},
		{
			name: "the reserved head blocks smaller jobs of other teams", capacity: 8, free: 4,
			held:  []held{{"b", us, 4}},
			queue: []Job{{"a1", "a", us, 8}, {"b1", "b", us, 1}},
			then: func(q *Queue, p *pool) {
				// b's GPUs free up: b is now below a's share, yet a1
				// keeps the queue.
				q.Release("held-b", -1)
				p.free[us] += 4
			},
			wantPlaced: []string{"a1"},
			wantWaited: []string{"a1", "b1"},
		},
		{
			name: "a reservation ends when its team's quota no longer admits it", capacity: 8, free: 4,
			quotas: map[QuotaKey]int{{"a", "us", h100}: 8},
			held:   []held{{"b", us, 4}},
			queue:  []Job{{"a1", "a", us, 8}, {"b1", "b", us, 1}},
			then: func(q *Queue, p *pool) {
				q.SetQuota(QuotaKey{"a", "us", h100}, 4)
			},
			wantPlaced: []string{"b1"},
			wantWaited: []string{"a1"},
			wantBlocks: []Block{{Team: "a", Location: "us", GPUModel: h100, Used: 0, Quota: 4, Need: 8}},
		},
		{
			name: "a quota of 0 admits nothing", capacity: 8, free: 8,
			quotas:     map[QuotaKey]int{{"a", "us", h100}: 0},
			queue:      []Job{{"a1", "a", us, 1}, {"b1", "b", us, 1}},
			wantPlaced: []string{"b1"},
			wantBlocks: []Block{{Team: "a", Location: "us", GPUModel: h100, Quota: 0, Need: 1}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := New()
			q.SetQuotas(tt.quotas)
			q.SetCapacity(map[Key]int{us: tt.capacity, {"us", ""}: tt.capacity})
			for _, h := range tt.held {
				q.Hold("held-"+h.team, len(q.byJob["held-"+h.team]), h.team, h.key.Location, h.key.GPUModel, h.gpus)
			}
			for _, j := range tt.queue {
				q.Push(j)
			}
			p := &pool{q: q, free: map[Key]int{us: tt.free, {"us", ""}: tt.free}}
			p.pass()
			if tt.then != nil {
				tt.then(q, p)
				p.pass()
			}
			if diff := cmp.Diff(tt.wantPlaced, p.placed); diff != "" {
				t.Errorf("placed (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantWaited, p.waited); diff != "" {
				t.Errorf("waited (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantBlocks, p.blocks); diff != "" {
				t.Errorf("blocked by quota (-want +got):\n%s", diff)
			}
		})
	}
}

func TestBlockMessage(t *testing.T) {
	for _, tt := range []struct {
		b    Block
		want string
	}{
		{Block{Team: "ml", Location: "us", GPUModel: h100, Used: 14, Quota: 16, Need: 4},
			"team ml uses 14 of 16 GH100_H100_SXM5_80GB GPUs in us; this job needs 4"},
		{Block{Team: "ml", Location: "us", Used: 0, Quota: 2, Need: 4},
			"team ml uses 0 of 2 GPUs in us; this job needs 4, more than the quota: raise it for the job to run"},
	} {
		if got := tt.b.Message(); got != tt.want {
			t.Errorf("Message() = %q, want %q", got, tt.want)
		}
	}
}

// TestOrder: positions follow the order a pass would place the jobs in
// with GPUs free: the reserved job, the rules with each placed job counted
// as held, then the jobs their quotas hold back.
func TestOrder(t *testing.T) {
	q := New()
	q.SetCapacity(map[Key]int{us: 32})
	q.SetQuotas(map[QuotaKey]int{{"c", "us", h100}: 2})
	q.Hold("x", 0, "a", "us", h100, 2)
	for _, j := range []Job{{"a1", "a", us, 1}, {"a2", "a", us, 1}, {"b1", "b", us, 2}, {"b2", "b", us, 1}, {"c1", "c", us, 4}, {"b3", "b", us, 1}} {
		q.Push(j)
	}
	// a holds 2, b none: b1 (b: 2), a1 (a tie at 2, and older; a: 3), b2
	// (b: 3), a2 (a tie, older), b3; c1 needs more than c's quota.
	want := []string{"b1", "a1", "b2", "a2", "b3", "c1"}
	var got []string
	for _, j := range q.Order(us) {
		got = append(got, j.ID)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Order (-want +got):\n%s", diff)
	}
	for i, id := range want {
		if p := q.Position(id); p != i+1 {
			t.Errorf("Position(%s) = %d, want %d", id, p, i+1)
		}
	}
	q.Remove("b1") // b holds none again: b2, b3, then a1
	if p := q.Position("a1"); p != 3 {
		t.Errorf("after b1 left: Position(a1) = %d, want 3", p)
	}
	if p := q.Position("b1"); p != 0 {
		t.Errorf("Position(removed) = %d, want 0", p)
	}
}

func TestAdmitsAnyModelPlacement(t *testing.T) {
	q := New()
	q.SetQuotas(map[QuotaKey]int{{"a", "us", h100}: 4})
	q.Hold("x", 0, "a", "us", h100, 3)
	if b, ok := q.Admits("a", "us", h100, 2); ok || b.Used != 3 || b.Quota != 4 {
		t.Errorf("Admits(over the model's quota) = %+v, %v", b, ok)
	}
	if _, ok := q.Admits("a", "us", "GB200", 8); !ok {
		t.Error("Admits(a model without quota) = false")
	}
	q.Release("x", -1)
	if _, ok := q.Admits("a", "us", h100, 4); !ok || q.Used(QuotaKey{"a", "us", ""}) != 0 {
		t.Errorf("after release: used %d", q.Used(QuotaKey{"a", "us", ""}))
	}
}

func TestPushKeepsPlace(t *testing.T) {
	q := New()
	for i := range 3 {
		q.Push(Job{fmt.Sprint("a", i), "a", us, 1})
	}
	q.Push(Job{"a0", "a", us, 4}) // updated, not moved
	if got := q.Order(us); got[0].ID != "a0" || got[0].GPUs != 4 || len(got) != 3 {
		t.Errorf("Order after update = %+v", got)
	}
}

// TestDeferPassesOverOneJob: a job deferred (it waits for a standalone
// volume) holds up neither its team's next job nor the queue, and stays
// queued at its place; a skipped one (a quota) holds up its team.
func TestDeferPassesOverOneJob(t *testing.T) {
	for _, tt := range []struct {
		out  Outcome
		want []string
	}{{Defer, []string{"a1", "a2", "b0"}}, {Skip, []string{"b0"}}} {
		q := New()
		q.SetCapacity(map[Key]int{us: 8})
		for _, j := range []Job{{"a0", "a", us, 1}, {"a1", "a", us, 1}, {"b0", "b", us, 1}, {"a2", "a", us, 1}} {
			q.Push(j)
		}
		var tried []string
		q.Pass(func(j Job) Outcome {
			tried = append(tried, j.ID)
			if j.ID == "a0" {
				return tt.out
			}
			if j.ID == "a1" && tt.out == Skip {
				t.Errorf("a skipped team's next job was tried")
			}
			return Drop
		}, nil)
		placed := slices.Sorted(slices.Values(tried[1:]))
		if tried[0] != "a0" || !slices.Equal(placed, tt.want) {
			t.Errorf("outcome %d: tried %v, want a0 then %v", tt.out, tried, tt.want)
		}
		if p := q.Position("a0"); p != 1 {
			t.Errorf("outcome %d: the job that waits is at %d, want 1: it stays queued where it was", tt.out, p)
		}
	}
}
