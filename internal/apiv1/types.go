package apiv1

import (
	"encoding/json"
	"time"

	"github.com/cosmicac/cosmicac/internal/authz"
	"github.com/cosmicac/cosmicac/internal/cosmic"
)

// Prefix is the path prefix of every route of this API.
const Prefix = "/api/v1"

// Job is a job as the API shows it: the domain's JSON.
type Job = cosmic.Job

// Spec is a job spec as the API takes it: the domain's JSON ("region" is
// accepted as an alias of "location").
type Spec = cosmic.Spec

// Command is the `cosmicac jobs create` line equivalent to a spec:
// {"command": "...", "args": [...], "unexpressed": [...]}.
type Command = cosmic.Command

// FieldError is one invalid field, in the details of an "invalid" error.
type FieldError = cosmic.FieldError

// JobList is one page of jobs. Page is 1-based; Total counts every job that
// matches the filters, on every page.
type JobList struct {
	Items []Job `json:"items"`
	Total int   `json:"total"`
	Page  int   `json:"page"`
	Size  int   `json:"size"`
}

// Error codes of ErrorBody.Code. Programs match them; messages are for
// people and may change. The domain's kinds (cosmic.Codes) are among them,
// as the same strings; StatusOf is each code's HTTP status.
const (
	CodeInvalid          = cosmic.CodeInvalid   // 400: the input is invalid; details: []FieldError
	CodeBadRequest       = "bad_request"        // 400: the request cannot be read
	CodeUnauthorized     = "unauthorized"       // 401: no token, or an unknown or expired one
	CodeForbidden        = cosmic.CodeForbidden // 403: the user's role does not allow it
	CodeNotFound         = cosmic.CodeNotFound  // 404: no such object (or not visible to the user)
	CodeMethodNotAllowed = "method_not_allowed" // 405
	CodeRequestTimeout   = "request_timeout"    // 408: the request's body did not arrive in time
	CodeConflict         = cosmic.CodeConflict  // 409: contradicts the object's current state
	CodeTooLarge         = "too_large"          // 413: the body exceeds the size limit
	CodeTooManyRequests  = "too_many_requests"  // 429: too many attempts; retry after Retry-After seconds
	CodeInternal         = "internal"           // 500: a bug or an unexpected failure; see the server log
	CodeNotImplemented   = "not_implemented"    // 501: not available yet
	CodeUnavailable      = "unavailable"        // 503: a component behind the API cannot be reached
	CodeTimeout          = "deadline_exceeded"  // 504: a component behind the API did not answer in time
)

// statuses is every code's HTTP status.
var statuses = map[string]int{
	CodeInvalid: 400, CodeBadRequest: 400, CodeUnauthorized: 401, CodeForbidden: 403, CodeNotFound: 404,
	CodeMethodNotAllowed: 405, CodeRequestTimeout: 408, CodeConflict: 409, CodeTooLarge: 413, CodeInternal: 500,
	CodeNotImplemented: 501, CodeUnavailable: 503, CodeTimeout: 504,
}

// Codes lists every error code.
func Codes() []string {
	out := make([]string, 0, len(statuses))
	for c := range statuses {
		out = append(out, c)
	}
	return out
}

// StatusOf is the HTTP status of an error code (500 for a code it does not
// know).
func StatusOf(code string) int {
	if s, ok := statuses[code]; ok {
		return s
	}
	return 500
}

// ErrorResponse is the body of every non-2xx answer.
type ErrorResponse struct {
	Error ErrorBody `json:"error"`
}

// ErrorBody is one error. Details, when present, depends on the code: for
// "invalid" it is a []FieldError naming every problem at once.
type ErrorBody struct {
	Code    string          `json:"code"`
	Message string          `json:"message"`
	Details json.RawMessage `json:"details,omitempty"`
}

// Label sets one label of a job; an empty Value removes it.
type Label struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// DataSyncDirection says which way a manual data synchronisation goes.
type DataSyncDirection string

// The data sync directions.
const (
	DataSyncPush DataSyncDirection = "push" // from the job's volume to its data store
	DataSyncPull DataSyncDirection = "pull" // from the data store into the job's volume
)

// DataSyncDirections lists the directions.
var DataSyncDirections = []DataSyncDirection{DataSyncPush, DataSyncPull}

// DataSync asks for a manual synchronisation of one volume of a job.
type DataSync struct {
	Direction DataSyncDirection `json:"direction"`
	// Volume names one volume, by its name, else its mount path; absent:
	// every datastore volume of the job.
	Volume string `json:"volume,omitempty"`
}

// DataSyncResult is a datasync of a replica (POST and GET
// /api/v1/jobs/{id}/datasync): what each volume's sync did, or does, in
// the spec's order. State is running until every volume is done, then
// done (a volume's failure is in that volume).
type DataSyncResult struct {
	Direction DataSyncDirection `json:"direction"`
	Replica   int               `json:"replica"`
	State     string            `json:"state"`
	StartedAt time.Time         `json:"startedAt,omitzero"`
	EndedAt   time.Time         `json:"endedAt,omitzero"`
	Volumes   []VolumeSync      `json:"volumes"`
}

// The states of a datasync and of each of its volumes
// (DataSyncResult.State, VolumeSync.State).
const (
	DataSyncQueued  = "queued"
	DataSyncRunning = "running"
	DataSyncDone    = "done"
	DataSyncFailed  = "failed"
)

// VolumeSync is one volume's sync: its state (queued, running, done or
// failed), the objects and bytes it moved so far and, once a pull's
// listing is read, in all (TotalObjects, TotalBytes), the files a push
// found unchanged, the remote objects an RWD push deleted, the names
// skipped (links, names that are no path); Error and Reason when it
// failed (its files kept as they were).
type VolumeSync struct {
	Index        int      `json:"index"`
	MountPath    string   `json:"mountPath"`
	State        string   `json:"state"`
	Objects      int64    `json:"objects"`
	Bytes        int64    `json:"bytes"`
	TotalObjects int64    `json:"totalObjects,omitempty"`
	TotalBytes   int64    `json:"totalBytes,omitempty"`
	Unchanged    int64    `json:"unchanged,omitempty"`
	Deleted      int64    `json:"deleted,omitempty"`
	Skipped      []string `json:"skipped,omitempty"`
	Error        string   `json:"error,omitempty"`
	Reason       string   `json:"reason,omitempty"`
}

// Rack is a registered rack and its capacity as its worker last reported it.
type Rack struct {
	ID          string        `json:"id"`
	Type        string        `json:"type"`
	Location    string        `json:"location"`
	GPUModel    string        `json:"gpuModel"`
	WorkerKey   string        `json:"workerKey"`
	CreatedAt   time.Time     `json:"createdAt"`
	Nodes       []cosmic.Node `json:"nodes"`
	GPUs        int           `json:"gpus"`
	FreeGPUs    int           `json:"freeGpus"`
	Reachable   bool          `json:"reachable"`
	WorkerAddrs []string      `json:"workerAddrs,omitempty"`
	// Problem, when set, is why the rack cannot take jobs until an
	// operator fixes it, with the fix (e.g. rack_misconfigured: its
	// Kubernetes namespace is missing).
	Problem *cosmic.Reason `json:"problem,omitempty"`
	// Note is what users should know of the rack's capacity, from its
	// worker (a QEMU rack without GPUs declares them for placement only).
	Note string `json:"note,omitempty"`
	// AgentDeadline is the seconds a replica placed or restarted on the
	// rack may take until its agent connects (then it fails with
	// agent_timeout): the registration's, or the default (600).
	AgentDeadline int `json:"agentDeadline"`
	// PlacementPolicy is the registration's placement policy for the
	// rack's location; absent: the ork's default (docs/placement.md).
	PlacementPolicy string `json:"placementPolicy,omitempty"`
	// Catalogue is what the rack runs, as its worker last reported it
	// (images, job types, runtimes, the most a VM gets); absent until it
	// reports one.
	Catalogue *cosmic.Catalogue `json:"catalogue,omitempty"`
}

// RackList is every registered rack.
type RackList struct {
	Items []Rack `json:"items"`
	Total int    `json:"total"`
}

// Fleet is the platform's GPUs by location and GPU model, as a job's spec
// names them (location, resources.gpuModel), counted as the ork counts its
// racks (RackList) but without the racks and nodes they are on: what a
// member needs to choose a job's location, model and GPU count.
type Fleet struct {
	Locations []FleetLocation `json:"locations"`
}

// FleetLocation is one location's GPU models, by model name.
type FleetLocation struct {
	Name      string          `json:"name"`
	GPUModels []FleetGPUModel `json:"gpuModels"`
}

// FleetGPUModel is the GPUs of one model in one location. A single-node
// job (every job but a vLLM replica larger than a node) may ask for at most
// MaxPerNode GPUs, and is placed at once if it asks for at most
// MaxFreePerNode; Free counts GPUs a replica could be placed on (of
// schedulable, ready nodes), which may be spread over several nodes.
type FleetGPUModel struct {
	Model          string `json:"model"`
	Nodes          int    `json:"nodes"`
	GPUs           int    `json:"gpus"`
	Free           int    `json:"free"`
	MaxPerNode     int    `json:"maxPerNode"`
	MaxFreePerNode int    `json:"maxFreePerNode"`
	// MaxCPUPerNode and MaxMemoryMiBPerNode are the most vCPUs and memory
	// a node gives CosmicAC's jobs (0: its worker reports none).
	MaxCPUPerNode       int   `json:"maxCpuPerNode,omitempty"`
	MaxMemoryMiBPerNode int64 `json:"maxMemoryMiBPerNode,omitempty"`
	// Catalogue is what its racks run, together: the job types, runtimes
	// and images of any of them (no images: one takes any image), and the
	// most a VM of them gets (0: one has no cap). Absent while one of its
	// racks has not reported its catalogue.
	Catalogue *cosmic.Catalogue `json:"catalogue,omitempty"`
}

// RegisterRack registers a rack, or updates the rack with that ID (an
// update without agentDeadline gives the rack the default). Type
// defaults to "server". WorkerAddrs tells the ork where to dial the worker's
// key (host:port of its fabric listener).
type RegisterRack struct {
	ID          string   `json:"id"`
	Type        string   `json:"type,omitempty"`
	Location    string   `json:"location"`
	GPUModel    string   `json:"gpuModel"`
	WorkerKey   string   `json:"workerKey"`
	WorkerAddrs []string `json:"workerAddrs,omitempty"`
	// AgentDeadline is the seconds a replica placed or restarted on the
	// rack may take until its agent connects, 1 to 86400; 0 or absent: the
	// default, 600 (docs/scheduling.md, "Deadlines").
	AgentDeadline int `json:"agentDeadline,omitempty"`
	// PlacementPolicy is how the ork ranks the nodes of the rack's
	// location: best-fit or fgd; absent: the ork's default. The racks of
	// one location share one policy (docs/placement.md).
	PlacementPolicy string `json:"placementPolicy,omitempty"`
}

// WhoAmI is the caller as the API knows it.
type WhoAmI struct {
	User          string `json:"user"`
	PlatformAdmin bool   `json:"platformAdmin"`
	// Team is the request's active team ("" for none) and Role the
	// caller's role in it.
	Team string      `json:"team"`
	Role cosmic.Role `json:"role,omitempty"`
	// Teams are every team the caller belongs to.
	Teams []cosmic.Member `json:"teams"`
	// Token is the ID of the token (or session) the request carried.
	Token string `json:"token"`
	// Credential is "token" or "session"; a token's binding, scope and
	// selector follow.
	Credential string            `json:"credential"`
	BoundTeam  string            `json:"boundTeam,omitempty"`
	Scope      string            `json:"scope,omitempty"`
	Selector   map[string]string `json:"selector,omitempty"`
	// CSRFToken is the session's CSRF token, to send as X-CSRF-Token with
	// every request that changes something (sessions only).
	CSRFToken string    `json:"csrfToken,omitempty"`
	ExpiresAt time.Time `json:"expiresAt,omitzero"`
	// Permissions are the permissions (docs/permissions.md) the request's
	// credential holds in the active team and on the platform, as the
	// API checks them: the web interface shows only the actions they
	// allow.
	Permissions []authz.Permission `json:"permissions"`
}

// Health is the answer of the health check.
type Health struct {
	Status  string `json:"status"` // "ok"
	Version string `json:"version"`
}

// ShellRequest opens a shell (the body of POST /jobs/{id}/shell): argv
// empty for the login shell; tty asks for a terminal of rows × cols.
type ShellRequest struct {
	Argv []string `json:"argv,omitempty"`
	TTY  bool     `json:"tty"`
	Rows int      `json:"rows,omitempty"`
	Cols int      `json:"cols,omitempty"`
	Term string   `json:"term,omitempty"`
	Env  []string `json:"env,omitempty"`
}

// The types of the terminal's text messages.
const (
	TerminalResizeType = "resize"
	TerminalExitType   = "exit"
)

// TerminalResize is the text message a terminal's client sends when its
// window changes: {"type":"resize","cols":N,"rows":N}.
type TerminalResize struct {
	Type string `json:"type"`
	Cols int    `json:"cols"`
	Rows int    `json:"rows"`
}

// TerminalExit is the terminal's last message, when its shell ends: the
// exit code (128+signal number for a process a signal killed), the signal,
// or why the session could not run at all.
type TerminalExit struct {
	Type   string `json:"type"`
	Code   int    `json:"code"`
	Signal string `json:"signal,omitempty"`
	Error  string `json:"error,omitempty"`
}

// APIKey is an inference API key as the API lists it (never its secret):
// it belongs to a team and reaches that team's models at /inference/v1
// (docs/inference.md, "API keys").
type APIKey struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	Team      string    `json:"team"`
	CreatedBy string    `json:"createdBy"`
	Prefix    string    `json:"prefix"` // the start of the secret, to recognise it
	CreatedAt time.Time `json:"createdAt"`
	// Models limits the key to these served model names (absent: every
	// model its team reaches).
	Models []string `json:"models,omitempty"`
	// ExpiresAt ends the key (absent: never).
	ExpiresAt time.Time `json:"expiresAt,omitzero"`
	// RotatedAt is the last rotation; the secret it replaced works until
	// PreviousExpiresAt (absent once it has ended).
	RotatedAt         time.Time `json:"rotatedAt,omitzero"`
	PreviousExpiresAt time.Time `json:"previousExpiresAt,omitzero"`
	// LastUsedAt is when proxy-inference last saw the key, to the minute.
	LastUsedAt time.Time `json:"lastUsedAt,omitzero"`
	// TokensPerMinute caps the prompt and completion tokens the key's
	// requests spend in a minute at each proxy-inference (absent: no cap).
	TokensPerMinute int64 `json:"tokensPerMinute,omitempty"`
}

// InferenceAuth is the body of PUT /api/v1/jobs/{id}/inference/auth.
type InferenceAuth struct {
	RequireAuth *bool `json:"requireAuth"`
}

// CreateAPIKey is the body of POST /api/v1/api-keys. Team defaults to the
// caller's; only admins may name another. Models limits the key to those
// served model names (at most MaxKeyModels); ExpiresAt (RFC 3339) or
// ExpiresIn (a Go duration, "720h") ends it, not both.
type CreateAPIKey struct {
	Name      string    `json:"name"`
	Team      string    `json:"team,omitempty"`
	Models    []string  `json:"models,omitempty"`
	ExpiresAt time.Time `json:"expiresAt,omitzero"`
	ExpiresIn string    `json:"expiresIn,omitempty"`
	// TokensPerMinute caps the tokens the key spends a minute (0: none;
	// at most MaxKeyTokensPerMinute).
	TokensPerMinute int64 `json:"tokensPerMinute,omitempty"`
}

// RotateAPIKey is the body of POST /api/v1/api-keys/{id}/rotate (it may be
// empty): how long the old secret keeps working, a Go duration from 0s to
// MaxKeyGrace (default DefaultKeyGrace).
type RotateAPIKey struct {
	Grace string `json:"grace,omitempty"`
}

// Limits of API keys.
const (
	MaxKeyModels = 32
	// MaxKeyTokensPerMinute bounds a key's tokens per minute.
	MaxKeyTokensPerMinute = 1 << 40
	DefaultKeyGrace       = 24 * time.Hour
	MaxKeyGrace           = 7 * 24 * time.Hour
)

// CreatedAPIKey is the answer of POST /api/v1/api-keys: the key and its
// secret, which is shown this once.
type CreatedAPIKey struct {
	APIKey
	Key string `json:"key"`
}

// APIKeyList is the answer of GET /api/v1/api-keys.
type APIKeyList struct {
	Items []APIKey `json:"items"`
	Total int      `json:"total"`
}
