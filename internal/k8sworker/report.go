package k8sworker

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/joblog"
	"github.com/cosmicac/cosmicac/internal/worker"
)

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// setReport records rep as replica k's report; a change is pushed to the
// ork and written as a system log record.
func (w *Worker) setReport(k replicaKey, m *replicaMem, rep worker.ReplicaReport, o observation, now time.Time) {
	rep = withExit(m, rep, o)
	if m.last != nil && reflect.DeepEqual(*m.last, rep) {
		return
	}
	w.mu.Lock()
	_, tombstone := w.gone[k]
	w.mu.Unlock()
	if tombstone && !rep.Gone {
		return // a late event about a replica reported Gone
	}
	prev := m.last
	m.last = &rep
	w.recordChange(k, m, prev, rep, o, now)
	w.mu.Lock()
	defer w.mu.Unlock()
	if rep.Gone {
		w.tombstoneLocked(k, now)
	}
	w.version++
	w.dirty[k] = dirtyReport{rep: rep, version: w.version}
	signal(w.push)
}

// markGone reports replica k Gone (a delete of what the rack does not hold).
func (w *Worker) markGone(k replicaKey) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.tombstoneLocked(k, time.Now())
	w.version++
	w.dirty[k] = dirtyReport{rep: worker.ReplicaReport{Replica: k.replica, State: cosmic.StateStopped, Gone: true}, version: w.version}
	signal(w.push)
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

func (w *Worker) markCapacityLocked() {
	w.version++
	w.capDirty = w.version
	signal(w.push)
}

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
	backoff := w.retryMin
	t := time.NewTimer(time.Hour)
	t.Stop()
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.push:
		}
		for {
			rep, sent, ok := w.pending(ctx)
			if !ok {
				break
			}
			rctx, cancel := context.WithTimeout(ctx, reportTimeout)
			err := w.rep.Report(rctx, rep)
			cancel()
			if err == nil {
				w.delivered(sent)
				backoff = w.retryMin
				continue
			}
			if ctx.Err() != nil {
				return
			}
			w.log.Warn("report failed", "err", err, "retry_in", backoff)
			t.Reset(backoff)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			backoff = min(2*backoff, w.retryMax)
		}
	}
}

type sentVersions struct {
	replicas map[replicaKey]uint64
	states   map[replicaKey]cosmic.State
	capacity uint64
}

// pending builds a Report of every undelivered change.
func (w *Worker) pending(ctx context.Context) (worker.Report, sentVersions, bool) {
	var capa *worker.Capacity
	w.mu.Lock()
	wantCap := w.capDirty != 0
	w.mu.Unlock()
	if wantCap {
		if nodes, err := w.nodes(ctx); err == nil {
			capa = &worker.Capacity{Rack: w.cfg.Rack, Nodes: nodes, ObservedAt: time.Now()}
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	sent := sentVersions{replicas: make(map[replicaKey]uint64, len(w.dirty)), states: make(map[replicaKey]cosmic.State, len(w.dirty)), capacity: w.capDirty}
	if len(w.dirty) == 0 && (w.capDirty == 0 || capa == nil) {
		return worker.Report{}, sent, false
	}
	rep := worker.Report{Rack: w.cfg.Rack, Capacity: capa}
	if capa == nil {
		sent.capacity = 0
	}
	keys := slices.SortedFunc(maps.Keys(w.dirty), func(a, b replicaKey) int {
		return cmp.Or(cmp.Compare(a.job, b.job), cmp.Compare(a.replica, b.replica))
	})
	for _, k := range keys {
		d := w.dirty[k]
		sent.replicas[k] = d.version
		sent.states[k] = d.rep.State
		if n := len(rep.Jobs); n == 0 || rep.Jobs[n-1].JobID != k.job {
			rep.Jobs = append(rep.Jobs, worker.JobReport{JobID: k.job})
		}
		jr := &rep.Jobs[len(rep.Jobs)-1]
		jr.Replicas = append(jr.Replicas, d.rep)
	}
	return rep, sent, true
}

// delivered clears the changes a Report carried, unless newer ones came.
func (w *Worker) delivered(sent sentVersions) {
	w.agents.delivered(sent.states)
	w.mu.Lock()
	defer w.mu.Unlock()
	for k, v := range sent.replicas {
		if d, ok := w.dirty[k]; ok && d.version == v {
			delete(w.dirty, k)
		}
	}
	if sent.capacity != 0 && w.capDirty == sent.capacity {
		w.capDirty = 0
	}
}
