package k8sworker

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	virtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/worker"
)

// Progress step names reported while a replica starts (the simulated rack
// reports the same).
const (
	StepImport   = "import root disk"
	StepSchedule = "schedule VMI"
	StepBoot     = "boot VMI"
	StepAgent    = "wait for agent"
)

// StatusPolicy is how observations become states.
type StatusPolicy struct {
	// ImportRestartLimit fails an import whose importer pod CDI restarted
	// this many times (0: only a Failed DataVolume fails).
	ImportRestartLimit int
	// UnschedulableGrace is how long a VMI may be unschedulable before its
	// replica fails.
	UnschedulableGrace time.Duration
	// RequireAgent keeps a replica starting (step StepAgent) until its
	// agents report ready. A replica already running stays running (an
	// agent going silent later does not take it back to starting).
	RequireAgent bool
}

// StatusPolicy is the rack's status policy. RequireAgent is decided per
// replica by the worker (RackConfig.RequireAgent, ServeAgents).
func (c RackConfig) StatusPolicy() StatusPolicy {
	return StatusPolicy{ImportRestartLimit: c.ImportRestartLimit, UnschedulableGrace: c.UnschedulableGrace.D()}
}

// ReplicaObservation is what the worker observes of one replica: its
// objects by VMI index, nil where absent.
type ReplicaObservation struct {
	Replica     int
	Nodes       []string // the reserved nodes, by VMI index
	DataVolumes []*cdiv1.DataVolume
	VMIs        []*virtv1.VirtualMachineInstance
	// Replacing is set by the worker from a restart (or a drift repair)
	// until the new VMIs are created.
	Replacing bool
	// AgentReady is whether the replica's agent reported ready.
	AgentReady bool
	// Previous is the state last reported, kept while a VMI's phase is
	// Unknown (its node cannot be reached; KubeVirt decides later).
	Previous cosmic.State
}

// vmiStatus is the status of one VMI with its disk; rank orders the steps.
type vmiStatus struct {
	state    cosmic.State
	reason   *cosmic.Reason
	progress *cosmic.Progress
	rank     int // for starting: how far along (step × 1000 + percent)
}

// ReplicaStatus maps a replica's observed objects to its report (docs/jobs.md, "Statuses"):
//
//   - failed, when a VMI failed or shut down (vmi_crashed), its disk import
//     failed or its importer restarted ImportRestartLimit times
//     (import_failed), or it has been unschedulable for UnschedulableGrace
//     (vmi_unschedulable). The lowest failed VMI index gives the reason;
//   - restarting, while Replacing or a VMI is being deleted;
//   - running, when every VMI is Running with condition Ready (and, with
//     RequireAgent, the agent is ready);
//   - starting, once any VMI's disk import has been scheduled or a VMI has
//     been scheduled: progress is the least advanced VMI's step
//     (StepImport with CDI's percent, StepSchedule, StepBoot, StepAgent);
//   - pending, before that: objects missing, DataVolume Pending, PVCBound,
//     WaitForFirstConsumer or PendingPopulation, VMI Pending or Scheduling.
//
// A VMI whose phase is Unknown keeps Previous (pending if none).
func ReplicaStatus(p StatusPolicy, o ReplicaObservation, now time.Time) worker.ReplicaReport {
	rep := worker.ReplicaReport{Replica: o.Replica, Nodes: o.Nodes}
	n := max(len(o.Nodes), len(o.DataVolumes), len(o.VMIs), 1)
	all := make([]vmiStatus, n)
	for i := range n {
		var dv *cdiv1.DataVolume
		var vmi *virtv1.VirtualMachineInstance
		if i < len(o.DataVolumes) {
			dv = o.DataVolumes[i]
		}
		if i < len(o.VMIs) {
			vmi = o.VMIs[i]
		}
		node := ""
		if i < len(o.Nodes) {
			node = o.Nodes[i]
		}
		all[i] = observeVMI(p, dv, vmi, node, now)
	}

	for _, s := range all {
		if s.state == cosmic.StateFailed {
			rep.State, rep.Reason = cosmic.StateFailed, s.reason
			return rep
		}
	}
	for _, s := range all {
		if s.state == cosmic.StateUnknown {
			rep.State = o.Previous
			if rep.State == "" {
				rep.State = cosmic.StatePending
			}
			return rep
		}
	}
	// The least advanced VMI decides.
	least := all[0]
	restarting := o.Replacing
	for _, s := range all {
		if s.state == cosmic.StateRestarting {
			restarting = true
		}
		if order(s) < order(least) {
			least = s
		}
	}
	switch {
	case restarting:
		rep.State, rep.Progress = cosmic.StateRestarting, least.progress
	case least.state == cosmic.StateRunning && p.RequireAgent && !o.AgentReady && o.Previous != cosmic.StateRunning:
		rep.State, rep.Progress = cosmic.StateStarting, &cosmic.Progress{Step: StepAgent}
	case least.state == cosmic.StateRunning:
		rep.State = cosmic.StateRunning
	case least.state == cosmic.StatePending && anyStarted(all):
		// Another VMI has started: the replica is starting, at the start.
		rep.State, rep.Progress = cosmic.StateStarting, &cosmic.Progress{Step: StepImport}
	default:
		rep.State, rep.Progress = least.state, least.progress
	}
	return rep
}

func anyStarted(all []vmiStatus) bool {
	for _, s := range all {
		if s.state != cosmic.StatePending {
			return true
		}
	}
	return false
}

// order sorts VMI statuses from least to most advanced.
func order(s vmiStatus) int {
	switch s.state {
	case cosmic.StatePending:
		return 0
	case cosmic.StateStarting, cosmic.StateRestarting:
		return 1 + s.rank
	}
	return 1 << 30
}

// observeVMI is the status of one VMI and its root disk.
func observeVMI(p StatusPolicy, dv *cdiv1.DataVolume, vmi *virtv1.VirtualMachineInstance, node string, now time.Time) vmiStatus {
	if vmi != nil {
		if vmi.DeletionTimestamp != nil {
			return vmiStatus{state: cosmic.StateRestarting}
		}
		if node == "" {
			node = vmi.Status.NodeName
		}
		switch vmi.Status.Phase {
		case virtv1.Failed:
			detail := fmt.Sprintf("VMI %s on node %s failed", vmi.Name, node)
			if vmi.Status.Reason != "" {
				detail += " (" + vmi.Status.Reason + ")"
			}
			return failed(cosmic.ReasonVMICrashed, detail)
		case virtv1.Succeeded:
			return failed(cosmic.ReasonVMICrashed, fmt.Sprintf("VMI %s on node %s shut down (its guest powered off)", vmi.Name, node))
		case virtv1.Unknown:
			return vmiStatus{state: cosmic.StateUnknown}
		case virtv1.Running:
			if vmiCondition(vmi, virtv1.VirtualMachineInstanceReady) == corev1.ConditionTrue {
				return vmiStatus{state: cosmic.StateRunning}
			}
			return starting(StepBoot, 50, 3)
		case virtv1.Scheduled:
			return starting(StepBoot, 0, 3)
		}
		if c := unschedulable(vmi); c != nil {
			if now.Sub(c.LastTransitionTime.Time) >= p.UnschedulableGrace {
				detail := fmt.Sprintf("VMI %s cannot be scheduled on node %s", vmi.Name, node)
				if c.Message != "" {
					detail += ": " + c.Message
				}
				return failed(cosmic.ReasonVMIUnschedulable, detail)
			}
		}
	}

	if dv != nil {
		if s, done := observeDisk(p, dv); !done {
			return s
		}
	} else if vmi == nil {
		return vmiStatus{state: cosmic.StatePending}
	}
	// The disk is imported (or its DataVolume is gone while the VMI lives):
	// the VMI is not scheduled yet.
	return starting(StepSchedule, 0, 2)
}

// observeDisk is the status of a root disk import, and whether it is done.
func observeDisk(p StatusPolicy, dv *cdiv1.DataVolume) (vmiStatus, bool) {
	st := dv.Status
	if st.Phase == cdiv1.Failed {
		return failed(cosmic.ReasonImportFailed, importDetail(dv, "failed")), false
	}
	if p.ImportRestartLimit > 0 && int(st.RestartCount) >= p.ImportRestartLimit && st.Phase != cdiv1.Succeeded {
		return failed(cosmic.ReasonImportFailed, importDetail(dv, fmt.Sprintf("failed %d times", st.RestartCount))), false
	}
	switch st.Phase {
	case cdiv1.Succeeded:
		return vmiStatus{}, true
	case cdiv1.PhaseUnset, cdiv1.Pending, cdiv1.PVCBound, cdiv1.WaitForFirstConsumer, cdiv1.PendingPopulation:
		return vmiStatus{state: cosmic.StatePending}, false
	}
	pct := ParseProgress(st.Progress)
	return starting(StepImport, pct, 1), false
}

func importDetail(dv *cdiv1.DataVolume, what string) string {
	d := fmt.Sprintf("import of %s into DataVolume %s %s", registrySource(dv), dv.Name, what)
	for _, t := range []cdiv1.DataVolumeConditionType{cdiv1.DataVolumeRunning, cdiv1.DataVolumeReady} {
		for _, c := range dv.Status.Conditions {
			if c.Type == t && c.Message != "" {
				return d + ": " + c.Message
			}
		}
	}
	return d
}

func registrySource(dv *cdiv1.DataVolume) string {
	if s := dv.Spec.Source; s != nil && s.Registry != nil && s.Registry.URL != nil {
		return *s.Registry.URL
	}
	return "the image"
}

// ParseProgress reads CDI's progress ("45.20%", "N/A") as a whole percent
// from 0 to 100.
func ParseProgress(p cdiv1.DataVolumeProgress) int {
	f, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(string(p)), "%"), 64)
	if err != nil || f != f { // not a number, or NaN
		return 0
	}
	return int(min(max(f, 0), 100))
}

// starting is a VMI at step (the rank-th step of starting) and percent pct.
func starting(step string, pct, rank int) vmiStatus {
	return vmiStatus{state: cosmic.StateStarting, progress: &cosmic.Progress{Step: step, Percent: pct}, rank: rank*1000 + pct}
}

func failed(code cosmic.ReasonCode, detail string) vmiStatus {
	r := cosmic.NewReason(code, detail)
	return vmiStatus{state: cosmic.StateFailed, reason: &r}
}

func vmiCondition(v *virtv1.VirtualMachineInstance, t virtv1.VirtualMachineInstanceConditionType) corev1.ConditionStatus {
	for _, c := range v.Status.Conditions {
		if c.Type == t {
			return c.Status
		}
	}
	return corev1.ConditionUnknown
}

// unschedulable is the VMI's PodScheduled=False condition with reason
// Unschedulable (KubeVirt copies it from the virt-launcher pod), or nil.
func unschedulable(v *virtv1.VirtualMachineInstance) *virtv1.VirtualMachineInstanceCondition {
	for i, c := range v.Status.Conditions {
		if c.Type == virtv1.VirtualMachineInstanceConditionType(corev1.PodScheduled) && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return &v.Status.Conditions[i]
		}
	}
	return nil
}
