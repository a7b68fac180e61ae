package inferproxy

import (
	"context"
	"sync"
	"time"

	"github.com/cosmicac/cosmicac/internal/ork/orkapi"
)

// The proxy's part of autoscaling (docs/inference.md, "Autoscaling"): it
// counts the requests each autoscaled job has here, in flight at its
// replicas and waiting for one to be ready, and reports them to the ork
// every loadEvery, and at once when a request starts waiting (a job
// scaled to zero wakes without waiting for the next report). The ork sums
// the reports of every proxy and sizes the jobs.

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

// add changes job id's counts; a request that starts waiting asks for a
// report at once.
func (l *jobLoads) add(id string, inFlight, waiting int) {
	l.mu.Lock()
	e := l.m[id]
	e.ID, e.InFlight, e.Waiting = id, e.InFlight+inFlight, e.Waiting+waiting
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
