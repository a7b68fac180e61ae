package qemuworker

// What the worker reports: the agents' reports taken, the replicas' states, their system log.

import (
	"fmt"
	"reflect"
	"strconv"
	"time"

	"github.com/cosmicac/cosmicac/internal/agent/agentapi"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/joblog"
	"github.com/cosmicac/cosmicac/internal/worker"
)

// onAgentReport takes an agent's report: judgeAgentReport says what it
// does to its replica, which this carries out.
func (w *Worker) onAgentReport(peer fabric.PublicKey, a agentapi.WorkerReport) {
	w.mu.Lock()
	defer w.mu.Unlock()
	k, ok := w.agents[peer]
	r := w.replicas[k]
	if !ok || r == nil || k.job != a.JobID || k.replica != a.Replica || a.VMIIndex != 0 {
		w.log.Warn("agent report for another VM dropped", "agent", peer.Short(), "job_id", a.JobID, "replica", a.Replica)
		return
	}
	if r.adopted && !r.heard && r.vm != nil {
		r.heard = true
		w.emitLocked(r, "", true, fmt.Sprintf("the agent in the adopted VM reached the restarted worker (key %s)", peer.Short()))
	}
	v := judgeAgentReport(r.state, r.vm != nil, r.ready, a)
	if cp := agentapi.CopyProgress(a.Volumes); r.state == cosmic.StateStarting && !v.connected && !reflect.DeepEqual(cp, r.copying) {
		r.copying = cp
		w.queue.Set(r.key.ref(), w.reportLocked(r))
		w.queue.Push()
	}
	if v.failure != nil {
		r.reason, r.copying = v.failure, nil
		w.recordLocked(r, "agent", false, "the replica cannot run: %s", v.failure.Message)
		w.setLocked(r, cosmic.StateFailed)
		w.stopVMLocked(r)
		return
	}
	if v.connected {
		r.copying = nil
		r.ready = true
		if r.rec != nil {
			r.rec.Ready = true
			w.writeRecordLocked(r)
		}
		w.recordLocked(r, "agent_connected", true, "the agent in the VM connected (key %s)", peer.Short())
		w.setLocked(r, cosmic.StateRunning)
	}
	if v.exit != nil {
		code := *v.exit
		r.exit = &code
		if code == 0 {
			w.recordLocked(r, "command", true, "the job's command exited 0")
			w.setLocked(r, cosmic.StateStopped)
		} else {
			reason := cosmic.NewReason(cosmic.ReasonCommandFailed, "exit code "+strconv.Itoa(code))
			r.reason = &reason
			w.recordLocked(r, "command", false, "the job's command exited %d", code)
			w.setLocked(r, cosmic.StateFailed)
		}
		w.stopVMLocked(r)
	}
}

// agentVerdict is what an agent's report does to its replica.
type agentVerdict struct {
	// connected: the agent is ready for the first time: the replica runs.
	connected bool
	// exit: the job's command ended with this code: the replica is
	// stopped (0) or failed, and its VM stops.
	exit *int
	// failure: the agent says the replica cannot run (a volume that
	// could not be copied in): it fails, and its VM stops.
	failure *cosmic.Reason
}

// judgeAgentReport is the rule of an agent's report, pure: a replica
// whose VM is up and that is starting or running takes it; the agent's
// first ready runs it; a command's exit, once it runs, ends it.
func judgeAgentReport(state cosmic.State, vmUp, ready bool, a agentapi.WorkerReport) agentVerdict {
	var v agentVerdict
	if !vmUp || (state != cosmic.StateStarting && state != cosmic.StateRunning) {
		return v
	}
	if a.Failure != nil && !ready && !a.Ready {
		f := *a.Failure
		v.failure = &f
		return v
	}
	if a.Ready && !ready {
		v.connected, state = true, cosmic.StateRunning
	}
	if c := a.Command; c != nil && c.State == "exited" && c.ExitCode != nil && state == cosmic.StateRunning {
		code := *c.ExitCode
		v.exit = &code
	}
	return v
}

func (w *Worker) setLocked(r *replica, s cosmic.State) {
	r.state = s
	w.queue.Set(r.key.ref(), w.reportLocked(r))
	w.queue.SetCapacity()
	w.queue.Push()
}

func (w *Worker) reportLocked(r *replica) worker.ReplicaReport {
	rep := worker.ReplicaReport{Replica: r.key.replica, State: r.state, Reason: r.reason, ExitCode: r.exit, Observed: worker.Observe()}
	for _, n := range r.res.Nodes {
		rep.Nodes = append(rep.Nodes, n.Node)
	}
	if r.id != nil {
		rep.AgentKeys = []string{r.id.PublicKey().String()}
	}
	if r.job.ID != "" && holdsGPUs(r.state) {
		rep.Given = w.given(r.job, r.res)
	}
	if r.state == cosmic.StateStarting && r.copying != nil {
		p := *r.copying
		rep.Progress = &p
	} else if r.state == cosmic.StateStarting || r.state == cosmic.StateRestarting {
		if pct, ok := stepPercent[r.step]; ok {
			rep.Progress = &cosmic.Progress{Step: r.step, Percent: pct}
		}
	}
	return rep
}

// recordLocked writes a system record of the replica's log and keeps its
// step (the last one, which a deadline's reason names).
func (w *Worker) recordLocked(r *replica, step string, ok bool, format string, args ...any) {
	if step != "" && step != r.step {
		r.step = step
		if r.state == cosmic.StateStarting || r.state == cosmic.StateRestarting {
			w.queue.Set(r.key.ref(), w.reportLocked(r)) // the progress
			w.queue.Push()
		}
	}
	w.emitLocked(r, step, ok, fmt.Sprintf(format, args...))
}

// emitLocked writes a system record of the replica's log.
func (w *Worker) emitLocked(r *replica, step string, ok bool, line string) {
	if w.opts.Logs == nil {
		return
	}
	okv := ok
	w.opts.Logs.Emit(joblog.Record{Time: time.Now(), JobID: r.key.job, Team: r.job.Team, Replica: r.key.replica,
		Source: joblog.SourceSystem, Stream: "wrk-server-qemu", Step: step, OK: &okv, Line: line})
}
