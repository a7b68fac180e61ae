package inferproxy

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cosmicac/cosmicac/internal/agent/agentapi"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/inferproxy/proxyapi"
	"github.com/cosmicac/cosmicac/internal/trust"
)

// Health of a replica or a model.
const (
	HealthHealthy   = "healthy"
	HealthDegraded  = "degraded"
	HealthUnhealthy = "unhealthy"
	HealthUnknown   = "unknown"
)

// replica is what the proxy knows of one replica's head agent.
type replica struct {
	key  fabric.PublicKey
	job  string // the job it is a replica of
	meta atomic.Pointer[agentapi.InferenceMeta]

	outstanding atomic.Int64
	hostName    atomic.Pointer[string]

	mu        sync.Mutex
	downUntil time.Time
	outcomes  [64]outcome // a ring of the last requests
	n, next   int
	ewmaMs    float64
	lastErr   string
}

type outcome struct{ failed bool }

// host is the replica's host name for the proxy's transport.
func (r *replica) host() string {
	if h := r.hostName.Load(); h != nil {
		return *h
	}
	h := hex.EncodeToString(r.key[:]) + ".agent"
	r.hostName.Store(&h)
	return h
}

// observe records a request's outcome and its time to first byte.
func (r *replica) observe(failed bool, ttfb time.Duration, errText string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.outcomes[r.next] = outcome{failed: failed}
	r.next = (r.next + 1) % len(r.outcomes)
	r.n = min(r.n+1, len(r.outcomes))
	if !failed {
		ms := float64(ttfb.Microseconds()) / 1000
		if r.ewmaMs == 0 {
			r.ewmaMs = ms
		} else {
			r.ewmaMs = 0.9*r.ewmaMs + 0.1*ms
		}
	} else {
		r.lastErr = errText
	}
}

// markDown keeps the replica out of rotation for d (it failed to answer).
func (r *replica) markDown(d time.Duration) {
	r.mu.Lock()
	r.downUntil = time.Now().Add(d)
	r.mu.Unlock()
}

func (r *replica) isDown(now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return now.Before(r.downUntil)
}

// ReplicaHealth is one replica's health as the proxy sees it (the
// contract's type: proxyapi).
type ReplicaHealth = proxyapi.ReplicaHealth

// health judges a replica: not ready or kept out after a failure →
// unhealthy; ≥50% errors among ≥5 recent requests → unhealthy; ≥10% errors,
// or a time to first byte (or probe) over slow → degraded; else healthy.
func (r *replica) health(slow time.Duration) ReplicaHealth {
	m := r.meta.Load()
	r.mu.Lock()
	defer r.mu.Unlock()
	h := ReplicaHealth{Replica: m.Replica, Key: r.key.String(), Ready: m.Ready, Outstanding: r.outstanding.Load(),
		Requests: r.n, LatencyMs: r.ewmaMs, ProbeMs: m.ProbeMs, Error: m.Error}
	fails := 0
	for i := 0; i < r.n; i++ {
		if r.outcomes[i].failed {
			fails++
		}
	}
	if r.n > 0 {
		h.ErrorRate = float64(fails) / float64(r.n)
	}
	if h.Error == "" && fails > 0 {
		h.Error = r.lastErr
	}
	slowMs := float64(slow.Milliseconds())
	switch {
	case !m.Ready || time.Now().Before(r.downUntil):
		h.Health = HealthUnhealthy
	case r.n >= 5 && h.ErrorRate >= 0.5:
		h.Health = HealthUnhealthy
	case r.n >= 5 && h.ErrorRate >= 0.1, h.LatencyMs > slowMs, m.ProbeMs > slowMs:
		h.Health = HealthDegraded
	default:
		h.Health = HealthHealthy
	}
	return h
}

// pool is the replicas of one job, refreshed from the directories.
type pool struct {
	jobID string

	mu sync.Mutex
	// at is when the lookup that gave replicas, order and err began.
	at       time.Time
	replicas map[fabric.PublicKey]*replica
	order    []*replica // the live announcements, ready or not
	err      error
	// loading is non-nil while a lookup runs, which began at loadingSince.
	loading      chan struct{}
	loadingSince time.Time
	ahead        bool // a lookup ahead of the list's expiry runs (or is about to)
}

// replicaSet finds and caches each job's replicas.
type replicaSet struct {
	node   *fabric.Node
	dirs   []fabric.PublicKey
	agents Agents
	ttl    time.Duration
	bg     *background // looks lists up ahead of their expiry (nil: never)

	mu    sync.Mutex
	pools map[string]*pool
}

// get returns the live replicas of job, looking them up when the cached
// answer is older than ttl (one lookup at a time per job; the others wait
// for it).
//
// A list past aheadAt of ttl is looked up again in the background
// (ahead.go), while the request goes on with it.
func (s *replicaSet) get(ctx context.Context, jobID string) ([]*replica, error) {
	now := time.Now()
	p := s.pool(jobID)
	p.mu.Lock()
	due := p.loading == nil && !p.ahead && p.err == nil && dueAhead(p.at, now, s.ttl)
	p.ahead = p.ahead || due
	p.mu.Unlock()
	if due {
		// Once the proxy is closed nothing runs, and the flag stays: no
		// read ahead is wanted any more.
		s.bg.Go(func(ctx context.Context) {
			s.lookup(ctx, p, time.Now(), true)
			p.mu.Lock()
			p.ahead = false
			p.mu.Unlock()
		})
	}
	return s.lookup(ctx, p, now.Add(-s.ttl), true)
}

// pool is job's pool, made on first use.
func (s *replicaSet) pool(jobID string) *pool {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.pools[jobID]
	if p == nil {
		p = &pool{jobID: jobID, replicas: map[fabric.PublicKey]*replica{}}
		s.pools[jobID] = p
	}
	return p
}

// refresh is get with an answer from a lookup begun now or later: a
// request that found no ready replica looks again, since a replica that
// just turned ready is in the directories before its job is running
// (inferagent publishes ready only once announced). Lookups stay one at a
// time per job, however many requests wait.
func (s *replicaSet) refresh(ctx context.Context, jobID string) ([]*replica, error) {
	return s.lookup(ctx, s.pool(jobID), time.Now(), false)
}

// lookup answers from the last lookup of job if it began at notBefore or
// later, else from a new one (or the one running, if it began in time).
// stale lets it answer the last list while a lookup runs.
func (s *replicaSet) lookup(ctx context.Context, p *pool, notBefore time.Time, stale bool) ([]*replica, error) {
	jobID := p.jobID
	for {
		p.mu.Lock()
		if !p.at.Before(notBefore) {
			out, err := p.order, p.err
			p.mu.Unlock()
			return out, err
		}
		if ch := p.loading; ch != nil {
			last, inTime := p.order, !p.loadingSince.Before(notBefore)
			p.mu.Unlock()
			if stale && len(last) > 0 { // serve the last list meanwhile
				return last, nil
			}
			select {
			case <-ch:
				if inTime {
					p.mu.Lock()
					out, err := p.order, p.err
					p.mu.Unlock()
					return out, err
				}
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		ch := make(chan struct{})
		began := time.Now()
		p.loading, p.loadingSince = ch, began
		p.mu.Unlock()
		// Not the caller's cancellation (others wait for this lookup), but
		// the proxy's Close (s.bg) ends it.
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		stop := s.bg.onClose(cancel)
		peers, err := s.node.Lookup(lctx, agentapi.InferenceTopic(jobID), s.dirs...)
		stop()
		cancel()
		p.mu.Lock()
		p.loading = nil
		close(ch)
		if err != nil {
			p.err, p.at = err, began
			if len(p.order) > 0 {
				p.err = nil // keep the last good answer
			}
			p.mu.Unlock()
			continue
		}
		next := make(map[fabric.PublicKey]*replica, len(peers))
		order := make([]*replica, 0, len(peers))
		for _, pi := range peers {
			var m agentapi.InferenceMeta
			if json.Unmarshal(pi.Meta, &m) != nil || m.Role != agentapi.PlacementHead || m.JobID != jobID {
				continue // workers of multi-node replicas serve no API
			}
			// The directory takes an agent's word for its meta; the ork's
			// binding of its key decides. Only the key bound as the head of
			// one of this job's replicas is routed to (a hijack replayed in
			// internal/cosmictest's TestModelHijackIsRefused).
			b, ok := s.agents.Principal(pi.Key)
			if !ok || b.Role != trust.InferenceAgent || b.Job != jobID || !b.Head() {
				continue
			}
			m.Replica = b.Replica
			r := p.replicas[pi.Key]
			if r == nil {
				r = &replica{key: pi.Key, job: jobID}
			}
			r.meta.Store(&m)
			next[pi.Key] = r
			order = append(order, r)
		}
		p.replicas, p.order, p.err, p.at = next, order, nil, began
		p.mu.Unlock()
	}
}

// pick chooses the ready replica with the fewest outstanding requests
// (ties at random), skipping tried ones and those kept out after a failure
// (unless nothing else is left).
func pick(rs []*replica, tried map[*replica]bool) *replica {
	now := time.Now()
	var best []*replica
	var bestN int64
	var fallback *replica
	for _, r := range rs {
		if tried[r] || !r.meta.Load().Ready {
			continue
		}
		if r.isDown(now) {
			fallback = r
			continue
		}
		n := r.outstanding.Load()
		switch {
		case len(best) == 0 || n < bestN:
			best, bestN = append(best[:0], r), n
		case n == bestN:
			best = append(best, r)
		}
	}
	switch len(best) {
	case 0:
		return fallback
	case 1:
		return best[0]
	}
	return best[rand.IntN(len(best))]
}
