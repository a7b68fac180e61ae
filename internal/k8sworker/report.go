package k8sworker

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/joblog"
	"github.com/cosmicac/cosmicac/internal/worker"
)

// setReport records rep as replica k's report; a change is pushed to the
// ork and written as a system log record.
func (w *Worker) setReport(k replicaKey, m *replicaMem, rep worker.ReplicaReport, o observation, now time.Time) {
	rep = withExit(m, rep, o)
	if m.last != nil {
		rep.Observed = m.last.Observed
		if reflect.DeepEqual(*m.last, rep) {
			return
		}
	}
	w.mu.Lock()
	_, tombstone := w.gone[k]
	w.mu.Unlock()
	if tombstone && !rep.Gone {
		return // a late event about a replica reported Gone
	}
	rep.Observed = worker.Observe()
	prev := m.last
	m.last = &rep
	w.recordChange(k, m, prev, rep, o, now)
	w.mu.Lock()
	defer w.mu.Unlock()
	if rep.Gone {
		w.tombstoneLocked(k, now)
	}
	w.reports.Set(k.ref(), rep)
}

// markGone reports replica k Gone (a delete of what the rack does not hold).
func (w *Worker) markGone(k replicaKey) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.tombstoneLocked(k, w.now())
	w.reports.SetGone(k.ref())
}

// goneTTL is how long a tombstone outlives its replica's Gone report:
// informers lag by seconds, not minutes.
const goneTTL = 10 * time.Minute

// tombstoneLocked records replica k as reported Gone at now and, at most
// once per goneTTL, forgets tombstones older than goneTTL, so that a
// long-running worker does not keep one per replica it ever deleted.
func (w *Worker) tombstoneLocked(k replicaKey, now time.Time) {
	w.gone[k] = now
	if now.Sub(w.gonePruned) < goneTTL {
		return
	}
	w.gonePruned = now
	for g, at := range w.gone {
		if now.Sub(at) > goneTTL {
			delete(w.gone, g)
		}
	}
}

// markCapacityLocked queues the rack's capacity for the next Report.
func (w *Worker) markCapacityLocked() { w.reports.SetCapacity() }

// recordChange writes the system log record of a report's change: the
// import's progress, scheduling, boot, readiness, failures, restarts,
// stops and deletion.
func (w *Worker) recordChange(k replicaKey, m *replicaMem, prev *worker.ReplicaReport, rep worker.ReplicaReport, o observation, now time.Time) {
	var was worker.ReplicaReport
	if prev != nil {
		was = *prev
	}
	step := func(p *cosmic.Progress) (string, int) {
		if p == nil {
			return "", 0
		}
		return p.Step, p.Percent
	}
	ws, wp := step(was.Progress)
	s, p := step(rep.Progress)
	switch {
	case rep.Gone:
		w.record(k, m, now, "delete", true, "replica %d deleted: no object of it is left", k.replica)
	case rep.State == cosmic.StateFailed && was.State != cosmic.StateFailed:
		msg := "failed"
		if rep.Reason != nil {
			msg = rep.Reason.Message
		}
		w.record(k, m, now, failStep(rep.Reason), false, "replica %d failed: %s", k.replica, msg)
	case rep.State == cosmic.StateRunning && was.State != cosmic.StateRunning:
		w.record(k, m, now, "ready", true, "replica %d running on %s", k.replica, strings.Join(rep.Nodes, ", "))
	case rep.State == cosmic.StateStopped || rep.State == cosmic.StateFailed:
		// Recorded by the action that stopped it.
	case s == StepImport && (ws != s || wp != p):
		w.record(k, m, now, "import_disk", true, "importing root disk of replica %d: %d%%", k.replica, p)
	case s == StepSchedule && ws != s:
		if ws == StepImport || ws == "" {
			w.record(k, m, now, "import_disk", true, "root disk of replica %d imported", k.replica)
		}
	case s == StepBoot && p == 0 && (ws != s || wp != p):
		w.record(k, m, now, "schedule", true, "replica %d scheduled: %s", k.replica, describeScheduled(o))
	case s == StepBoot && p > 0 && (ws != s || wp != p):
		w.record(k, m, now, "boot", true, "replica %d: VMIs running, waiting for them to be ready", k.replica)
	case s == StepAgent && ws != s:
		w.record(k, m, now, "agent", true, "replica %d: VMIs ready, waiting for the agent to report ready", k.replica)
	case rep.State == cosmic.StatePending && was.State == "":
		w.record(k, m, now, "pending", true, "replica %d waiting for its root disk import and VMIs to be scheduled", k.replica)
	}
}

func failStep(r *cosmic.Reason) string {
	if r == nil {
		return "fail"
	}
	switch r.Code {
	case cosmic.ReasonImportFailed:
		return "import_disk"
	case cosmic.ReasonVMIUnschedulable:
		return "schedule"
	case cosmic.ReasonVMICrashed:
		return "crash"
	}
	return "fail"
}

func describeScheduled(o observation) string {
	var parts []string
	for i := range o.vmis {
		v := &o.vmis[i]
		if v.Status.NodeName != "" {
			parts = append(parts, fmt.Sprintf("VMI %s on node %s", v.Name, v.Status.NodeName))
		}
	}
	if len(parts) == 0 {
		return "VMIs scheduled"
	}
	return strings.Join(parts, ", ")
}

// record writes a system log record of replica k.
func (w *Worker) record(k replicaKey, m *replicaMem, now time.Time, step string, ok bool, format string, args ...any) {
	w.logs.Emit(joblog.Record{
		Time:    now,
		JobID:   k.job,
		Team:    m.team,
		Replica: k.replica,
		Source:  joblog.SourceSystem,
		Stream:  w.cfg.Rack,
		Step:    step,
		OK:      joblog.Bool(ok),
		Line:    fmt.Sprintf(format, args...),
	})
}

// reportLoop delivers undelivered changes to the reporter, the latest
// report of each replica, retrying with exponential backoff.
func (w *Worker) reportLoop(ctx context.Context) {
	w.reports.Deliver(ctx, worker.Delivery{
		Rack:     w.cfg.Rack,
		Reporter: w.rep,
		Log:      w.log,
		RetryMin: w.retryMin,
		RetryMax: w.retryMax,
		Capacity: func(ctx context.Context) (worker.Capacity, error) {
			nodes, err := w.nodes(ctx)
			if err != nil {
				return worker.Capacity{}, err
			}
			vols, err := w.volumes(ctx)
			if err != nil {
				return worker.Capacity{}, err
			}
			return worker.Capacity{Rack: w.cfg.Rack, Nodes: nodes, ObservedAt: w.now(), Problem: w.problem.get(), Catalogue: Catalogue(w.cfg), Volumes: vols}, nil
		},
		Delivered: w.delivered,
	})
}

// delivered tells the agent hub the states a delivered Report carried.
func (w *Worker) delivered(rep worker.Report) {
	states := make(map[replicaKey]cosmic.State)
	for _, j := range rep.Jobs {
		for _, r := range j.Replicas {
			states[replicaKey{job: j.JobID, replica: r.Replica}] = r.State
		}
	}
	w.agents.delivered(states)
}
