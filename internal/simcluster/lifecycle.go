package simcluster

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/worker"
)

// phase is what a replica does at its next step.
type phase int

const (
	phaseIdle     phase = iota // running, failed or stopped: nothing to do
	phaseAccept                // pending (or restarting): next, import or reuse the disk
	phaseImport                // importing the root disk: next, another increment
	phaseSchedule              // next, schedule one VMI per reserved node
	phaseBoot                  // next, boot the VMIs
	phaseReady                 // next, running
	phaseDelete                // graceful delete: next, gone
	phaseExit                  // the command exited: next, stopped or failed
	phaseShutdown              // powering off (shutDown): next, stopped or deleted once the agent has ended
)

// importIncrement is the percent of the root disk imported per step.
const importIncrement = 25

// Progress step names reported while starting or restarting.
const (
	progressImport   = "import root disk"
	progressSchedule = "schedule VMI"
	progressBoot     = "boot VMI"
)

// replica is one replica of a job as the simulated cluster holds it.
type replica struct {
	key      replicaKey
	res      cosmic.Reservation
	state    cosmic.State
	reason   *cosmic.Reason
	progress *cosmic.Progress
	// failedAt is when the replica last failed (fail): an Apply of the job
	// as it was before then is a late one of the run that failed.
	failedAt time.Time

	phase phase
	due   time.Time

	claimed    bool   // res's GPUs are in Cluster.claims
	vmis       []vmi  // live VMIs
	disk       bool   // the root disk is imported (and kept until Delete)
	diskID     string // the imported disk's identity (RootDisk)
	importPct  int
	failImport bool // simFailImport armed for this replica's import
	// holdAgent (simHoldAgent) keeps the replica waiting for its agent,
	// as a VM whose image cannot start one; heldNoted says its record
	// was written.
	holdAgent, heldNoted bool

	agent *agentRun // the replica's agent(s) (gpu-container: AgentRunner; managed-inference: InferenceRunner)
	// exited, then and deadline are a shutdown's (phaseShutdown): the
	// stopped agent's end, what follows it, and the grace's end.
	exited   <-chan struct{}
	then     phase
	deadline time.Time
	exit     *CommandOutcome // the command's end, not yet taken
	exitCode *int            // reported: the exit code of the command that ended r

	// given is what the replica's VMIs get: their share of the job
	// (cosmic.ShareOf), set at Apply.
	given *cosmic.Given

	// marked is the report last queued for the ork (mark), with its stamp.
	marked worker.ReplicaReport
}

// vmi is one simulated VirtualMachineInstance: a replica's share of one node.
type vmi struct {
	name string
	node string
	gpus []int
	// agent is the identity issued to the VMI's agent when the job type
	// has one (a runner is set), as the Kubernetes worker issues one per
	// VMI at Apply; its public key is reported in the replica's AgentKeys
	// from the VMI's scheduling on, so that the platform binds it before
	// the agent boots.
	agent *fabric.Identity
}

func (r *replica) holdsGPUs() bool { return r.claimed }

func (r *replica) stateName() string { return string(r.state) }

// report is r's current state, unstamped.
func (r *replica) report() worker.ReplicaReport {
	out := worker.ReplicaReport{Replica: r.key.replica, State: r.state}
	if r.reason != nil {
		rs := *r.reason
		out.Reason = &rs
	}
	if r.progress != nil {
		p := *r.progress
		out.Progress = &p
	}
	if r.claimed {
		out.Nodes = r.res.NodeNames()
		if r.given != nil {
			g := *r.given
			out.Given = &g
		}
	}
	if r.exitCode != nil {
		v := *r.exitCode
		out.ExitCode = &v
	}
	if r.claimed {
		for _, v := range r.vmis {
			if v.agent != nil {
				out.AgentKeys = append(out.AgentKeys, v.agent.PublicKey().String())
			}
		}
	}
	return out
}

// lifecycleLoop advances every replica whose step is due, then sleeps until
// the next one is (or until woken by a new lifecycle).
func (c *Cluster) lifecycleLoop(ctx context.Context) {
	t := time.NewTimer(time.Hour)
	t.Stop()
	defer t.Stop()
	for {
		next := c.tick(time.Now())
		var due <-chan time.Time
		if !next.IsZero() {
			t.Reset(time.Until(next))
			due = t.C
		}
		select {
		case <-ctx.Done():
			return
		case <-c.wake:
			t.Stop()
		case <-due:
		}
	}
}

// tick takes every due step and returns when the next one is due (zero if
// none is).
func (c *Cluster) tick(now time.Time) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	var next time.Time
	for _, j := range c.jobs {
		for _, r := range j.replicas {
			if r.phase == phaseIdle {
				continue
			}
			if !r.due.After(now) {
				c.advance(j, r, now)
			}
			if r.phase != phaseIdle && j.replicas[r.key.replica] == r && (next.IsZero() || r.due.Before(next)) {
				next = r.due
			}
		}
	}
	return next
}

// start begins r's lifecycle on res: the GPUs are checked against the
// simulated hardware and claimed, and r is pending.
func (c *Cluster) start(j *simJob, r *replica, res cosmic.Reservation, now time.Time) {
	r.res = res
	r.vmis = nil
	r.progress = nil
	r.exit, r.exitCode = nil, nil
	c.stopAgent(r)
	if problem := c.checkFit(r.key, res); problem != "" {
		r.claimed = false
		r.state, r.phase = cosmic.StateFailed, phaseIdle
		reason := cosmic.NewReason(cosmic.ReasonVMIUnschedulable, problem)
		r.reason = &reason
		c.record(r, now, "schedule", false, "cannot schedule replica %d on %s: %s", r.key.replica, describeAllocs(res.Nodes), problem)
		c.mark(r)
		return
	}
	c.claim(r)
	r.state, r.reason = cosmic.StatePending, nil
	r.phase, r.due = phaseAccept, now.Add(c.cfg.Step.D())
	c.record(r, now, "accept", true, "replica %d accepted: %d × %s on %s; waiting to be scheduled", r.key.replica, res.Count(), c.cfg.GPUModel, describeAllocs(res.Nodes))
	c.mark(r)
}

// checkFit says why res cannot run here, or "".
func (c *Cluster) checkFit(k replicaKey, res cosmic.Reservation) string {
	var problems []string
	for _, a := range res.Nodes {
		n := c.byName[a.Node]
		if n == nil {
			problems = append(problems, fmt.Sprintf("rack %s has no node %q", c.cfg.Rack, a.Node))
			continue
		}
		if n.lost {
			problems = append(problems, fmt.Sprintf("node %s is not ready", a.Node))
		}
		if len(a.GPUs) == 0 {
			problems = append(problems, fmt.Sprintf("no GPUs asked on node %s", a.Node))
		}
		seen := map[int]bool{}
		for _, g := range a.GPUs {
			switch holder, held := c.claims[gpuKey{a.Node, g}]; {
			case g < 0 || g >= c.cfg.GPUsPerNode:
				problems = append(problems, fmt.Sprintf("node %s has no GPU %d (it has %d)", a.Node, g, c.cfg.GPUsPerNode))
			case seen[g]:
				problems = append(problems, fmt.Sprintf("GPU %d of node %s asked twice", g, a.Node))
			case held && holder != k:
				problems = append(problems, fmt.Sprintf("GPU %d of node %s is held by replica %d of job %s", g, a.Node, holder.replica, holder.job))
			}
			seen[g] = true
		}
	}
	return strings.Join(problems, "; ")
}

func (c *Cluster) claim(r *replica) {
	for _, g := range r.res.GPUs() {
		c.claims[gpuKey{g.Node, g.Index}] = r.key
	}
	r.claimed = true
}

func (c *Cluster) release(r *replica) {
	if !r.claimed {
		return
	}
	for _, g := range r.res.GPUs() {
		k := gpuKey{g.Node, g.Index}
		if c.claims[k] == r.key {
			delete(c.claims, k)
		}
	}
	r.claimed = false
}

// advance takes r's due step.
func (c *Cluster) advance(j *simJob, r *replica, now time.Time) {
	r.due = now.Add(c.cfg.Step.D())
	switch r.phase {
	case phaseAccept:
		if r.state == cosmic.StatePending {
			r.state = cosmic.StateStarting
		}
		if r.disk {
			r.progress = &cosmic.Progress{Step: progressImport, Percent: 100}
			r.phase = phaseSchedule
			c.record(r, now, "import_disk", true, "root disk of replica %d kept from an earlier run: reusing it, no import", r.key.replica)
			break
		}
		if c.failNextImport {
			r.failImport, c.failNextImport = true, false
		}
		r.importPct = 0
		r.progress = &cosmic.Progress{Step: progressImport, Percent: 0}
		r.phase = phaseImport
		c.record(r, now, "import_disk", true, "importing root disk of replica %d from %s (%d GiB): 0%%", r.key.replica, imageOf(j.job), j.job.Spec.DiskGB)
	case phaseImport:
		r.importPct = min(r.importPct+importIncrement, 100)
		if r.failImport && r.importPct >= 50 {
			pct := r.importPct
			r.failImport, r.importPct = false, 0
			c.record(r, now, "import_disk", false, "import of the root disk of replica %d from %s failed at %d%% (simulated)", r.key.replica, imageOf(j.job), pct)
			c.fail(r, cosmic.ReasonImportFailed, fmt.Sprintf("import from %s failed at %d%%", imageOf(j.job), pct))
			return
		}
		r.progress = &cosmic.Progress{Step: progressImport, Percent: r.importPct}
		if r.importPct == 100 {
			c.disks++
			r.disk, r.diskID = true, fmt.Sprintf("%s-r%d-disk-%d", r.key.job, r.key.replica, c.disks)
			r.phase = phaseSchedule
			c.record(r, now, "import_disk", true, "root disk of replica %d imported: 100%%", r.key.replica)
		} else {
			c.record(r, now, "import_disk", true, "importing root disk of replica %d: %d%%", r.key.replica, r.importPct)
		}
	case phaseSchedule:
		for _, a := range r.res.Nodes {
			if n := c.byName[a.Node]; n == nil || n.lost {
				c.record(r, now, "schedule", false, "cannot schedule replica %d: node %s is not ready", r.key.replica, a.Node)
				c.fail(r, cosmic.ReasonVMIUnschedulable, fmt.Sprintf("node %s is not ready", a.Node))
				return
			}
		}
		r.vmis = r.vmis[:0]
		for i, a := range r.res.Nodes {
			v := vmi{name: vmiName(r.key, i), node: a.Node, gpus: a.GPUs}
			if c.runsAgents(j.job) {
				id, err := fabric.GenerateIdentity()
				if err != nil {
					c.fail(r, cosmic.ReasonVMICrashed, fmt.Sprintf("issue the agent's identity: %v", err))
					return
				}
				v.agent = id
			}
			r.vmis = append(r.vmis, v)
			c.record(r, now, "schedule", true, "VMI %s scheduled on node %s with GPUs %s (%d of %d)", v.name, v.node, formatGPUs(v.gpus), i+1, len(r.res.Nodes))
		}
		r.progress = &cosmic.Progress{Step: progressSchedule, Percent: 100}
		r.phase = phaseBoot
	case phaseBoot:
		if c.holdNextAgent {
			r.holdAgent, c.holdNextAgent = true, false
		}
		for _, v := range r.vmis {
			c.record(r, now, "boot", true, "VMI %s booted on node %s", v.name, v.node)
		}
		r.progress = &cosmic.Progress{Step: progressBoot, Percent: 100}
		r.phase = phaseReady
		if !r.holdAgent {
			// A held agent is not started at all: as in a VM whose image
			// cannot start one, nothing of the replica runs or serves (its
			// keys are bound all the same, from the scheduling on).
			c.startAgent(j, r, now)
		}
	case phaseReady:
		if r.holdAgent {
			// simHoldAgent: the agent never connects; the ork's agent
			// deadline fails the replica.
			if !r.heldNoted {
				r.heldNoted = true
				c.record(r, now, "agent", false, "the agent of replica %d does not connect (simHoldAgent): waiting for it", r.key.replica)
			}
			return
		}
		if !r.agentReady() {
			if r.exit != nil && r.exit.State == cosmic.StateFailed {
				// The agent will never be ready: a replica that cannot
				// run (a volume not copied in) fails before running.
				c.endCommand(r, now)
				return
			}
			// Running only once the agent is ready: look again next step
			// (or when it signals ready).
			if !r.agent.waiting {
				r.agent.waiting = true
				c.record(r, now, "agent", true, "waiting for the %s of replica %d to be ready", agentWhat(j.job), r.key.replica)
			}
			return
		}
		if r.agent != nil {
			c.record(r, now, "agent", true, "%s of replica %d ready", agentWhat(j.job), r.key.replica)
		}
		r.state, r.reason, r.progress = cosmic.StateRunning, nil, nil
		r.phase = phaseIdle
		c.record(r, now, "ready", true, "replica %d running on %s", r.key.replica, describeAllocs(r.res.Nodes))
		if r.exit != nil {
			r.phase = phaseExit // the command already ended: report running first
		}
	case phaseExit:
		if undelivered := c.reports.Undelivered(r.key.ref()); undelivered || r.exit == nil {
			// The ork has not heard that r runs yet: the end follows the
			// running it ends.
			if r.exit == nil {
				r.phase = phaseIdle
			}
			return
		}
		c.endCommand(r, now)
	case phaseDelete:
		c.remove(j, r, false, now)
		return
	case phaseShutdown:
		if !c.poweredOff(r, now) {
			return
		}
		r.exited = nil
		if r.then == phaseDelete {
			c.remove(j, r, false, now)
			return
		}
		c.stop(j, r, now)
		return
	default:
		return
	}
	c.mark(r)
}

// fail moves r to failed with a reason: its VMIs are gone and its GPUs
// released; an imported disk is kept.
func (c *Cluster) fail(r *replica, code cosmic.ReasonCode, detail string) {
	reason := cosmic.NewReason(code, detail)
	r.state, r.reason, r.progress = cosmic.StateFailed, &reason, nil
	r.failedAt = time.Now()
	r.phase = phaseIdle
	r.vmis = nil
	r.exit = nil
	c.stopAgent(r)
	c.release(r)
	c.mark(r)
}

// stop deletes r's VMIs and releases its GPUs; its disk is kept, unless
// the import was still running.
func (c *Cluster) stop(j *simJob, r *replica, now time.Time) {
	what := "no VMI to delete"
	if len(r.vmis) > 0 {
		what = describeVMIs(r.vmis) + " deleted"
	}
	if r.phase == phaseImport {
		r.importPct = 0
		what += "; the unfinished disk import was abandoned"
	}
	disk := "no root disk to keep"
	if r.disk {
		disk = "root disk kept"
	}
	r.vmis = nil
	r.exit = nil
	c.stopAgent(r)
	c.release(r)
	reason := cosmic.NewReason(cosmic.ReasonKilled, "")
	r.state, r.reason, r.progress, r.phase = cosmic.StateStopped, &reason, nil, phaseIdle
	c.record(r, now, "stop", true, "replica %d stopped: %s; %s; GPUs released", r.key.replica, what, disk)
	c.mark(r)
}

// restart replaces r's VMIs, keeping its disk and GPUs.
func (c *Cluster) restart(j *simJob, r *replica, now time.Time) {
	what := "no VMI yet"
	if len(r.vmis) > 0 {
		what = describeVMIs(r.vmis) + " deleted"
	}
	if r.phase == phaseImport {
		r.importPct = 0
	}
	r.vmis = nil
	r.exit, r.exitCode = nil, nil
	c.stopAgent(r)
	r.state, r.reason, r.progress = cosmic.StateRestarting, nil, nil
	r.phase, r.due = phaseAccept, now.Add(c.cfg.Step.D())
	c.record(r, now, "restart", true, "restarting replica %d: %s; root disk and GPUs kept", r.key.replica, what)
	c.mark(r)
}

// remove deletes r's VMIs and disk and forgets it; it is reported Gone.
func (c *Cluster) remove(j *simJob, r *replica, force bool, now time.Time) {
	var parts []string
	if len(r.vmis) > 0 {
		parts = append(parts, describeVMIs(r.vmis))
	}
	if r.disk || r.phase == phaseImport {
		parts = append(parts, "root disk")
	}
	what := "nothing left to delete"
	if len(parts) > 0 {
		what = strings.Join(parts, " and ") + " deleted"
		if force {
			what += " at once (force)"
		}
	}
	r.vmis = nil
	r.disk, r.diskID = false, ""
	r.phase = phaseIdle
	r.exit = nil
	c.stopAgent(r)
	c.release(r)
	c.record(r, now, "delete", true, "replica %d deleted: %s", r.key.replica, what)
	delete(j.replicas, r.key.replica)
	if len(j.replicas) == 0 {
		delete(c.jobs, r.key.job)
	}
	c.markGone(r.key)
}

// ---- names and text

func vmiName(k replicaKey, i int) string {
	id := k.job
	if len(id) > 8 {
		id = id[:8]
	}
	return fmt.Sprintf("job-%s-r%d-%d", id, k.replica, i)
}

func imageOf(j cosmic.Job) string {
	if j.Spec.Image != "" {
		return j.Spec.Image
	}
	return "the default image"
}

// formatGPUs writes GPU indices compactly: "0-7", "0,2,4-5".
func formatGPUs(gpus []int) string {
	var b strings.Builder
	for i := 0; i < len(gpus); {
		k := i
		for k+1 < len(gpus) && gpus[k+1] == gpus[k]+1 {
			k++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(gpus[i]))
		if k > i {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(gpus[k]))
		}
		i = k + 1
	}
	return b.String()
}

func describeAllocs(as []cosmic.NodeAlloc) string {
	parts := make([]string, len(as))
	for i, a := range as {
		parts[i] = fmt.Sprintf("node %s GPUs %s", a.Node, formatGPUs(a.GPUs))
	}
	return strings.Join(parts, " and ")
}

func describeVMIs(vs []vmi) string {
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = fmt.Sprintf("VMI %s on %s", v.name, v.node)
	}
	if len(parts) == 1 {
		return parts[0]
	}
	return strings.Join(parts, ", ")
}
