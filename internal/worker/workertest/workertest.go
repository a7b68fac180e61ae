// Package workertest is the conformance suite of worker.Worker: what the
// ork relies on of every rack kind, checked the same way against each (the
// simulated rack, the Kubernetes worker on a real kube-apiserver, the
// QEMU worker where it can run): Apply is idempotent, Stop keeps the root
// disk, Restart keeps the GPUs and the disk, Delete ends in Gone, a
// restarted worker reports what its rack still runs, and every replica's
// reports move only by the state machine, in the order their worker
// observed them.
//
// A rack kind joins by giving Run a Rack: its worker, the reports it
// delivered, and what the suite cannot do through the Worker interface
// (place a replica, play the infrastructure a test has no controller for,
// name the root disk, restart the worker). A rack kind whose boots cost
// minutes of CPU (real VMs under emulation) runs the checks chained on one
// replica (Chained).
//
// Importers: the rack kinds' tests.
package workertest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/waittest"
	"github.com/cosmicac/cosmicac/internal/worker"
)

// Rack is one rack, fresh for a subtest, of the kind under the suite.
type Rack struct {
	// Worker is the worker under test, running.
	Worker worker.Worker
	// Reports are the reports it delivered, in order (a Recorder, or the
	// rack's test's own reporter).
	Reports Reports
	// Job is a job the rack can run (its ID fresh on each call).
	Job func() cosmic.Job
	// Place reserves free GPUs of the rack for replica of job.
	Place func(job cosmic.Job, replica int) cosmic.Reservation
	// Play does what the rack's infrastructure would do next for the
	// replica, for a rack whose test has no controllers (the Kubernetes
	// worker's: CDI's import, KubeVirt's boot); nil for a rack that plays
	// itself. The suite calls it while it waits: it must be idempotent,
	// and an error only means "not yet".
	Play func(job string, replica int) error
	// RootDisk names the replica's root disk by identity ("": none): a
	// new disk, a new name.
	RootDisk func(job string, replica int) string
	// RestartWorker stops the worker and starts a new one on the same rack
	// and reporter, and answers it. Nil for a rack that lives in its
	// worker's memory (the simulated one): the check says so and skips.
	RestartWorker func() worker.Worker
	// Timeout bounds each wait (default waittest.Timeout): a rack of real
	// VMs takes minutes to boot one.
	Timeout time.Duration
}

// Mode is how Run runs the checks.
type Mode int

const (
	// Separate runs each check on its own rack with its own jobs, one
	// after another (the default).
	Separate Mode = iota
	// Parallel runs the checks at once, each on its own rack: for racks
	// whose checks mostly wait, so that the suite takes about as long as
	// its longest check.
	Parallel
	// Chained runs the checks one after another on one rack, each taking
	// over the running replica the one before left (applied, then
	// restarted, stopped and applied again, taken over by a restarted
	// worker, deleted): for racks where a boot costs minutes of CPU (real
	// VMs under emulation), three boots instead of six. A check that
	// finds no running replica starts one.
	Chained
)

// Reports are a worker's delivered reports, as the suite reads them.
type Reports interface {
	// History is every report of one replica, in the order delivered.
	History(job string, replica int) []worker.ReplicaReport
}

// Recorder is a worker.Reporter that keeps every report, in order.
type Recorder struct {
	mu      sync.Mutex
	reports []worker.Report
}

var _ worker.Reporter = (*Recorder)(nil)

// Report implements worker.Reporter.
func (r *Recorder) Report(_ context.Context, rep worker.Report) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reports = append(r.reports, rep)
	return nil
}

// History is every report of one replica, in the order delivered.
func (r *Recorder) History(job string, replica int) []worker.ReplicaReport {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []worker.ReplicaReport
	for _, rep := range r.reports {
		for _, jr := range rep.Jobs {
			if jr.JobID != job {
				continue
			}
			for _, rr := range jr.Replicas {
				if rr.Replica == replica {
					out = append(out, rr)
				}
			}
		}
	}
	return out
}

// Reports are the reports delivered so far, in order.
func (r *Recorder) Reports() []worker.Report {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.reports)
}

// Last is the replica's last report, if it has one.
func (r *Recorder) Last(job string, replica int) (worker.ReplicaReport, bool) {
	h := r.History(job, replica)
	if len(h) == 0 {
		return worker.ReplicaReport{}, false
	}
	return h[len(h)-1], true
}

// LastCapacity is the capacity of the last report that carried one (nil:
// none did).
func (r *Recorder) LastCapacity() *worker.Capacity {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.reports) - 1; i >= 0; i-- {
		if c := r.reports[i].Capacity; c != nil {
			return c
		}
	}
	return nil
}

// Run runs the suite; newRack makes a fresh rack for each check (one for
// them all, Chained).
func Run(t *testing.T, newRack func(t *testing.T) *Rack, mode ...Mode) {
	m := Separate
	if len(mode) > 0 {
		m = mode[0]
	}
	checks := []struct {
		name string
		f    func(t *testing.T, s *suite)
	}{
		{"ApplyIsIdempotent", applyIsIdempotent},
		{"StopKeepsTheDisk", stopKeepsTheDisk},
		{"RestartKeepsTheGPUsAndTheDisk", restartKeepsTheGPUs},
		// Before the delete: chained, the restarted worker takes over the
		// running replica, and the delete is of a replica it adopted.
		{"ARestartedWorkerReportsWhatRuns", restartedWorker},
		{"DeleteEndsInGone", deleteEndsInGone},
	}
	if m == Chained {
		r := newRack(t)
		s := &suite{t: t, r: r, w: r.Worker, timeout: cmp(r.Timeout, waittest.Timeout), chained: true}
		for _, c := range checks {
			t.Run(c.name, func(t *testing.T) {
				s.t = t
				c.f(t, s)
			})
		}
		s.t = t
		s.checkReports()
		return
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			if m == Parallel {
				t.Parallel()
			}
			r := newRack(t)
			s := &suite{t: t, r: r, w: r.Worker, timeout: cmp(r.Timeout, waittest.Timeout)}
			c.f(t, s)
			s.checkReports()
		})
	}
}

func cmp(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

type suite struct {
	t       *testing.T
	r       *Rack
	w       worker.Worker
	timeout time.Duration
	touched []worker.ReplicaRef // the replicas whose reports checkReports reads
	// chained: the checks share the rack; cur is the replica the last
	// one left running (nil: none).
	chained bool
	cur     *placed
}

type placed struct {
	job cosmic.Job
	res cosmic.Reservation
}

func (s *suite) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	s.t.Cleanup(cancel)
	return ctx
}

// apply applies job with replica 0 placed.
func (s *suite) apply(j cosmic.Job, res cosmic.Reservation) {
	s.t.Helper()
	if err := s.w.Apply(s.ctx(), worker.ApplyParams{Job: j, Reservations: []cosmic.Reservation{res}}); err != nil {
		s.t.Fatalf("Apply: %v", err)
	}
	ref := worker.ReplicaRef{JobID: j.ID, Replica: res.Replica}
	if !slices.Contains(s.touched, ref) {
		s.touched = append(s.touched, ref)
	}
}

// last is the replica's last report.
func (s *suite) last(job string, replica int) (worker.ReplicaReport, bool) {
	h := s.r.Reports.History(job, replica)
	if len(h) == 0 {
		return worker.ReplicaReport{}, false
	}
	return h[len(h)-1], true
}

// wait plays the rack until the replica's last report passes ok.
func (s *suite) wait(job string, replica int, what string, ok func(worker.ReplicaReport) error) worker.ReplicaReport {
	s.t.Helper()
	var got worker.ReplicaReport
	waittest.NoErrorWithin(s.t, s.timeout, func() error {
		if s.r.Play != nil {
			_ = s.r.Play(job, replica) // not yet, at worst
		}
		r, found := s.last(job, replica)
		if !found {
			return errors.New("no report yet")
		}
		if err := ok(r); err != nil {
			return fmt.Errorf("last report %s (%v): %w", r.State, r.Reason, err)
		}
		got = r
		return nil
	}, "replica %d of %s: %s", replica, job, what)
	return got
}

func (s *suite) waitState(job string, replica int, want cosmic.State) worker.ReplicaReport {
	s.t.Helper()
	return s.wait(job, replica, "reported "+string(want), func(r worker.ReplicaReport) error {
		if r.State != want {
			return fmt.Errorf("want %s", want)
		}
		return nil
	})
}

// run applies a new job's replica 0 and waits for it to run; chained, it
// answers the replica the check before left running, if it still runs.
func (s *suite) run() (cosmic.Job, cosmic.Reservation, worker.ReplicaReport) {
	s.t.Helper()
	if c := s.cur; c != nil {
		if r, ok := s.last(c.job.ID, 0); ok && r.State == cosmic.StateRunning && !r.Gone {
			return c.job, c.res, r
		}
	}
	j := s.r.Job()
	res := s.r.Place(j, 0)
	s.apply(j, res)
	rep := s.waitState(j.ID, 0, cosmic.StateRunning)
	s.leave(j, res)
	return j, res, rep
}

// leave records, chained, the replica a check leaves running for the next.
func (s *suite) leave(j cosmic.Job, res cosmic.Reservation) {
	if s.chained {
		s.cur = &placed{j, res}
	}
}

// jobs is the worker's Jobs answer, by job ID.
func (s *suite) jobs() map[string]worker.JobReport {
	s.t.Helper()
	js, err := s.w.Jobs(s.ctx())
	if err != nil {
		s.t.Fatalf("Jobs: %v", err)
	}
	out := map[string]worker.JobReport{}
	for _, j := range js {
		if _, dup := out[j.JobID]; dup {
			s.t.Errorf("Jobs lists %s twice", j.JobID)
		}
		out[j.JobID] = j
	}
	return out
}

// applyIsIdempotent: the same Apply, again and again, before and after
// the replica runs, makes one replica with one root disk, and changes
// nothing of a running one.
func applyIsIdempotent(t *testing.T, s *suite) {
	j := s.r.Job()
	res := s.r.Place(j, 0)
	s.apply(j, res)
	s.apply(j, res)
	running := s.waitState(j.ID, 0, cosmic.StateRunning)
	disk := s.r.RootDisk(j.ID, 0)
	if disk == "" {
		t.Fatal("a running replica has no root disk")
	}
	before := len(s.r.Reports.History(j.ID, 0))
	s.apply(j, res)
	if jr, ok := s.jobs()[j.ID]; !ok || len(jr.Replicas) != 1 || jr.Replicas[0].State != cosmic.StateRunning {
		t.Errorf("Jobs after three Applies: %+v, want replica 0 running", jr)
	}
	if got := s.r.RootDisk(j.ID, 0); got != disk {
		t.Errorf("an Apply of a running replica changed its root disk %q to %q", disk, got)
	}
	for _, r := range s.r.Reports.History(j.ID, 0)[before:] {
		if r.State != cosmic.StateRunning {
			t.Errorf("after an Apply of the running replica, a report %s (%v)", r.State, r.Reason)
		}
	}
	if !slices.Equal(running.Nodes, nodesOf(res)) {
		t.Errorf("running on %v, placed on %v", running.Nodes, nodesOf(res))
	}
	s.leave(j, res)
}

// stopKeepsTheDisk: Stop ends the replica's VMs as killed, keeps its root
// disk, and a later Apply runs it again from that disk.
func stopKeepsTheDisk(t *testing.T, s *suite) {
	j, res, _ := s.run()
	disk := s.r.RootDisk(j.ID, 0)
	if err := s.w.Stop(s.ctx(), worker.ReplicaRef{JobID: j.ID, Replica: worker.AllReplicas}); err != nil {
		t.Fatal(err)
	}
	st := s.waitState(j.ID, 0, cosmic.StateStopped)
	if st.Gone {
		t.Error("a stopped replica is reported gone: its disk is kept")
	}
	if got := s.r.RootDisk(j.ID, 0); got != disk {
		t.Errorf("Stop changed the root disk %q to %q", disk, got)
	}
	if err := s.w.Stop(s.ctx(), worker.ReplicaRef{JobID: j.ID, Replica: worker.AllReplicas}); err != nil {
		t.Errorf("Stop again: %v", err)
	}
	s.apply(j, res)
	s.waitState(j.ID, 0, cosmic.StateRunning)
	if got := s.r.RootDisk(j.ID, 0); got != disk {
		t.Errorf("running again after Stop on a new root disk %q, not %q", got, disk)
	}
}

// restartKeepsTheGPUs: Restart replaces the VMs (restarting, then
// running) on the same nodes, from the same root disk; restarting an
// unknown job is not_found.
func restartKeepsTheGPUs(t *testing.T, s *suite) {
	j, _, before := s.run()
	disk := s.r.RootDisk(j.ID, 0)
	if err := s.w.Restart(s.ctx(), worker.ReplicaRef{JobID: j.ID, Replica: worker.AllReplicas}); err != nil {
		t.Fatal(err)
	}
	n := len(s.r.Reports.History(j.ID, 0))
	s.wait(j.ID, 0, "restarting, then running", func(worker.ReplicaReport) error {
		h := s.r.Reports.History(j.ID, 0)
		var sawRestarting bool
		for _, r := range h[min(n, len(h)):] {
			sawRestarting = sawRestarting || r.State == cosmic.StateRestarting
		}
		if h[len(h)-1].State != cosmic.StateRunning || !sawRestarting && !restartedBefore(h[:n]) {
			return fmt.Errorf("history since the restart %v", statesOf(h[min(n, len(h)):]))
		}
		return nil
	})
	after, _ := s.last(j.ID, 0)
	if !slices.Equal(after.Nodes, before.Nodes) {
		t.Errorf("restarted on %v, ran on %v", after.Nodes, before.Nodes)
	}
	if got := s.r.RootDisk(j.ID, 0); got != disk {
		t.Errorf("Restart changed the root disk %q to %q", disk, got)
	}
	err := s.w.Restart(s.ctx(), worker.ReplicaRef{JobID: cosmic.NewJobID(), Replica: worker.AllReplicas})
	if fabric.ErrorCode(err) != fabric.CodeNotFound {
		t.Errorf("Restart of an unknown job: %v, want not_found", err)
	}
}

// restartedBefore: a restarting report delivered before the history was
// cut (the Restart call itself may report it before it returns).
func restartedBefore(h []worker.ReplicaReport) bool {
	return len(h) > 0 && h[len(h)-1].State == cosmic.StateRestarting
}

// deleteEndsInGone: Delete removes the replica and its disk, reported Gone
// last; the job leaves Jobs; deleting again, or a replica never applied,
// succeeds (a named one is reported Gone).
func deleteEndsInGone(t *testing.T, s *suite) {
	j, _, _ := s.run()
	s.cur = nil // gone, whatever follows
	if err := s.w.Delete(s.ctx(), worker.DeleteParams{JobID: j.ID, Replica: worker.AllReplicas}); err != nil {
		t.Fatal(err)
	}
	s.wait(j.ID, 0, "gone", func(r worker.ReplicaReport) error {
		if !r.Gone {
			return errors.New("not gone")
		}
		return nil
	})
	if got := s.r.RootDisk(j.ID, 0); got != "" {
		t.Errorf("a deleted replica keeps its root disk %q", got)
	}
	if _, ok := s.jobs()[j.ID]; ok {
		t.Error("Jobs lists a deleted job")
	}
	if err := s.w.Delete(s.ctx(), worker.DeleteParams{JobID: j.ID, Replica: worker.AllReplicas}); err != nil {
		t.Errorf("Delete again: %v", err)
	}
	if err := s.w.Delete(s.ctx(), worker.DeleteParams{JobID: j.ID, Replica: 3}); err != nil {
		t.Errorf("Delete of a replica never applied: %v", err)
	}
	s.touched = append(s.touched, worker.ReplicaRef{JobID: j.ID, Replica: 3})
	s.wait(j.ID, 3, "a never-applied replica named in a Delete reported gone", func(r worker.ReplicaReport) error {
		if !r.Gone {
			return errors.New("not gone")
		}
		return nil
	})
}

// restartedWorker: a new worker on the same rack reports the replica the
// rack still runs, as running, with no Apply.
func restartedWorker(t *testing.T, s *suite) {
	if s.r.RestartWorker == nil {
		t.Skip("this rack's replicas end with its worker (the simulated rack's memory): a restarted worker is a new rack")
	}
	j, _, before := s.run()
	disk := s.r.RootDisk(j.ID, 0)
	s.w = s.r.RestartWorker()
	var jr worker.JobReport
	waittest.NoErrorWithin(t, s.timeout, func() error {
		var ok bool
		if jr, ok = s.jobs()[j.ID]; !ok || len(jr.Replicas) != 1 || jr.Replicas[0].State != cosmic.StateRunning {
			return fmt.Errorf("the new worker's Jobs: %+v", jr)
		}
		return nil
	}, "the restarted worker to report the running replica")
	if !slices.Equal(jr.Replicas[0].Nodes, before.Nodes) {
		t.Errorf("the restarted worker reports nodes %v, the replica ran on %v", jr.Replicas[0].Nodes, before.Nodes)
	}
	if got := s.r.RootDisk(j.ID, 0); got != disk {
		t.Errorf("the worker's restart changed the root disk %q to %q", disk, got)
	}
}

// checkReports: every touched replica's reports move only by the state
// machine (a stopped or failed replica applied again starts anew, from
// pending or a state it skips to), and those stamped by one worker process in the order it
// observed them.
func (s *suite) checkReports() {
	for _, ref := range s.touched {
		h := s.r.Reports.History(ref.JobID, ref.Replica)
		last := map[string]uint64{}
		for i, r := range h {
			if i > 0 && !h[i-1].Gone {
				a, b := h[i-1].State, r.State
				// After a stop or a failure, an Apply starts a new run: its
				// first report is pending, or a later state observed at once
				// (observed states may skip forward).
				newRun := (a == cosmic.StateStopped || a == cosmic.StateFailed) && (b == cosmic.StatePending || cosmic.CanTransition(cosmic.StatePending, b))
				if a != b && !r.Gone && !newRun && !cosmic.CanTransition(a, b) {
					s.t.Errorf("replica %d of %s: report %d moves %s → %s; history %v", ref.Replica, ref.JobID, i, a, b, statesOf(h))
				}
			}
			if o := r.Observed; o.Process != "" {
				if o.Seq <= last[o.Process] {
					s.t.Errorf("replica %d of %s: report %d stamped %d after %d by the same worker", ref.Replica, ref.JobID, i, o.Seq, last[o.Process])
				}
				last[o.Process] = o.Seq
			}
			if !slices.Contains(worker.ReportedStates, r.State) && !r.Gone {
				s.t.Errorf("replica %d of %s: report %d in state %q, which no worker reports", ref.Replica, ref.JobID, i, r.State)
			}
		}
	}
}

func nodesOf(r cosmic.Reservation) []string {
	var out []string
	for _, n := range r.Nodes {
		out = append(out, n.Node)
	}
	return out
}

func statesOf(h []worker.ReplicaReport) []string {
	out := make([]string, len(h))
	for i, r := range h {
		out[i] = string(r.State)
		if r.Gone {
			out[i] += "(gone)"
		}
	}
	return out
}
