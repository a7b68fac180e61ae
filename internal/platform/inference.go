package platform

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/inferagent"
	"github.com/cosmicac/cosmicac/internal/inferproxy"
	"github.com/cosmicac/cosmicac/internal/joblog"
	"github.com/cosmicac/cosmicac/internal/simcluster"
	"github.com/cosmicac/cosmicac/internal/simruntime"
)

// SimRuntime is the simulated runtime the inference agents of the
// simulated rack start (docs/inference.md, "The simulated runtime"): a
// little time to first token and between tokens, so that streams are
// streams, and nothing slower.
var SimRuntime = simruntime.Config{TTFT: 20 * time.Millisecond, InterTokenDelay: 2 * time.Millisecond}

func (c Config) simRuntime() simruntime.Config {
	if c.SimRuntime.TTFT == 0 && c.SimRuntime.InterTokenDelay == 0 && c.SimRuntime.LoadTime == 0 {
		return SimRuntime
	}
	return c.SimRuntime
}

// simInference runs the inference agents of the simulated rack's
// managed-inference replicas in this process: one inferagent.Agent per
// VMI, with the bootstrap the worker's cloud-init gives a VMI
// (docs/inference.md): a fresh key pair, the job, the placement, and the
// peers: the agents' directory (announce), proxy-inference (it reaches
// the agent over the connection the agent opens) and the worker
// (inference.report events). Each agent runs the simulated runtime.
//
// An agent's key gets full access on the agents' directory (announce:
// the only place it may write) and read-only access on the worker (its
// reports); proxy-inference gives any key read-only access (ping), and
// trusts an agent because the directory lists it. It is admitted nowhere
// else, and taken off and revoked when its agent stops.
type simInference struct {
	log     *slog.Logger
	logs    joblog.Sink
	peers   []inferagent.Peer
	runtime simruntime.Config

	full, readOnly []*fabric.AllowList
	nodes          func() []*fabric.Node

	mu     sync.Mutex
	agents map[string][]*inferagent.Agent // "job/replica" → the live agents, by VMI index
	wg     sync.WaitGroup
}

func slotKey(jobID string, replica int) string { return fmt.Sprintf("%s/%d", jobID, replica) }

// StartInference implements simcluster.InferenceRunner.
func (s *simInference) StartInference(ctx context.Context, job cosmic.Job, replica int, vmis []simcluster.VMI) simcluster.AgentHandle {
	done := make(chan simcluster.CommandOutcome, 1)
	var once sync.Once
	fail := func(err error) {
		once.Do(func() {
			r := cosmic.NewReason(cosmic.ReasonVMICrashed, "inference agent: "+err.Error())
			done <- simcluster.CommandOutcome{State: cosmic.StateFailed, Reason: &r}
		})
	}
	if job.Spec.Inference == nil || len(vmis) == 0 {
		fail(fmt.Errorf("job %s has no inference spec or no VMI", job.ID))
		return simcluster.AgentHandle{Done: done, Stop: func() {}}
	}
	hosts := make([]string, len(vmis))
	for i, v := range vmis {
		hosts[i] = v.Name
	}
	actx, cancel := context.WithCancel(ctx)
	var agents []*inferagent.Agent
	for i, v := range vmis {
		id, err := fabric.GenerateIdentity()
		if err != nil {
			cancel()
			fail(err)
			return simcluster.AgentHandle{Done: done, Stop: func() {}}
		}
		pl := inferagent.Placement{VMIIndex: i, VMICount: len(vmis), GPUs: len(v.GPUs)}
		if len(vmis) > 1 {
			pl.Hosts = hosts
		}
		log := s.log.With("job_id", job.ID, "replica", replica, "vmi", i)
		a := inferagent.New(inferagent.Config{JobID: job.ID, Team: job.Team, Replica: replica, Placement: pl,
			Inference: *job.Spec.Inference, Identity: id, Peers: s.peers,
			Launcher: &inferagent.SimLauncher{Config: s.runtime}, Logs: s.logs,
			HealthPoll: 20 * time.Millisecond, ProbeInterval: 2 * time.Second, AnnounceTTL: 6 * time.Second,
			OnChange: func(st inferagent.Status) {
				log.Debug("inference agent", "ready", st.Ready, "error", st.Error, "restarts", st.RuntimeRestarts)
			}}, log)
		key := id.PublicKey()
		s.admit(key)
		agents = append(agents, a)
		s.wg.Go(func() {
			defer s.remove(key)
			if err := a.Run(actx); err != nil && actx.Err() == nil {
				log.Error("inference agent stopped", "err", err)
				fail(err)
			}
		})
	}
	k := slotKey(job.ID, replica)
	s.mu.Lock()
	s.agents[k] = agents
	s.mu.Unlock()
	forget := func() {
		s.mu.Lock()
		if cur := s.agents[k]; len(cur) > 0 && cur[0] == agents[0] {
			delete(s.agents, k)
		}
		s.mu.Unlock()
	}
	return simcluster.AgentHandle{
		Ready: agents[0].Ready(), // the head's: the replica is ready when the head is
		Done:  done,
		Stop:  func() { forget(); cancel() },
		Crash: func() {
			forget()
			for _, a := range agents {
				a.Crash()
			}
			cancel()
		},
	}
}

func (s *simInference) admit(key fabric.PublicKey) {
	for _, l := range s.full {
		l.Allow(key)
	}
	for _, l := range s.readOnly {
		l.AllowReadOnly(key)
	}
}

// remove takes a stopped agent's key off every list and closes its
// connections.
func (s *simInference) remove(key fabric.PublicKey) {
	for _, l := range append(append([]*fabric.AllowList{}, s.full...), s.readOnly...) {
		l.Remove(key)
	}
	for _, n := range s.nodes() {
		if n != nil {
			n.Revoke(key)
		}
	}
}

// Agents returns the live inference agents of a job's replica, by VMI
// index (nil when none runs).
func (s *simInference) Agents(jobID string, replica int) []*inferagent.Agent {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*inferagent.Agent(nil), s.agents[slotKey(jobID, replica)]...)
}

// Wait waits for every agent's goroutine (after their contexts ended).
func (s *simInference) Wait() { s.wg.Wait() }

// InferenceAgents returns the inference agents the simulated rack runs for
// a job's replica, by VMI index, while they run.
func (p *Platform) InferenceAgents(jobID string, replica int) []*inferagent.Agent {
	if p.inference == nil {
		return nil
	}
	return p.inference.Agents(jobID, replica)
}

// ModelHealth adapts the in-process proxy to appnode.ModelHealthSource: the
// health of an inference job's model as the proxy sees it.
type proxyHealth struct{ p *inferproxy.Proxy }

func (h proxyHealth) ModelHealth(ctx context.Context, jobID string) (cosmic.ModelHealth, error) {
	mh, err := h.p.JobHealth(ctx, jobID)
	if err != nil {
		return cosmic.ModelUnknown, err
	}
	return cosmic.ModelHealth(mh.Health), nil
}
