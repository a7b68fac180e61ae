package ork

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/joblog"
	"github.com/cosmicac/cosmicac/internal/ork/orkapi"
	"github.com/cosmicac/cosmicac/internal/ork/placement"
	"github.com/cosmicac/cosmicac/internal/store"
	"github.com/cosmicac/cosmicac/internal/worker"
)

// The autoscaler (docs/inference.md, "Autoscaling"). Each proxy reports,
// every second and at once when a request starts waiting, the requests
// each autoscaled job has there: in flight at its replicas and waiting for
// one. Every AutoscaleEvery the leading ork sums the fresh reports per job
// and sizes the job (scaleRule): up at once, down only once the load has
// wanted fewer replicas for the job's whole scale-down delay. A new replica
// is queued and placed like any other (queue, quotas, reasons); one taken
// away is deleted on its worker, highest index first, and its GPUs go when
// the worker reports it gone. Each decision is a system record of the job
// and counted in cosmicac_ork_autoscale_decisions_total.

// loadFresh is how long a proxy's report counts: a proxy that stopped
// reporting (it ended, or cannot reach the ork) counts for nothing after
// it, and with no fresh report at all nothing is scaled down.
const loadFresh = 5 * time.Second

// proxyLoad is one proxy's last report.
type proxyLoad struct {
	at   time.Time
	jobs map[string]orkapi.JobLoad
}

// scaler is the autoscaler's memory of one job.
type scaler struct {
	// below is since when the load has wanted fewer replicas than the job
	// runs (zero: it has not), and peak the most it wanted since.
	below time.Time
	peak  int
	// cap is the most replicas the job's location could ever hold, as
	// placement found when a scale-up was impossible (0: none known).
	cap int
}

// scaleInput is what scaleRule decides on.
type scaleInput struct {
	A       cosmic.Autoscaling
	Current int
	// Demand is the requests the fresh reports sum to; Known is false
	// when no proxy reported within loadFresh.
	Demand int
	Known  bool
	Now    time.Time
	State  scaler
}

// scaleRule answers the replicas the job should run and the scaler's new
// memory. The load wants ceil(demand / target) replicas, at least one
// while any request waits, within minReplicas and maxReplicas (and the
// location's cap): more than the job runs is answered at once; fewer only
// when the load has wanted fewer for the whole scale-down delay, and then
// the most it wanted in that time.
func scaleRule(in scaleInput) (int, scaler) {
	st := in.State
	if !in.Known {
		st.below, st.peak = time.Time{}, 0
		return in.Current, st
	}
	a := in.A
	target := max(a.TargetInFlight, 1)
	want := (in.Demand + target - 1) / target
	hi := a.MaxReplicas
	if st.cap > 0 {
		hi = min(hi, st.cap)
	}
	want = min(max(want, a.MinReplicas), max(hi, a.MinReplicas))
	switch {
	case want > in.Current:
		st.below, st.peak = time.Time{}, 0
		return want, st
	case want == in.Current:
		st.below, st.peak = time.Time{}, 0
		return in.Current, st
	}
	if st.below.IsZero() {
		st.below, st.peak = in.Now, want
	}
	st.peak = max(st.peak, want)
	if in.Now.Sub(st.below) < time.Duration(a.ScaleDownDelay)*time.Second {
		return in.Current, st
	}
	n := st.peak
	st.below, st.peak = time.Time{}, 0
	return n, st
}

// ReportLoad takes a proxy's load report (orkapi.MethodReportLoad). A
// report that asks for more replicas than a job runs wakes the
// autoscaler at once.
func (o *Ork) ReportLoad(from fabric.PublicKey, rep orkapi.LoadReport) error {
	if len(rep.Jobs) > orkapi.MaxLoadJobs {
		return fabric.Errorf(fabric.CodeBadRequest, "a load report lists %d jobs, more than %d", len(rep.Jobs), orkapi.MaxLoadJobs)
	}
	jobs := make(map[string]orkapi.JobLoad, len(rep.Jobs))
	wake := false
	for _, l := range rep.Jobs {
		if l.InFlight < 0 || l.Waiting < 0 {
			return fabric.Errorf(fabric.CodeBadRequest, "job %s: negative load", l.ID)
		}
		for i, n := range l.Replicas {
			if n < 0 || i < 0 || i > cosmic.MaxReplicas {
				return fabric.Errorf(fabric.CodeBadRequest, "job %s: replica %d: no such replica, or a negative load", l.ID, i)
			}
		}
		jobs[l.ID] = l
		wake = wake || l.Waiting > 0
	}
	o.mu.Lock()
	o.loads[from] = proxyLoad{at: o.now(), jobs: jobs}
	o.mu.Unlock()
	if wake {
		select {
		case o.scaleKick <- struct{}{}:
		default:
		}
	}
	return nil
}

// demandLocked sums the fresh reports' load of job id, and says whether
// any report is fresh.
func (o *Ork) demandLocked(id string, now time.Time) (int, bool) {
	n, known := 0, false
	for _, l := range o.loads {
		if now.Sub(l.at) > loadFresh {
			continue
		}
		known = true
		if jl, ok := l.jobs[id]; ok {
			n += jl.InFlight + jl.Waiting
		}
	}
	return n, known
}

// autoscaleRelist is how often the autoscaler reads the store's list of
// serving jobs anew; between, it follows the jobs it knows, those created
// since, and those the proxies report.
const autoscaleRelist = 30 * time.Second

// autoscale sizes every autoscaled job that serves (running or degraded:
// one still starting is left to start) to its load.
func (o *Ork) autoscale(ctx context.Context) {
	now := o.now()
	o.mu.Lock()
	maps.DeleteFunc(o.loads, func(_ fabric.PublicKey, l proxyLoad) bool { return now.Sub(l.at) > time.Minute })
	relist := now.Sub(o.scaledListed) >= autoscaleRelist
	ids := maps.Clone(o.autoscaled)
	for _, l := range o.loads {
		for id, jl := range l.jobs {
			if jl.Waiting > 0 {
				ids[id] = true // a job woken from zero may be new to the autoscaler
			}
		}
	}
	o.mu.Unlock()
	if relist {
		jobs, err := listAll(ctx, o.st, store.ListJobsQuery{States: []cosmic.State{cosmic.StateRunning, cosmic.StateDegraded}})
		if err != nil {
			o.log.Warn("autoscale: list jobs", "err", err)
			return
		}
		ids = map[string]bool{}
		for _, j := range jobs {
			if j.Spec.Autoscaled() {
				ids[j.ID] = true
			}
		}
		o.mu.Lock()
		o.scaledListed = now
		o.mu.Unlock()
	}
	keep := map[string]bool{}
	for _, id := range slices.Sorted(maps.Keys(ids)) {
		j, err := o.st.GetJob(ctx, id)
		if err != nil || !j.Spec.Autoscaled() {
			continue // gone, or not autoscaled: a report names what it likes
		}
		keep[id] = true
		if st := j.Status.State; st != cosmic.StateRunning && st != cosmic.StateDegraded || j.Status.Rollout != nil {
			continue // a rollout sizes the job until it ends
		}
		o.mu.Lock()
		demand, known := o.demandLocked(id, now)
		cur := j.Spec.Replicas()
		n, st := scaleRule(scaleInput{A: *j.Spec.Inference.Autoscaling, Current: cur, Demand: demand, Known: known, Now: now, State: o.scalers[id]})
		o.scalers[id] = st
		o.mu.Unlock()
		if n == cur {
			continue
		}
		why := fmt.Sprintf("%d requests in flight or waiting", demand)
		if demand == 1 {
			why = "1 request in flight or waiting"
		}
		if _, err := o.scaleJob(ctx, id, n, why); err != nil {
			o.log.Warn("autoscale", "job_id", id, "from", cur, "to", n, "err", err)
		}
	}
	o.mu.Lock()
	o.autoscaled = keep
	maps.DeleteFunc(o.scalers, func(id string, _ scaler) bool { return !keep[id] })
	o.mu.Unlock()
}

// scaleJob sets an autoscaled job's replica count to n, for why (the
// load), as resizeLocked does. It records the decision in the job's
// system log and the decisions metric.
func (o *Ork) scaleJob(ctx context.Context, id string, n int, why string) (cosmic.Job, error) {
	o.mu.Lock()
	var (
		from    int
		removed []cosmic.Reservation
	)
	j, err := o.updateJobLocked(ctx, id, func(_ Tx, j *cosmic.Job) error {
		if !j.Spec.Autoscaled() {
			return conflictf("job %s is not autoscaled", j.ID)
		}
		if j.Status.Rollout != nil {
			return conflictf("job %s is rolling out an update", j.ID)
		}
		if st := j.Status.State; st != cosmic.StateRunning && st != cosmic.StateDegraded {
			return conflictf("job %s is %s: only a serving job is scaled", j.ID, st)
		}
		// The bounds as stored now (an update may have changed them since
		// the decision).
		a := j.Spec.Inference.Autoscaling
		n = min(max(n, a.MinReplicas), a.MaxReplicas)
		from = j.Spec.Replicas()
		removed = o.resizeLocked(j, n, cosmic.NewReason(cosmic.ReasonScaledDown, why))
		return o.setAggregate(j)
	})
	if err == nil {
		o.requeueLocked(j)
	}
	o.mu.Unlock()
	if err != nil || n == from {
		return j, err
	}
	dir := "up"
	if n < from {
		dir = "down"
	}
	o.metrics.scaled.WithLabelValues(dir).Inc()
	o.record(j, "autoscale", fmt.Sprintf("scaled %s from %d to %d replicas: %s (target %d per replica, min %d, max %d)",
		dir, from, n, why, j.Spec.Inference.Autoscaling.TargetInFlight, j.Spec.Inference.Autoscaling.MinReplicas, j.Spec.Inference.Autoscaling.MaxReplicas))
	o.log.Info("autoscale", "job_id", id, "from", from, "to", n, "why", why)
	o.deleteOnWorkers(ctx, id, removed)
	if n > from {
		o.poke()
	}
	return j, nil
}

// resizeLocked sets job j's replica count to n: added replicas are
// queued (the caller enqueues the job); replicas taken away, highest index
// first, are drained when they run (deleted with reason gone once their
// requests end: drain.go), else marked deleting with reason gone and
// answered (the caller deletes them on their workers, deleteOnWorkers);
// either keeps its GPUs until its worker reports it gone, when its entry
// goes. It runs inside updateJobLocked.
func (o *Ork) resizeLocked(j *cosmic.Job, n int, gone cosmic.Reason) []cosmic.Reservation {
	from := j.Spec.Replicas()
	if n == from {
		return nil
	}
	j.Spec.Inference.Replicas = n
	for i := from; i < n; i++ {
		if i < len(j.Status.Replicas) {
			r := &j.Status.Replicas[i]
			if r.Drain != nil {
				r.Drain = nil // still draining from a scale-down: it serves on
				continue
			}
			if r.State == cosmic.StateDeleting {
				continue // still going from a scale-down: placed again once gone
			}
		}
		setReplica(j, i, func(rs *cosmic.ReplicaStatus) {
			rs.State, rs.Reason, rs.Nodes, rs.AgentKeys, rs.Progress = cosmic.StateQueued, nil, nil, nil, nil
			rs.Generation = j.Status.Generation // what it will be placed with
		})
	}
	var removed []cosmic.Reservation
	for i := n; i < from; i++ {
		res, held := o.snap.Reserved(j.ID, i)
		switch {
		case !held:
		case j.Status.Replicas[i].State == cosmic.StateRunning:
			o.drainReplica(j, i, gone) // deleted once its requests end (drain.go)
		default:
			removed = append(removed, res)
			setReplica(j, i, func(rs *cosmic.ReplicaStatus) { rs.State, rs.Reason = cosmic.StateDeleting, &gone })
		}
	}
	trimReplicas(j, func(i int) bool { _, held := o.snap.Reserved(j.ID, i); return held })
	return removed
}

// deleteOnWorkers deletes the replicas of job id on their workers, in the
// background; the heartbeat's reconcile asks again for one whose worker
// did not answer.
func (o *Ork) deleteOnWorkers(ctx context.Context, id string, rs []cosmic.Reservation) {
	for _, r := range rs {
		o.goBackground(func() {
			err := o.onRacks(context.WithoutCancel(ctx), []string{r.Rack}, func(ctx context.Context, w worker.Worker) error {
				return w.Delete(ctx, worker.DeleteParams{JobID: id, Replica: r.Replica})
			})
			if err != nil {
				o.log.Warn("delete a replica on its worker", "job_id", id, "replica", r.Replica, "err", err)
			}
		})
	}
}

// cappedJob is a scale-up placement found impossible (schedule).
type cappedJob struct {
	job cosmic.Job
	why cosmic.Reason
}

// takeBackLocked takes back the replicas of a job holding GPUs that its
// location can never hold (placement found them impossible), reading the
// job afresh. An autoscaled job's scale-up is capped to the most replicas
// placement could hold with every node empty (at least those placed), and
// the autoscaler asks for no more than that from now on (until the ork
// restarts). Any other (a rollout's replica, or a count an update raised
// before the location shrank) fails those replicas alone, holding no GPUs:
// the job serves on, degraded, and a rollout rolls back.
func (o *Ork) takeBackLocked(ctx context.Context, queued cosmic.Job, why cosmic.Reason) error {
	job, err := o.st.GetJob(ctx, queued.ID)
	if err != nil {
		o.dequeueLocked(queued.ID)
		return err
	}
	reserved := func(i int) bool { _, ok := o.snap.Reserved(job.ID, i); return ok }
	held := 0
	for i := range job.Spec.Replicas() {
		if reserved(i) {
			held = i + 1
		}
	}
	line, step := "", "placement"
	j, err := o.updateJobLocked(ctx, job.ID, func(_ Tx, j *cosmic.Job) error {
		if j.Spec.Autoscaled() && j.Status.Rollout == nil {
			step = "autoscale"
			n := j.Spec.Replicas() - 1
			for ; n > held; n-- {
				try := *j
				in := *j.Spec.Inference
				in.Replicas = n
				try.Spec.Inference = &in
				if _, impossible := placement.Place(o.snap, try).(placement.Impossible); !impossible {
					break
				}
			}
			st := o.scalers[j.ID]
			st.cap = max(n, 1)
			o.scalers[j.ID] = st
			line = fmt.Sprintf("cannot scale to %d replicas, only to %d: %s", j.Spec.Replicas(), n, why.Message)
			j.Spec.Inference.Replicas = n
			trimReplicas(j, reserved)
			return o.setAggregate(j)
		}
		var failed []string
		for i := range j.Spec.Replicas() {
			if !reserved(i) && i < len(j.Status.Replicas) && j.Status.Replicas[i].State == cosmic.StateQueued {
				r := why
				setReplica(j, i, func(rs *cosmic.ReplicaStatus) { rs.State, rs.Reason = cosmic.StateFailed, &r })
				failed = append(failed, fmt.Sprint(i))
			}
		}
		line = fmt.Sprintf("replicas %s cannot be placed: %s", strings.Join(failed, ", "), why.Message)
		return o.setAggregate(j)
	})
	if err != nil {
		return err
	}
	o.requeueLocked(j)
	o.record(j, step, line)
	return nil
}

// trimReplicas drops the status entries past the job's replica count
// from the end, while they hold no GPUs (held): those still being
// deleted stay until their worker reports them gone.
func trimReplicas(j *cosmic.Job, held func(i int) bool) {
	n := j.Spec.Replicas()
	for len(j.Status.Replicas) > n {
		last := len(j.Status.Replicas) - 1
		if held(last) {
			break
		}
		j.Status.Replicas = j.Status.Replicas[:last]
	}
	j.Status.Replicas = slices.Clip(j.Status.Replicas)
}

// record writes a system record of the ork's about job j (Deps.Records).
func (o *Ork) record(j cosmic.Job, step, line string) {
	o.records.Emit(joblog.Record{Time: o.now(), JobID: j.ID, Team: j.Team, Replica: -1,
		Source: joblog.SourceSystem, Stream: "wrk-ork", Step: step, OK: joblog.Bool(true), Line: line})
}
