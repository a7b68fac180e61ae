package platform

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/cosmicac/cosmicac/internal/agent/agentapi"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/inferagent"
	"github.com/cosmicac/cosmicac/internal/inferagent/simlaunch"
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
// VMI, with the identity the rack issued it and the bootstrap the worker's
// cloud-init gives a VMI (docs/inference.md): the job, the placement, and
// the peers: the agents' directory (announce), proxy-inference (it reaches
// the agent over the connection the agent opens), the worker
// (inference.report events) and the monitor. Each agent runs the
// simulated runtime. What each peer admits it to is internal/trust's
// declaration; proxy-inference routes to it only because the ork binds its
// key as its replica's head (VMI 0).
type simInference struct {
	agentRunner
	peers   []inferagent.Peer
	runtime simruntime.Config
	// llamaServer and modelDir run the llama.cpp runtime's replicas: a
	// real llama-server on this host each ("": the rack has none).
	llamaServer, modelDir string
	// modelCache is this host's cache of models taken from datastores
	// (DATA_DIR/cache/models): the simulated rack's nodes share the host.
	modelCache string

	mu     sync.Mutex
	agents map[string][]*inferagent.Agent // "job/replica" → the live agents, by VMI index
	wg     sync.WaitGroup
}

func slotKey(jobID string, replica int) string { return fmt.Sprintf("%s/%d", jobID, replica) }

// StartInference implements simcluster.InferenceRunner.
func (s *simInference) StartInference(ctx context.Context, job cosmic.Job, replica int, vmis []simcluster.VMI, boot simcluster.Boot) simcluster.AgentHandle {
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
	// The llama.cpp runtime is the real engine, one process on this host
	// (its replica has one VMI), with none of the job's variables (the host
	// is the operator's). It serves on a unix socket in a directory of its
	// own (0700), not on the host's loopback, where any local user and any
	// web page the operator's browser opens could reach it (llama-server
	// allows every CORS origin).
	var llamaSocket string
	if job.Spec.Inference.Runtime == cosmic.RuntimeLlamaCPP {
		dir, err := os.MkdirTemp("", "cosmicac-llama-")
		if err != nil {
			fail(fmt.Errorf("a directory for llama-server's socket: %w", err))
			return simcluster.AgentHandle{Done: done, Stop: func() {}}
		}
		llamaSocket = filepath.Join(dir, "runtime.sock")
	}
	hosts := make([]string, len(vmis))
	for i, v := range vmis {
		hosts[i] = v.Name
	}
	actx, cancel := context.WithCancel(ctx)
	var (
		agents []*inferagent.Agent
		keys   []fabric.PublicKey
	)
	for _, v := range vmis {
		if v.Identity == nil {
			cancel()
			fail(fmt.Errorf("the rack issued VMI %s no identity", v.Name))
			return simcluster.AgentHandle{Done: done, Stop: func() {}}
		}
		keys = append(keys, v.Identity.PublicKey())
	}
	unbind := s.bindLocal(job, replica, keys)
	var running sync.WaitGroup
	for i, v := range vmis {
		id := v.Identity
		pl := inferagent.Placement{VMIIndex: i, VMICount: len(vmis), GPUs: len(v.GPUs), ModelCache: s.modelCache}
		if len(vmis) > 1 {
			pl.Hosts = hosts
		}
		var launcher inferagent.Launcher = &simlaunch.Launcher{Config: s.runtime}
		if llamaSocket != "" {
			pl.Socket, pl.LlamaServer, pl.ModelDir = llamaSocket, s.llamaServer, s.modelDir
			launcher = inferagent.ExecLauncher{}
		}
		log := s.log.With("component", inferagent.Component, "job_id", job.ID, "replica", replica, "vmi_index", i)
		a := inferagent.New(inferagent.Config{JobID: job.ID, Team: job.Team, Replica: replica, Placement: pl,
			Inference: *job.Spec.Inference, Identity: id, Peers: withWorker(s.peers, boot.Worker),
			Launcher: launcher, Logs: boot.Logs,
			HealthPoll: 20 * time.Millisecond, AnnounceTTL: 6 * time.Second,
			OnChange: func(st agentapi.InferenceStatus) {
				log.Debug("inference agent", "ready", st.Ready, "err", st.Error, "restarts", st.RuntimeRestarts)
			}}, log)
		agents = append(agents, a)
		running.Add(1)
		s.wg.Go(func() {
			defer running.Done()
			if !s.whenBound(actx, job, replica, keys) {
				return
			}
			if err := a.Run(actx); err != nil && actx.Err() == nil {
				log.Error("inference agent stopped", "err", err)
				fail(err)
			}
		})
	}
	s.wg.Go(func() {
		running.Wait()
		unbind()
		if llamaSocket != "" {
			os.RemoveAll(filepath.Dir(llamaSocket))
		}
	})
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

// modelDir is the llama.cpp runtime's model directory on this host.
func (c Config) modelDir() string {
	if c.ModelDir != "" {
		return c.ModelDir
	}
	return filepath.Join(c.DataDir, "models")
}
