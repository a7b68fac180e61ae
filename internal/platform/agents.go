package platform

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/cosmicac/cosmicac/internal/agent"
	"github.com/cosmicac/cosmicac/internal/agent/agentapi"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/joblog"
	"github.com/cosmicac/cosmicac/internal/ork/orkapi"
	"github.com/cosmicac/cosmicac/internal/simcluster"
	"github.com/cosmicac/cosmicac/internal/simsshd"
	"github.com/cosmicac/cosmicac/internal/trust"
	"github.com/cosmicac/cosmicac/internal/vmboot"
	"github.com/cosmicac/cosmicac/internal/worker"
)

// agentRunner is what the simulated rack's two agent runners share: where
// the agents' records go, and the two keyrings an agent's key is bound in.
// The rack's worker binds the keys it issued in its own keyring (local), as
// the Kubernetes worker does; the platform's other components admit them
// once they follow the ork's binding (bound), which the ork makes from the
// rack's report of its replicas' AgentKeys.
type agentRunner struct {
	log   *slog.Logger
	rack  string
	local *trust.Keyring
	bound *trust.Keyring
}

// bindLocal binds the agents' keys (by VMI index) in the worker's keyring
// and returns the func that unbinds them.
func (r agentRunner) bindLocal(job cosmic.Job, replica int, keys []fabric.PublicKey) (unbind func()) {
	r.local.BindAgents(orkapi.Placement{Job: job.ID, Team: job.Team, Type: job.Spec.Type, Replica: replica, Rack: r.rack}, keys)
	return func() { r.local.UnbindAgents(job.ID, replica, keys) }
}

// boundWait is how long an agent waits for the platform to bind its key
// before it starts anyway (and retries its peers, as a VM's agent would).
const boundWait = 10 * time.Second

// whenBound waits until the platform's keyring binds every key to the
// replica's VMIs, as they boot after the rack reported them, or boundWait.
// It reports false if ctx ended first.
func (r agentRunner) whenBound(ctx context.Context, job cosmic.Job, replica int, keys []fabric.PublicKey) bool {
	deadline := time.Now().Add(boundWait)
	for {
		all := true
		for i, k := range keys {
			all = all && r.bound.IsAgent(k, job.ID, replica, i)
		}
		if all || time.Now().After(deadline) {
			return ctx.Err() == nil
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// simAgents runs the instance agents of the simulated rack's gpu-container
// replicas in this process: one agent.Agent (a goroutine) per replica, with
// the identity the rack issued and the bootstrap a VMI's agent gets from
// the worker (docs/shell.md): its key pair, the job, and the platform peers
// it may talk to. What each peer admits the agent to is internal/trust's
// declaration: the agent's key, bound to its job's replica, may announce
// that job in the agents' directory, report to its worker and be reached
// by the app-node, and nothing else. Its records go straight into the
// platform's sink. It implements simcluster.AgentRunner.
type simAgents struct {
	agentRunner
	dataDir string
	// sshPort is every agent's agent.Config.SSHPort (a real sshd's);
	// 0 starts a simulated sshd (internal/simsshd) for each replica.
	sshPort int
	// noHostShells refuses every shell and simulated ssh session
	// (simcluster.Config.NoHostShells).
	noHostShells bool

	// The peers of the bootstrap, but the worker (Start's).
	peers []agent.Peer

	mu  sync.Mutex
	ids map[agentSlot]*fabric.Identity // the live agents
	wg  sync.WaitGroup
}

type agentSlot struct {
	job     string
	replica int
}

// Key returns the key of the agent the platform runs for a job's replica.
func (s *simAgents) Key(jobID string, replica int) (fabric.PublicKey, bool) {
	id, ok := s.Identity(jobID, replica)
	if !ok {
		return fabric.PublicKey{}, false
	}
	return id.PublicKey(), true
}

// Identity returns the identity of the agent the platform runs for a job's
// replica.
func (s *simAgents) Identity(jobID string, replica int) (*fabric.Identity, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id, ok := s.ids[agentSlot{jobID, replica}]
	return id, ok
}

// Start implements simcluster.AgentRunner.
func (s *simAgents) Start(ctx context.Context, job cosmic.Job, replica int, id *fabric.Identity, boot simcluster.Boot) simcluster.AgentHandle {
	done := make(chan simcluster.CommandOutcome, 1)
	var once sync.Once
	finish := func(o simcluster.CommandOutcome) { once.Do(func() { done <- o }) }
	failed := func(err error) simcluster.AgentHandle {
		r := cosmic.NewReason(cosmic.ReasonVMICrashed, "instance agent: "+err.Error())
		finish(simcluster.CommandOutcome{State: cosmic.StateFailed, Reason: &r})
		return simcluster.AgentHandle{Done: done, Stop: func() {}}
	}
	if id == nil {
		return failed(errors.New("the rack issued no identity"))
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
	// The VM's sshd: CosmicAC's own simulated one unless the platform was
	// pointed at a real sshd (Config.AgentSSHPort).
	sshPort := s.sshPort
	var sshd *simsshd.Server
	if sshPort == 0 {
		var err error
		refuse := ""
		if s.noHostShells {
			refuse = HostShellsOff
		}
		sshd, err = simsshd.Start(simsshd.Config{AuthorizedKeys: job.Spec.SSHPublicKeys, Env: env, Dir: dir, Refuse: refuse,
			Record: sshdRecorder(boot.Logs, job, replica),
			Log:    s.log.With("component", simsshdComponent, "job_id", job.ID, "replica", replica)}, "127.0.0.1:0")
		if err != nil {
			return failed(fmt.Errorf("ssh server: %w", err))
		}
		sshPort = sshd.Port()
	}
	vols, err := simVolumes(job, dir, boot.VolumesDir)
	if err != nil {
		if sshd != nil {
			sshd.Close()
		}
		return failed(err)
	}
	cfg := agent.Config{JobID: job.ID, Team: job.Team, Replica: replica, Identity: id,
		Peers: withWorker(s.peers, boot.Worker), Command: job.Spec.Command, Env: env, WorkDir: dir, Logs: boot.Logs,
		TCPPorts: tcpPorts(job.Spec), SSHPort: sshPort, Notice: HostShellNotice(hostUser()),
		Volumes: vols,
		OnChange: func(st agentapi.Status) {
			if p := agentapi.CopyProgress(st.Volumes); p != nil && boot.Progress != nil {
				boot.Progress(job.ID, replica, p)
			}
			if st.Failure != nil { // a volume not copied in: the command never starts
				r := *st.Failure
				finish(simcluster.CommandOutcome{State: cosmic.StateFailed, Reason: &r})
				return
			}
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
	if s.noHostShells {
		cfg.Notice, cfg.RefuseShells = "", HostShellsOff
	}
	unbind := s.bindLocal(job, replica, []fabric.PublicKey{key})
	s.mu.Lock()
	s.ids[agentSlot{job.ID, replica}] = id
	s.mu.Unlock()
	a := agent.New(cfg, s.log.With("component", agent.Component, "job_id", job.ID, "replica", replica))
	actx, cancel := context.WithCancel(ctx)
	exited := make(chan struct{})
	s.wg.Go(func() {
		defer close(exited)
		defer s.forget(job.ID, replica, key, unbind)
		if sshd != nil {
			defer sshd.Close()
		}
		if !s.whenBound(actx, job, replica, []fabric.PublicKey{key}) {
			return
		}
		if err := a.Run(actx); err != nil && actx.Err() == nil {
			s.log.Error("instance agent stopped", "component", agent.Component, "job_id", job.ID, "replica", replica, "err", err)
			r := cosmic.NewReason(cosmic.ReasonVMICrashed, "instance agent: "+err.Error())
			finish(simcluster.CommandOutcome{State: cosmic.StateFailed, Reason: &r})
		}
	})
	return simcluster.AgentHandle{Ready: a.Ready(), Done: done, Stop: cancel, Exited: exited}
}

// simVolumes are the volumes of job for its agent on the simulated rack:
// no VM, so each datastore or Git volume goes to a directory of the
// replica's home on the platform's host, home + the mount path, and each
// standalone volume is the directory the rack keeps it in under
// volumesDir (made the first time), linked to from home + the mount path
// (docs/data.md). The agent says where
// in the job's system log.
func simVolumes(job cosmic.Job, home, volumesDir string) ([]agent.Volume, error) {
	var out []agent.Volume
	for _, v := range vmboot.Volumes(job.Spec) {
		av := agent.Volume{Index: v.Index, MountPath: v.MountPath, Dir: filepath.Join(home, filepath.FromSlash(v.MountPath)),
			Push: v.Push, Delete: v.Delete, Target: v.Target, Git: v.Git, Archive: v.Archive, PushArchive: v.PushArchive,
			Standalone: v.Standalone, ReadOnly: v.ReadOnly}
		if v.Standalone != "" {
			if volumesDir == "" {
				return nil, fmt.Errorf("volume %d (%s): this rack keeps no standalone volumes", v.Index, v.MountPath)
			}
			dir, err := worker.VolumePath(volumesDir, job.Team, v.Standalone, "")
			if err == nil {
				err = os.MkdirAll(dir, 0o700)
			}
			// The command finds it where it finds the others: home + the
			// mount path, a link to the rack's directory.
			if err == nil {
				err = os.MkdirAll(filepath.Dir(av.Dir), 0o700)
			}
			if fi, lerr := os.Lstat(av.Dir); err == nil && lerr == nil && fi.Mode()&os.ModeSymlink != 0 {
				err = os.Remove(av.Dir)
			}
			if err == nil {
				err = os.Symlink(dir, av.Dir)
			}
			if err != nil {
				return nil, fmt.Errorf("volume %d (%s): %w", v.Index, v.MountPath, err)
			}
			av.Dir = dir
		}
		out = append(out, av)
	}
	return out, nil
}

// HostShellNotice is what every shell session on the simulated rack is
// told first (`jobs shell`, the web Terminal): it is on this host, as
// user, whatever the prompt looks like. simsshd's Banner says it for
// `jobs ssh`.
func HostShellNotice(user string) string {
	return "CosmicAC: this job runs on the simulated rack, where no VM runs. This shell runs on the\n" +
		"platform's host, as " + user + ", with no isolation: it is not a VM, whatever the prompt\n" +
		"looks like. An operator turns these shells off with cosmicac up --sim-host-shells=false\n" +
		"(docs/simulated-rack.md).\n"
}

// HostShellsOff is the refusal of every shell and ssh session on the
// simulated rack when its host shells are off.
const HostShellsOff = "CosmicAC: shells are turned off on this platform's simulated rack (cosmicac up\n" +
	"--sim-host-shells=false): no VM runs there, and a shell would run on the platform's host.\n" +
	"A rack of VMs (QEMU or Kubernetes) gives shells in the job's VM (docs/simulated-rack.md).\n"

// hostUser names the user this process runs as, whose shells the
// simulated rack's sessions are.
func hostUser() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return "user " + u.Username
	}
	return "the user running the platform"
}

// simsshdComponent names the simulated sshd in the platform's log and in
// the stream of its records in a job's system log.
const simsshdComponent = "sim-sshd"

// sshdRecorder writes the simulated sshd's lines (sessions opened and
// closed, keys it cannot admit) in the job's system log, as the agent
// writes its shell sessions.
func sshdRecorder(logs joblog.Sink, job cosmic.Job, replica int) func(string) {
	return func(line string) {
		logs.Emit(joblog.Record{Time: time.Now(), JobID: job.ID, Team: job.Team, Replica: replica,
			Source: joblog.SourceSystem, Stream: simsshdComponent, Step: "ssh", OK: joblog.Bool(true), Line: line})
	}
}

func tcpPorts(spec cosmic.Spec) []int {
	ports := []int{agentapi.DefaultSSHPort}
	for _, p := range []int{spec.DefaultHTTPPort, spec.GRPCPort} {
		if p > 0 {
			ports = append(ports, p)
		}
	}
	return ports
}

// forget drops a stopped agent: its key is unbound (and its connections
// to the worker closed); the platform's other components revoke it when
// the ork unbinds the replica.
func (s *simAgents) forget(jobID string, replica int, key fabric.PublicKey, unbind func()) {
	s.mu.Lock()
	if id := s.ids[agentSlot{jobID, replica}]; id != nil && id.PublicKey() == key {
		delete(s.ids, agentSlot{jobID, replica})
	}
	s.mu.Unlock()
	unbind()
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

// AgentIdentity is the identity the simulated rack issued the instance
// agent of a job's replica, while it runs. It is the key pair a user with
// root in that VM holds: the tests act as such a user with it
// (internal/cosmictest's access matrix).
func (p *Platform) AgentIdentity(jobID string, replica int) (*fabric.Identity, bool) {
	if p.agents == nil {
		return nil, false
	}
	return p.agents.Identity(jobID, replica)
}

// withWorker is peers and the rack's worker, as a VMI's bootstrap names
// them (the agents report to it).
func withWorker(peers []agent.Peer, w simcluster.Peer) []agent.Peer {
	if w.Key == (fabric.PublicKey{}) {
		return peers
	}
	return append(slices.Clip(peers), agent.Peer{Role: agentapi.RoleWorker, Key: w.Key, Addrs: w.Addrs})
}
