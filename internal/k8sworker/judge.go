package k8sworker

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	virtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/cosmicac/cosmicac/internal/agent/agentapi"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/worker"
)

// judgePolicy is the rack's rules that judge applies.
type judgePolicy struct {
	// status maps the objects to a report; its RequireAgent is decided
	// per replica, from requireAgent.
	status StatusPolicy
	drift  DriftPolicy
	// requireAgent are the job types whose replicas run only once their
	// agents report ready (none when the worker serves no agents), within
	// agentTimeout of each other report.
	requireAgent []cosmic.JobType
	agentTimeout time.Duration
}

// judgePolicy is the worker's policy, as it serves agents or not.
func (w *Worker) judgePolicy() judgePolicy {
	p := judgePolicy{status: w.cfg.StatusPolicy(), drift: w.cfg.DriftPolicy, agentTimeout: w.cfg.AgentTimeout.D()}
	if w.agents != nil {
		p.requireAgent = w.cfg.RequireAgent
	}
	return p
}

// replicaView is everything judge reads of one replica: its objects as the
// informers show them, and what the worker keeps of it.
type replicaView struct {
	key replicaKey
	obs observation
	// state is the replica's state (replicaMem.current), nil before it
	// has one.
	state *replicaState
	// previous is the state last reported ("" before the first report).
	previous cosmic.State
	// deleting is set by Delete; deleteJob when the whole job goes (its
	// root too).
	deleting, deleteJob bool
	// seen are the UIDs of the VMIs, by index, the worker saw the replica
	// run on.
	seen map[int]string
	// agents are the last reports of the replica's agents, by VMI index.
	agents map[int]agentSeen
}

// view gathers what judge reads of replica k (m.mu held): the state is
// resolved (m.current forgets an override the informer has caught up with)
// and the agents' reports copied.
func (w *Worker) view(k replicaKey, m *replicaMem, o observation) replicaView {
	v := replicaView{key: k, obs: o, deleting: m.deleting, deleteJob: m.deleteJob,
		seen: maps.Clone(m.seen), agents: w.agents.reports(k)}
	if st, ok := m.current(o.state); ok {
		v.state = &st
	}
	if m.last != nil {
		v.previous = m.last.State
	}
	return v
}

// decision is judge's verdict on a replica: its report, and what the
// worker does about it, in this order: record the drift, write the state
// (and, if the replica fails, delete its VMIs), create VMIs, watch the
// agents, delete the VMIs in remove, remember the VMIs seen.
type decision struct {
	rep worker.ReplicaReport
	// drift are the indices of VMIs deleted behind the worker's back: it
	// records them and forgets it saw them. By the drift policy the
	// replica fails, or they are recreated (write says replace; create).
	drift []int
	// write is the state to record on the replica's carrier (nil: none).
	write *replicaState
	// fail: write fails the replica; all its VMIs are deleted.
	fail bool
	// create are the indices of the VMIs to create (after write).
	create []int
	// agentsReady: the replica's agents have just reported ready, and
	// write latches it.
	agentsReady bool
	// watchAgents are the VMIs of a running replica gated on its agents,
	// whose agents the worker watches for silence.
	watchAgents []*virtv1.VirtualMachineInstance
	// remove are VMIs to delete: replaced ones, or those of a replica that
	// holds no GPUs.
	remove []*virtv1.VirtualMachineInstance
	// seen are the UIDs of the VMIs, by index, the replica now runs on
	// (nil: leave what the worker saw as it is).
	seen map[int]string
	// requeue is when to judge the replica again (0: at its next event).
	requeue time.Duration
}

// judge is the worker's judgement of replica v.key: from its objects and
// what the worker keeps of it, at now, its report and what to do. It is a
// pure function: reconcile gathers v under the replica's lock and acts on
// the decision.
//
//   - Gone, once a deleting replica has no object left (nor its root,
//     when the whole job goes);
//   - while deleting, the objects' status (ReplicaStatus), restarting but
//     for failed; before the replica has a state, the objects' status;
//   - stopped (killed) or failed (with its recorded reason) as its state
//     says, the VMIs left removed;
//   - otherwise the objects' status on the reserved nodes, and:
//   - a failed status fails the replica;
//   - a VMI seen running and gone is drift: with DriftFail the replica
//     fails (vmi_crashed), with DriftRecreate it is replaced (restarting)
//     and the VMI recreated;
//   - while a replacement (a restart) goes on, the replaced VMIs are
//     removed, the new ones created once they are gone, and the replica is
//     restarting until they run; then it is back to run;
//   - a replica of a job type in requireAgent whose VMIs have agents is
//     running only once every VMI's agent has reported ready since the VMI
//     was created (within agentTimeout), or is latched ready on the
//     carrier; the gate opening latches it. Running, its agents are
//     watched;
//   - a VMI within its unschedulable grace is judged again when it ends.
func judge(p judgePolicy, v replicaView, now time.Time) decision {
	k, o, st := v.key, v.obs, v.state
	if v.deleting && o.empty() && (!v.deleteJob || o.root == nil) {
		return decision{rep: worker.ReplicaReport{Replica: k.replica, State: cosmic.StateStopped, Gone: true}}
	}
	keys := agentKeys(o)
	objs := indexObjects(o, st)
	if st == nil || v.deleting {
		var nodes []string
		if st != nil {
			nodes = nodeNames(st.Reservation)
		}
		rep := ReplicaStatus(p.status, ReplicaObservation{Replica: k.replica, Nodes: nodes, DataVolumes: objs.dvs, VMIs: objs.vmis, Previous: v.previous}, now)
		if v.deleting && rep.State != cosmic.StateFailed {
			rep.State, rep.Progress = cosmic.StateRestarting, nil
		}
		rep.AgentKeys = keys
		return decision{rep: rep}
	}
	d := decision{remove: objs.remove}
	switch st.Desired {
	case desiredStop:
		r := cosmic.NewReason(cosmic.ReasonKilled, "")
		d.rep = worker.ReplicaReport{Replica: k.replica, State: cosmic.StateStopped, Reason: &r, AgentKeys: keys}
		if objs.oldLeft > 0 && v.previous != "" && v.previous != cosmic.StateStopped && v.previous != cosmic.StateFailed {
			// Its VMIs power off, within their grace (their agents push
			// the job's volumes): it is as it was until they are gone, as
			// a VM powering off still has its GPUs, which the ork keeps
			// reserved until the stopped report (internal/ork/poweroff.go).
			d.rep = worker.ReplicaReport{Replica: k.replica, State: v.previous, Nodes: nodeNames(st.Reservation), AgentKeys: keys}
		}
		return d
	case desiredFailed:
		d.rep = worker.ReplicaReport{Replica: k.replica, State: cosmic.StateFailed, Reason: st.Failure, Nodes: nodeNames(st.Reservation), AgentKeys: keys}
		return d
	}

	// Run, or replace: the reserved nodes decide.
	nodes := nodeNames(st.Reservation)
	objs.grow(len(nodes))
	dvs, vmis := objs.dvs[:len(nodes)], objs.vmis[:len(nodes)]
	var drift, missing []int
	if objs.oldLeft == 0 {
		for i := range nodes {
			if vmis[i] != nil {
				continue
			}
			missing = append(missing, i)
			if st.Desired == desiredRun && v.seen[i] != "" {
				drift = append(drift, i)
			}
		}
	}
	obs := ReplicaObservation{Replica: k.replica, Nodes: nodes, DataVolumes: dvs, VMIs: vmis, Previous: v.previous}
	pol := p.status
	gated := slices.Contains(p.requireAgent, jobTypeOf(o)) && len(keys) > 0
	var latch []string
	if gated {
		pol.RequireAgent = true
		obs.AgentReady, latch = agentsReady(st.AgentReady, v.agents, vmis, p.agentTimeout, now)
	}
	r := ReplicaStatus(pol, obs, now)
	if gated && r.State != cosmic.StateFailed && r.State != cosmic.StateRunning {
		// The agents say how their volumes come in: a volume that cannot
		// fails the replica with the agent's reason; one coming in is
		// its progress.
		if f := agentsFailure(v.agents, vmis); f != nil {
			r = worker.ReplicaReport{Replica: k.replica, State: cosmic.StateFailed, Reason: f, Nodes: nodes}
		} else if prog := agentsProgress(v.agents, vmis); prog != nil && r.State == cosmic.StateStarting {
			r.Progress = prog
		}
	}
	next := *st
	switch {
	case r.State == cosmic.StateFailed:
		d.rep = r
		d.fail, next = true, failedState(next, *r.Reason)
	case len(drift) > 0 && p.drift == DriftFail:
		names := make([]string, len(drift))
		for i, n := range drift {
			names[i] = VMIName(k.job, k.replica, n)
		}
		reason := cosmic.NewReason(cosmic.ReasonVMICrashed, fmt.Sprintf("VMI %s was deleted outside CosmicAC (driftPolicy %s)", strings.Join(names, ", "), DriftFail))
		d.rep = worker.ReplicaReport{Replica: k.replica, State: cosmic.StateFailed, Reason: &reason, Nodes: nodes}
		d.drift, d.fail, next = drift, true, failedState(next, reason)
	case len(drift) > 0:
		obs.Replacing = true
		d.rep = ReplicaStatus(pol, obs, now)
		next.Desired = desiredReplace
		d.drift, d.write, d.create = drift, &next, drift
	case st.Desired == desiredReplace && r.State == cosmic.StateRunning:
		d.rep = r
		next.Desired, next.Replacing = desiredRun, nil
		d.write = &next
	case st.Desired == desiredReplace || len(st.Replacing) > 0:
		d.rep = r
		if st.Desired == desiredReplace {
			obs.Replacing = true
			d.rep = ReplicaStatus(pol, obs, now)
		}
		switch {
		case len(missing) > 0:
			d.create = missing
		case st.Desired == desiredRun && len(objs.uids) == len(nodes):
			// Back to run with every new VMI made: the replacement is
			// over.
			next.Desired, next.Replacing = desiredRun, nil
			d.write = &next
		}
	default:
		d.rep = r
	}
	d.rep.AgentKeys = keys
	d.requeue = graceRequeue(p.status.UnschedulableGrace, objs.vmis, now)
	if d.fail {
		d.write, d.remove = &next, nil
		return d
	}
	if latch != nil && d.rep.State == cosmic.StateRunning {
		next.AgentReady = latch
		d.agentsReady, d.write = true, &next
	}
	if gated && d.rep.State == cosmic.StateRunning {
		d.watchAgents = vmis
	}
	d.seen = objs.uids
	return d
}

// failedState is st failed for reason.
func failedState(st replicaState, reason cosmic.Reason) replicaState {
	st.Desired, st.Failure, st.Replacing = desiredFailed, &reason, nil
	return st
}

// graceRequeue is when the first unschedulable VMI's grace ends (0: none
// is within its grace), a little after, and at most maxGraceRequeue.
func graceRequeue(grace time.Duration, vmis []*virtv1.VirtualMachineInstance, now time.Time) time.Duration {
	var requeue time.Duration
	for _, v := range vmis {
		if v == nil {
			continue
		}
		if c := unschedulable(v); c != nil {
			left := grace - now.Sub(c.LastTransitionTime.Time)
			if left > 0 && (requeue == 0 || left < requeue) {
				requeue = min(left+50*time.Millisecond, maxGraceRequeue)
			}
		}
	}
	return requeue
}

// indexedObjects are a replica's DataVolumes and current VMIs by VMI
// index (nil where absent), and the VMIs it no longer runs on: those
// being replaced, or all of a replica that holds no GPUs.
type indexedObjects struct {
	dvs  []*cdiv1.DataVolume
	vmis []*virtv1.VirtualMachineInstance
	uids map[int]string // of vmis
	// remove are the old VMIs not being deleted yet; oldLeft counts every
	// old VMI left.
	remove  []*virtv1.VirtualMachineInstance
	oldLeft int
}

func indexObjects(o observation, st *replicaState) indexedObjects {
	x := indexedObjects{dvs: []*cdiv1.DataVolume{}, vmis: []*virtv1.VirtualMachineInstance{}, uids: map[int]string{}}
	for i := range o.dvs {
		if n := vmiIndex(&o.dvs[i]); n >= 0 {
			x.grow(n + 1)
			x.dvs[n] = &o.dvs[i]
		}
	}
	var old map[string]bool
	if st != nil {
		old = setOf(st.Replacing)
	}
	for i := range o.vmis {
		v := &o.vmis[i]
		n := vmiIndex(v)
		if n < 0 {
			continue
		}
		if st != nil && (old[string(v.UID)] || !st.holdsGPUs()) {
			x.oldLeft++
			if v.DeletionTimestamp == nil {
				x.remove = append(x.remove, v)
			}
			continue
		}
		x.grow(n + 1)
		x.vmis[n] = v
		x.uids[n] = string(v.UID)
	}
	return x
}

// grow makes room for n VMI indices.
func (x *indexedObjects) grow(n int) {
	for len(x.dvs) < n {
		x.dvs = append(x.dvs, nil)
	}
	for len(x.vmis) < n {
		x.vmis = append(x.vmis, nil)
	}
}

// agentsFailure is the first failure an agent of vmis reported since its
// VMI was created (a volume it could not copy in), or nil.
func agentsFailure(reports map[int]agentSeen, vmis []*virtv1.VirtualMachineInstance) *cosmic.Reason {
	for i, v := range vmis {
		if s, ok := reports[i]; ok && v != nil && s.failure != nil && !s.at.Before(v.CreationTimestamp.Time) {
			f := *s.failure
			return &f
		}
	}
	return nil
}

// agentsProgress is the copy of the volumes the agents of vmis reported
// since their VMIs were created (agentapi.CopyProgress of them all), or
// nil when none copies.
func agentsProgress(reports map[int]agentSeen, vmis []*virtv1.VirtualMachineInstance) *cosmic.Progress {
	var vols []agentapi.VolumeStatus
	for i, v := range vmis {
		if s, ok := reports[i]; ok && v != nil && !s.at.Before(v.CreationTimestamp.Time) {
			vols = append(vols, s.volumes...)
		}
	}
	return agentapi.CopyProgress(vols)
}

// agentsReady says whether the agents of vmis are ready: every VMI's agent
// is latched ready on the carrier (latched holds its VMI's UID), or has
// reported ready since its VMI was created and within timeout. latch is
// the VMIs' UIDs to latch when reports opened the gate.
func agentsReady(latched []string, reports map[int]agentSeen, vmis []*virtv1.VirtualMachineInstance, timeout time.Duration, now time.Time) (ready bool, latch []string) {
	was := setOf(latched)
	ready, fresh := len(vmis) > 0, false
	var uids []string
	for i, v := range vmis {
		if v == nil {
			ready = false
			continue
		}
		uids = append(uids, string(v.UID))
		if was[string(v.UID)] {
			continue
		}
		s, ok := reports[i]
		if ok && s.ready && !s.at.Before(v.CreationTimestamp.Time) && now.Sub(s.at) <= timeout {
			fresh = true
			continue
		}
		ready = false
	}
	if ready && fresh {
		latch = uids
	}
	return ready, latch
}
