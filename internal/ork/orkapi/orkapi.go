// Package orkapi is the fabric contract of wrk-ork towards the app-node (and
// operators with `cosmicac rpc`): method names, their params and results,
// and a typed Client. Errors cross the fabric as *fabric.Error with the codes
// below, which the app-node maps to HTTP statuses.
//
// Importers: internal/ork (serves it), internal/appnode (calls it), the CLI
// wiring. It imports only the domain and the fabric.
package orkapi

import (
	"context"
	"time"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
)

// Methods served by the ork.
const (
	MethodCreateJob  = "createJob"
	MethodGetJob     = "getJob"
	MethodListJobs   = "listJobs"
	MethodDeleteJob  = "deleteJob"
	MethodRestartJob = "restartJob"
	MethodKillJob    = "killJob"
	MethodLabelJob   = "labelJob"
	// MethodSetRequireAuth turns "require authorization" of a running
	// managed-inference job on or off (SetRequireAuthParams).
	MethodSetRequireAuth = "setRequireAuth"
	MethodRegisterRack   = "registerRack"
	MethodListRacks      = "listRacks"
	MethodForgetRacks    = "forgetRacks"
	// MethodDeleteVolume removes a team's standalone volume from the
	// rack that keeps it.
	MethodDeleteVolume = "deleteVolume"
	// MethodWatchPeers answers the keys bound to racks and jobs
	// (Peers), long-polled by the other components' keyrings.
	MethodWatchPeers = "watchPeers"
	// MethodWatchJobs answers the jobs' version (JobsVersion) once it
	// passes the one given, long-polled by the app-node's watches.
	MethodWatchJobs = "watchJobs"
	// MethodSetQuota, MethodDeleteQuota and MethodListQuotas keep the
	// teams' GPU quotas (docs/scheduling.md).
	MethodSetQuota    = "setQuota"
	MethodDeleteQuota = "deleteQuota"
	MethodListQuotas  = "listQuotas"
	// MethodReportLoad is proxy-inference's report of the requests each
	// autoscaled job has (LoadReport): what the ork's autoscaler sizes
	// the jobs to.
	MethodReportLoad = "reportLoad"
	// MethodUpdateJob changes a managed-inference job's spec, rolling the
	// change out to its replicas one at a time (UpdateJobParams).
	MethodUpdateJob = "updateJob"
)

// The ork's methods, each declared once with its params and result: the
// ork's handlers (Handle) and Client (Call) use these.
var (
	CreateJob      = fabric.Method[CreateJobParams, cosmic.Job]{Name: MethodCreateJob}
	GetJob         = fabric.Method[JobRef, cosmic.Job]{Name: MethodGetJob}
	ListJobs       = fabric.Method[ListJobsParams, ListJobsReply]{Name: MethodListJobs}
	DeleteJob      = fabric.Method[DeleteJobParams, cosmic.Job]{Name: MethodDeleteJob}
	RestartJob     = fabric.Method[RestartJobParams, cosmic.Job]{Name: MethodRestartJob}
	KillJob        = fabric.Method[JobRef, cosmic.Job]{Name: MethodKillJob}
	LabelJob       = fabric.Method[LabelJobParams, cosmic.Job]{Name: MethodLabelJob}
	SetRequireAuth = fabric.Method[SetRequireAuthParams, cosmic.Job]{Name: MethodSetRequireAuth}
	RegisterRack   = fabric.Method[RegisterRackParams, RackInfo]{Name: MethodRegisterRack}
	ListRacks      = fabric.Method[struct{}, ListRacksReply]{Name: MethodListRacks}
	WatchJobs      = fabric.Method[WatchJobsParams, JobsVersion]{Name: MethodWatchJobs}
	WatchPeers     = fabric.Method[WatchPeersParams, Peers]{Name: MethodWatchPeers}
	ForgetRacks    = fabric.Method[ForgetRacksParams, struct{}]{Name: MethodForgetRacks}
	DeleteVolume   = fabric.Method[VolumeRef, struct{}]{Name: MethodDeleteVolume}
	SetQuota       = fabric.Method[SetQuotaParams, Quota]{Name: MethodSetQuota}
	DeleteQuota    = fabric.Method[QuotaRef, struct{}]{Name: MethodDeleteQuota}
	ListQuotas     = fabric.Method[ListQuotasParams, ListQuotasReply]{Name: MethodListQuotas}
	ReportLoad     = fabric.Method[LoadReport, struct{}]{Name: MethodReportLoad}
	UpdateJob      = fabric.Method[UpdateJobParams, cosmic.Job]{Name: MethodUpdateJob}
)

// UpdateJobParams is a managed-inference job's new spec (whole, as create
// takes it; defaulted by the ork). Asked is as CreateJobParams'.
type UpdateJobParams struct {
	ID    string           `json:"id"`
	Spec  cosmic.Spec      `json:"spec"`
	Asked cosmic.Resources `json:"asked"`
}

// LoadReport is one proxy's load of the autoscaled jobs it routes to,
// as of now: a job it does not list has none there.
type LoadReport struct {
	Jobs []JobLoad `json:"jobs"`
}

// JobLoad is one job's requests at one proxy: in flight at its replicas,
// and waiting for a replica to be ready.
type JobLoad struct {
	ID       string `json:"id"`
	InFlight int    `json:"inFlight,omitempty"`
	Waiting  int    `json:"waiting,omitempty"`
	// Replicas are the requests in flight at each replica (by index),
	// those with any: a rollout waits for a draining replica's to end.
	Replicas map[int]int `json:"replicas,omitempty"`
}

// MaxLoadJobs bounds the jobs of one LoadReport.
const MaxLoadJobs = 10000

// MaxWatchJobsWait bounds how long the ork holds a watchJobs call.
const MaxWatchJobsWait = 25 * time.Second

// WatchJobsParams asks for the jobs' version once it is not Epoch/Since,
// waiting at most WaitMillis (0: answer at once).
type WatchJobsParams struct {
	Epoch      string `json:"epoch,omitempty"`
	Since      uint64 `json:"since,omitempty"`
	WaitMillis int    `json:"waitMillis,omitempty"`
}

// JobsVersion is the jobs' version: it grows with every change the ork
// commits; a new ork process starts a new Epoch.
type JobsVersion struct {
	Epoch   string `json:"epoch"`
	Version uint64 `json:"version"`
}

// Error codes beyond the fabric's own: the domain's (cosmic.CodeOf), which
// the ork answers as they are (fabric.CodeNotFound and CodeForbidden are
// the same strings).
const (
	// CodeInvalid: the spec or params are invalid; Details holds
	// []FieldError.
	CodeInvalid = cosmic.CodeInvalid
	// CodeConflict: the request contradicts the current state (an illegal
	// transition, a duplicate ID).
	CodeConflict = cosmic.CodeConflict
)

// FieldError is one invalid field, in an invalid error's details.
type FieldError struct {
	Field   string            `json:"field"`
	Message string            `json:"message"`
	Reason  cosmic.ReasonCode `json:"reason,omitempty"`
}

// CreateJobParams creates a job. ID is chosen by the caller (a UUID) so that
// a retried create is idempotent: creating an existing ID with the same spec
// returns the existing job.
type CreateJobParams struct {
	ID   string      `json:"id"`
	User string      `json:"user"`
	Team string      `json:"team"`
	Spec cosmic.Spec `json:"spec"`
	// Asked are the spec's resources as its creator wrote them, before
	// cosmic.Spec.Default (zero where left out): a rack's cap on a VM's
	// vCPUs or memory refuses the job only for what was asked for
	// (cosmic.Catalogue.Refuses); a default is given up to the cap.
	Asked cosmic.Resources `json:"asked,omitzero"`
}

// JobRef names a job.
type JobRef struct {
	ID string `json:"id"`
}

// Sort keys for ListJobs.
const (
	SortCreatedAt = "createdAt"
	SortUpdatedAt = "updatedAt"
	SortName      = "name"
	SortState     = "state"
)

// ListJobsParams filters, sorts and pages the job list. Zero values mean no
// filter. Page is 0-based; Size 0 means the default (50), at most 1000.
type ListJobsParams struct {
	Team          string            `json:"team,omitempty"`
	User          string            `json:"user,omitempty"`
	Name          string            `json:"name,omitempty"` // spec.name, exactly
	States        []cosmic.State    `json:"states,omitempty"`
	Labels        map[string]string `json:"labels,omitempty"` // all must match
	UpdatedAfter  time.Time         `json:"updatedAfter,omitzero"`
	UpdatedBefore time.Time         `json:"updatedBefore,omitzero"`
	Sort          string            `json:"sort,omitempty"`  // a Sort* key; default createdAt
	Order         string            `json:"order,omitempty"` // asc | desc; default desc
	Page          int               `json:"page,omitempty"`
	Size          int               `json:"size,omitempty"`
}

// ListJobsReply is one page of jobs and the total that match.
type ListJobsReply struct {
	Jobs  []cosmic.Job `json:"jobs"`
	Total int          `json:"total"`
}

// DeleteJobParams deletes a job (or one replica with Replica set).
type DeleteJobParams struct {
	ID      string `json:"id"`
	Force   bool   `json:"force,omitempty"`
	Replica *int   `json:"replica,omitempty"`
}

// RestartJobParams restarts a job (or one replica with Replica set).
type RestartJobParams struct {
	ID      string `json:"id"`
	Replica *int   `json:"replica,omitempty"`
}

// LabelJobParams sets (or with an empty Value, removes) one label.
type LabelJobParams struct {
	ID    string `json:"id"`
	Name  string `json:"name"`
	Value string `json:"value"`
}

// SetRequireAuthParams sets inference.requireAuth of managed-inference job
// ID: off, its model is reached without an API key (and by every team's).
type SetRequireAuthParams struct {
	ID          string `json:"id"`
	RequireAuth bool   `json:"requireAuth"`
}

// RackInfo is a registered rack and its capacity as last reported.
type RackInfo struct {
	cosmic.Rack
	Nodes     []cosmic.Node `json:"nodes"`
	GPUs      int           `json:"gpus"`
	FreeGPUs  int           `json:"freeGpus"`
	Reachable bool          `json:"reachable"`
	// Problem is what the worker says stops the rack from taking jobs
	// until an operator fixes it, with the fix (worker.Capacity.Problem).
	Problem *cosmic.Reason `json:"problem,omitempty"`
	// Note is the worker's note on the rack's capacity (worker.Capacity.Note).
	Note string `json:"note,omitempty"`
	// Catalogue is what the rack runs, as its worker last reported it
	// (worker.Capacity.Catalogue); nil until it reports one.
	Catalogue *cosmic.Catalogue `json:"catalogue,omitempty"`
	// WorkerAddrs is where the ork dials the worker.
	WorkerAddrs []string `json:"workerAddrs,omitempty"`
	// Volumes are the standalone volumes the rack keeps, of every team,
	// as its worker last reported them (worker.Capacity.Volumes): the
	// app-node shows a team its own only.
	Volumes []cosmic.StoredVolume `json:"volumes,omitempty"`
}

// RegisterRackParams registers (or updates) a rack. WorkerAddrs tells the
// ork where to reach the worker's key.
type RegisterRackParams struct {
	cosmic.Rack
	WorkerAddrs []string `json:"workerAddrs,omitempty"`
}

// ListRacksReply lists the racks.
type ListRacksReply struct {
	Racks []RackInfo `json:"racks"`
}

// VolumeRef names a team's standalone volume.
type VolumeRef struct {
	Team string `json:"team"`
	Name string `json:"name"`
}

// ForgetRacksParams removes racks. A rack with jobs holding GPUs is refused
// unless Force, which fails those jobs with rack_removed.
type ForgetRacksParams struct {
	IDs   []string `json:"ids"`
	Force bool     `json:"force,omitempty"`
}

// Quota caps the GPUs a team's jobs may hold at once in a location, of one
// GPU model or, with GPUModel empty, of every model there together. A job
// whose team would go over a quota that covers it stays queued with the
// reason team_quota.
type Quota struct {
	Team      string    `json:"team"`
	Location  string    `json:"location"`
	GPUModel  string    `json:"gpuModel,omitempty"`
	GPUs      int       `json:"gpus"`
	UpdatedAt time.Time `json:"updatedAt,omitzero"`
	UpdatedBy string    `json:"updatedBy,omitempty"`
	// Used is how many GPUs the team's jobs hold under the quota now.
	Used int `json:"used"`
}

// SetQuotaParams sets (or replaces) the quota of (Team, Location,
// GPUModel); By names who set it. Team and Location are required, GPUs is
// 0 or more.
type SetQuotaParams struct {
	Team     string `json:"team"`
	Location string `json:"location"`
	GPUModel string `json:"gpuModel,omitempty"`
	GPUs     int    `json:"gpus"`
	By       string `json:"by,omitempty"`
}

// QuotaRef names a quota; deleting one that is not set is not_found.
type QuotaRef struct {
	Team     string `json:"team"`
	Location string `json:"location"`
	GPUModel string `json:"gpuModel,omitempty"`
}

// ListQuotasParams lists one team's quotas, or every team's with Team
// empty.
type ListQuotasParams struct {
	Team string `json:"team,omitempty"`
}

// ListQuotasReply lists quotas by team, location and GPU model.
type ListQuotasReply struct {
	Quotas []Quota `json:"quotas"`
}

// Client calls an ork over the fabric.
type Client struct {
	node *fabric.Node
	key  fabric.PublicKey
}

// NewClient returns a client of the ork holding key.
func NewClient(n *fabric.Node, key fabric.PublicKey) *Client { return &Client{node: n, key: key} }

// CreateJob creates a job.
func (c *Client) CreateJob(ctx context.Context, p CreateJobParams) (cosmic.Job, error) {
	return CreateJob.Call(ctx, c.node, c.key, p)
}

// GetJob returns a job.
func (c *Client) GetJob(ctx context.Context, id string) (cosmic.Job, error) {
	return GetJob.Call(ctx, c.node, c.key, JobRef{ID: id})
}

// ListJobs lists jobs.
func (c *Client) ListJobs(ctx context.Context, p ListJobsParams) (ListJobsReply, error) {
	return ListJobs.Call(ctx, c.node, c.key, p)
}

// DeleteJob deletes a job or a replica and returns the job as it now is.
func (c *Client) DeleteJob(ctx context.Context, p DeleteJobParams) (cosmic.Job, error) {
	return DeleteJob.Call(ctx, c.node, c.key, p)
}

// RestartJob restarts a job or a replica.
func (c *Client) RestartJob(ctx context.Context, p RestartJobParams) (cosmic.Job, error) {
	return RestartJob.Call(ctx, c.node, c.key, p)
}

// KillJob stops a job, releasing its GPUs and keeping its storage.
func (c *Client) KillJob(ctx context.Context, id string) (cosmic.Job, error) {
	return KillJob.Call(ctx, c.node, c.key, JobRef{ID: id})
}

// LabelJob sets or removes a label.
func (c *Client) LabelJob(ctx context.Context, p LabelJobParams) (cosmic.Job, error) {
	return LabelJob.Call(ctx, c.node, c.key, p)
}

// SetRequireAuth turns a managed-inference job's "require authorization"
// on or off and returns the job as it now is.
func (c *Client) SetRequireAuth(ctx context.Context, p SetRequireAuthParams) (cosmic.Job, error) {
	return SetRequireAuth.Call(ctx, c.node, c.key, p)
}

// ReportLoad sends this proxy's load of the autoscaled jobs.
func (c *Client) ReportLoad(ctx context.Context, p LoadReport) error {
	_, err := ReportLoad.Call(ctx, c.node, c.key, p)
	return err
}

// UpdateJob changes a managed-inference job's spec.
func (c *Client) UpdateJob(ctx context.Context, p UpdateJobParams) (cosmic.Job, error) {
	return UpdateJob.Call(ctx, c.node, c.key, p)
}

// RegisterRack registers or updates a rack.
func (c *Client) RegisterRack(ctx context.Context, p RegisterRackParams) (RackInfo, error) {
	return RegisterRack.Call(ctx, c.node, c.key, p)
}

// ListRacks lists racks with their capacity.
func (c *Client) ListRacks(ctx context.Context) (ListRacksReply, error) {
	return ListRacks.Call(ctx, c.node, c.key, struct{}{})
}

// DeleteVolume removes a team's standalone volume.
func (c *Client) DeleteVolume(ctx context.Context, p VolumeRef) error {
	_, err := DeleteVolume.Call(ctx, c.node, c.key, p)
	return err
}

// ForgetRacks removes racks.
func (c *Client) ForgetRacks(ctx context.Context, p ForgetRacksParams) error {
	_, err := ForgetRacks.Call(ctx, c.node, c.key, p)
	return err
}

// WatchJobs is MethodWatchJobs.
func (c *Client) WatchJobs(ctx context.Context, p WatchJobsParams) (JobsVersion, error) {
	return WatchJobs.Call(ctx, c.node, c.key, p)
}

// WatchPeers is MethodWatchPeers: the keys bound to racks and jobs, once
// they differ from p's version or the wait ends (trust.PeerSource).
func (c *Client) WatchPeers(ctx context.Context, p WatchPeersParams) (Peers, error) {
	return WatchPeers.Call(ctx, c.node, c.key, p)
}

// SetQuota sets a team's quota and returns it with the GPUs used under it.
func (c *Client) SetQuota(ctx context.Context, p SetQuotaParams) (Quota, error) {
	return SetQuota.Call(ctx, c.node, c.key, p)
}

// DeleteQuota removes a team's quota.
func (c *Client) DeleteQuota(ctx context.Context, p QuotaRef) error {
	_, err := DeleteQuota.Call(ctx, c.node, c.key, p)
	return err
}

// ListQuotas lists quotas with the GPUs used under each.
func (c *Client) ListQuotas(ctx context.Context, p ListQuotasParams) (ListQuotasReply, error) {
	return ListQuotas.Call(ctx, c.node, c.key, p)
}
