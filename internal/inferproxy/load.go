package inferproxy

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/cosmicac/cosmicac/internal/ork/orkapi"
)

// The proxy's part of autoscaling and rolling updates (docs/inference.md,
// "Autoscaling", "Rolling updates"): it counts the requests each job has
// here, in flight at each of its replicas and (an autoscaled job's)
// waiting for one to be ready, and reports them to the ork every
// loadEvery, and at once when a request starts waiting (a job scaled to
// zero wakes without waiting for the next report). The ork sums the
// reports of every proxy: it sizes the autoscaled jobs, and a rollout
// replaces a drained replica once none is in flight there.

// LoadReporter takes the proxy's load reports (*orkapi.Client).
type LoadReporter interface {
	ReportLoad(ctx context.Context, p orkapi.LoadReport) error
}

var _ LoadReporter = (*orkapi.Client)(nil)

// loadEvery is how often the proxy reports its load.
const loadEvery = time.Second

// jobLoads counts the requests of the autoscaled jobs waiting at this
// proxy for a replica to be ready (those in flight are the replicas' own
// counts: replica.outstanding, read when a report is made).
type jobLoads struct {
	mu      sync.Mutex
	waiting map[string]int
	kick    chan struct{}
}

func newJobLoads() *jobLoads {
	return &jobLoads{waiting: map[string]int{}, kick: make(chan struct{}, 1)}
}

// wait changes job id's count of waiting requests; a request that starts
// waiting asks for a report at once.
func (l *jobLoads) wait(id string, n int) {
	l.mu.Lock()
	l.waiting[id] += n
	if l.waiting[id] <= 0 {
		delete(l.waiting, id)
	}
	l.mu.Unlock()
	if n > 0 {
		select {
		case l.kick <- struct{}{}:
		default:
		}
	}
}

// loadReport is the load now: for each job with requests here, those in
// flight at each of its replicas and those waiting for one.
func (p *Proxy) loadReport() orkapi.LoadReport {
	byJob := map[string]*orkapi.JobLoad{}
	get := func(id string) *orkapi.JobLoad {
		jl := byJob[id]
		if jl == nil {
			jl = &orkapi.JobLoad{ID: id}
			byJob[id] = jl
		}
		return jl
	}
	s := p.replicas
	s.mu.Lock()
	pools := slices.Collect(maps.Values(s.pools))
	s.mu.Unlock()
	for _, pl := range pools {
		pl.mu.Lock()
		for _, r := range pl.order {
			if n := int(r.outstanding.Load()); n > 0 {
				jl := get(pl.jobID)
				if jl.Replicas == nil {
					jl.Replicas = map[int]int{}
				}
				jl.InFlight += n
				jl.Replicas[r.meta.Load().Replica] += n
			}
		}
		pl.mu.Unlock()
	}
	p.loads.mu.Lock()
	for id, n := range p.loads.waiting {
		get(id).Waiting += n
	}
	p.loads.mu.Unlock()
	out := orkapi.LoadReport{Jobs: make([]orkapi.JobLoad, 0, len(byJob))}
	for _, jl := range byJob {
		if len(out.Jobs) == orkapi.MaxLoadJobs {
			break // the ork takes no more
		}
		out.Jobs = append(out.Jobs, *jl)
	}
	return out
}

// reportLoads sends the load to r every loadEvery and on each kick, until
// ctx ends. A report that fails is logged once until one succeeds again:
// the ork scales nothing down while it hears from no proxy.
func (p *Proxy) reportLoads(ctx context.Context, r LoadReporter) {
	tick := time.NewTicker(loadEvery)
	defer tick.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-p.loads.kick:
		}
		cctx, cancel := context.WithTimeout(ctx, 2*loadEvery)
		err := r.ReportLoad(cctx, p.loadReport())
		cancel()
		switch {
		case err != nil && !failing && ctx.Err() == nil:
			p.log.Warn("report load to the ork", "err", err)
			failing = true
		case err == nil && failing:
			p.log.Info("reporting load to the ork again")
			failing = false
		}
	}
}
