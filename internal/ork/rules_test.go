package ork

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/worker"
)

// The report rules, one case per rule: the job before, what the rack holds,
// the report, and what must come out (replica is the reported replica's
// state).
func TestReportRules(t *testing.T) {
	now := time.Unix(1_700_000_000, 0).UTC()
	earlier := now.Add(-time.Minute)
	job := func(state cosmic.State, replicas ...cosmic.State) cosmic.Job {
		j := cosmic.Job{ID: "j", Team: "t", Spec: cosmic.Spec{Type: cosmic.TypeGPUContainer, Inference: nil},
			Status: cosmic.Status{State: state, History: []cosmic.StatusChange{{State: state, At: earlier}}}}
		if len(replicas) > 1 {
			j.Spec.Type = cosmic.TypeManagedInference
			j.Spec.Inference = &cosmic.InferenceSpec{Runtime: cosmic.RuntimeVLLM, Model: "m", Replicas: len(replicas), GPUsPerReplica: 1}
		}
		for i, s := range replicas {
			j.Status.Replicas = append(j.Status.Replicas, cosmic.ReplicaStatus{Index: i, State: s, Nodes: []string{"n0"}})
		}
		return j
	}
	resv := func(replica int, rack string) cosmic.Reservation {
		return cosmic.Reservation{JobID: "j", Replica: replica, Rack: rack, Nodes: []cosmic.NodeAlloc{{Node: "n0", GPUs: []int{replica}}}}
	}
	heldOn := func(rack string, replicas ...int) func(int) (cosmic.Reservation, bool) {
		return func(r int) (cosmic.Reservation, bool) {
			for _, h := range replicas {
				if h == r {
					return resv(r, rack), true
				}
			}
			return cosmic.Reservation{}, false
		}
	}
	zero := 0
	failed := cosmic.NewReason(cosmic.ReasonVMICrashed, "boom")
	at := func(p string, seq uint64) worker.Observation { return worker.Observation{Process: p, Seq: seq} }
	type want struct {
		changed   bool
		job       cosmic.State
		replica   cosmic.State
		release   int
		exitCode  *int
		agentKeys []string
		remove    bool
		requeue   bool
	}
	for name, tc := range map[string]struct {
		job     cosmic.Job
		held    func(int) (cosmic.Reservation, bool)
		applied map[worker.ReplicaRef]worker.Observation
		report  worker.ReplicaReport
		want    want
	}{
		"starting": {job(cosmic.StatePending, cosmic.StatePending), heldOn("r", 0), nil,
			worker.ReplicaReport{State: cosmic.StateStarting, AgentKeys: []string{"k0"}},
			want{changed: true, job: cosmic.StateStarting, replica: cosmic.StateStarting, agentKeys: []string{"k0"}}},
		"running": {job(cosmic.StateStarting, cosmic.StateStarting), heldOn("r", 0), nil,
			worker.ReplicaReport{State: cosmic.StateRunning},
			want{changed: true, job: cosmic.StateRunning, replica: cosmic.StateRunning}},
		"another rack's replica": {job(cosmic.StateStarting, cosmic.StateStarting), heldOn("other", 0), nil,
			worker.ReplicaReport{State: cosmic.StateRunning},
			want{job: cosmic.StateStarting, replica: cosmic.StateStarting}},
		"a replica released already": {job(cosmic.StateStarting, cosmic.StateStarting), heldOn("r"), nil,
			worker.ReplicaReport{State: cosmic.StateRunning},
			want{job: cosmic.StateStarting, replica: cosmic.StateStarting}},
		"a killed job's VM still powering off": {job(cosmic.StateStopped, cosmic.StateStopped), heldOn("r", 0), nil,
			worker.ReplicaReport{State: cosmic.StateRunning},
			want{job: cosmic.StateStopped, replica: cosmic.StateStopped}},
		"a killed job's VM off": {job(cosmic.StateStopped, cosmic.StateStopped), heldOn("r", 0), nil,
			worker.ReplicaReport{State: cosmic.StateStopped},
			want{changed: true, job: cosmic.StateStopped, replica: cosmic.StateStopped, release: 1}},
		"a killed job's VM off, reported before the kill was stored": {job(cosmic.StateStopped, cosmic.StateStopped), heldOn("r", 0),
			map[worker.ReplicaRef]worker.Observation{{JobID: "j", Replica: 0}: at("p", 7)},
			worker.ReplicaReport{State: cosmic.StateStopped, Observed: at("p", 7)},
			want{changed: true, job: cosmic.StateStopped, replica: cosmic.StateStopped, release: 1}},
		"a killed job's VM gone": {job(cosmic.StateStopped, cosmic.StateStopped), heldOn("r", 0), nil,
			worker.ReplicaReport{State: cosmic.StateStopped, Gone: true},
			want{changed: true, job: cosmic.StateStopped, replica: cosmic.StateStopped, release: 1}},
		"older than the last applied": {job(cosmic.StateRunning, cosmic.StateRunning), heldOn("r", 0),
			map[worker.ReplicaRef]worker.Observation{{JobID: "j", Replica: 0}: at("p", 7)},
			worker.ReplicaReport{State: cosmic.StateStarting, Observed: at("p", 6)},
			want{job: cosmic.StateRunning, replica: cosmic.StateRunning}},
		"the last applied again": {job(cosmic.StateRunning, cosmic.StateRunning), heldOn("r", 0),
			map[worker.ReplicaRef]worker.Observation{{JobID: "j", Replica: 0}: at("p", 7)},
			worker.ReplicaReport{State: cosmic.StateRunning, Observed: at("p", 7)},
			want{job: cosmic.StateRunning, replica: cosmic.StateRunning}},
		"the last applied again, after the worker was unreachable": {job(cosmic.StateUnknown, cosmic.StateUnknown), heldOn("r", 0),
			map[worker.ReplicaRef]worker.Observation{{JobID: "j", Replica: 0}: at("p", 7)},
			worker.ReplicaReport{State: cosmic.StateRunning, Observed: at("p", 7)},
			want{changed: true, job: cosmic.StateRunning, replica: cosmic.StateRunning}},
		"older than the last applied, after the worker was unreachable": {job(cosmic.StateUnknown, cosmic.StateUnknown), heldOn("r", 0),
			map[worker.ReplicaRef]worker.Observation{{JobID: "j", Replica: 0}: at("p", 7)},
			worker.ReplicaReport{State: cosmic.StateFailed, Reason: &failed, Observed: at("p", 6)},
			want{job: cosmic.StateUnknown, replica: cosmic.StateUnknown}},
		"a restarted worker process": {job(cosmic.StateRunning, cosmic.StateRunning), heldOn("r", 0),
			map[worker.ReplicaRef]worker.Observation{{JobID: "j", Replica: 0}: at("p", 7)},
			worker.ReplicaReport{State: cosmic.StateStarting, Observed: at("q", 1)},
			// applied (a new process), though running → starting is not
			// the job's to make: the job stays running
			want{changed: true, job: cosmic.StateRunning, replica: cosmic.StateStarting}},
		"failed": {job(cosmic.StateRunning, cosmic.StateRunning), heldOn("r", 0), nil,
			worker.ReplicaReport{State: cosmic.StateFailed, Reason: &failed},
			want{changed: true, job: cosmic.StateFailed, replica: cosmic.StateFailed, release: 1}},
		"one of two failed": {job(cosmic.StateRunning, cosmic.StateRunning, cosmic.StateRunning), heldOn("r", 0, 1), nil,
			worker.ReplicaReport{Replica: 1, State: cosmic.StateFailed, Reason: &failed},
			want{changed: true, job: cosmic.StateDegraded, replica: cosmic.StateFailed, release: 1}},
		"the command ended": {job(cosmic.StateRunning, cosmic.StateRunning), heldOn("r", 0), nil,
			worker.ReplicaReport{State: cosmic.StateStopped, ExitCode: &zero},
			want{changed: true, job: cosmic.StateStopped, replica: cosmic.StateStopped, release: 1, exitCode: &zero}},
		"a late end of the last run": {job(cosmic.StateStarting, cosmic.StateStarting), heldOn("r", 0), nil,
			worker.ReplicaReport{State: cosmic.StateStopped, ExitCode: &zero},
			want{job: cosmic.StateStarting, replica: cosmic.StateStarting}},
		"a late stop": {job(cosmic.StateRunning, cosmic.StateRunning), heldOn("r", 0), nil,
			worker.ReplicaReport{State: cosmic.StateStopped},
			want{job: cosmic.StateRunning, replica: cosmic.StateRunning}},
		"a replica deleted on its own, gone": {job(cosmic.StateStarting, cosmic.StateRunning, cosmic.StateDeleting), heldOn("r", 0, 1), nil,
			worker.ReplicaReport{Replica: 1, Gone: true},
			want{changed: true, job: cosmic.StateStarting, replica: cosmic.StateQueued, release: 1, requeue: true}},
		"a deleting job's replica gone": {job(cosmic.StateDeleting, cosmic.StateRunning), heldOn("r", 0), nil,
			worker.ReplicaReport{Gone: true},
			want{changed: true, job: cosmic.StateDeleting, replica: cosmic.StateStopped, release: 1, remove: true}},
		"one of a deleting job's two replicas gone": {job(cosmic.StateDeleting, cosmic.StateRunning, cosmic.StateRunning), heldOn("r", 0, 1), nil,
			worker.ReplicaReport{Gone: true},
			want{changed: true, job: cosmic.StateDeleting, replica: cosmic.StateStopped, release: 1}},
		"a deleting job's replica gone, from another rack": {job(cosmic.StateDeleting, cosmic.StateRunning), heldOn("other", 0), nil,
			worker.ReplicaReport{Gone: true},
			want{job: cosmic.StateDeleting, replica: cosmic.StateRunning}},
		"a deleting job's replica failed": {job(cosmic.StateDeleting, cosmic.StateRunning), heldOn("r", 0), nil,
			worker.ReplicaReport{State: cosmic.StateFailed, Reason: &failed},
			want{job: cosmic.StateDeleting, replica: cosmic.StateRunning}},
		"a deleting job's command ended": {job(cosmic.StateDeleting, cosmic.StateRunning), heldOn("r", 0), nil,
			worker.ReplicaReport{State: cosmic.StateStopped, ExitCode: &zero},
			want{job: cosmic.StateDeleting, replica: cosmic.StateRunning}},
		"a gone replica not deleting is late": {job(cosmic.StateRunning, cosmic.StateRunning), heldOn("r", 0), nil,
			worker.ReplicaReport{Gone: true},
			want{job: cosmic.StateRunning, replica: cosmic.StateRunning}},
	} {
		t.Run(name, func(t *testing.T) {
			out, err := reportRules(reportInput{Job: tc.job, Rack: "r", Held: tc.held, Applied: tc.applied,
				Report: worker.JobReport{JobID: "j", Replicas: []worker.ReplicaReport{tc.report}}, Now: now})
			if err != nil {
				t.Fatal(err)
			}
			n := tc.report.Replica
			got := want{changed: out.Changed, job: out.Job.Status.State, replica: out.Job.Status.Replicas[n].State,
				release: len(out.Release), exitCode: out.Job.Status.ExitCode, agentKeys: out.AgentKeys[n], remove: out.Remove, requeue: out.Requeue}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(want{})); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if out.Changed && !out.Job.UpdatedAt.Equal(now) {
				t.Errorf("updatedAt %v, want now", out.Job.UpdatedAt)
			}
			if !out.Changed && !cmp.Equal(out.Job, tc.job) {
				t.Error("an unchanged job was changed")
			}
		})
	}
}

// The aggregate's reasons and its refusal of an illegal transition.
func TestAggregate(t *testing.T) {
	now := time.Unix(1_700_000_000, 0).UTC()
	crash := cosmic.NewReason(cosmic.ReasonVMICrashed, "boom")
	j := cosmic.Job{ID: "j", Spec: cosmic.Spec{Type: cosmic.TypeManagedInference,
		Inference: &cosmic.InferenceSpec{Runtime: cosmic.RuntimeVLLM, Model: "m", Replicas: 2, GPUsPerReplica: 1}},
		Status: cosmic.Status{State: cosmic.StateRunning, Replicas: []cosmic.ReplicaStatus{
			{Index: 0, State: cosmic.StateRunning}, {Index: 1, State: cosmic.StateFailed, Reason: &crash}}}}
	if ig, err := aggregate(&j, now); err != nil || ig != nil || j.Status.State != cosmic.StateDegraded ||
		j.Status.Reason == nil || j.Status.Reason.Code != cosmic.ReasonReplicaFailed {
		t.Fatalf("degraded: %+v %v %v", j.Status, ig, err)
	}
	stopped := cosmic.Job{ID: "s", Status: cosmic.Status{State: cosmic.StateStopped,
		Replicas: []cosmic.ReplicaStatus{{Index: 0, State: cosmic.StateRunning}}}}
	if ig, err := aggregate(&stopped, now); err != nil || ig == nil || ig.From != cosmic.StateStopped || stopped.Status.State != cosmic.StateStopped {
		t.Fatalf("stopped → running is not a transition: %+v %v %v", stopped.Status, ig, err)
	}
	// A pending job shows why its rack cannot apply it, until it can.
	ns := cosmic.NewReason(cosmic.ReasonRackMisconfigured, `namespace "cosmicac" does not exist`)
	pending := cosmic.Job{ID: "p", Spec: cosmic.Spec{Type: cosmic.TypeGPUContainer}, Status: cosmic.Status{State: cosmic.StatePending,
		Replicas: []cosmic.ReplicaStatus{{Index: 0, State: cosmic.StatePending, Reason: &ns}}}}
	if _, err := aggregate(&pending, now); err != nil || pending.Status.State != cosmic.StatePending || pending.Status.Reason == nil || *pending.Status.Reason != ns {
		t.Fatalf("pending on a misconfigured rack: %+v %v", pending.Status, err)
	}
	pending.Status.Replicas[0].Reason = nil
	if _, err := aggregate(&pending, now); err != nil || pending.Status.State != cosmic.StatePending || pending.Status.Reason != nil {
		t.Fatalf("pending once the rack is fixed: %+v %v", pending.Status, err)
	}
	// A running job whose worker builds its VMIs anew (a restarted `up`'s
	// simulated rack lost them) is restarting for that, not for a restart
	// nobody requested.
	lost := cosmic.Job{ID: "l", Spec: cosmic.Spec{Type: cosmic.TypeGPUContainer}, Status: cosmic.Status{State: cosmic.StateRunning,
		Replicas: []cosmic.ReplicaStatus{{Index: 0, State: cosmic.StatePending}}}}
	if _, err := aggregate(&lost, now); err != nil || lost.Status.State != cosmic.StateRestarting ||
		lost.Status.Reason == nil || lost.Status.Reason.Code != cosmic.ReasonVMIsRecreated {
		t.Fatalf("VMIs recreated by the worker: %+v %v", lost.Status, err)
	}
}
