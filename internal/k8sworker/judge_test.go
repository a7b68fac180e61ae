package k8sworker

import (
	"maps"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	virtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/cosmicac/cosmicac/internal/agent/agentapi"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/worker"
)

// The judged replica: replica 0 of job "judge", on gpu-node-1 (and
// gpu-node-2 for two VMIs).
const judgeJob = "judge"

var (
	judgeNow  = statusNow
	judgeKey  = replicaKey{job: judgeJob, replica: 0}
	judgeKeys = []string{seededIdentity("agent-vmi-0").PublicKey().String()}
	// bootedAt is when the judged VMIs were created.
	bootedAt = judgeNow.Add(-10 * time.Minute)
)

func judgeRes(nodes ...string) cosmic.Reservation {
	if len(nodes) == 0 {
		nodes = []string{"gpu-node-1"}
	}
	r := cosmic.Reservation{JobID: judgeJob, Rack: "k8s-us-1", Replica: 0}
	for _, n := range nodes {
		r.Nodes = append(r.Nodes, cosmic.NodeAlloc{Node: n, GPUs: []int{0}})
	}
	return r
}

func judgeState(d desired, replacing ...string) *replicaState {
	return &replicaState{Desired: d, Reservation: judgeRes(), Replacing: replacing}
}

func indexed(i int) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: VMIName(judgeJob, 0, i), Labels: map[string]string{
		LabelJob: judgeJob, LabelReplica: "0", LabelVMIIndex: strconv.Itoa(i)}}
}

func jDV(i int, phase cdiv1.DataVolumePhase, progress string) cdiv1.DataVolume {
	return cdiv1.DataVolume{ObjectMeta: indexed(i), Status: cdiv1.DataVolumeStatus{Phase: phase, Progress: cdiv1.DataVolumeProgress(progress)}}
}

func jVMI(i int, uid string, phase virtv1.VirtualMachineInstancePhase, conds ...virtv1.VirtualMachineInstanceCondition) virtv1.VirtualMachineInstance {
	v := virtv1.VirtualMachineInstance{ObjectMeta: indexed(i)}
	v.UID, v.CreationTimestamp = types.UID(uid), metav1.NewTime(bootedAt)
	v.Status.Phase, v.Status.Conditions = phase, conds
	return v
}

func createdAt(v virtv1.VirtualMachineInstance, at time.Time) virtv1.VirtualMachineInstance {
	v.CreationTimestamp = metav1.NewTime(at)
	return v
}

func beingDeleted(v virtv1.VirtualMachineInstance) virtv1.VirtualMachineInstance {
	v.DeletionTimestamp = &metav1.Time{Time: judgeNow}
	return v
}

// withAgent is o with its job's root, of job type typ, and VMI 0's
// cloud-init Secret carrying the key of its agent.
func withAgent(o observation, typ cosmic.JobType) observation {
	s := corev1.Secret{ObjectMeta: indexed(0)}
	s.Name = SecretName(judgeJob, 0, 0)
	s.Annotations = map[string]string{AnnotationAgentKey: judgeKeys[0]}
	o.secrets = append(o.secrets, s)
	o.root = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: RootName(judgeJob)}, Data: map[string]string{"type": string(typ)}}
	return o
}

// verdict is a decision as the tests compare it: VMIs by UID.
type verdict struct {
	Rep         worker.ReplicaReport
	Drift       []int
	Write       *replicaState
	Fail        bool
	Create      []int
	AgentsReady bool
	Watch       []string
	Remove      []string
	Seen        map[int]string
	Requeue     time.Duration
}

func verdictOf(d decision) verdict {
	uids := func(vs []*virtv1.VirtualMachineInstance) []string {
		var out []string
		for _, v := range vs {
			out = append(out, string(v.UID))
		}
		return out
	}
	return verdict{Rep: d.rep, Drift: d.drift, Write: d.write, Fail: d.fail, Create: d.create, AgentsReady: d.agentsReady,
		Watch: uids(d.watchAgents), Remove: uids(d.remove), Seen: d.seen, Requeue: d.requeue}
}

func TestJudge(t *testing.T) {
	base := judgePolicy{
		status:       StatusPolicy{ImportRestartLimit: 3, UnschedulableGrace: time.Minute},
		drift:        DriftRecreate,
		requireAgent: []cosmic.JobType{cosmic.TypeGPUContainer},
		agentTimeout: 30 * time.Second,
	}
	n1 := []string{"gpu-node-1"}
	imported := jDV(0, cdiv1.Succeeded, "100.0%")
	crashed := jVMI(0, "uid-a", virtv1.Failed)
	crashed.Status.Reason = "qemu exited"
	crash := reason(cosmic.ReasonVMICrashed, "VMI cj-judge-r0-0 on node gpu-node-1 failed (qemu exited)")
	killed := reason(cosmic.ReasonKilled, "")
	unsched := func(since time.Duration) virtv1.VirtualMachineInstance {
		return jVMI(0, "uid-a", virtv1.Pending, unschedCond(since))
	}
	unschedReason := reason(cosmic.ReasonVMIUnschedulable, "VMI cj-judge-r0-0 cannot be scheduled on node gpu-node-1: 0/3 nodes are available: 1 Insufficient nvidia.com/GH100_H100_SXM5_80GB.")
	outside := reason(cosmic.ReasonVMICrashed, "VMI cj-judge-r0-1 was deleted outside CosmicAC (driftPolicy fail)")
	readyAt := func(at time.Time) map[int]agentSeen { return map[int]agentSeen{0: {ready: true, at: at}} }
	copying := []agentapi.VolumeStatus{{Index: 0, MountPath: "/data", Phase: agentapi.VolumePulling, Objects: 3, Bytes: 30, TotalObjects: 10, TotalBytes: 100}}
	running := func(uid string) virtv1.VirtualMachineInstance { return jVMI(0, uid, virtv1.Running, ready) }
	run := judgeState(desiredRun)
	// written is the judged state with f applied.
	written := func(st *replicaState, f func(*replicaState)) *replicaState {
		c := *st
		f(&c)
		return &c
	}
	two := &replicaState{Desired: desiredRun, Reservation: judgeRes("gpu-node-1", "gpu-node-2")}

	tests := map[string]struct {
		policy func(*judgePolicy) // changes the base policy
		view   replicaView
		want   verdict
	}{
		// Deleting.
		"deleting, nothing left: Gone": {
			view: replicaView{state: run, deleting: true},
			want: verdict{Rep: worker.ReplicaReport{State: cosmic.StateStopped, Gone: true}},
		},
		"deleting the job, its root left: restarting": {
			view: replicaView{state: run, deleting: true, deleteJob: true, obs: observation{root: &corev1.ConfigMap{}}},
			want: verdict{Rep: worker.ReplicaReport{State: cosmic.StateRestarting, Nodes: n1}},
		},
		"deleting, a VMI left: restarting, nothing to do": {
			view: replicaView{state: run, deleting: true, seen: map[int]string{0: "uid-a"},
				obs: observation{dvs: []cdiv1.DataVolume{imported}, vmis: []virtv1.VirtualMachineInstance{running("uid-a")}}},
			want: verdict{Rep: worker.ReplicaReport{State: cosmic.StateRestarting, Nodes: n1}},
		},
		"deleting, its VMI crashed: failed": {
			view: replicaView{state: run, deleting: true, obs: observation{vmis: []virtv1.VirtualMachineInstance{crashed}}},
			want: verdict{Rep: worker.ReplicaReport{State: cosmic.StateFailed, Reason: crash, Nodes: n1}},
		},

		// No state yet (the carrier not applied, or not in the informer).
		"no state yet: the objects' status": {
			view: replicaView{obs: observation{dvs: []cdiv1.DataVolume{jDV(0, cdiv1.ImportInProgress, "45.20%")}, vmis: []virtv1.VirtualMachineInstance{jVMI(0, "uid-a", virtv1.Pending)}}},
			want: verdict{Rep: worker.ReplicaReport{State: cosmic.StateStarting, Progress: progress(StepImport, 45)}},
		},

		// Running on its reservation.
		"pending": {
			view: replicaView{state: run, obs: observation{dvs: []cdiv1.DataVolume{jDV(0, cdiv1.Pending, "N/A")}, vmis: []virtv1.VirtualMachineInstance{jVMI(0, "uid-a", virtv1.Pending)}}},
			want: verdict{Rep: worker.ReplicaReport{State: cosmic.StatePending, Nodes: n1}, Seen: map[int]string{0: "uid-a"}},
		},
		"importing the disk": {
			view: replicaView{state: run, previous: cosmic.StatePending, obs: observation{dvs: []cdiv1.DataVolume{jDV(0, cdiv1.ImportInProgress, "45.20%")}, vmis: []virtv1.VirtualMachineInstance{jVMI(0, "uid-a", virtv1.Pending)}}},
			want: verdict{Rep: worker.ReplicaReport{State: cosmic.StateStarting, Progress: progress(StepImport, 45), Nodes: n1}, Seen: map[int]string{0: "uid-a"}},
		},
		"import failed: the replica fails": {
			view: replicaView{state: run, obs: observation{dvs: []cdiv1.DataVolume{jDV(0, cdiv1.Failed, "12.00%")}, vmis: []virtv1.VirtualMachineInstance{jVMI(0, "uid-a", virtv1.Pending)}}},
			want: verdict{
				Rep:   worker.ReplicaReport{State: cosmic.StateFailed, Reason: reason(cosmic.ReasonImportFailed, "import of the image into DataVolume cj-judge-r0-0 failed"), Nodes: n1},
				Write: &replicaState{Desired: desiredFailed, Reservation: judgeRes(), Failure: reason(cosmic.ReasonImportFailed, "import of the image into DataVolume cj-judge-r0-0 failed")},
				Fail:  true,
			},
		},
		"the disk imported, the VMI not made yet (no drift)": {
			view: replicaView{state: run, obs: observation{dvs: []cdiv1.DataVolume{imported}}},
			want: verdict{Rep: worker.ReplicaReport{State: cosmic.StateStarting, Progress: progress(StepSchedule, 0), Nodes: n1}},
		},
		"running": {
			view: replicaView{state: run, obs: observation{dvs: []cdiv1.DataVolume{imported}, vmis: []virtv1.VirtualMachineInstance{running("uid-a")}}},
			want: verdict{Rep: worker.ReplicaReport{State: cosmic.StateRunning, Nodes: n1}, Seen: map[int]string{0: "uid-a"}},
		},
		"its node unreachable: the last state is kept": {
			view: replicaView{state: run, previous: cosmic.StateRunning, obs: observation{vmis: []virtv1.VirtualMachineInstance{jVMI(0, "uid-a", virtv1.Unknown)}}},
			want: verdict{Rep: worker.ReplicaReport{State: cosmic.StateRunning, Nodes: n1}, Seen: map[int]string{0: "uid-a"}},
		},
		"its VMI crashed: the replica fails": {
			view: replicaView{state: run, seen: map[int]string{0: "uid-a"}, obs: observation{dvs: []cdiv1.DataVolume{imported}, vmis: []virtv1.VirtualMachineInstance{crashed}}},
			want: verdict{
				Rep:   worker.ReplicaReport{State: cosmic.StateFailed, Reason: crash, Nodes: n1},
				Write: &replicaState{Desired: desiredFailed, Reservation: judgeRes(), Failure: crash},
				Fail:  true,
			},
		},

		// Unschedulable: the clock decides.
		"unschedulable within its grace: judged again as it ends": {
			view: replicaView{state: run, obs: observation{dvs: []cdiv1.DataVolume{imported}, vmis: []virtv1.VirtualMachineInstance{unsched(10 * time.Second)}}},
			want: verdict{Rep: worker.ReplicaReport{State: cosmic.StateStarting, Progress: progress(StepSchedule, 0), Nodes: n1},
				Seen: map[int]string{0: "uid-a"}, Requeue: 50*time.Second + 50*time.Millisecond},
		},
		"unschedulable within a long grace: judged again within a minute": {
			policy: func(p *judgePolicy) { p.status.UnschedulableGrace = time.Hour },
			view:   replicaView{state: run, obs: observation{dvs: []cdiv1.DataVolume{imported}, vmis: []virtv1.VirtualMachineInstance{unsched(10 * time.Second)}}},
			want: verdict{Rep: worker.ReplicaReport{State: cosmic.StateStarting, Progress: progress(StepSchedule, 0), Nodes: n1},
				Seen: map[int]string{0: "uid-a"}, Requeue: maxGraceRequeue},
		},
		"unschedulable past its grace: the replica fails": {
			view: replicaView{state: run, obs: observation{dvs: []cdiv1.DataVolume{imported}, vmis: []virtv1.VirtualMachineInstance{unsched(2 * time.Minute)}}},
			want: verdict{
				Rep:   worker.ReplicaReport{State: cosmic.StateFailed, Reason: unschedReason, Nodes: n1},
				Write: &replicaState{Desired: desiredFailed, Reservation: judgeRes(), Failure: unschedReason},
				Fail:  true,
			},
		},

		// Stopped and failed replicas hold no GPUs.
		"stopped: killed, its VMI removed": {
			view: replicaView{state: judgeState(desiredStop), obs: observation{dvs: []cdiv1.DataVolume{imported}, vmis: []virtv1.VirtualMachineInstance{running("uid-a")}}},
			want: verdict{Rep: worker.ReplicaReport{State: cosmic.StateStopped, Reason: killed}, Remove: []string{"uid-a"}},
		},
		"killed, its VMI powering off: as it was until it is gone": {
			view: replicaView{state: judgeState(desiredStop), previous: cosmic.StateRunning, obs: observation{dvs: []cdiv1.DataVolume{imported}, vmis: []virtv1.VirtualMachineInstance{beingDeleted(running("uid-a"))}}},
			want: verdict{Rep: worker.ReplicaReport{State: cosmic.StateRunning, Nodes: n1}},
		},
		"killed, its VMI not deleted yet: as it was, the VMI removed": {
			view: replicaView{state: judgeState(desiredStop), previous: cosmic.StateRunning, obs: observation{dvs: []cdiv1.DataVolume{imported}, vmis: []virtv1.VirtualMachineInstance{running("uid-a")}}},
			want: verdict{Rep: worker.ReplicaReport{State: cosmic.StateRunning, Nodes: n1}, Remove: []string{"uid-a"}},
		},
		"killed, its VMI gone: stopped": {
			view: replicaView{state: judgeState(desiredStop), previous: cosmic.StateRunning, obs: observation{dvs: []cdiv1.DataVolume{imported}}},
			want: verdict{Rep: worker.ReplicaReport{State: cosmic.StateStopped, Reason: killed}},
		},
		"failed: its recorded reason, its VMI being deleted": {
			view: replicaView{state: &replicaState{Desired: desiredFailed, Reservation: judgeRes(), Failure: crash},
				obs: observation{dvs: []cdiv1.DataVolume{imported}, vmis: []virtv1.VirtualMachineInstance{beingDeleted(crashed)}}},
			want: verdict{Rep: worker.ReplicaReport{State: cosmic.StateFailed, Reason: crash, Nodes: n1}},
		},

		// Drift: a VMI seen running is gone.
		"drift, recreate: replaced, the VMI made again": {
			view: replicaView{state: two, seen: map[int]string{0: "uid-a", 1: "uid-b"},
				obs: observation{dvs: []cdiv1.DataVolume{imported, jDV(1, cdiv1.Succeeded, "100.0%")}, vmis: []virtv1.VirtualMachineInstance{running("uid-a")}}},
			want: verdict{
				Rep:    worker.ReplicaReport{State: cosmic.StateRestarting, Progress: progress(StepSchedule, 0), Nodes: []string{"gpu-node-1", "gpu-node-2"}},
				Drift:  []int{1},
				Write:  written(two, func(s *replicaState) { s.Desired = desiredReplace }),
				Create: []int{1},
				Seen:   map[int]string{0: "uid-a"},
			},
		},
		"drift, fail: the replica fails": {
			policy: func(p *judgePolicy) { p.drift = DriftFail },
			view: replicaView{state: two, seen: map[int]string{0: "uid-a", 1: "uid-b"},
				obs: observation{dvs: []cdiv1.DataVolume{imported, jDV(1, cdiv1.Succeeded, "100.0%")}, vmis: []virtv1.VirtualMachineInstance{running("uid-a")}}},
			want: verdict{
				Rep:   worker.ReplicaReport{State: cosmic.StateFailed, Reason: outside, Nodes: []string{"gpu-node-1", "gpu-node-2"}},
				Drift: []int{1},
				Write: written(two, func(s *replicaState) { s.Desired, s.Failure = desiredFailed, outside }),
				Fail:  true,
			},
		},

		// A restart (replace) and an Apply over old VMIs (run, replacing).
		"restart: the old VMI removed": {
			view: replicaView{state: judgeState(desiredReplace, "uid-old"),
				obs: observation{dvs: []cdiv1.DataVolume{imported}, vmis: []virtv1.VirtualMachineInstance{running("uid-old")}}},
			want: verdict{Rep: worker.ReplicaReport{State: cosmic.StateRestarting, Progress: progress(StepSchedule, 0), Nodes: n1},
				Remove: []string{"uid-old"}},
		},
		"restart: the old VMI being deleted is waited for": {
			view: replicaView{state: judgeState(desiredReplace, "uid-old"),
				obs: observation{dvs: []cdiv1.DataVolume{imported}, vmis: []virtv1.VirtualMachineInstance{beingDeleted(running("uid-old"))}}},
			want: verdict{Rep: worker.ReplicaReport{State: cosmic.StateRestarting, Progress: progress(StepSchedule, 0), Nodes: n1}},
		},
		"restart: the old VMI gone, the new one made": {
			view: replicaView{state: judgeState(desiredReplace, "uid-old"), obs: observation{dvs: []cdiv1.DataVolume{imported}}},
			want: verdict{Rep: worker.ReplicaReport{State: cosmic.StateRestarting, Progress: progress(StepSchedule, 0), Nodes: n1},
				Create: []int{0}},
		},
		"restart: the new VMI deleted before it runs: made again (no drift)": {
			view: replicaView{state: judgeState(desiredReplace, "uid-old"), seen: map[int]string{0: "uid-new"}, obs: observation{dvs: []cdiv1.DataVolume{imported}}},
			want: verdict{Rep: worker.ReplicaReport{State: cosmic.StateRestarting, Progress: progress(StepSchedule, 0), Nodes: n1},
				Create: []int{0}},
		},
		"restart: the new VMI boots, restarting": {
			view: replicaView{state: judgeState(desiredReplace, "uid-old"),
				obs: observation{dvs: []cdiv1.DataVolume{imported}, vmis: []virtv1.VirtualMachineInstance{jVMI(0, "uid-new", virtv1.Running, notReady)}}},
			want: verdict{Rep: worker.ReplicaReport{State: cosmic.StateRestarting, Progress: progress(StepBoot, 50), Nodes: n1},
				Seen: map[int]string{0: "uid-new"}},
		},
		"restart: the new VMI runs, back to run": {
			view: replicaView{state: judgeState(desiredReplace, "uid-old"),
				obs: observation{dvs: []cdiv1.DataVolume{imported}, vmis: []virtv1.VirtualMachineInstance{running("uid-new")}}},
			want: verdict{Rep: worker.ReplicaReport{State: cosmic.StateRunning, Nodes: n1},
				Write: judgeState(desiredRun), Seen: map[int]string{0: "uid-new"}},
		},
		"applied over old VMIs: once they are gone, the new ones made": {
			view: replicaView{state: judgeState(desiredRun, "uid-old"), obs: observation{dvs: []cdiv1.DataVolume{imported}}},
			want: verdict{Rep: worker.ReplicaReport{State: cosmic.StateStarting, Progress: progress(StepSchedule, 0), Nodes: n1},
				Create: []int{0}},
		},
		"applied over old VMIs, the import failed: fails (every VMI is deleted)": {
			view: replicaView{state: judgeState(desiredRun, "uid-old"),
				obs: observation{dvs: []cdiv1.DataVolume{jDV(0, cdiv1.Failed, "0%")}, vmis: []virtv1.VirtualMachineInstance{running("uid-old")}}},
			want: verdict{
				Rep:   worker.ReplicaReport{State: cosmic.StateFailed, Reason: reason(cosmic.ReasonImportFailed, "import of the image into DataVolume cj-judge-r0-0 failed"), Nodes: n1},
				Write: &replicaState{Desired: desiredFailed, Reservation: judgeRes(), Failure: reason(cosmic.ReasonImportFailed, "import of the image into DataVolume cj-judge-r0-0 failed")},
				Fail:  true,
			},
		},
		"applied over old VMIs: every new one made, the replacement is over": {
			view: replicaView{state: judgeState(desiredRun, "uid-old"),
				obs: observation{dvs: []cdiv1.DataVolume{imported}, vmis: []virtv1.VirtualMachineInstance{jVMI(0, "uid-new", virtv1.Pending)}}},
			want: verdict{Rep: worker.ReplicaReport{State: cosmic.StateStarting, Progress: progress(StepSchedule, 0), Nodes: n1},
				Write: judgeState(desiredRun), Seen: map[int]string{0: "uid-new"}},
		},

		// The agents gate running.
		"its VMI ready, its agent silent: waits for the agent": {
			view: replicaView{state: run, obs: withAgent(observation{dvs: []cdiv1.DataVolume{imported}, vmis: []virtv1.VirtualMachineInstance{running("uid-a")}}, cosmic.TypeGPUContainer)},
			want: verdict{Rep: worker.ReplicaReport{State: cosmic.StateStarting, Progress: progress(StepAgent, 0), Nodes: n1, AgentKeys: judgeKeys},
				Seen: map[int]string{0: "uid-a"}},
		},
		"its agent reported ready: running, latched": {
			view: replicaView{state: run, agents: readyAt(judgeNow.Add(-time.Second)),
				obs: withAgent(observation{dvs: []cdiv1.DataVolume{imported}, vmis: []virtv1.VirtualMachineInstance{running("uid-a")}}, cosmic.TypeGPUContainer)},
			want: verdict{Rep: worker.ReplicaReport{State: cosmic.StateRunning, Nodes: n1, AgentKeys: judgeKeys},
				Write:       written(run, func(s *replicaState) { s.AgentReady = []string{"uid-a"} }),
				AgentsReady: true, Watch: []string{"uid-a"}, Seen: map[int]string{0: "uid-a"}},
		},
		"its agent ready before its VMI is: booting, nothing latched": {
			view: replicaView{state: run, agents: readyAt(judgeNow.Add(-time.Second)),
				obs: withAgent(observation{dvs: []cdiv1.DataVolume{imported}, vmis: []virtv1.VirtualMachineInstance{jVMI(0, "uid-a", virtv1.Running, notReady)}}, cosmic.TypeGPUContainer)},
			want: verdict{Rep: worker.ReplicaReport{State: cosmic.StateStarting, Progress: progress(StepBoot, 50), Nodes: n1, AgentKeys: judgeKeys},
				Seen: map[int]string{0: "uid-a"}},
		},
		"its agent reported not ready: waits": {
			view: replicaView{state: run, agents: map[int]agentSeen{0: {ready: false, at: judgeNow.Add(-time.Second)}},
				obs: withAgent(observation{dvs: []cdiv1.DataVolume{imported}, vmis: []virtv1.VirtualMachineInstance{running("uid-a")}}, cosmic.TypeGPUContainer)},
			want: verdict{Rep: worker.ReplicaReport{State: cosmic.StateStarting, Progress: progress(StepAgent, 0), Nodes: n1, AgentKeys: judgeKeys},
				Seen: map[int]string{0: "uid-a"}},
		},
		"its agent copies the job's volumes in: starting, their progress": {
			view: replicaView{state: run, agents: map[int]agentSeen{0: {at: judgeNow.Add(-time.Second), volumes: copying}},
				obs: withAgent(observation{dvs: []cdiv1.DataVolume{imported}, vmis: []virtv1.VirtualMachineInstance{running("uid-a")}}, cosmic.TypeGPUContainer)},
			want: verdict{Rep: worker.ReplicaReport{State: cosmic.StateStarting, Progress: agentapi.CopyProgress(copying), Nodes: n1, AgentKeys: judgeKeys},
				Seen: map[int]string{0: "uid-a"}},
		},
		"its agent could not copy a volume in: the replica fails with its reason": {
			view: replicaView{state: run, agents: map[int]agentSeen{0: {at: judgeNow.Add(-time.Second), failure: reason(cosmic.ReasonVolumeSyncFailed, "volume 0 (/data): no_such_container")}},
				obs: withAgent(observation{dvs: []cdiv1.DataVolume{imported}, vmis: []virtv1.VirtualMachineInstance{running("uid-a")}}, cosmic.TypeGPUContainer)},
			want: verdict{Rep: worker.ReplicaReport{State: cosmic.StateFailed, Reason: reason(cosmic.ReasonVolumeSyncFailed, "volume 0 (/data): no_such_container"), Nodes: n1, AgentKeys: judgeKeys},
				Write: written(run, func(s *replicaState) {
					s.Desired, s.Failure = desiredFailed, reason(cosmic.ReasonVolumeSyncFailed, "volume 0 (/data): no_such_container")
				}), Fail: true},
		},
		"a failure its agent reported before the VMI was made (a replaced VMI's agent): waits": {
			view: replicaView{state: run, agents: map[int]agentSeen{0: {at: judgeNow.Add(-10 * time.Second), failure: reason(cosmic.ReasonVolumeSyncFailed, "volume 0 (/data): no_such_container")}},
				obs: withAgent(observation{dvs: []cdiv1.DataVolume{imported}, vmis: []virtv1.VirtualMachineInstance{createdAt(running("uid-a"), judgeNow.Add(-5*time.Second))}}, cosmic.TypeGPUContainer)},
			want: verdict{Rep: worker.ReplicaReport{State: cosmic.StateStarting, Progress: progress(StepAgent, 0), Nodes: n1, AgentKeys: judgeKeys},
				Seen: map[int]string{0: "uid-a"}},
		},
		"its agent reported ready before the VMI was made (a replaced VMI's agent): waits": {
			view: replicaView{state: run, agents: readyAt(judgeNow.Add(-10 * time.Second)),
				obs: withAgent(observation{dvs: []cdiv1.DataVolume{imported}, vmis: []virtv1.VirtualMachineInstance{createdAt(running("uid-a"), judgeNow.Add(-5*time.Second))}}, cosmic.TypeGPUContainer)},
			want: verdict{Rep: worker.ReplicaReport{State: cosmic.StateStarting, Progress: progress(StepAgent, 0), Nodes: n1, AgentKeys: judgeKeys},
				Seen: map[int]string{0: "uid-a"}},
		},
		"its agent reported ready longer ago than the timeout: waits": {
			view: replicaView{state: run, agents: readyAt(judgeNow.Add(-31 * time.Second)),
				obs: withAgent(observation{dvs: []cdiv1.DataVolume{imported}, vmis: []virtv1.VirtualMachineInstance{running("uid-a")}}, cosmic.TypeGPUContainer)},
			want: verdict{Rep: worker.ReplicaReport{State: cosmic.StateStarting, Progress: progress(StepAgent, 0), Nodes: n1, AgentKeys: judgeKeys},
				Seen: map[int]string{0: "uid-a"}},
		},
		"latched ready on the carrier: running, its agent watched": {
			view: replicaView{state: written(run, func(s *replicaState) { s.AgentReady = []string{"uid-a"} }),
				obs: withAgent(observation{dvs: []cdiv1.DataVolume{imported}, vmis: []virtv1.VirtualMachineInstance{running("uid-a")}}, cosmic.TypeGPUContainer)},
			want: verdict{Rep: worker.ReplicaReport{State: cosmic.StateRunning, Nodes: n1, AgentKeys: judgeKeys},
				Watch: []string{"uid-a"}, Seen: map[int]string{0: "uid-a"}},
		},
		"latched for another VMI: waits": {
			view: replicaView{state: written(run, func(s *replicaState) { s.AgentReady = []string{"uid-old"} }),
				obs: withAgent(observation{dvs: []cdiv1.DataVolume{imported}, vmis: []virtv1.VirtualMachineInstance{running("uid-a")}}, cosmic.TypeGPUContainer)},
			want: verdict{Rep: worker.ReplicaReport{State: cosmic.StateStarting, Progress: progress(StepAgent, 0), Nodes: n1, AgentKeys: judgeKeys},
				Seen: map[int]string{0: "uid-a"}},
		},
		"reported running, its agent silent: stays running": {
			view: replicaView{state: run, previous: cosmic.StateRunning,
				obs: withAgent(observation{dvs: []cdiv1.DataVolume{imported}, vmis: []virtv1.VirtualMachineInstance{running("uid-a")}}, cosmic.TypeGPUContainer)},
			want: verdict{Rep: worker.ReplicaReport{State: cosmic.StateRunning, Nodes: n1, AgentKeys: judgeKeys},
				Watch: []string{"uid-a"}, Seen: map[int]string{0: "uid-a"}},
		},
		"restart: the new VMI's agent ready: back to run, latched": {
			view: replicaView{state: judgeState(desiredReplace, "uid-old"), agents: readyAt(judgeNow.Add(-time.Second)),
				obs: withAgent(observation{dvs: []cdiv1.DataVolume{imported}, vmis: []virtv1.VirtualMachineInstance{running("uid-new")}}, cosmic.TypeGPUContainer)},
			want: verdict{Rep: worker.ReplicaReport{State: cosmic.StateRunning, Nodes: n1, AgentKeys: judgeKeys},
				Write:       written(run, func(s *replicaState) { s.AgentReady = []string{"uid-new"} }),
				AgentsReady: true, Watch: []string{"uid-new"}, Seen: map[int]string{0: "uid-new"}},
		},
		"a job type not gated: running without its agent": {
			policy: func(p *judgePolicy) { p.requireAgent = []cosmic.JobType{cosmic.TypeManagedInference} },
			view:   replicaView{state: run, obs: withAgent(observation{dvs: []cdiv1.DataVolume{imported}, vmis: []virtv1.VirtualMachineInstance{running("uid-a")}}, cosmic.TypeGPUContainer)},
			want: verdict{Rep: worker.ReplicaReport{State: cosmic.StateRunning, Nodes: n1, AgentKeys: judgeKeys},
				Seen: map[int]string{0: "uid-a"}},
		},
		"the worker serves no agents: running without one": {
			policy: func(p *judgePolicy) { p.requireAgent = nil },
			view:   replicaView{state: run, obs: withAgent(observation{dvs: []cdiv1.DataVolume{imported}, vmis: []virtv1.VirtualMachineInstance{running("uid-a")}}, cosmic.TypeGPUContainer)},
			want: verdict{Rep: worker.ReplicaReport{State: cosmic.StateRunning, Nodes: n1, AgentKeys: judgeKeys},
				Seen: map[int]string{0: "uid-a"}},
		},
		"VMIs built without agents: running": {
			view: replicaView{state: run, obs: observation{root: withAgent(observation{}, cosmic.TypeGPUContainer).root,
				dvs: []cdiv1.DataVolume{imported}, vmis: []virtv1.VirtualMachineInstance{running("uid-a")}}},
			want: verdict{Rep: worker.ReplicaReport{State: cosmic.StateRunning, Nodes: n1}, Seen: map[int]string{0: "uid-a"}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p := base
			if tc.policy != nil {
				tc.policy(&p)
			}
			v := tc.view
			v.key = judgeKey
			var before replicaState
			if v.state != nil {
				before = *v.state
			}
			seen := maps.Clone(v.seen)
			got := verdictOf(judge(p, v, judgeNow))
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("judge (-want +got):\n%s", diff)
			}
			// judge changes nothing it is given.
			if v.state != nil {
				if diff := cmp.Diff(before, *v.state); diff != "" {
					t.Errorf("judge changed the state (-before +after):\n%s", diff)
				}
			}
			if diff := cmp.Diff(seen, v.seen); diff != "" {
				t.Errorf("judge changed seen (-before +after):\n%s", diff)
			}
		})
	}
}

// The worker's view of a replica resolves its state as replicaMem.current
// does, and copies what judge reads.
func TestView(t *testing.T) {
	w := &Worker{}
	carrier := judgeState(desiredRun)
	carrier.Version = 5
	override := judgeState(desiredReplace, "uid-old")
	override.Version = 7
	last := worker.ReplicaReport{State: cosmic.StateRunning}
	m := &replicaMem{override: override, seen: map[int]string{0: "uid-a"}, last: &last, deleting: true}

	v := w.view(judgeKey, m, observation{state: carrier})
	if v.state == nil || v.state.Desired != desiredReplace || v.previous != cosmic.StateRunning || !v.deleting || v.agents != nil {
		t.Fatalf("view with the informer behind the worker's write: %+v", v)
	}
	v.seen[1] = "uid-b"
	if len(m.seen) != 1 {
		t.Error("the view shares the worker's seen map")
	}

	carrier.Version = 7
	if v := w.view(judgeKey, m, observation{state: carrier}); v.state == nil || v.state.Desired != desiredRun || m.override != nil {
		t.Fatalf("view with the informer caught up: %+v (override %v)", v, m.override)
	}
	if v := w.view(judgeKey, &replicaMem{}, observation{}); v.state != nil || v.previous != "" {
		t.Fatalf("view of a replica without a state: %+v", v)
	}
}
