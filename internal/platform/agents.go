package platform

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"

	"github.com/cosmicac/cosmicac/internal/agent"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/joblog"
	"github.com/cosmicac/cosmicac/internal/simcluster"
)

// simAgents runs the instance agents of the simulated rack's gpu-container
// replicas in this process: one agent.Agent (a goroutine) per replica, with
// the bootstrap a VMI's agent gets from the worker (docs/shell.md): its own
// key pair, the job, and the platform peers it may talk to. It implements
// simcluster.AgentRunner.
//
// Each agent's key is admitted where the agent needs it, and no further
// (an agent's key lives inside a user's VM, so it is the user's): full
// access on the agents' directory (announce), read-only on the worker
// (its agent.report events) and the app-node (the agent dials it and the
// app-node opens shells back over that connection). On the ork and the
// monitor it is not admitted at all: full access there would let a VM
// create, kill or delete any team's job, or write any job's logs; the
// agent's records go straight into the platform's log sink instead. A
// key is taken off and revoked when its agent stops.
type simAgents struct {
	log     *slog.Logger
	logs    joblog.Sink
	dataDir string
	sshPort int // agent.Config.SSHPort

	// The peers of the bootstrap.
	peers []agent.Peer
	// Where each role admits the agents' keys.
	full, readOnly []*fabric.AllowList
	nodes          func() []*fabric.Node // to revoke a stopped agent

	mu   sync.Mutex
	keys map[agentSlot]fabric.PublicKey // the live agents
	wg   sync.WaitGroup
}

type agentSlot struct {
	job     string
	replica int
}

// Key returns the key of the agent the platform runs for a job's replica.
func (s *simAgents) Key(jobID string, replica int) (fabric.PublicKey, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k, ok := s.keys[agentSlot{jobID, replica}]
	return k, ok
}

// Verify is appnode.FabricShells.Verify: key is the live agent of the
// job's replica.
func (s *simAgents) Verify(jobID string, replica int, key fabric.PublicKey) bool {
	k, ok := s.Key(jobID, replica)
	return ok && k == key
}

// Start implements simcluster.AgentRunner.
func (s *simAgents) Start(ctx context.Context, job cosmic.Job, replica int) (<-chan struct{}, <-chan simcluster.CommandOutcome, func()) {
	done := make(chan simcluster.CommandOutcome, 1)
	var once sync.Once
	finish := func(o simcluster.CommandOutcome) { once.Do(func() { done <- o }) }
	failed := func(err error) (<-chan struct{}, <-chan simcluster.CommandOutcome, func()) {
		r := cosmic.NewReason(cosmic.ReasonVMICrashed, "instance agent: "+err.Error())
		finish(simcluster.CommandOutcome{State: cosmic.StateFailed, Reason: &r})
		return nil, done, func() {}
	}
	id, err := fabric.GenerateIdentity()
	if err != nil {
		return failed(err)
	}
	key := id.PublicKey()
	// The VM's home: sessions and the command start there.
	dir := filepath.Join(s.dataDir, "vms", fmt.Sprintf("%s-r%d", job.ID, replica))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return failed(err)
	}
	env := make([]string, 0, len(job.Spec.EnvVars)+1)
	for _, e := range job.Spec.EnvVars {
		env = append(env, e.Name+"="+e.Value)
	}
	env = append(env, "HOME="+dir)
	cfg := agent.Config{JobID: job.ID, Team: job.Team, Replica: replica, Identity: id,
		Peers: s.peers, Command: job.Spec.Command, Env: env, WorkDir: dir, Logs: s.logs,
		TCPPorts: tcpPorts(job.Spec), SSHPort: s.sshPort,
		OnChange: func(st agent.Status) {
			if st.Command == nil {
				return
			}
			state, reason, ok := st.Command.Outcome()
			if !ok {
				return
			}
			code := *st.Command.ExitCode
			finish(simcluster.CommandOutcome{State: state, Reason: reason, ExitCode: &code})
		}}
	s.admit(job.ID, replica, key)
	a := agent.New(cfg, s.log.With("job_id", job.ID, "replica", replica))
	actx, cancel := context.WithCancel(ctx)
	s.wg.Go(func() {
		defer s.remove(job.ID, replica, key)
		if err := a.Run(actx); err != nil && actx.Err() == nil {
			s.log.Error("instance agent stopped", "job_id", job.ID, "replica", replica, "err", err)
			r := cosmic.NewReason(cosmic.ReasonVMICrashed, "instance agent: "+err.Error())
			finish(simcluster.CommandOutcome{State: cosmic.StateFailed, Reason: &r})
		}
	})
	return a.Ready(), done, cancel
}

func tcpPorts(spec cosmic.Spec) []int {
	ports := []int{agent.DefaultSSHPort}
	for _, p := range []int{spec.DefaultHTTPPort, spec.GRPCPort} {
		if p > 0 {
			ports = append(ports, p)
		}
	}
	return ports
}

func (s *simAgents) admit(jobID string, replica int, key fabric.PublicKey) {
	for _, l := range s.full {
		l.Allow(key)
	}
	for _, l := range s.readOnly {
		l.AllowReadOnly(key)
	}
	s.mu.Lock()
	s.keys[agentSlot{jobID, replica}] = key
	s.mu.Unlock()
}

// remove takes a stopped agent's key off every list and closes its
// connections.
func (s *simAgents) remove(jobID string, replica int, key fabric.PublicKey) {
	s.mu.Lock()
	if s.keys[agentSlot{jobID, replica}] == key {
		delete(s.keys, agentSlot{jobID, replica})
	}
	s.mu.Unlock()
	for _, l := range append(append([]*fabric.AllowList{}, s.full...), s.readOnly...) {
		l.Remove(key)
	}
	for _, n := range s.nodes() {
		if n != nil {
			n.Revoke(key)
		}
	}
}

// Wait waits for every agent's goroutine (after their contexts ended).
func (s *simAgents) Wait() { s.wg.Wait() }

// AgentKey is the key of the instance agent the simulated rack runs for a
// job's replica, while it runs.
func (p *Platform) AgentKey(jobID string, replica int) (fabric.PublicKey, bool) {
	if p.agents == nil {
		return fabric.PublicKey{}, false
	}
	return p.agents.Key(jobID, replica)
}
