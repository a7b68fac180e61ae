// Package worker is the contract between the ork and a rack worker: the
// Worker interface that both the simulated rack (internal/simcluster) and the
// Kubernetes worker (internal/k8sworker) implement, the fabric methods that
// carry it, and the reports a worker pushes back to the ork.
//
// The protocol is level-triggered. The ork tells a worker the desired state
// of a job (Apply, Stop, Restart, Delete; all idempotent) and a worker
// reports what it observes (Report, pushed on every change; Jobs, pulled by
// the ork after either side restarts). A lost message is repaired by the
// next report or pull. Both workers keep what they have not yet reported in
// a ReportQueue, which delivers it.
//
// Importers: the ork, the workers, and the CLI wiring. It imports only the
// domain (internal/cosmic) and the fabric.
package worker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync/atomic"
	"time"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
)

// Methods a worker serves to the ork.
const (
	MethodCapacity = "worker.capacity"
	MethodApply    = "worker.apply"
	MethodStop     = "worker.stop"
	MethodRestart  = "worker.restart"
	MethodDelete   = "worker.delete"
	MethodJobs     = "worker.jobs"
	// MethodDeleteVolume removes a standalone volume the rack keeps.
	MethodDeleteVolume = "worker.deleteVolume"
)

// MethodReport is served by the ork: workers push Reports to it.
const MethodReport = "ork.workerReport"

// AllReplicas selects every replica of a job in a ReplicaRef.
const AllReplicas = -1

// Capacity is a rack's nodes as the worker sees them.
type Capacity struct {
	Rack       string        `json:"rack"`
	Nodes      []cosmic.Node `json:"nodes"`
	ObservedAt time.Time     `json:"observedAt"`
	// Problem, when set, is why the rack cannot take jobs until an
	// operator fixes it (e.g. rack_misconfigured: its Kubernetes namespace
	// is missing): the ork shows it with the rack.
	Problem *cosmic.Reason `json:"problem,omitempty"`
	// Note is what users should know of the rack's capacity, shown with
	// it (a QEMU rack without GPUs: "GPUs declared for placement only").
	Note string `json:"note,omitempty"`
	// Overhead is what the rack's hypervisor takes per VM beyond the
	// guest's vCPUs and memory; placement charges it on the node with each
	// replica (zero: nothing).
	Overhead cosmic.VMOverhead `json:"overhead,omitzero"`
	// Catalogue is what the rack can run (images, job types, runtimes,
	// the most a VM gets). Every worker reports it: the ork refuses at
	// create what no rack of a job's location can run, and shows it with
	// the rack and the location. Nil: not reported (an older worker), and
	// the ork checks nothing.
	Catalogue *cosmic.Catalogue `json:"catalogue,omitempty"`
	// Volumes are the standalone volumes the rack keeps, each with the
	// job that has it mounted, if any (its VM may still be powering off):
	// the ork places a job that mounts one on this rack, and only once
	// no other job has it (docs/data.md).
	Volumes []cosmic.StoredVolume `json:"volumes,omitempty"`
}

// ApplyParams asks the worker to run a job's replicas on their reserved
// GPUs: create what is missing, keep what exists. Replicas not listed are
// left alone (they may be queued).
type ApplyParams struct {
	Job          cosmic.Job           `json:"job"`
	Reservations []cosmic.Reservation `json:"reservations"`
}

// ReplicaRef names one replica of a job, or all of them (AllReplicas).
type ReplicaRef struct {
	JobID   string `json:"jobId"`
	Replica int    `json:"replica"`
}

// DeleteParams removes a job's (or a replica's) VMIs, storage and every other
// object. Force skips graceful shutdown.
type DeleteParams struct {
	JobID   string `json:"jobId"`
	Replica int    `json:"replica"`
	Force   bool   `json:"force,omitempty"`
}

// Replica states a worker reports. They are cosmic.States; a worker reports
// only these.
var ReportedStates = []cosmic.State{
	cosmic.StatePending, cosmic.StateStarting, cosmic.StateRunning,
	cosmic.StateRestarting, cosmic.StateFailed, cosmic.StateStopped,
}

// ReplicaReport is what the worker observes of one replica.
type ReplicaReport struct {
	Replica  int              `json:"replica"`
	State    cosmic.State     `json:"state"`
	Reason   *cosmic.Reason   `json:"reason,omitempty"`
	Progress *cosmic.Progress `json:"progress,omitempty"`
	Nodes    []string         `json:"nodes,omitempty"`
	ExitCode *int             `json:"exitCode,omitempty"`
	// AgentKeys are the public keys (64 hex digits, by VMI index) of the
	// in-VM agents the worker issued for the replica, when it issues them
	// (the Kubernetes worker). The ork keeps them in the job's status, so an
	// app-node can tell the agent the platform issued from any other key.
	AgentKeys []string `json:"agentKeys,omitempty"`
	// Given is what the rack gives the replica (its VMs' vCPUs, memory
	// and GPUs), which can be less than the job asks: the ork shows it
	// next to the spec's resources. Nil: not reported.
	Given *cosmic.Given `json:"given,omitempty"`
	// Gone is set once every object of the replica is deleted.
	Gone bool `json:"gone,omitempty"`
	// Observed says which worker process observed this state, and in
	// what order (Observe). The ork applies a replica's report only if it
	// is newer than the last one it applied from the same process, so that
	// a late answer cannot undo a newer state: a pulled Jobs reply that was
	// current when the pull began, or a replica's failure reported again
	// after the replica was placed anew. Zero: not stamped (always applied).
	Observed Observation `json:"observed,omitzero"`
}

// Observation stamps a replica report: Process is random per worker process
// start, Seq grows with every observation that process stamps.
type Observation struct {
	Process string `json:"process"`
	Seq     uint64 `json:"seq"`
}

var (
	observer = func() string {
		var b [8]byte
		rand.Read(b[:])
		return hex.EncodeToString(b[:])
	}()
	observations atomic.Uint64
)

// Observe returns a new stamp of this process, later than every stamp it
// returned before.
func Observe() Observation { return Observation{Process: observer, Seq: observations.Add(1)} }

// Supersedes reports whether a report stamped o may replace one stamped
// last: o is not stamped, or comes from another process (a worker that
// restarted), or is later.
func (o Observation) Supersedes(last Observation) bool {
	return o.Process == "" || o.Process != last.Process || o.Seq > last.Seq
}

// JobReport is what the worker observes of one job.
type JobReport struct {
	JobID    string          `json:"jobId"`
	Replicas []ReplicaReport `json:"replicas"`
}

// Report is pushed by a worker to the ork on every change.
type Report struct {
	Rack     string      `json:"rack"`
	Jobs     []JobReport `json:"jobs,omitempty"`
	Capacity *Capacity   `json:"capacity,omitempty"`
}

// JobsReply answers MethodJobs: every job the worker runs.
type JobsReply struct {
	Jobs []JobReport `json:"jobs"`
}

// Worker runs jobs on one rack. Every method is idempotent.
//
// A job the rack cannot run (an image or job type not in its Catalogue) is
// not an Apply error: Apply reports each of its reserved replicas failed
// with reason rack_refused (Refused) and writes the refusal to the
// replica's system log, so that the job learns it at once and its GPUs are
// released. An Apply error is one the ork retries on the next heartbeat.
type Worker interface {
	Capacity(ctx context.Context) (Capacity, error)
	Apply(ctx context.Context, p ApplyParams) error
	// Stop deletes the replicas' VMIs but keeps their storage (kill).
	Stop(ctx context.Context, r ReplicaRef) error
	// Restart replaces the replicas' VMIs, keeping storage and GPUs.
	Restart(ctx context.Context, r ReplicaRef) error
	Delete(ctx context.Context, p DeleteParams) error
	Jobs(ctx context.Context) ([]JobReport, error)
	// DeleteVolume removes a standalone volume the rack keeps, and what
	// it holds: cosmic.ErrNotFound when the rack keeps no such volume,
	// cosmic.ErrConflict while a VM has it (docs/data.md).
	DeleteVolume(ctx context.Context, p VolumeRef) error
}

// VolumeRef names a standalone volume: its team and name.
type VolumeRef struct {
	Team string `json:"team"`
	Name string `json:"name"`
}

// Reporter receives a worker's reports: the ork, or a fabric client of it.
type Reporter interface {
	Report(ctx context.Context, r Report) error
}

// Serve registers w's methods on a fabric node.
func Serve(r fabric.Registrar, w Worker) {
	type none struct{}
	fabric.HandleFunc(r, MethodCapacity, func(ctx context.Context, _ fabric.PublicKey, _ none) (Capacity, error) {
		return w.Capacity(ctx)
	}, fabric.ReadOnly())
	fabric.HandleFunc(r, MethodApply, func(ctx context.Context, _ fabric.PublicKey, p ApplyParams) (none, error) {
		return none{}, w.Apply(ctx, p)
	})
	fabric.HandleFunc(r, MethodStop, func(ctx context.Context, _ fabric.PublicKey, p ReplicaRef) (none, error) {
		return none{}, w.Stop(ctx, p)
	})
	fabric.HandleFunc(r, MethodRestart, func(ctx context.Context, _ fabric.PublicKey, p ReplicaRef) (none, error) {
		return none{}, w.Restart(ctx, p)
	})
	fabric.HandleFunc(r, MethodDelete, func(ctx context.Context, _ fabric.PublicKey, p DeleteParams) (none, error) {
		return none{}, w.Delete(ctx, p)
	})
	fabric.HandleFunc(r, MethodDeleteVolume, func(ctx context.Context, _ fabric.PublicKey, p VolumeRef) (none, error) {
		return none{}, w.DeleteVolume(ctx, p)
	})
	fabric.HandleFunc(r, MethodJobs, func(ctx context.Context, _ fabric.PublicKey, _ none) (JobsReply, error) {
		jobs, err := w.Jobs(ctx)
		return JobsReply{Jobs: jobs}, err
	}, fabric.ReadOnly())
}

// Client is a Worker reached over the fabric.
type Client struct {
	node *fabric.Node
	key  fabric.PublicKey
}

// NewClient returns a Worker that calls the worker holding key.
func NewClient(n *fabric.Node, key fabric.PublicKey) *Client { return &Client{node: n, key: key} }

// Capacity implements Worker.
func (c *Client) Capacity(ctx context.Context) (Capacity, error) {
	var out Capacity
	err := c.node.Call(ctx, c.key, MethodCapacity, nil, &out)
	return out, err
}

// Apply implements Worker.
func (c *Client) Apply(ctx context.Context, p ApplyParams) error {
	return c.node.Call(ctx, c.key, MethodApply, p, nil)
}

// Stop implements Worker.
func (c *Client) Stop(ctx context.Context, r ReplicaRef) error {
	return c.node.Call(ctx, c.key, MethodStop, r, nil)
}

// Restart implements Worker.
func (c *Client) Restart(ctx context.Context, r ReplicaRef) error {
	return c.node.Call(ctx, c.key, MethodRestart, r, nil)
}

// Delete implements Worker.
func (c *Client) Delete(ctx context.Context, p DeleteParams) error {
	return c.node.Call(ctx, c.key, MethodDelete, p, nil)
}

// DeleteVolume implements Worker.
func (c *Client) DeleteVolume(ctx context.Context, p VolumeRef) error {
	return c.node.Call(ctx, c.key, MethodDeleteVolume, p, nil)
}

// Jobs implements Worker.
func (c *Client) Jobs(ctx context.Context) ([]JobReport, error) {
	var out JobsReply
	err := c.node.Call(ctx, c.key, MethodJobs, nil, &out)
	return out.Jobs, err
}

// ReporterClient pushes reports to the ork over the fabric.
type ReporterClient struct {
	node *fabric.Node
	ork  fabric.PublicKey
}

// NewReporterClient returns a Reporter that calls the ork holding key.
func NewReporterClient(n *fabric.Node, ork fabric.PublicKey) *ReporterClient {
	return &ReporterClient{node: n, ork: ork}
}

// Report implements Reporter.
func (c *ReporterClient) Report(ctx context.Context, r Report) error {
	return c.node.Call(ctx, c.ork, MethodReport, r, nil)
}

// ReportReceiver is the ork's side of Report: it learns which key sent the
// report, so it can check that the key is the rack's worker.
type ReportReceiver interface {
	ReceiveReport(ctx context.Context, from fabric.PublicKey, r Report) error
}

// ServeReporter registers the ork's report method on a fabric node.
func ServeReporter(r fabric.Registrar, rcv ReportReceiver) {
	fabric.HandleFunc(r, MethodReport, func(ctx context.Context, peer fabric.PublicKey, p Report) (struct{}, error) {
		return struct{}{}, rcv.ReceiveReport(ctx, peer, p)
	})
}

// CheckApply checks what every rack worker's Apply must refuse, as
// bad_request: a job without an ID, a reservation of another job or of
// another rack than rack, a negative or twice-reserved replica, a
// reservation holding no GPU.
func CheckApply(p ApplyParams, rack string) error {
	if p.Job.ID == "" {
		return fabric.Errorf(fabric.CodeBadRequest, "apply: job has no ID")
	}
	seen := map[int]bool{}
	for _, r := range p.Reservations {
		switch {
		case r.JobID != p.Job.ID:
			return fabric.Errorf(fabric.CodeBadRequest, "apply %s: reservation of replica %d is for job %q", p.Job.ID, r.Replica, r.JobID)
		case r.Rack != rack:
			return fabric.Errorf(fabric.CodeBadRequest, "apply %s: reservation of replica %d is on rack %q, this is %q", p.Job.ID, r.Replica, r.Rack, rack)
		case r.Replica < 0:
			return fabric.Errorf(fabric.CodeBadRequest, "apply %s: replica index %d", p.Job.ID, r.Replica)
		case seen[r.Replica]:
			return fabric.Errorf(fabric.CodeBadRequest, "apply %s: replica %d reserved twice", p.Job.ID, r.Replica)
		case r.Count() == 0:
			return fabric.Errorf(fabric.CodeBadRequest, "apply %s: reservation of replica %d holds no GPUs", p.Job.ID, r.Replica)
		}
		seen[r.Replica] = true
	}
	return nil
}

// Refused is the report of a replica the worker refuses to run, with
// reason rack_refused and why (detail: "no image \"x\" in this rack's
// catalogue").
func Refused(replica int, detail string) ReplicaReport {
	reason := cosmic.NewReason(cosmic.ReasonRackRefused, detail)
	return ReplicaReport{Replica: replica, State: cosmic.StateFailed, Reason: &reason, Observed: Observe()}
}
