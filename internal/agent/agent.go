// Package agent is the instance agent (`cosmicac agent instance`): the
// process inside a GPU Container Job's VMI that the platform reaches over
// the fabric. It is a dial-only fabric node: it connects outward to the
// platform peers its bootstrap names (no inbound port on the cluster),
// admits only those keys, announces itself under the topic
// "instance/<job id>", and serves
//
//   - shell.open (a stream, see package shellproto): a shell or a command,
//     with a real PTY or with pipes, many at once; each session is recorded
//     in the job's system log;
//   - agent.status (a call): ready, version, sessions, the job's command;
//
// runs the job's command, if any, sending its output as application log
// records and reporting its exit (agentapi.Status.Command,
// agentapi.CommandStatus.Outcome), and pushes its status to the rack worker
// (agentapi.MethodReport events) on every change and every ReportInterval.
// Its contract with the platform (the methods, Status, the peer roles, the
// client side of shells and TCP) is internal/agent/agentapi's, which the
// platform's servers import instead of this package.
//
// It is also the home of what the inference agent (internal/inferagent)
// shares with it: the bootstrap file both read (FileBootstrap, the peers
// and their roles) and what they do with the peers (NewNode, KeepConnected,
// NotifyWorkers).
//
// See docs/shell.md. Importers: internal/agentcmd (the agent command),
// internal/inferagent, the in-process agents of internal/platform and
// simcluster, tests.
package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/cosmicac/cosmicac/internal/agent/agentapi"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/joblog"
	"github.com/cosmicac/cosmicac/internal/trust"
	"github.com/cosmicac/cosmicac/internal/version"
)

// Component is the agent's component name in pings.
const Component = string(trust.InstanceAgent)

// Intervals.
var (
	// ReportInterval is how often the status is pushed to worker peers
	// without a change.
	ReportInterval = 10 * time.Second
	// ReconnectInterval is how often unconnected peers are dialled again.
	ReconnectInterval = 3 * time.Second
)

// Agent is one instance agent.
type Agent struct {
	cfg Config
	log *slog.Logger
	fwd *joblog.Forwarder // its records to the monitor (nil: Config.Logs)

	ready   chan struct{}
	started time.Time

	mu        sync.Mutex
	node      *fabric.Node
	isReady   bool
	closing   bool
	sessions  map[string]*session
	nextID    int
	total     int
	command   *agentapi.CommandStatus
	cmdDone   chan struct{}
	sessionWG sync.WaitGroup
	// volumes are Config.Volumes' sync; failure why the replica cannot
	// run (a volume not copied in); reached that a platform peer is
	// connected, which makes the agent ready once the volumes are in.
	volumes []agentapi.VolumeStatus
	failure *cosmic.Reason
	reached bool
	pulled  bool
	pushed  bool // the RW volumes were pushed (or tried): the command ended
	// toldProgress is when a volume's progress was last told.
	toldProgress time.Time
	syncMu       sync.Mutex // one volume sync at a time (datasync, the command's end)
	// lastSync is the last datasync asked for (MethodDataSync), guarded
	// by mu; runCtx the context a datasync runs in (Run's, until it
	// stops) and syncs those running, which Run waits for.
	lastSync *agentapi.DataSyncStatus
	runCtx   context.Context
	syncs    sync.WaitGroup
}

// New makes an agent; Run runs it.
func New(cfg Config, log *slog.Logger) *Agent {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	a := &Agent{log: log, ready: make(chan struct{}), sessions: map[string]*session{}}
	if cfg.Logs == nil {
		cfg.Logs = joblog.Discard
		if a.fwd = MonitorForwarder(cfg.Peers, a.Node); a.fwd != nil {
			cfg.Logs = a.fwd
		}
	}
	a.cfg = cfg
	for _, v := range cfg.Volumes {
		a.volumes = append(a.volumes, agentapi.VolumeStatus{Index: v.Index, MountPath: v.MountPath, Phase: agentapi.VolumePulling})
	}
	a.pulled = len(cfg.Volumes) == 0
	return a
}

// Forwarder is the forwarder of the agent's records to its monitor, nil
// unless the agent made one (Config.Logs), for its metrics.
func (a *Agent) Forwarder() *joblog.Forwarder { return a.fwd }

// Ready is closed once the agent is ready (agentapi.Status.Ready).
func (a *Agent) Ready() <-chan struct{} { return a.ready }

// Node is the agent's fabric node, once Run has started it (else nil).
func (a *Agent) Node() *fabric.Node {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.node
}

// CommandDone is closed when the job's command has exited, or will not
// start (a volume not copied in; Status.Failure says why). It is nil
// when the config has no command, or before Run started it.
func (a *Agent) CommandDone() <-chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cmdDone
}

// Status returns the agent's status now.
func (a *Agent) Status() agentapi.Status {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.statusLocked()
}

func (a *Agent) statusLocked() agentapi.Status {
	s := agentapi.Status{JobID: a.cfg.JobID, Replica: a.cfg.Replica, VMIIndex: a.cfg.VMIIndex,
		Ready: a.isReady, Version: version.Version, StartedAt: a.started,
		Sessions: []agentapi.SessionInfo{}, SessionsTotal: a.total}
	if a.cfg.Identity != nil {
		s.Key = a.cfg.Identity.PublicKey().String()
	}
	for _, ss := range a.sessions {
		s.Sessions = append(s.Sessions, ss.info)
	}
	slices.SortFunc(s.Sessions, func(x, y agentapi.SessionInfo) int { return x.StartedAt.Compare(y.StartedAt) })
	if a.command != nil {
		c := a.command.Clone()
		s.Command = &c
	}
	s.Volumes = slices.Clone(a.volumes)
	if a.lastSync != nil {
		d := cloneDataSync(*a.lastSync)
		s.DataSync = &d
	}
	if a.failure != nil {
		f := *a.failure
		s.Failure = &f
	}
	return s
}

// changed tells OnChange and the worker peers about a new status.
func (a *Agent) changed() {
	st := a.Status()
	if a.cfg.OnChange != nil {
		a.cfg.OnChange(st)
	}
	a.report(st)
}

func (a *Agent) report(st agentapi.Status) {
	if n := a.Node(); n != nil {
		NotifyWorkers(n, a.cfg.Peers, agentapi.MethodReport, st, a.log)
	}
}

// Run serves until ctx ends; then it ends every session and the job's
// command (SIGTERM, then SIGKILL after 10 s), pushes the job's RW volumes
// back (pushAtStop, within StopPushTimeout) and closes the node.
func (a *Agent) Run(ctx context.Context) error {
	cfg := a.cfg
	if cfg.Identity == nil {
		return errors.New("agent: config has no identity")
	}
	if cfg.JobID == "" {
		return errors.New("agent: config has no job ID")
	}
	n, err := NewNode(trust.InstanceAgent, cfg.Identity, cfg.Listen, cfg.Peers, a.log)
	if err != nil {
		return err
	}
	defer n.Close()
	n.HandleStream(agentapi.MethodShell, a.handleShell)
	n.HandleStream(agentapi.MethodTCPConnect, a.handleTCP)
	fabric.HandleFunc(n, agentapi.MethodDataSync, func(ctx context.Context, _ fabric.PublicKey, p agentapi.DataSyncParams) (agentapi.DataSyncReply, error) {
		return a.dataSync(ctx, p)
	})
	fabric.HandleFunc(n, agentapi.MethodStatus, func(context.Context, fabric.PublicKey, struct{}) (agentapi.Status, error) {
		return a.Status(), nil
	}, fabric.ReadOnly())
	dial, dirs := PeerKeys(cfg.Peers)
	a.mu.Lock()
	a.node, a.started = n, time.Now()
	a.mu.Unlock()
	a.log.Info("agent serving", "job_id", cfg.JobID, "key", n.PublicKey().String(), "addr", n.Addr(), "peers", len(cfg.Peers))

	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	a.mu.Lock()
	a.runCtx = rctx
	a.mu.Unlock()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()

	// Keep a connection to every peer with an address: the platform calls
	// the agent back over them.
	wg.Go(func() { KeepConnected(rctx, n, dial, a.log, ConnectHooks{Reached: a.reach}) })
	// The records go to the monitor until the push at a stop is told
	// (pushAtStop), after everything else has ended.
	fctx, fcancel := context.WithCancel(context.WithoutCancel(ctx))
	fdone := make(chan struct{})
	if a.fwd != nil {
		go func() { defer close(fdone); a.fwd.Run(fctx) }()
	} else {
		close(fdone)
	}
	defer func() { fcancel(); <-fdone }()
	if len(dirs) > 0 {
		meta, _ := json.Marshal(map[string]any{"jobId": cfg.JobID, "replica": cfg.Replica, "vmiIndex": cfg.VMIIndex, "version": version.Version})
		wg.Go(func() {
			n.KeepAnnounced(rctx, fabric.AnnounceParams{Topic: agentapi.Topic(cfg.JobID), Meta: meta}, dirs...)
		})
	}
	// The volumes come in before the agent is ready and the command
	// starts; a volume that cannot leaves the agent up (shells work) with
	// its failure in the status, and no command.
	volumesIn := make(chan bool, 1)
	if len(cfg.Volumes) > 0 {
		wg.Go(func() {
			failure := a.pullVolumes(rctx, n)
			if failure == nil && rctx.Err() == nil {
				a.mu.Lock()
				a.pulled = true
				reached := a.reached
				a.mu.Unlock()
				if reached {
					a.setReady()
				}
			}
			volumesIn <- failure == nil && rctx.Err() == nil
		})
	} else {
		volumesIn <- true
	}
	if len(cfg.Command) > 0 {
		done := make(chan struct{})
		a.mu.Lock()
		a.cmdDone = done
		a.mu.Unlock()
		wg.Go(func() {
			if !<-volumesIn {
				close(done)
				return
			}
			a.runCommand(rctx, done)
		})
	}
	wg.Go(func() { KeepReporting(rctx, ReportInterval, func() { a.report(a.Status()) }) })

	<-ctx.Done()
	a.mu.Lock()
	a.closing = true
	for _, s := range a.sessions {
		s.hangup()
	}
	a.mu.Unlock()
	cancel()
	a.sessionWG.Wait()
	wg.Wait()
	a.syncs.Wait()
	a.pushAtStop()
	return nil
}

// setReady makes the agent ready (agentapi.Status.Ready) the first time it is
// called: after the first round of KeepConnected that reached a peer.
func (a *Agent) setReady() {
	a.mu.Lock()
	if a.isReady {
		a.mu.Unlock()
		return
	}
	a.isReady = true
	close(a.ready)
	a.mu.Unlock()
	a.log.Info("agent ready", "job_id", a.cfg.JobID)
	a.changed()
}

// reach marks a platform peer reached: the agent is ready, once its
// volumes are in.
func (a *Agent) reach() {
	a.mu.Lock()
	a.reached = true
	pulled := a.pulled
	a.mu.Unlock()
	if pulled {
		a.setReady()
	}
}

// recordFailure writes a system record of a failed step.
func (a *Agent) recordFailure(step, format string, args ...any) {
	a.cfg.Logs.Emit(joblog.Record{Time: time.Now(), JobID: a.cfg.JobID, Team: a.cfg.Team, Replica: a.cfg.Replica,
		Source: joblog.SourceSystem, Stream: Component, Step: step, OK: joblog.Bool(false), Line: fmt.Sprintf(format, args...)})
}

// record writes a system record of the job.
func (a *Agent) record(step, format string, args ...any) {
	a.cfg.Logs.Emit(joblog.Record{Time: time.Now(), JobID: a.cfg.JobID, Team: a.cfg.Team, Replica: a.cfg.Replica,
		Source: joblog.SourceSystem, Stream: Component, Step: step, OK: joblog.Bool(true), Line: fmt.Sprintf(format, args...)})
}

// HandleReports registers f for the agentapi.MethodReport events agents send; a
// rack worker calls it on its fabric node (whose allow-list must admit the
// agents' keys).
func HandleReports(r fabric.Registrar, f func(peer fabric.PublicKey, st agentapi.Status)) {
	fabric.HandleFunc(r, agentapi.MethodReport, func(_ context.Context, peer fabric.PublicKey, st agentapi.Status) (struct{}, error) {
		f(peer, st)
		return struct{}{}, nil
	})
}

func hostEnv() []string { return os.Environ() }
