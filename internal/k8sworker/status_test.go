package k8sworker

import (
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	virtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/worker"
)

func dv(phase cdiv1.DataVolumePhase, progress string, restarts int32, conds ...cdiv1.DataVolumeCondition) *cdiv1.DataVolume {
	d := &cdiv1.DataVolume{ObjectMeta: metav1.ObjectMeta{Name: "cj-x-r0-0"}}
	d.Spec.Source = &cdiv1.DataVolumeSource{Registry: &cdiv1.DataVolumeSourceRegistry{URL: new("docker://example.com/img:1")}}
	d.Status = cdiv1.DataVolumeStatus{Phase: phase, Progress: cdiv1.DataVolumeProgress(progress), RestartCount: restarts, Conditions: conds}
	return d
}

func vm(phase virtv1.VirtualMachineInstancePhase, conds ...virtv1.VirtualMachineInstanceCondition) *virtv1.VirtualMachineInstance {
	v := &virtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: "cj-x-r0-0"}}
	v.Status.Phase, v.Status.Conditions = phase, conds
	return v
}

var (
	ready       = virtv1.VirtualMachineInstanceCondition{Type: virtv1.VirtualMachineInstanceReady, Status: corev1.ConditionTrue}
	notReady    = virtv1.VirtualMachineInstanceCondition{Type: virtv1.VirtualMachineInstanceReady, Status: corev1.ConditionFalse}
	statusNow   = time.Date(2026, 5, 4, 12, 0, 0, 0, time.UTC)
	unschedCond = func(since time.Duration) virtv1.VirtualMachineInstanceCondition {
		return virtv1.VirtualMachineInstanceCondition{
			Type: virtv1.VirtualMachineInstanceConditionType(corev1.PodScheduled), Status: corev1.ConditionFalse,
			Reason: corev1.PodReasonUnschedulable, Message: "0/3 nodes are available: 1 Insufficient nvidia.com/GH100_H100_SXM5_80GB.",
			LastTransitionTime: metav1.NewTime(statusNow.Add(-since)),
		}
	}
	importErr = cdiv1.DataVolumeCondition{Type: cdiv1.DataVolumeRunning, Status: corev1.ConditionFalse, Reason: "Error", Message: "Unable to process data: manifest unknown"}
)

func progress(step string, pct int) *cosmic.Progress {
	return &cosmic.Progress{Step: step, Percent: pct}
}

func reason(code cosmic.ReasonCode, detail string) *cosmic.Reason {
	r := cosmic.NewReason(code, detail)
	return &r
}

func TestReplicaStatus(t *testing.T) {
	policy := StatusPolicy{ImportRestartLimit: 3, UnschedulableGrace: time.Minute}
	one := []string{"gpu-node-1"}
	two := []string{"gpu-node-1", "gpu-node-2"}
	deleted := vm(virtv1.Running, ready)
	deleted.DeletionTimestamp = &metav1.Time{}
	crashed := vm(virtv1.Failed)
	crashed.Status.Reason = "PodTerminating"

	tests := map[string]struct {
		policy *StatusPolicy // nil: policy
		obs    ReplicaObservation
		want   worker.ReplicaReport
	}{
		"nothing created yet": {
			obs:  ReplicaObservation{Nodes: one},
			want: worker.ReplicaReport{State: cosmic.StatePending},
		},
		"disk pending, VMI pending": {
			obs:  ReplicaObservation{Nodes: one, DataVolumes: []*cdiv1.DataVolume{dv(cdiv1.Pending, "N/A", 0)}, VMIs: []*virtv1.VirtualMachineInstance{vm(virtv1.Pending)}},
			want: worker.ReplicaReport{State: cosmic.StatePending},
		},
		"wait for first consumer, VMI scheduling": {
			obs:  ReplicaObservation{Nodes: one, DataVolumes: []*cdiv1.DataVolume{dv(cdiv1.WaitForFirstConsumer, "", 0)}, VMIs: []*virtv1.VirtualMachineInstance{vm(virtv1.Scheduling)}},
			want: worker.ReplicaReport{State: cosmic.StatePending},
		},
		"import scheduled": {
			obs:  ReplicaObservation{Nodes: one, DataVolumes: []*cdiv1.DataVolume{dv(cdiv1.ImportScheduled, "N/A", 0)}, VMIs: []*virtv1.VirtualMachineInstance{vm(virtv1.Pending)}},
			want: worker.ReplicaReport{State: cosmic.StateStarting, Progress: progress(StepImport, 0)},
		},
		"import in progress": {
			obs:  ReplicaObservation{Nodes: one, DataVolumes: []*cdiv1.DataVolume{dv(cdiv1.ImportInProgress, "45.20%", 1)}, VMIs: []*virtv1.VirtualMachineInstance{vm(virtv1.Pending)}},
			want: worker.ReplicaReport{State: cosmic.StateStarting, Progress: progress(StepImport, 45)},
		},
		"imported, VMI not scheduled yet": {
			obs:  ReplicaObservation{Nodes: one, DataVolumes: []*cdiv1.DataVolume{dv(cdiv1.Succeeded, "100.0%", 0)}, VMIs: []*virtv1.VirtualMachineInstance{vm(virtv1.Scheduling)}},
			want: worker.ReplicaReport{State: cosmic.StateStarting, Progress: progress(StepSchedule, 0)},
		},
		"imported, VMI not created yet": {
			obs:  ReplicaObservation{Nodes: one, DataVolumes: []*cdiv1.DataVolume{dv(cdiv1.Succeeded, "100.0%", 0)}},
			want: worker.ReplicaReport{State: cosmic.StateStarting, Progress: progress(StepSchedule, 0)},
		},
		"scheduled": {
			obs:  ReplicaObservation{Nodes: one, DataVolumes: []*cdiv1.DataVolume{dv(cdiv1.Succeeded, "100.0%", 0)}, VMIs: []*virtv1.VirtualMachineInstance{vm(virtv1.Scheduled)}},
			want: worker.ReplicaReport{State: cosmic.StateStarting, Progress: progress(StepBoot, 0)},
		},
		"booting": {
			obs:  ReplicaObservation{Nodes: one, DataVolumes: []*cdiv1.DataVolume{dv(cdiv1.Succeeded, "100.0%", 0)}, VMIs: []*virtv1.VirtualMachineInstance{vm(virtv1.Running, notReady)}},
			want: worker.ReplicaReport{State: cosmic.StateStarting, Progress: progress(StepBoot, 50)},
		},
		"running": {
			obs:  ReplicaObservation{Nodes: one, DataVolumes: []*cdiv1.DataVolume{dv(cdiv1.Succeeded, "100.0%", 0)}, VMIs: []*virtv1.VirtualMachineInstance{vm(virtv1.Running, ready)}},
			want: worker.ReplicaReport{State: cosmic.StateRunning},
		},
		"running, disk garbage-collected": {
			obs:  ReplicaObservation{Nodes: one, VMIs: []*virtv1.VirtualMachineInstance{vm(virtv1.Running, ready)}},
			want: worker.ReplicaReport{State: cosmic.StateRunning},
		},
		"ready VMI waits for the agent": {
			policy: &StatusPolicy{RequireAgent: true},
			obs:    ReplicaObservation{Nodes: one, DataVolumes: []*cdiv1.DataVolume{dv(cdiv1.Succeeded, "100.0%", 0)}, VMIs: []*virtv1.VirtualMachineInstance{vm(virtv1.Running, ready)}},
			want:   worker.ReplicaReport{State: cosmic.StateStarting, Progress: progress(StepAgent, 0)},
		},
		"agent ready": {
			policy: &StatusPolicy{RequireAgent: true},
			obs:    ReplicaObservation{Nodes: one, AgentReady: true, DataVolumes: []*cdiv1.DataVolume{dv(cdiv1.Succeeded, "100.0%", 0)}, VMIs: []*virtv1.VirtualMachineInstance{vm(virtv1.Running, ready)}},
			want:   worker.ReplicaReport{State: cosmic.StateRunning},
		},
		"import failed": {
			obs: ReplicaObservation{Nodes: one, DataVolumes: []*cdiv1.DataVolume{dv(cdiv1.Failed, "12.00%", 0, importErr)}, VMIs: []*virtv1.VirtualMachineInstance{vm(virtv1.Pending)}},
			want: worker.ReplicaReport{State: cosmic.StateFailed,
				Reason: reason(cosmic.ReasonImportFailed, "import of docker://example.com/img:1 into DataVolume cj-x-r0-0 failed: Unable to process data: manifest unknown")},
		},
		"importer restarted too often": {
			obs: ReplicaObservation{Nodes: one, DataVolumes: []*cdiv1.DataVolume{dv(cdiv1.ImportInProgress, "N/A", 3, importErr)}},
			want: worker.ReplicaReport{State: cosmic.StateFailed,
				Reason: reason(cosmic.ReasonImportFailed, "import of docker://example.com/img:1 into DataVolume cj-x-r0-0 failed 3 times: Unable to process data: manifest unknown")},
		},
		"importer restarted, under the limit": {
			obs:  ReplicaObservation{Nodes: one, DataVolumes: []*cdiv1.DataVolume{dv(cdiv1.ImportInProgress, "N/A", 2, importErr)}},
			want: worker.ReplicaReport{State: cosmic.StateStarting, Progress: progress(StepImport, 0)},
		},
		"unschedulable within grace": {
			obs:  ReplicaObservation{Nodes: one, DataVolumes: []*cdiv1.DataVolume{dv(cdiv1.Succeeded, "100.0%", 0)}, VMIs: []*virtv1.VirtualMachineInstance{vm(virtv1.Scheduling, unschedCond(10*time.Second))}},
			want: worker.ReplicaReport{State: cosmic.StateStarting, Progress: progress(StepSchedule, 0)},
		},
		"unschedulable past grace": {
			obs: ReplicaObservation{Nodes: one, DataVolumes: []*cdiv1.DataVolume{dv(cdiv1.Succeeded, "100.0%", 0)}, VMIs: []*virtv1.VirtualMachineInstance{vm(virtv1.Scheduling, unschedCond(2*time.Minute))}},
			want: worker.ReplicaReport{State: cosmic.StateFailed,
				Reason: reason(cosmic.ReasonVMIUnschedulable, "VMI cj-x-r0-0 cannot be scheduled on node gpu-node-1: 0/3 nodes are available: 1 Insufficient nvidia.com/GH100_H100_SXM5_80GB.")},
		},
		"unschedulable, no grace": {
			policy: &StatusPolicy{},
			obs:    ReplicaObservation{Nodes: one, VMIs: []*virtv1.VirtualMachineInstance{vm(virtv1.Pending, unschedCond(0))}},
			want: worker.ReplicaReport{State: cosmic.StateFailed,
				Reason: reason(cosmic.ReasonVMIUnschedulable, "VMI cj-x-r0-0 cannot be scheduled on node gpu-node-1: 0/3 nodes are available: 1 Insufficient nvidia.com/GH100_H100_SXM5_80GB.")},
		},
		"crashed": {
			obs: ReplicaObservation{Nodes: one, DataVolumes: []*cdiv1.DataVolume{dv(cdiv1.Succeeded, "100.0%", 0)}, VMIs: []*virtv1.VirtualMachineInstance{crashed}},
			want: worker.ReplicaReport{State: cosmic.StateFailed,
				Reason: reason(cosmic.ReasonVMICrashed, "VMI cj-x-r0-0 on node gpu-node-1 failed (PodTerminating)")},
		},
		"guest powered off": {
			obs: ReplicaObservation{Nodes: one, VMIs: []*virtv1.VirtualMachineInstance{vm(virtv1.Succeeded)}},
			want: worker.ReplicaReport{State: cosmic.StateFailed,
				Reason: reason(cosmic.ReasonVMICrashed, "VMI cj-x-r0-0 on node gpu-node-1 shut down (its guest powered off)")},
		},
		"restart requested": {
			obs:  ReplicaObservation{Nodes: one, Replacing: true, DataVolumes: []*cdiv1.DataVolume{dv(cdiv1.Succeeded, "100.0%", 0)}},
			want: worker.ReplicaReport{State: cosmic.StateRestarting, Progress: progress(StepSchedule, 0)},
		},
		"VMI being deleted": {
			obs:  ReplicaObservation{Nodes: one, DataVolumes: []*cdiv1.DataVolume{dv(cdiv1.Succeeded, "100.0%", 0)}, VMIs: []*virtv1.VirtualMachineInstance{deleted}},
			want: worker.ReplicaReport{State: cosmic.StateRestarting},
		},
		"node unreachable keeps the last state": {
			obs:  ReplicaObservation{Nodes: one, Previous: cosmic.StateRunning, VMIs: []*virtv1.VirtualMachineInstance{vm(virtv1.Unknown)}},
			want: worker.ReplicaReport{State: cosmic.StateRunning},
		},
		"two VMIs: the least advanced decides": {
			obs: ReplicaObservation{Nodes: two,
				DataVolumes: []*cdiv1.DataVolume{dv(cdiv1.Succeeded, "100.0%", 0), dv(cdiv1.ImportInProgress, "80.5%", 0)},
				VMIs:        []*virtv1.VirtualMachineInstance{vm(virtv1.Running, ready), vm(virtv1.Pending)}},
			want: worker.ReplicaReport{State: cosmic.StateStarting, Progress: progress(StepImport, 80)},
		},
		"two VMIs: one started, the other waits for its consumer": {
			obs: ReplicaObservation{Nodes: two,
				DataVolumes: []*cdiv1.DataVolume{dv(cdiv1.ImportInProgress, "10%", 0), dv(cdiv1.WaitForFirstConsumer, "", 0)}},
			want: worker.ReplicaReport{State: cosmic.StateStarting, Progress: progress(StepImport, 0)},
		},
		"two VMIs: both ready": {
			obs: ReplicaObservation{Nodes: two,
				DataVolumes: []*cdiv1.DataVolume{dv(cdiv1.Succeeded, "100.0%", 0), dv(cdiv1.Succeeded, "100.0%", 0)},
				VMIs:        []*virtv1.VirtualMachineInstance{vm(virtv1.Running, ready), vm(virtv1.Running, ready)}},
			want: worker.ReplicaReport{State: cosmic.StateRunning},
		},
		"two VMIs: one crashed fails the replica": {
			obs: ReplicaObservation{Nodes: two,
				DataVolumes: []*cdiv1.DataVolume{dv(cdiv1.Succeeded, "100.0%", 0), dv(cdiv1.Succeeded, "100.0%", 0)},
				VMIs:        []*virtv1.VirtualMachineInstance{vm(virtv1.Running, ready), vm(virtv1.Failed)}},
			want: worker.ReplicaReport{State: cosmic.StateFailed,
				Reason: reason(cosmic.ReasonVMICrashed, "VMI cj-x-r0-0 on node gpu-node-2 failed")},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p := policy
			if tc.policy != nil {
				p = *tc.policy
			}
			tc.obs.Replica = 2
			tc.want.Replica, tc.want.Nodes = 2, tc.obs.Nodes
			got := ReplicaStatus(p, tc.obs, statusNow)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ReplicaStatus (-want +got):\n%s", diff)
			}
			if !slices.Contains(worker.ReportedStates, got.State) {
				t.Errorf("state %s is not one a worker reports", got.State)
			}
		})
	}
}

// TestReplicaStatusMonotone walks one replica through its life as KubeVirt
// and CDI move it and checks every reported move is a legal transition.
func TestReplicaStatusMonotone(t *testing.T) {
	steps := []ReplicaObservation{
		{},
		{DataVolumes: []*cdiv1.DataVolume{dv(cdiv1.Pending, "N/A", 0)}, VMIs: []*virtv1.VirtualMachineInstance{vm("")}},
		{DataVolumes: []*cdiv1.DataVolume{dv(cdiv1.WaitForFirstConsumer, "N/A", 0)}, VMIs: []*virtv1.VirtualMachineInstance{vm(virtv1.Scheduling)}},
		{DataVolumes: []*cdiv1.DataVolume{dv(cdiv1.ImportScheduled, "N/A", 0)}, VMIs: []*virtv1.VirtualMachineInstance{vm(virtv1.Scheduling)}},
		{DataVolumes: []*cdiv1.DataVolume{dv(cdiv1.ImportInProgress, "3.1%", 0)}, VMIs: []*virtv1.VirtualMachineInstance{vm(virtv1.Scheduling)}},
		{DataVolumes: []*cdiv1.DataVolume{dv(cdiv1.ImportInProgress, "N/A", 1)}, VMIs: []*virtv1.VirtualMachineInstance{vm(virtv1.Scheduling)}},
		{DataVolumes: []*cdiv1.DataVolume{dv(cdiv1.Succeeded, "100.0%", 0)}, VMIs: []*virtv1.VirtualMachineInstance{vm(virtv1.Scheduling)}},
		{DataVolumes: []*cdiv1.DataVolume{dv(cdiv1.Succeeded, "100.0%", 0)}, VMIs: []*virtv1.VirtualMachineInstance{vm(virtv1.Scheduled)}},
		{DataVolumes: []*cdiv1.DataVolume{dv(cdiv1.Succeeded, "100.0%", 0)}, VMIs: []*virtv1.VirtualMachineInstance{vm(virtv1.Running, notReady)}},
		{DataVolumes: []*cdiv1.DataVolume{dv(cdiv1.Succeeded, "100.0%", 0)}, VMIs: []*virtv1.VirtualMachineInstance{vm(virtv1.Running, ready)}},
		{Replacing: true, DataVolumes: []*cdiv1.DataVolume{dv(cdiv1.Succeeded, "100.0%", 0)}},
		{DataVolumes: []*cdiv1.DataVolume{dv(cdiv1.Succeeded, "100.0%", 0)}, VMIs: []*virtv1.VirtualMachineInstance{vm(virtv1.Scheduled)}},
		{DataVolumes: []*cdiv1.DataVolume{dv(cdiv1.Succeeded, "100.0%", 0)}, VMIs: []*virtv1.VirtualMachineInstance{vm(virtv1.Running, ready)}},
		{DataVolumes: []*cdiv1.DataVolume{dv(cdiv1.Succeeded, "100.0%", 0)}, VMIs: []*virtv1.VirtualMachineInstance{vm(virtv1.Failed)}},
	}
	prev := cosmic.StatePending
	var seen []cosmic.State
	for i, o := range steps {
		o.Nodes = []string{"n"}
		got := ReplicaStatus(DefaultRackConfig().StatusPolicy(), o, statusNow).State
		if got != prev && !cosmic.CanTransition(prev, got) {
			t.Errorf("step %d: %s -> %s is not a legal transition", i, prev, got)
		}
		if got != prev {
			seen = append(seen, got)
		}
		prev = got
	}
	want := []cosmic.State{cosmic.StateStarting, cosmic.StateRunning, cosmic.StateRestarting, cosmic.StateStarting, cosmic.StateRunning, cosmic.StateFailed}
	if diff := cmp.Diff(want, seen); diff != "" {
		t.Errorf("states (-want +got):\n%s", diff)
	}
}

func TestParseProgress(t *testing.T) {
	for in, want := range map[string]int{"45.20%": 45, "100.0%": 100, "N/A": 0, "": 0, "0%": 0, "-3%": 0, "250%": 100, " 7.9% ": 7, "NaN%": 0} {
		if got := ParseProgress(cdiv1.DataVolumeProgress(in)); got != want {
			t.Errorf("ParseProgress(%q) = %d, want %d", in, got, want)
		}
	}
}
