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
// records and reporting its exit (Status.Command, CommandStatus.Outcome),
// and pushes its status to the rack worker (MethodReport events) on every
// change and every ReportInterval.
//
// It is also the home of what the inference agent (internal/inferagent)
// shares with it: the bootstrap file both read (FileBootstrap, the peers
// and their roles) and what they do with the peers (NewNode, KeepConnected,
// NotifyWorkers).
//
// See docs/shell.md. Importers: internal/agentcmd (the agent command), internal/cli (`jobs
// shell`), internal/inferagent, and the rack workers for the report types
// and the bootstrap's peer roles.
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

	"github.com/cosmicac/cosmicac/internal/agent/shellproto"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/joblog"
	"github.com/cosmicac/cosmicac/internal/trust"
	"github.com/cosmicac/cosmicac/internal/version"
)

// Fabric methods of the agent.
const (
	// MethodStatus is a call answered with Status (read-only access).
	MethodStatus = "agent.status"
	// MethodShell opens a shell session (a stream).
	MethodShell = shellproto.Method
	// MethodReport is the event the agent sends to its worker peers with its
	// Status, on every change and every ReportInterval. Events are at most
	// once: a worker that must not miss one also calls MethodStatus.
	MethodReport = "agent.report"
)

// Component is the agent's component name in pings.
const Component = string(trust.InstanceAgent)

// Topic is the directory topic an agent of job announces itself under.
func Topic(jobID string) string { return trust.AgentTopic(trust.InstanceAgent, jobID) }

// Intervals.
var (
	// ReportInterval is how often the status is pushed to worker peers
	// without a change.
	ReportInterval = 10 * time.Second
	// ReconnectInterval is how often unconnected peers are dialled again.
	ReconnectInterval = 3 * time.Second
)

// Status is what MethodStatus answers and MethodReport carries.
type Status struct {
	JobID    string `json:"jobId"`
	Replica  int    `json:"replica"`
	VMIIndex int    `json:"vmiIndex"`
	// Key is the agent's public key.
	Key string `json:"key"`
	// Ready: the agent serves shells and has reached the platform (at least
	// one dialled peer is connected, or it has none to dial).
	Ready     bool      `json:"ready"`
	Version   string    `json:"version"`
	StartedAt time.Time `json:"startedAt"`
	// Sessions are the open shell sessions.
	Sessions []SessionInfo `json:"sessions"`
	// SessionsTotal counts every session opened since the start.
	SessionsTotal int `json:"sessionsTotal"`
	// Command is the job's command, when the spec has one.
	Command *CommandStatus `json:"command,omitempty"`
}

// SessionInfo describes one open shell session.
type SessionInfo struct {
	ID        string    `json:"id"`
	Peer      string    `json:"peer"` // the key that opened it (the relay, or the CLI)
	User      string    `json:"user,omitempty"`
	Argv      []string  `json:"argv,omitempty"`
	TTY       bool      `json:"tty"`
	PID       int       `json:"pid"`
	StartedAt time.Time `json:"startedAt"`
}

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
	command   *CommandStatus
	cmdDone   chan struct{}
	sessionWG sync.WaitGroup
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
	return a
}

// Forwarder is the forwarder of the agent's records to its monitor, nil
// unless the agent made one (Config.Logs), for its metrics.
func (a *Agent) Forwarder() *joblog.Forwarder { return a.fwd }

// Ready is closed once the agent is ready (Status.Ready).
func (a *Agent) Ready() <-chan struct{} { return a.ready }

// Node is the agent's fabric node, once Run has started it (else nil).
func (a *Agent) Node() *fabric.Node {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.node
}

// CommandDone is closed when the job's command has exited (nil when the
// config has no command, or before Run started it).
func (a *Agent) CommandDone() <-chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cmdDone
}

// Status returns the agent's status now.
func (a *Agent) Status() Status {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.statusLocked()
}

func (a *Agent) statusLocked() Status {
	s := Status{JobID: a.cfg.JobID, Replica: a.cfg.Replica, VMIIndex: a.cfg.VMIIndex,
		Ready: a.isReady, Version: version.Version, StartedAt: a.started,
		Sessions: []SessionInfo{}, SessionsTotal: a.total}
	if a.cfg.Identity != nil {
		s.Key = a.cfg.Identity.PublicKey().String()
	}
	for _, ss := range a.sessions {
		s.Sessions = append(s.Sessions, ss.info)
	}
	slices.SortFunc(s.Sessions, func(x, y SessionInfo) int { return x.StartedAt.Compare(y.StartedAt) })
	if a.command != nil {
		c := a.command.clone()
		s.Command = &c
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

func (a *Agent) report(st Status) {
	if n := a.Node(); n != nil {
		NotifyWorkers(n, a.cfg.Peers, MethodReport, st, a.log)
	}
}

// Run serves until ctx ends; then it ends every session and the job's
// command (SIGTERM, then SIGKILL after 10 s) and closes the node.
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
	n.HandleStream(MethodShell, a.handleShell)
	n.HandleStream(MethodTCPConnect, a.handleTCP)
	fabric.HandleFunc(n, MethodStatus, func(context.Context, fabric.PublicKey, struct{}) (Status, error) {
		return a.Status(), nil
	}, fabric.ReadOnly())
	dial, dirs := PeerKeys(cfg.Peers)
	a.mu.Lock()
	a.node, a.started = n, time.Now()
	a.mu.Unlock()
	a.log.Info("agent serving", "job_id", cfg.JobID, "key", n.PublicKey().String(), "addr", n.Addr(), "peers", len(cfg.Peers))

	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()

	// Keep a connection to every peer with an address: the platform calls
	// the agent back over them.
	wg.Go(func() { KeepConnected(rctx, n, dial, a.log, ConnectHooks{Reached: a.setReady}) })
	if a.fwd != nil {
		wg.Go(func() { a.fwd.Run(rctx) })
	}
	if len(dirs) > 0 {
		meta, _ := json.Marshal(map[string]any{"jobId": cfg.JobID, "replica": cfg.Replica, "vmiIndex": cfg.VMIIndex, "version": version.Version})
		wg.Go(func() {
			n.KeepAnnounced(rctx, fabric.AnnounceParams{Topic: Topic(cfg.JobID), Meta: meta}, dirs...)
		})
	}
	if len(cfg.Command) > 0 {
		done := make(chan struct{})
		a.mu.Lock()
		a.cmdDone = done
		a.mu.Unlock()
		wg.Go(func() { a.runCommand(rctx, done) })
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
	return nil
}

// setReady makes the agent ready (Status.Ready) the first time it is
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

// record writes a system record of the job.
func (a *Agent) record(step, format string, args ...any) {
	a.cfg.Logs.Emit(joblog.Record{Time: time.Now(), JobID: a.cfg.JobID, Team: a.cfg.Team, Replica: a.cfg.Replica,
		Source: joblog.SourceSystem, Stream: Component, Step: step, OK: joblog.Bool(true), Line: fmt.Sprintf(format, args...)})
}

// HandleReports registers f for the MethodReport events agents send; a
// rack worker calls it on its fabric node (whose allow-list must admit the
// agents' keys).
func HandleReports(r fabric.Registrar, f func(peer fabric.PublicKey, st Status)) {
	fabric.HandleFunc(r, MethodReport, func(_ context.Context, peer fabric.PublicKey, st Status) (struct{}, error) {
		f(peer, st)
		return struct{}{}, nil
	})
}

// GetStatus calls MethodStatus on the agent with key (over the connection
// it opened, or at an address the caller knows).
func GetStatus(ctx context.Context, n *fabric.Node, key fabric.PublicKey) (Status, error) {
	var st Status
	err := n.Call(ctx, key, MethodStatus, struct{}{}, &st)
	return st, err
}

func hostEnv() []string { return os.Environ() }
