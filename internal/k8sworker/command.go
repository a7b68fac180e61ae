package k8sworker

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	virtv1 "kubevirt.io/api/core/v1"

	"github.com/cosmicac/cosmicac/internal/agent/agentapi"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/worker"
)

// The job's command (issue 7, docs/k8s-worker.md "Agents"). Each VMI's
// instance agent runs the spec's command and reports its exit
// (agentapi.CommandStatus in its agent.report events and agent.status
// answers). The worker maps it to the replica's state as the simulated
// rack does: once every VMI's command exited 0, the replica's VMIs are
// deleted (its root disks and Secrets kept, as by Stop) and it is reported
// stopped with exit code 0; a non-zero exit of any VMI's command fails the
// replica at once (reason command_failed with the code and the last lines
// of output; its VMIs deleted) with that exit code. The outcome is kept on
// the replica's carrier (AnnotationExitCode, with AnnotationDesired stop
// or failed and AnnotationFailure), so a restarted worker keeps reporting
// it.
//
// The ork takes a stopped report with an exit code as the command's end
// only for a replica it has seen running, and the worker sends only the
// latest report of a replica: an exit 0 is therefore acted on only once a
// running report has been delivered to the ork.

// DefaultAgentPoll is how often the worker calls agent.status on each
// connected agent by default.
const DefaultAgentPoll = 10 * time.Second

// agentTick is how often the agent loop looks at pending exits and at whom
// to poll.
var agentTick = 500 * time.Millisecond

// exitSeen is the end of one VMI's command, as reported, and when the
// worker learnt it.
type exitSeen struct {
	cmd agentapi.CommandStatus
	at  time.Time
}

// noteCommandLocked records what a report says of slot's command (h.mu
// held) and reports whether it is an exit not known before. Reports may
// arrive out of order: a running report of the run whose exit is known
// is stale; one of another run (the VMI's replacement) clears it.
func (h *agentHub) noteCommandLocked(slot agentSlot, c *agentapi.CommandStatus) bool {
	if c == nil {
		return false
	}
	prev, had := h.exits[slot]
	if _, _, done := c.Outcome(); !done {
		if had && !prev.cmd.StartedAt.Equal(c.StartedAt) {
			delete(h.exits, slot)
		}
		return false
	}
	if had && prev.cmd.StartedAt.Equal(c.StartedAt) {
		return false
	}
	h.exits[slot] = exitSeen{cmd: *c, at: h.now()}
	return true
}

func (h *agentHub) kick() {
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// delivered notes the states the ork was told of replicas.
func (h *agentHub) delivered(states map[replicaKey]cosmic.State) {
	if h == nil {
		return
	}
	ran := false
	h.mu.Lock()
	for k, s := range states {
		if s == cosmic.StateRunning {
			h.ran[k], ran = true, true
		} else {
			delete(h.ran, k)
		}
	}
	h.mu.Unlock()
	if ran {
		h.kick()
	}
}

// dropExits forgets the exits recorded for replica k.
func (h *agentHub) dropExits(k replicaKey) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.exits {
		if s.replicaKey == k {
			delete(h.exits, s)
		}
	}
}

// agentLoop polls the agents' status and acts on their commands' ends
// until the worker stops (its queue shuts down). It starts with the first
// reconciliation.
func (w *Worker) agentLoop() {
	h := w.agents
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	t := time.NewTicker(agentTick)
	defer t.Stop()
	for !w.queue.ShuttingDown() {
		w.pollAgents(ctx)
		w.endCommands(ctx)
		select {
		case <-t.C:
		case <-h.wake:
		}
	}
}

// pollAgents calls agent.status on each connected agent not asked for
// PollInterval (at once for one not asked since the worker started) and
// takes the answer as a report. An agent without agent.status (the
// inference agent) is not asked again.
func (w *Worker) pollAgents(ctx context.Context) {
	h := w.agents
	now := w.now()
	var due []fabric.PublicKey
	h.mu.Lock()
	for pk := range h.slots {
		if now.Sub(h.polled[pk]) >= h.opts.PollInterval {
			due = append(due, pk)
		}
	}
	h.mu.Unlock()
	due = slices.DeleteFunc(due, func(pk fabric.PublicKey) bool { return !h.opts.Node.Connected(pk) })
	h.mu.Lock()
	for _, pk := range due {
		h.polled[pk] = now
	}
	h.mu.Unlock()
	var wg sync.WaitGroup
	for _, pk := range due {
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			st, err := agentapi.GetStatus(cctx, h.opts.Node, pk)
			if err != nil {
				if fabric.ErrorCode(err) == fabric.CodeNotFound {
					h.mu.Lock()
					if _, ok := h.polled[pk]; ok {
						h.polled[pk] = now.Add(100 * 365 * 24 * time.Hour)
					}
					h.mu.Unlock()
				}
				w.log.Debug("agent.status", "agent", pk.Short(), "err", err)
				return
			}
			w.onAgentReport(pk, agentapi.WorkerReport{JobID: st.JobID, Replica: st.Replica, VMIIndex: st.VMIIndex, Ready: st.Ready, Command: st.Command, Volumes: st.Volumes, Failure: st.Failure})
		})
	}
	wg.Wait()
}

// endCommands acts on the recorded exits.
func (w *Worker) endCommands(ctx context.Context) {
	h := w.agents
	h.mu.Lock()
	keys := map[replicaKey]bool{}
	for s := range h.exits {
		keys[s.replicaKey] = true
	}
	h.mu.Unlock()
	for k := range keys {
		w.endCommand(ctx, k)
	}
}

// endCommand stops or fails replica k if its command ended on its current
// VMIs (see the top of this file); exits of VMIs that are replaced, or of
// a replica that no longer runs, are dropped.
func (w *Worker) endCommand(ctx context.Context, k replicaKey) {
	if !w.health.healthy() {
		return
	}
	h := w.agents
	m := w.mem(k)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.deleting {
		h.dropExits(k)
		return
	}
	o, err := w.observe(ctx, k)
	if err != nil {
		return
	}
	st, ok := m.current(o.state)
	if !ok {
		return // not applied yet
	}
	if st.Desired != desiredRun || len(st.Replacing) > 0 {
		h.dropExits(k)
		return
	}
	n := len(st.Reservation.Nodes)
	vmis := make([]*virtv1.VirtualMachineInstance, n)
	for i := range o.vmis {
		v := &o.vmis[i]
		if x := vmiIndex(v); x >= 0 && x < n && v.DeletionTimestamp == nil {
			vmis[x] = v
		}
	}
	var failed *exitSeen
	failedAt, zeros := 0, 0
	h.mu.Lock()
	for i, v := range vmis {
		slot := agentSlot{replicaKey: k, vmi: i}
		e, ok := h.exits[slot]
		if ok && v != nil && e.at.Before(v.CreationTimestamp.Time) {
			delete(h.exits, slot) // an earlier VMI's
			continue
		}
		if !ok || v == nil {
			continue
		}
		if *e.cmd.ExitCode != 0 {
			if failed == nil {
				failed, failedAt = &e, i
			}
			continue
		}
		zeros++
	}
	ran := h.ran[k]
	h.mu.Unlock()

	next := st
	next.Replacing = nil
	switch {
	case failed != nil:
		_, reason, _ := failed.cmd.Outcome()
		if n > 1 {
			r := cosmic.NewReason(reason.Code, fmt.Sprintf("VMI %s: %s", VMIName(k.job, k.replica, failedAt), reason.Message))
			reason = &r
		}
		code := *failed.cmd.ExitCode
		next.Desired, next.Failure, next.ExitCode = desiredFailed, reason, &code
	case n > 0 && zeros == n && ran:
		next.Desired, next.Failure, next.ExitCode = desiredStop, nil, new(0)
	default:
		return // still running, or running not told to the ork yet
	}
	clear(m.seen)
	if err := w.writeState(ctx, k, m, next); err != nil {
		w.log.Warn("record the end of the command", "replica", k.String(), "err", err)
		return
	}
	h.dropExits(k)
	// What is left is deleted by the reconciliation (the VMIs of a
	// replica that holds no GPUs).
	if err := w.deleteReplicaVMIs(ctx, k, false); err != nil {
		w.log.Warn("delete the VMIs of an ended command", "replica", k.String(), "err", err)
	}
	what := "no VMI to delete"
	if len(o.vmis) > 0 {
		what = describeVMIs(o.vmis) + " deleted"
	}
	state, detail := cosmic.StateStopped, ""
	if next.Desired == desiredFailed {
		state, detail = cosmic.StateFailed, ": "+next.Failure.Message
	}
	w.record(k, m, w.now(), "command", state == cosmic.StateStopped, "the command of replica %d ended (exit code %d), replica %s%s; %s; root disk kept, GPUs released",
		k.replica, *next.ExitCode, state, detail, what)
	w.queue.Add(k)
}

// withExit adds the command's outcome to the report of a replica it
// ended: stopped with exit code 0 (no reason: not a kill), or failed with
// the exit code.
func withExit(m *replicaMem, rep worker.ReplicaReport, o observation) worker.ReplicaReport {
	if rep.Gone || m.deleting {
		return rep
	}
	st, ok := m.current(o.state)
	if !ok || st.ExitCode == nil {
		return rep
	}
	code := *st.ExitCode
	switch {
	case st.Desired == desiredStop && rep.State == cosmic.StateStopped:
		rep.Reason, rep.ExitCode = nil, &code
	case st.Desired == desiredFailed && rep.State == cosmic.StateFailed:
		rep.ExitCode = &code
	}
	return rep
}
