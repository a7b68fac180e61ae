// Package agentapi is the contract between the platform and the agents in
// a job's VM: the instance agent (internal/agent) and the inference agent
// (internal/inferagent). It declares their fabric methods once, what they
// answer and report (Status, CommandStatus, WorkerReport), the bootstrap's
// peer roles and the directory topics, and the client side of their
// streams: shells (Conn, RunSession, the app-node's HTTP relay) and TCP.
// The app-node, proxy-inference, the rack workers and the CLI reach the
// agents through this package and shellproto only, never through the
// agents' implementation, which runs processes and PTYs in tenants' VMs
// (archtest).
//
// Importers: the agents, internal/appnode, internal/inferproxy, the rack
// workers, internal/cli, tests.
package agentapi

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/cosmicac/cosmicac/internal/agent/shellproto"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
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

// StatusCall is MethodStatus, typed.
var StatusCall = fabric.Method[struct{}, Status]{Name: MethodStatus}

// Topic is the directory topic an agent of job announces itself under.
func Topic(jobID string) string { return "instance/" + jobID }

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
	// Volumes are the job's volumes the agent copies in before the
	// command (docs/data.md), in the spec's order.
	Volumes []VolumeStatus `json:"volumes,omitempty"`
	// Failure, when set, is why the replica cannot run: a volume that
	// could not be copied in. The agent stays up (shells still work); the
	// command is not started.
	Failure *cosmic.Reason `json:"failure,omitempty"`
	// DataSync is the last datasync the app-node asked for since the agent
	// started (MethodDataSync), running until its EndedAt is set; nil when
	// none was.
	DataSync *DataSyncStatus `json:"dataSync,omitempty"`
}

// Volume sync phases.
const (
	VolumePulling = "pulling"
	VolumeReady   = "ready"
	VolumeFailed  = "failed"
)

// VolumeStatus is one volume's sync.
type VolumeStatus struct {
	Index     int    `json:"index"` // in spec.volumes
	MountPath string `json:"mountPath"`
	Phase     string `json:"phase"`
	Objects   int64  `json:"objects"`
	Bytes     int64  `json:"bytes"`
	// TotalObjects and TotalBytes are what the volume's copy-in moves in
	// all, once its listing is read.
	TotalObjects int64  `json:"totalObjects,omitempty"`
	TotalBytes   int64  `json:"totalBytes,omitempty"`
	Error        string `json:"error,omitempty"`
}

// CopyProgress is the progress of a replica whose agent copies its
// volumes in (cosmic.StepCopyVolumes), from the agent's volumes: what
// moved of what the listings read so far hold; nil when none is being
// copied.
func CopyProgress(vols []VolumeStatus) *cosmic.Progress {
	p := cosmic.Progress{Step: cosmic.StepCopyVolumes}
	pulling := false
	for _, v := range vols {
		pulling = pulling || v.Phase == VolumePulling
		p.Objects += v.Objects
		p.Bytes += v.Bytes
		p.TotalObjects += max(v.TotalObjects, v.Objects)
		p.TotalBytes += max(v.TotalBytes, v.Bytes)
	}
	if !pulling {
		return nil
	}
	if p.TotalBytes > 0 {
		p.Percent = int(p.Bytes * 100 / p.TotalBytes)
	}
	return &p
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

// GetStatus calls MethodStatus on the agent with key (over the connection
// it opened, or at an address the caller knows).
func GetStatus(ctx context.Context, n fabric.Caller, key fabric.PublicKey) (Status, error) {
	return StatusCall.Call(ctx, n, key, struct{}{})
}

// MethodTCPConnect opens a stream spliced to a TCP port on the VM's
// loopback: 22 for `cosmicac jobs ssh` (the user's ssh with the CLI as
// ProxyCommand), the job's HTTP port for /api/v1/jobs/{id}/http/… later.
const MethodTCPConnect = "tcp.connect"

// TCPConnectParams are the parameters of MethodTCPConnect.
type TCPConnectParams struct {
	Port int `json:"port"`
}

// DefaultSSHPort is the port `jobs ssh` connects to.
const DefaultSSHPort = 22

// DialTCP opens a MethodTCPConnect stream to port on the agent with key.
func DialTCP(ctx context.Context, n *fabric.Node, key fabric.PublicKey, port int) (*fabric.Stream, error) {
	return n.OpenStream(ctx, key, MethodTCPConnect, TCPConnectParams{Port: port}, nil)
}

// Command states.
const (
	CommandRunning = "running"
	CommandExited  = "exited"
)

// TailLines is how many last lines of the command's output are kept for the
// failure reason.
const TailLines = 20

// CommandStatus is the job's command as the agent runs it.
type CommandStatus struct {
	Argv  []string `json:"argv"`
	State string   `json:"state"` // running | exited
	PID   int      `json:"pid,omitempty"`
	// ExitCode is set once the command has exited: its code, 128+signo when
	// a signal killed it, 127 when it could not be started.
	ExitCode *int   `json:"exitCode,omitempty"`
	Signal   string `json:"signal,omitempty"`
	// Error says why the command could not be started.
	Error     string     `json:"error,omitempty"`
	StartedAt time.Time  `json:"startedAt"`
	EndedAt   *time.Time `json:"endedAt,omitempty"`
	// Tail is the last TailLines lines of its output (stdout and stderr).
	Tail []string `json:"tail,omitempty"`
}

// Clone is a deep copy of c.
func (c CommandStatus) Clone() CommandStatus {
	c.Argv = append([]string(nil), c.Argv...)
	c.Tail = append([]string(nil), c.Tail...)
	if c.ExitCode != nil {
		v := *c.ExitCode
		c.ExitCode = &v
	}
	if c.EndedAt != nil {
		v := *c.EndedAt
		c.EndedAt = &v
	}
	return c
}

// Outcome is the job state the command's exit stands for (the ork's
// contract): exit 0 gives stopped, anything else failed with
// command_failed, the code and the last lines of output. done is false
// while the command runs.
func (c CommandStatus) Outcome() (state cosmic.State, reason *cosmic.Reason, done bool) {
	if c.State != CommandExited || c.ExitCode == nil {
		return "", nil, false
	}
	if *c.ExitCode == 0 {
		return cosmic.StateStopped, nil, true
	}
	detail := fmt.Sprintf("exit code %d", *c.ExitCode)
	if c.Signal != "" {
		detail += " (signal " + c.Signal + ")"
	}
	if c.Error != "" {
		detail += ": " + c.Error
	}
	if len(c.Tail) > 0 {
		last := c.Tail[max(0, len(c.Tail)-5):]
		detail += "; last output: " + strings.Join(last, " | ")
	}
	r := cosmic.NewReason(cosmic.ReasonCommandFailed, detail)
	return cosmic.StateFailed, &r, true
}

// Peer roles of the bootstrap (the strings of k8sworker.Peer.Role). Each
// is the class of key (trust.Role) the agent admits the peer as, so what
// the peer may call on the agent is what internal/trust's Graph says; the
// role also decides what else an agent does with it.
const (
	RoleDirectory = "directory"       // the agents' directory: the agent announces itself there
	RoleWorker    = "worker"          // the rack worker: receives the agent's report events
	RoleAppNode   = "app-node"        // relays users' shells (and later HTTP) to the instance agent
	RoleMonitor   = "monitor"         // wrk-monitor: receives the agent's log records
	RoleProxy     = "proxy-inference" // reaches the inference agent over the connection it opened
)

// WorkerReport is what a rack worker reads of either agent's status
// (Status, InferenceStatus: the same fields), as their report
// events carry it.
type WorkerReport struct {
	JobID    string `json:"jobId"`
	Replica  int    `json:"replica"`
	VMIIndex int    `json:"vmiIndex"`
	Ready    bool   `json:"ready"`
	// Command is the job's command (instance agents of a job with one).
	Command *CommandStatus `json:"command,omitempty"`
	// Volumes and Failure are Status's: the volumes coming in (the
	// replica's progress) and why the replica cannot run.
	Volumes []VolumeStatus `json:"volumes,omitempty"`
	Failure *cosmic.Reason `json:"failure,omitempty"`
}

// ServeWorkerReports registers f on a rack worker's node r for both agents'
// report events (MethodReport, MethodInferenceReport).
func ServeWorkerReports(r fabric.Registrar, f func(peer fabric.PublicKey, rep WorkerReport)) {
	for _, m := range []string{MethodReport, MethodInferenceReport} {
		fabric.HandleFunc(r, m, func(_ context.Context, peer fabric.PublicKey, rep WorkerReport) (struct{}, error) {
			f(peer, rep)
			return struct{}{}, nil
		})
	}
}
