package simcluster

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/cosmicac/cosmicac/internal/agent/agentapi"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/joblog"
)

// AgentRunner starts the instance agent of a gpu-container replica when its
// VMIs boot, as cloud-init starts `cosmicac agent instance` in a real VMI.
// The platform provides it (internal/platform), so that this package stays
// free of the agent: the simulated rack only sees three signals.
//
// Start must not block. Its handle's Ready is closed once the agent is
// ready (the replica is reported running only then); Done delivers the
// job's command's outcome once, when it exits (it never delivers for a job
// without a command); Stop ends the agent (and the command) without
// blocking, and is called when the replica's VMIs go away (kill, restart,
// crash, delete, the command's end). After Stop, Done is ignored. Exited,
// if set, is closed once a stopped agent has ended (it pushes the job's RW
// volumes first): a kill or a graceful delete keeps the replica's VMIs
// and GPUs until then (Config.StopGrace at most), as a VM powering off.
//
// id is the identity the rack issued the agent (the replica reports its
// public key from the VMI's scheduling on, so the platform may bind it
// before the agent starts).
//
// boot is what the rack gives each of its agents besides its identity, as
// a VMI's bootstrap does.
type AgentRunner interface {
	Start(ctx context.Context, job cosmic.Job, replica int, id *fabric.Identity, boot Boot) AgentHandle
}

// Boot is what the rack gives its agents, as a VMI's bootstrap does: the
// rack's worker (they report to it; zero for a rack not on the fabric)
// and where their job log records go (the rack's own sink: in process,
// the records a real agent sends the monitor).
type Boot struct {
	Worker Peer
	Logs   joblog.Sink
	// Progress tells the rack what a replica's agent does before it is
	// ready (copying the job's volumes in: cosmic.StepCopyVolumes; nil
	// when it is done), as its reports tell a rack's worker: the
	// replica's progress while it starts.
	Progress func(job string, replica int, p *cosmic.Progress)
	// VolumesDir is where the rack keeps its standalone volumes
	// (Config.VolumesDir): volume NAME of team TEAM is the directory
	// VolumesDir/TEAM/NAME, made when first mounted.
	VolumesDir string
}

// Peer is a fabric peer as a VMI's bootstrap names it: its key and
// addresses.
type Peer struct {
	Key   fabric.PublicKey
	Addrs []string
}

// CommandOutcome is how a replica's command ended: State stopped (exit 0)
// or failed (Reason command_failed, with the code and the last lines).
// ExitCode is nil when there was no exit code (the agent itself failed).
type CommandOutcome struct {
	State    cosmic.State
	Reason   *cosmic.Reason
	ExitCode *int
}

// InferenceRunner starts the inference agents of a managed-inference
// replica when its VMIs boot, one per VMI, as cloud-init starts `cosmicac
// agent inference` in each. The platform provides it (internal/platform).
//
// StartInference must not block; boot is as for AgentRunner. The handle's Ready is closed once the
// replica's head agent is ready (its runtime answered a real probe): the
// replica is reported running only then. Done delivers a failure of the
// agents (never a normal end); Stop ends them gracefully (they withdraw
// their announcements) and is called when the VMIs go away (kill,
// restart, delete); Crash, if set, ends them as dying VMIs would (no
// withdrawal, connections cut) and is called by the simCrash fault before
// the replica fails.
type InferenceRunner interface {
	StartInference(ctx context.Context, job cosmic.Job, replica int, vmis []VMI, boot Boot) AgentHandle
}

// VMI is one of a replica's VMIs as an InferenceRunner sees it: its name
// (its DNS name in the replica), its node and its GPUs there, and the
// identity the rack issued its agent.
type VMI struct {
	Name     string
	Node     string
	GPUs     []int
	Identity *fabric.Identity
}

// AgentHandle is what an AgentRunner or an InferenceRunner returns for a
// replica's agents.
type AgentHandle struct {
	Ready <-chan struct{}
	Done  <-chan CommandOutcome
	Stop  func()
	Crash func()
	// Exited is closed once the agents have ended after Stop (nil: the
	// rack does not wait for them).
	Exited <-chan struct{}
}

// agentRun is a replica's running agent.
type agentRun struct {
	gen     uint64
	ready   <-chan struct{}
	stop    func()
	crash   func() // nil: stop
	exited  <-chan struct{}
	isReady bool
	waiting bool // the "waiting for the agent" record was written
}

// startAgent starts r's agent, if the cluster has a runner for the job's
// type: the instance agent of a gpu-container replica, the inference
// agents (one per VMI) of a managed-inference replica.
func (c *Cluster) startAgent(j *simJob, r *replica, now time.Time) {
	c.stopAgent(r)
	ctx := c.runCtx
	if ctx == nil {
		ctx = context.Background()
	}
	var h AgentHandle
	switch {
	case c.agents != nil && j.job.Spec.Type == cosmic.TypeGPUContainer:
		h = c.agents.Start(ctx, j.job, r.key.replica, r.vmis[0].agent, c.boot())
		c.record(r, now, "agent", true, "instance agent of replica %d started in VMI %s", r.key.replica, vmiName(r.key, 0))
	case c.inference != nil && j.job.Spec.Type == cosmic.TypeManagedInference:
		vmis := make([]VMI, len(r.vmis))
		for i, v := range r.vmis {
			vmis[i] = VMI{Name: v.name, Node: v.node, GPUs: append([]int(nil), v.gpus...), Identity: v.agent}
		}
		h = c.inference.StartInference(ctx, j.job, r.key.replica, vmis, c.boot())
		c.record(r, now, "agent", true, "inference agents of replica %d started in %s", r.key.replica, describeVMIs(r.vmis))
	default:
		return
	}
	c.agentGen++
	gen := c.agentGen
	ready, done := h.Ready, h.Done
	r.agent = &agentRun{gen: gen, ready: ready, stop: h.Stop, crash: h.Crash, exited: h.Exited}
	if done != nil {
		k := r.key
		go func() {
			select {
			case o, ok := <-done:
				if ok {
					c.commandExited(k, gen, o)
				}
			case <-ctx.Done():
			}
		}()
	}
	if ready != nil {
		go func() {
			select {
			case <-ready:
				signal(c.wake)
			case <-ctx.Done():
			}
		}()
	}
}

// runsAgents says whether the cluster runs agents for the job's type.
func (c *Cluster) runsAgents(j cosmic.Job) bool {
	switch j.Spec.Type {
	case cosmic.TypeGPUContainer:
		return c.agents != nil
	case cosmic.TypeManagedInference:
		return c.inference != nil
	}
	return false
}

// agentWhat names a job's replica agent in records.
func agentWhat(j cosmic.Job) string {
	if j.Spec.Type == cosmic.TypeManagedInference {
		return "head inference agent"
	}
	return "instance agent"
}

// crashAgent ends r's agent as a crashing VMI would, if it runs; its
// outcome is ignored from now.
func (c *Cluster) crashAgent(r *replica) {
	if r.agent != nil && r.agent.crash != nil {
		r.agent.crash()
		r.agent = nil
	}
	c.stopAgent(r)
}

// shutDown tells r's agent to stop, as a power-off tells a VM's systemd,
// and has r wait in phaseShutdown, its VMIs and GPUs kept, until the agent
// has ended (it pushes the job's RW volumes first) or StopGrace has
// passed; then r is stopped (then phaseIdle) or deleted (phaseDelete). It
// answers false, doing nothing, when r has no agent to wait for.
func (c *Cluster) shutDown(r *replica, then phase, now time.Time) bool {
	if r.agent == nil || r.agent.exited == nil || len(r.vmis) == 0 {
		return false
	}
	exited := r.agent.exited
	c.stopAgent(r)
	// The GPUs stay claimed until the VMs are off, as a rack that passes
	// them through keeps them; the ork keeps them reserved until then
	// (docs/data.md).
	r.exited, r.then = exited, then
	r.phase, r.due, r.deadline = phaseShutdown, now.Add(c.cfg.Step.D()), now.Add(c.cfg.StopGrace.D())
	ctx := c.runCtx
	if ctx == nil {
		ctx = context.Background()
	}
	go func() {
		select {
		case <-exited:
			signal(c.wake)
		case <-ctx.Done():
		}
	}()
	c.record(r, now, "stop", true, "powering off %s: the agent stops, pushing the job's RW volumes first (up to %v)", describeVMIs(r.vmis), c.cfg.StopGrace.D())
	return true
}

// poweredOff says whether r's shutdown has ended: its agent has exited,
// or its grace has passed (then it says so).
func (c *Cluster) poweredOff(r *replica, now time.Time) bool {
	select {
	case <-r.exited:
		return true
	default:
	}
	if now.Before(r.deadline) {
		return false
	}
	c.record(r, now, "stop", false, "%s did not power off within %v: stopped at once", describeVMIs(r.vmis), c.cfg.StopGrace.D())
	return true
}

// stopAgent stops r's agent, if it runs; its outcome is ignored from now.
func (c *Cluster) stopAgent(r *replica) {
	if r.agent == nil {
		return
	}
	if r.agent.stop != nil {
		r.agent.stop()
	}
	r.agent = nil
}

// agentReady says whether r may be reported running: it has no agent, or
// its agent is ready.
func (r *replica) agentReady() bool {
	a := r.agent
	if a == nil || a.isReady || a.ready == nil {
		return true
	}
	select {
	case <-a.ready:
		a.isReady = true
		return true
	default:
		return false
	}
}

// commandExited takes the outcome of the command of r's agent generation
// gen: r ends at its next step once running has been delivered.
func (c *Cluster) commandExited(k replicaKey, gen uint64, o CommandOutcome) {
	c.mu.Lock()
	defer c.mu.Unlock()
	j := c.jobs[k.job]
	if j == nil {
		return
	}
	r := j.replicas[k.replica]
	if r == nil || r.agent == nil || r.agent.gen != gen {
		return // a stopped agent's command: its end is no news
	}
	r.exit = &o
	if r.phase == phaseIdle && r.state == cosmic.StateRunning {
		r.phase, r.due = phaseExit, time.Now()
	}
	// Before running, phaseReady moves on to phaseExit, or ends a replica
	// whose agent failed without being ready.
	signal(c.wake)
}

// endCommand ends r after its command exited: the VMIs are deleted and the
// GPUs released (the root disk is kept), the agent stopped, and r is
// stopped (exit 0) or failed with the outcome's reason and exit code.
func (c *Cluster) endCommand(r *replica, now time.Time) {
	o := *r.exit
	r.exit = nil
	c.stopAgent(r)
	what := "no VMI"
	if len(r.vmis) > 0 {
		what = describeVMIs(r.vmis) + " deleted"
	}
	r.vmis = nil
	c.release(r)
	r.state, r.reason, r.progress, r.phase = o.State, o.Reason, nil, phaseIdle
	if r.state != cosmic.StateFailed {
		r.state = cosmic.StateStopped
	}
	r.exitCode = o.ExitCode
	code := "no exit code"
	if o.ExitCode != nil {
		code = fmt.Sprintf("exit code %d", *o.ExitCode)
	}
	detail := ""
	if o.Reason != nil && o.Reason.Message != "" {
		detail = ": " + strings.TrimSpace(o.Reason.Message)
	}
	c.record(r, now, "command", r.state == cosmic.StateStopped, "the command of replica %d ended (%s), replica %s%s; %s; GPUs released",
		r.key.replica, code, r.state, detail, what)
}

// ServeAgentReports registers the agents' status events (agent.report,
// inference.report) on the rack's node r: the simulated rack follows its
// agents in process (AgentRunner, InferenceRunner), so they are only
// logged. A standalone rack, which runs no agents, serves them too, as
// every rack worker does (internal/trust).
func ServeAgentReports(r fabric.Registrar, log *slog.Logger) {
	agentapi.ServeWorkerReports(r, func(peer fabric.PublicKey, rep agentapi.WorkerReport) {
		log.Debug("agent report", "agent", peer.Short(), "job_id", rep.JobID, "replica", rep.Replica, "vmi_index", rep.VMIIndex, "ready", rep.Ready)
	})
}

// boot is the bootstrap the rack gives its agents.
func (c *Cluster) boot() Boot {
	return Boot{Worker: c.worker, Logs: c.logs, Progress: c.agentProgress, VolumesDir: c.cfg.VolumesDir}
}

// agentProgress takes what a starting replica's agent says it does: the
// replica's progress until it runs.
func (c *Cluster) agentProgress(job string, replica int, p *cosmic.Progress) {
	c.mu.Lock()
	defer c.mu.Unlock()
	j := c.jobs[job]
	if j == nil {
		return
	}
	r := j.replicas[replica]
	if r == nil || r.agent == nil || r.state != cosmic.StateStarting || p == nil {
		return
	}
	cp := *p
	r.progress = &cp
	c.mark(r)
}
