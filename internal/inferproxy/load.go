package inferproxy

import (
	"context"
	"maps"
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

// jobLoads counts the requests of the autoscaled jobs at this proxy.
type jobLoads struct {
	mu   sync.Mutex
	m    map[string]orkapi.JobLoad
	kick chan struct{}
}

func newJobLoads() *jobLoads {
	return &jobLoads{m: map[string]orkapi.JobLoad{}, kick: make(chan struct{}, 1)}
}

// add changes job id's counts (inFlight at replica, when not negative);
// a request that starts waiting asks for a report at once.
func (l *jobLoads) add(id string, replica, inFlight, waiting int) {
	l.mu.Lock()
	e := l.m[id]
	e.ID, e.InFlight, e.Waiting = id, e.InFlight+inFlight, e.Waiting+waiting
	if replica >= 0 && inFlight != 0 {
		if e.Replicas == nil {
			e.Replicas = map[int]int{}
		}
		e.Replicas[replica] += inFlight
		if e.Replicas[replica] == 0 {
			delete(e.Replicas, replica)
		}
	}
	if e.InFlight == 0 && e.Waiting == 0 {
		delete(l.m, id)
	} else {
		l.m[id] = e
	}
	l.mu.Unlock()
	if waiting > 0 {
		select {
		case l.kick <- struct{}{}:
		default:
		}
	}
}

// report is the counts now: the jobs with requests here.
func (l *jobLoads) report() orkapi.LoadReport {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := orkapi.LoadReport{Jobs: make([]orkapi.JobLoad, 0, len(l.m))}
	for _, e := range l.m {
		if len(out.Jobs) == orkapi.MaxLoadJobs {
			break // the ork takes no more
		}
		e.Replicas = maps.Clone(e.Replicas)
		out.Jobs = append(out.Jobs, e)
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
		err := r.ReportLoad(cctx, p.loads.report())
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
