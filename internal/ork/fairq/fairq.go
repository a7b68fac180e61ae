// Package fairq is the ork's admission order between teams: the queued
// jobs of each queue (a location and the GPU model they ask for), the GPUs
// each team holds, the teams' quotas, and the rules that pick the next job
// a scheduling pass offers to placement. It is pure (no I/O, no clock) and
// deterministic; the ork owns one Queue under its lock, and the simulation
// tests drive the same code with a simulated clock.
//
// The rules (docs/scheduling.md):
//
//   - Quota: a job is admitted only while, for every quota of its team
//     that covers it, the GPUs the team holds there plus the GPUs the job
//     still needs are at most the quota. A quota of (location, model)
//     covers the jobs of that location that ask for that model; a quota of
//     (location, "") covers every job of the location and counts all the
//     team's GPUs there. A job that needs more than its quota could ever
//     give waits as well (the quota may be raised).
//   - Fair share: within one queue the next job is the oldest queued job
//     of the team with the lowest share; a team whose oldest job is over
//     quota is skipped (FIFO within a team). A team's share is the highest
//     of held/quota over the quotas that cover the queue; a team with none
//     has held/capacity, capacity being the GPUs of the queue's location
//     and model (it is entitled to the whole pool). Ties go to the older
//     job.
//   - Reservation: the job chosen first that does not fit the free GPUs
//     reserves its queue: until it is placed, leaves the queue, or its
//     team's quota no longer admits it, it is offered first and no other
//     job of that queue is placed. So a large job is never starved by
//     small ones, and a job waits while its team is under quota only
//     behind a reserved job that does not fit.
//
// Importers: internal/ork only.
package fairq

import (
	"cmp"
	"fmt"
	"slices"
)

// Key names one queue: the location and GPU model the jobs ask for
// (GPUModel "" for any model of the location).
type Key struct {
	Location string
	GPUModel string
}

func (k Key) String() string {
	if k.GPUModel == "" {
		return k.Location
	}
	return k.Location + "/" + k.GPUModel
}

// Job is a queued job as the queue sees it.
type Job struct {
	ID   string
	Team string
	Key  Key
	// GPUs is what the job still needs: GPUs per replica times the
	// replicas that hold none.
	GPUs int
}

// Block says why a job is held back by its team's quota.
type Block struct {
	Team     string
	Location string
	GPUModel string // the quota's model; "" for the location-wide quota
	Used     int    // GPUs the team holds under that quota
	Quota    int
	Need     int // GPUs the job still needs
}

// Message is the job's waiting message, with the numbers: "team ml uses
// 14 of 16 GH100_H100_SXM5_80GB GPUs in us; this job needs 4".
func (b Block) Message() string {
	what := "GPUs"
	if b.GPUModel != "" {
		what = b.GPUModel + " GPUs"
	}
	msg := fmt.Sprintf("team %s uses %d of %d %s in %s; this job needs %d", b.Team, b.Used, b.Quota, what, b.Location, b.Need)
	if b.Need > b.Quota {
		msg += ", more than the quota: raise it for the job to run"
	}
	return msg
}

// Outcome is what a pass's try did with the job offered.
type Outcome int

// The outcomes of a try.
const (
	// Placed: the job got its GPUs; the caller has Held them. It leaves
	// the queue.
	Placed Outcome = iota
	// Wait: the job does not fit the free GPUs now. It reserves its queue.
	Wait
	// Drop: the job leaves the queue without GPUs (it can never be
	// placed, or is gone); the pass goes on.
	Drop
	// Skip: the job stays queued and its team is skipped for the rest of
	// the pass: placement chose GPUs that a quota of the team does not
	// admit (a job asking for any model, placed on a model the team has no
	// room on), or the job could not be moved on (an error).
	Skip
	// Stop: the queue is not served further this pass (an error).
	Stop
	// Defer: the job stays queued and the pass goes on with its team's
	// next job: it waits for something only it needs (a standalone volume
	// another job has mounted, the GPUs of the one rack that keeps it),
	// which must hold up neither its team's other jobs nor the queue.
	Defer
)

// QuotaKey names a quota, and the GPUs a team holds under it.
type QuotaKey struct {
	Team     string
	Location string
	GPUModel string // "" is the location-wide quota
}

// account is what a team holds under one quota key, and the quota if set.
type account struct {
	used   int
	quota  int
	capped bool
}

type entry struct {
	Job
	seq uint64
}

// teamQueue is one team's jobs in one queue, oldest first, with the
// accounts that cover them.
type teamQueue struct {
	team  string
	jobs  []*entry
	model *account // (team, location, model); nil in an any-model queue
	all   *account // (team, location, "")
}

type keyQueue struct {
	key      Key
	teams    map[string]*teamQueue
	order    []*teamQueue // the teams with jobs, by name (deterministic)
	n        int
	reserved string // the job that reserves this queue, or ""
}

type holding struct {
	team, location, model string
	gpus                  int
}

type replicaRef struct {
	job     string
	replica int
}

// Queue is the ork's queue. It is not safe for concurrent use.
type Queue struct {
	seq      uint64
	jobs     map[string]*entry
	queues   map[Key]*keyQueue
	accounts map[QuotaKey]*account
	capacity map[Key]int
	held     map[replicaRef]holding
	byJob    map[string][]int // replicas held, by job

	version  uint64 // bumps on every change that can move a position
	posAt    map[Key]uint64
	position map[string]int
}

// New returns an empty queue.
func New() *Queue {
	return &Queue{
		jobs:     map[string]*entry{},
		queues:   map[Key]*keyQueue{},
		accounts: map[QuotaKey]*account{},
		capacity: map[Key]int{},
		held:     map[replicaRef]holding{},
		byJob:    map[string][]int{},
		posAt:    map[Key]uint64{},
		position: map[string]int{},
	}
}

func (q *Queue) account(k QuotaKey) *account {
	a := q.accounts[k]
	if a == nil {
		a = &account{}
		q.accounts[k] = a
	}
	return a
}

// Len is the number of jobs queued.
func (q *Queue) Len() int { return len(q.jobs) }

// Has says whether job id is queued.
func (q *Queue) Has(id string) bool { _, ok := q.jobs[id]; return ok }

// Push queues j behind the jobs already queued, or, if it is queued,
// updates what it needs and keeps its place.
func (q *Queue) Push(j Job) {
	q.version++
	if e, ok := q.jobs[j.ID]; ok {
		if e.Key == j.Key && e.Team == j.Team {
			e.GPUs = j.GPUs
			return
		}
		q.Remove(j.ID)
	}
	q.seq++
	e := &entry{Job: j, seq: q.seq}
	q.jobs[j.ID] = e
	kq := q.queues[j.Key]
	if kq == nil {
		kq = &keyQueue{key: j.Key, teams: map[string]*teamQueue{}}
		q.queues[j.Key] = kq
	}
	tq := kq.teams[j.Team]
	if tq == nil {
		tq = &teamQueue{team: j.Team, all: q.account(QuotaKey{j.Team, j.Key.Location, ""})}
		if j.Key.GPUModel != "" {
			tq.model = q.account(QuotaKey{j.Team, j.Key.Location, j.Key.GPUModel})
		}
		kq.teams[j.Team] = tq
		i, _ := slices.BinarySearchFunc(kq.order, j.Team, func(t *teamQueue, name string) int { return cmp.Compare(t.team, name) })
		kq.order = slices.Insert(kq.order, i, tq)
	}
	tq.jobs = append(tq.jobs, e)
	kq.n++
}

// Remove takes job id out of the queue; removing what is not queued does
// nothing.
func (q *Queue) Remove(id string) {
	e, ok := q.jobs[id]
	if !ok {
		return
	}
	q.version++
	delete(q.jobs, id)
	delete(q.position, id)
	kq := q.queues[e.Key]
	tq := kq.teams[e.Team]
	tq.jobs = slices.DeleteFunc(tq.jobs, func(x *entry) bool { return x == e })
	kq.n--
	if kq.reserved == id {
		kq.reserved = ""
	}
	if len(tq.jobs) == 0 {
		delete(kq.teams, e.Team)
		kq.order = slices.DeleteFunc(kq.order, func(t *teamQueue) bool { return t == tq })
	}
	if kq.n == 0 {
		delete(q.queues, e.Key)
		delete(q.posAt, e.Key)
	}
}

// SetQuotas replaces every quota.
func (q *Queue) SetQuotas(quotas map[QuotaKey]int) {
	q.version++
	for _, a := range q.accounts {
		a.capped, a.quota = false, 0
	}
	for k, n := range quotas {
		a := q.account(k)
		a.capped, a.quota = true, n
	}
}

// SetQuota sets one quota (gpus < 0 removes it).
func (q *Queue) SetQuota(k QuotaKey, gpus int) {
	q.version++
	a := q.account(k)
	a.capped, a.quota = gpus >= 0, max(gpus, 0)
}

// SetCapacity sets the GPUs of each (location, model) and of each
// location (GPUModel ""): the entitlement of a team without a quota.
func (q *Queue) SetCapacity(c map[Key]int) {
	q.version++
	q.capacity = c
}

// Hold counts GPUs that a team's job now holds on a model of a location
// (one replica's reservation); a replica held already is counted once.
func (q *Queue) Hold(jobID string, replica int, team, location, model string, gpus int) {
	ref := replicaRef{jobID, replica}
	if _, ok := q.held[ref]; ok {
		return
	}
	q.version++
	q.held[ref] = holding{team, location, model, gpus}
	q.byJob[jobID] = append(q.byJob[jobID], replica)
	q.account(QuotaKey{team, location, model}).used += gpus
	if model != "" {
		q.account(QuotaKey{team, location, ""}).used += gpus
	}
}

// Release uncounts a replica's GPUs (replica < 0: all the job's).
func (q *Queue) Release(jobID string, replica int) {
	replicas := []int{replica}
	if replica < 0 {
		replicas = q.byJob[jobID]
	}
	for _, r := range slices.Clone(replicas) {
		ref := replicaRef{jobID, r}
		h, ok := q.held[ref]
		if !ok {
			continue
		}
		q.version++
		delete(q.held, ref)
		q.account(QuotaKey{h.team, h.location, h.model}).used -= h.gpus
		if h.model != "" {
			q.account(QuotaKey{h.team, h.location, ""}).used -= h.gpus
		}
		q.byJob[jobID] = slices.DeleteFunc(q.byJob[jobID], func(x int) bool { return x == r })
	}
	if len(q.byJob[jobID]) == 0 {
		delete(q.byJob, jobID)
	}
}

// ReleaseAll uncounts every holding (before they are counted again from a
// rebuilt snapshot).
func (q *Queue) ReleaseAll() {
	q.version++
	clear(q.held)
	clear(q.byJob)
	for _, a := range q.accounts {
		a.used = 0
	}
}

// Used is what team holds under quota key k's scope.
func (q *Queue) Used(k QuotaKey) int {
	if a := q.accounts[k]; a != nil {
		return a.used
	}
	return 0
}

// Admits says whether team has room under its quotas for gpus more GPUs of
// model in location (placement's choice for a job that asked for any
// model), and if not, the quota that refuses.
func (q *Queue) Admits(team, location, model string, gpus int) (Block, bool) {
	for _, k := range []QuotaKey{{team, location, model}, {team, location, ""}} {
		if a := q.accounts[k]; a != nil && a.capped && a.used+gpus > a.quota {
			return Block{Team: team, Location: location, GPUModel: k.GPUModel, Used: a.used, Quota: a.quota, Need: gpus}, false
		}
		if model == "" {
			break
		}
	}
	return Block{}, true
}

// admits checks a job of tq needing gpus (with extra GPUs counted as held
// on both accounts, for the projected order) against the quotas covering
// its queue.
func (tq *teamQueue) admits(key Key, gpus, extra int) (Block, bool) {
	for _, a := range []*account{tq.model, tq.all} {
		if a != nil && a.capped && a.used+extra+gpus > a.quota {
			m := key.GPUModel
			if a == tq.all {
				m = ""
			}
			return Block{Team: tq.team, Location: key.Location, GPUModel: m, Used: a.used + extra, Quota: a.quota, Need: gpus}, false
		}
	}
	return Block{}, true
}

// share is a fraction num/den; den 0 is infinite (a quota of 0).
type share struct{ num, den int }

func (a share) cmp(b share) int {
	switch {
	case a.den == 0 && b.den == 0:
		return 0
	case a.den == 0:
		return 1
	case b.den == 0:
		return -1
	}
	return cmp.Compare(a.num*b.den, b.num*a.den)
}

// share is the team's share of the queue, with extra GPUs counted as held.
func (tq *teamQueue) share(capacity, extra int) share {
	var s share
	capped := false
	for _, a := range []*account{tq.model, tq.all} {
		if a == nil || !a.capped {
			continue
		}
		x := share{a.used + extra, a.quota}
		if !capped || x.cmp(s) > 0 {
			s, capped = x, true
		}
	}
	if capped {
		return s
	}
	held := tq.all.used
	if tq.model != nil {
		held = tq.model.used
	}
	return share{held + extra, max(capacity, 1)}
}

// next is the head the queue offers next: the reserved job if its team's
// quota still admits it, else the oldest job of the team with the lowest
// share whose oldest job its quotas admit, skipping the teams in skip.
func (q *Queue) next(kq *keyQueue, skip, deferred map[string]bool) *entry {
	if kq.reserved != "" {
		if e := q.jobs[kq.reserved]; e != nil && !skip[e.Team] && !deferred[e.ID] {
			if _, ok := kq.teams[e.Team].admits(kq.key, e.GPUs, 0); ok {
				return e
			}
		}
		kq.reserved = ""
	}
	capacity := q.capacity[kq.key]
	var (
		best      *entry
		bestShare share
	)
	for _, tq := range kq.order {
		if skip[tq.team] {
			continue
		}
		head := tq.jobs[0]
		if len(deferred) > 0 {
			head = nil
			for _, e := range tq.jobs {
				if !deferred[e.ID] {
					head = e
					break
				}
			}
			if head == nil {
				continue
			}
		}
		if _, ok := tq.admits(kq.key, head.GPUs, 0); !ok {
			continue
		}
		s := tq.share(capacity, 0)
		if best == nil {
			best, bestShare = head, s
			continue
		}
		if c := s.cmp(bestShare); c < 0 || c == 0 && head.seq < best.seq {
			best, bestShare = head, s
		}
	}
	return best
}

// Pass offers jobs to try, queue by queue (the queue with the oldest job
// first), in the order of the rules, until each queue is empty, reserved
// by a job that must wait, or left with teams over quota. Each try says
// what became of the job (Outcome). Then overQuota is told of each team's
// oldest job that its quota holds back, and why (it may be nil).
func (q *Queue) Pass(try func(Job) Outcome, overQuota func(Job, Block)) {
	keys := make([]*keyQueue, 0, len(q.queues))
	oldest := make(map[Key]uint64, len(q.queues))
	for k, kq := range q.queues {
		keys = append(keys, kq)
		o := ^uint64(0)
		for _, tq := range kq.order {
			o = min(o, tq.jobs[0].seq)
		}
		oldest[k] = o
	}
	slices.SortFunc(keys, func(a, b *keyQueue) int { return cmp.Compare(oldest[a.key], oldest[b.key]) })
	for _, kq := range keys {
		skip, deferred := map[string]bool{}, map[string]bool{}
		for q.queues[kq.key] == kq {
			e := q.next(kq, skip, deferred)
			if e == nil {
				break
			}
			j := e.Job
			out := try(j)
			if out == Wait {
				kq.reserved = j.ID
				break
			}
			if out == Stop {
				break
			}
			if out == Skip {
				skip[j.Team] = true
				continue
			}
			if out == Defer {
				deferred[j.ID] = true
				continue
			}
			q.Remove(j.ID) // Placed or Drop
		}
		if overQuota == nil || q.queues[kq.key] != kq {
			continue
		}
		for _, tq := range kq.order {
			head := tq.jobs[0]
			if b, ok := tq.admits(kq.key, head.GPUs, 0); !ok {
				overQuota(head.Job, b)
			}
		}
	}
}

// Reserved is the job that reserves queue k, or "".
func (q *Queue) Reserved(k Key) string {
	if kq := q.queues[k]; kq != nil {
		return kq.reserved
	}
	return ""
}

// Position is a queued job's 1-based place in the order its queue would
// place its jobs if GPUs were free and nothing ended: the reserved job
// first, then by the rules, each job placed counting as held by its team,
// and last the jobs of teams their quotas hold back, oldest first. 0 for a
// job not queued.
func (q *Queue) Position(id string) int {
	e, ok := q.jobs[id]
	if !ok {
		return 0
	}
	if q.posAt[e.Key] != q.version {
		for i, j := range q.Order(e.Key) {
			q.position[j.ID] = i + 1
		}
		q.posAt[e.Key] = q.version
	}
	return q.position[id]
}

// Order lists queue k's jobs in the order Position gives.
func (q *Queue) Order(k Key) []Job {
	kq := q.queues[k]
	if kq == nil {
		return nil
	}
	out := make([]Job, 0, kq.n)
	next := make(map[*teamQueue]int, len(kq.order)) // index of each team's head
	extra := make(map[*teamQueue]int, len(kq.order))
	if e := q.jobs[kq.reserved]; e != nil {
		tq := kq.teams[e.Team]
		if tq.jobs[0] == e {
			out = append(out, e.Job)
			next[tq], extra[tq] = 1, e.GPUs
		}
	}
	capacity := q.capacity[k]
	for {
		var (
			best      *teamQueue
			bestShare share
		)
		for _, tq := range kq.order {
			i := next[tq]
			if i >= len(tq.jobs) {
				continue
			}
			if _, ok := tq.admits(k, tq.jobs[i].GPUs, extra[tq]); !ok {
				continue
			}
			s := tq.share(capacity, extra[tq])
			if best == nil {
				best, bestShare = tq, s
				continue
			}
			if c := s.cmp(bestShare); c < 0 || c == 0 && tq.jobs[i].seq < best.jobs[next[best]].seq {
				best, bestShare = tq, s
			}
		}
		if best == nil {
			break
		}
		e := best.jobs[next[best]]
		out = append(out, e.Job)
		next[best]++
		extra[best] += e.GPUs
	}
	var rest []*entry
	for _, tq := range kq.order {
		rest = append(rest, tq.jobs[next[tq]:]...)
	}
	slices.SortFunc(rest, func(a, b *entry) int { return cmp.Compare(a.seq, b.seq) })
	for _, e := range rest {
		out = append(out, e.Job)
	}
	return out
}
