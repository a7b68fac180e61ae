package apiv1

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/cosmicac/cosmicac/internal/authz"
	"github.com/cosmicac/cosmicac/internal/cosmic"
)

// Where a parameter travels.
const (
	InPath  = "path"
	InQuery = "query"
)

// Param is one path or query parameter of a route.
type Param struct {
	Name string
	In   string // InPath or InQuery
	// Type is a value of the parameter's Go type, reflected for its schema
	// ("" string, 0 integer, false boolean, time.Time{} date-time, a slice
	// for a repeatable parameter).
	Type        any
	Enum        []string // allowed values, when Type is a plain string
	Required    bool
	Description string
}

// Route is one operation of the API. The app-node registers a handler for
// each route under Method+" "+Path and the OpenAPI document describes the
// same list, so the two cannot drift.
type Route struct {
	Op          string // operationId; unique; the app-node's handler key
	Method      string
	Path        string // ServeMux pattern syntax, which is also OpenAPI's: /api/v1/jobs/{id}
	Tag         string
	Summary     string
	Description string
	// Perm is the permission the caller needs (docs/permissions.md). A
	// team permission acts in the job the path's {id} names (in its team),
	// else in the team the path's {team} names, else in the request's
	// active team.
	Perm authz.Permission
	// AllTeams lets a platform admin name every team (the team AllTeams)
	// to list across them.
	AllTeams bool
	Params   []Param
	Request  any   // a value of the body's type; nil: no body
	Response any   // a value of the success body's type; nil: no body
	Status   int   // the success status
	Errors   []int // error statuses beyond those implied (see ErrorStatuses)
	// Proxy marks a route that forwards to a job's own server: its last
	// path parameter takes the rest of the path, slashes included
	// ({name...} in the ServeMux pattern; OpenAPI has no such template, so
	// the document names it {name}), the query and the body are the job's
	// (no unknown-parameter check), and the handler authenticates the
	// caller itself (the job's spec may waive the token).
	Proxy bool
	// Preview marks a route whose method is unsafe (it takes a body) but
	// that changes nothing, such as a dry run: the audit log leaves it out,
	// as it does reads.
	Preview bool
}

// Pattern is the route's net/http ServeMux pattern.
func (r Route) Pattern() string {
	if r.Proxy && strings.HasSuffix(r.Path, "}") {
		return r.Method + " " + strings.TrimSuffix(r.Path, "}") + "...}"
	}
	return r.Method + " " + r.Path
}

// ErrorStatuses lists the error statuses the route may answer, ascending:
// 400 when it takes parameters or a body, 401 and 403 unless public, 404
// when it names an object or acts in a team, 413 with a body, 500 and 503 always, and
// r.Errors.
func (r Route) ErrorStatuses() []int {
	set := map[int]bool{http.StatusInternalServerError: true}
	if len(r.Params) > 0 || r.Request != nil {
		set[http.StatusBadRequest] = true
	}
	if r.Perm != authz.Public {
		set[http.StatusUnauthorized] = true
		set[http.StatusForbidden] = true
		set[http.StatusServiceUnavailable] = true // the ork could not be reached: not done
		set[http.StatusGatewayTimeout] = true     // it did not answer in time, or the connection was lost mid-call: perhaps done
	}
	if authz.KindOf(r.Perm) == authz.KindTeam {
		set[http.StatusNotFound] = true // the team, or the job, is not the caller's
	}
	for _, p := range r.Params {
		if p.In == InPath {
			set[http.StatusNotFound] = true
		}
	}
	if r.Request != nil {
		set[http.StatusRequestEntityTooLarge] = true
	}
	for _, s := range r.Errors {
		set[s] = true
	}
	var out []int
	for s := 100; s < 600; s++ {
		if set[s] {
			out = append(out, s)
		}
	}
	return out
}

// Operation IDs: the app-node's handler keys and the document's operationIds.
const (
	OpCreateJob               = "createJob"
	OpListJobs                = "listJobs"
	OpGetJob                  = "getJob"
	OpDeleteJob               = "deleteJob"
	OpRestartJob              = "restartJob"
	OpKillJob                 = "killJob"
	OpDataSyncJob             = "dataSyncJob"
	OpGetDataSync             = "getDataSync"
	OpLabelJob                = "labelJob"
	OpJobCommand              = "jobCommand"
	OpInferenceAuth           = "setInferenceAuth"
	OpUpdateJob               = "updateJob"
	OpRestartReplica          = "restartReplica"
	OpDeleteReplica           = "deleteReplica"
	OpJobShell                = "jobShell"
	OpJobSSH                  = "jobSSH"
	OpJobTerminal             = "jobTerminal"
	OpJobHTTPGet              = "jobHTTPGet"
	OpJobHTTPHead             = "jobHTTPHead"
	OpJobHTTPPost             = "jobHTTPPost"
	OpJobHTTPPut              = "jobHTTPPut"
	OpJobHTTPPatch            = "jobHTTPPatch"
	OpJobHTTPDelete           = "jobHTTPDelete"
	OpJobHTTPOptions          = "jobHTTPOptions"
	OpGetFleet                = "getFleet"
	OpListRacks               = "listRacks"
	OpRegisterRack            = "registerRack"
	OpRemoveRack              = "removeRack"
	OpCreateAPIKey            = "createAPIKey"
	OpListAPIKeys             = "listAPIKeys"
	OpRevokeAPIKey            = "revokeAPIKey"
	OpRotateAPIKey            = "rotateAPIKey"
	OpCreateDatastore         = "createDatastore"
	OpListDatastores          = "listDatastores"
	OpListVolumes             = "listVolumes"
	OpDeleteVolume            = "deleteVolume"
	OpGetDatastore            = "getDatastore"
	OpSetDatastoreCredentials = "setDatastoreCredentials"
	OpDeleteDatastore         = "deleteDatastore"
	OpWhoAmI                  = "whoAmI"
	OpOpenAPI                 = "openAPI"
	OpHealth                  = "health"
)

// Query parameters of listJobs.
const (
	QueryLabelSelector = "labelSelector"
	QueryOrder         = "order"
	QueryPage          = "page"
	QuerySize          = "size"
	QuerySort          = "sort"
	QueryStatusState   = "statusState"
	QueryUpdatedAfter  = "updatedAfter"
	QueryUpdatedBefore = "updatedBefore"
	QueryUserName      = "userName"
	QueryName          = "name"
	// QueryWatch holds a listJobs or getJob until the jobs change after
	// the version given (the HeaderJobsVersion of the last answer; empty:
	// answer at once with it), at most MaxWatchWait.
	QueryWatch   = "watch"
	QueryForce   = "force"
	QueryReplica = "replica"
	// QueryWait=false has POST …/datasync answer once the sync has begun.
	QueryWait = "wait"
	// QueryCols and QueryRows are the terminal's size at its open.
	QueryCols = "cols"
	QueryRows = "rows"
)

// HeaderJobsVersion is the jobs' version a watched answer shows: pass it
// as the next watch's QueryWatch.
const HeaderJobsVersion = "X-Cosmicac-Jobs-Version"

// MaxWatchWait bounds how long a watch holds a request.
const MaxWatchWait = 25 * time.Second

// JobHTTPOps are the operations of HTTP to the job, one per method.
var JobHTTPOps = map[string]string{
	http.MethodGet: OpJobHTTPGet, http.MethodHead: OpJobHTTPHead, http.MethodPost: OpJobHTTPPost,
	http.MethodPut: OpJobHTTPPut, http.MethodPatch: OpJobHTTPPatch, http.MethodDelete: OpJobHTTPDelete,
	http.MethodOptions: OpJobHTTPOptions,
}

// Upgrade tokens of the shell and SSH routes (agentapi.ShellUpgrade and
// agentapi.TCPUpgrade).
const (
	UpgradeShell = "cosmicac-shell.v1"
	UpgradeTCP   = "cosmicac-tcp.v1"
)

// The terminal's sizes (rows and columns) and its messages' limit.
const (
	DefaultTerminalCols = 80
	DefaultTerminalRows = 24
	MaxTerminalSize     = 1000
	TerminalReadLimit   = 64 << 10
)

// Paging limits of listJobs.
const (
	DefaultPageSize = 50
	MaxPageSize     = 1000
)

// Filter limits of listJobs: more is refused (400), not queried. They are
// the store's (store.MaxLabelFilters, store.MaxStateFilters), well under
// SQLite's 64 tables in a join (each label is one).
const (
	MaxLabelSelectorTerms = 16
	MaxStatusStates       = 32  // values of statusState, repeated and comma-separated together
	MaxUserNameLen        = 128 // of userName
)

// Sort keys and orders of listJobs.
var (
	SortKeys = []string{"createdAt", "updatedAt", "name", "state"}
	Orders   = []string{"asc", "desc"}
)

var (
	jobID        = Param{Name: "id", In: InPath, Type: "", Required: true, Description: "Job ID (a UUID)"}
	replicaQuery = Param{Name: QueryReplica, In: InQuery, Type: 0, Description: "Replica index, from 0 (default 0)"}
	replicaN     = Param{Name: "n", In: InPath, Type: 0, Required: true, Description: "Replica index, from 0"}
	watchParam   = Param{Name: QueryWatch, In: InQuery, Type: "", Description: fmt.Sprintf("Watch: hold the request until the jobs change after this version (the %s header of the last answer; empty: answer at once), at most %v, then answer as without it, with the version it shows in %s. A loop of these follows the jobs as they change.", HeaderJobsVersion, MaxWatchWait, HeaderJobsVersion)}
	force        = func(what string) Param {
		return Param{Name: QueryForce, In: InQuery, Type: false, Description: what}
	}
)

// Routes returns the API's routes, in the order the document lists them.
func Routes() []Route {
	job := cosmic.Job{}
	routes := []Route{
		{Op: OpCreateJob, Method: http.MethodPost, Path: Prefix + "/jobs", Tag: "jobs", Perm: authz.JobsCreate,
			Summary:     "Create a job",
			Description: "Decodes the spec strictly (unknown fields are refused), fills defaults and validates it, reporting every invalid field at once in the error's details. A job that could never fit the fleet (an unknown location or GPU model, more GPUs than a node or the location holds) is refused the same way, its field's reason carrying the code (no_such_location, no_such_gpu_model, exceeds_node_gpus, exceeds_location_gpus); nothing is stored. The job belongs to the caller and the caller's team. A team creates at most the app-node's jobCreatesPerMinute (default 120) jobs a minute (429 with Retry-After beyond it), and holds at most the ork's maxJobsPerTeam (default 1000) jobs in any state (403 beyond it).",
			Request:     cosmic.Spec{}, Response: job, Status: http.StatusCreated, Errors: []int{http.StatusConflict, http.StatusTooManyRequests}},
		{Op: OpListJobs, Method: http.MethodGet, Path: Prefix + "/jobs", Tag: "jobs", Perm: authz.JobsRead, AllTeams: true,
			Summary:     "List jobs",
			Description: "Lists the jobs of the caller's team (every team for admins), filtered, sorted and paged. Unknown parameters, and parameters other than statusState given more than once, are refused; so are filters over their limits (400, naming the limit).",
			Params: []Param{
				{Name: QueryLabelSelector, In: InQuery, Type: "", Description: fmt.Sprintf("Labels that must all match: key=value[,key=value...]; at most %d terms, keys at most %d bytes, values at most %d", MaxLabelSelectorTerms, cosmic.MaxLabelKeyLen, cosmic.MaxLabelValueLen)},
				{Name: QueryOrder, In: InQuery, Type: "", Enum: Orders, Description: "Order of the sort (default desc)"},
				{Name: QueryPage, In: InQuery, Type: 0, Description: "Page, from 1 (default 1)"},
				{Name: QuerySize, In: InQuery, Type: 0, Description: "Page size, 1 to 1000 (default 50)"},
				{Name: QuerySort, In: InQuery, Type: "", Enum: SortKeys, Description: "Sort key (default createdAt)"},
				{Name: QueryStatusState, In: InQuery, Type: []cosmic.State{}, Description: fmt.Sprintf("States to keep; repeatable, or comma-separated; at most %d values in all", MaxStatusStates)},
				{Name: QueryUpdatedAfter, In: InQuery, Type: time.Time{}, Description: "Keep jobs updated after this time (RFC 3339)"},
				{Name: QueryUpdatedBefore, In: InQuery, Type: time.Time{}, Description: "Keep jobs updated before this time (RFC 3339)"},
				{Name: QueryUserName, In: InQuery, Type: "", Description: fmt.Sprintf("Keep jobs created by this user (a name of at most %d bytes)", MaxUserNameLen)},
				{Name: QueryName, In: InQuery, Type: "", Description: fmt.Sprintf("Keep the job of this name (spec.name, exactly; names are unique within a team; at most %d characters)", cosmic.MaxNameLen)},
				watchParam,
			},
			Response: JobList{}, Status: http.StatusOK},
		{Op: OpGetJob, Method: http.MethodGet, Path: Prefix + "/jobs/{id}", Tag: "jobs", Perm: authz.JobsRead,
			Summary: "Get a job", Params: []Param{jobID, watchParam}, Response: job, Status: http.StatusOK},
		{Op: OpDeleteJob, Method: http.MethodDelete, Path: Prefix + "/jobs/{id}", Tag: "jobs", Perm: authz.JobsOperate,
			Summary:     "Delete a job",
			Description: "Deletes a job and answers it as it now is: in state deleting while its VMs are being removed. A job whose VMs run (starting, running, degraded, restarting, unknown) is refused (409) unless force=true, which kills it first.",
			Params:      []Param{jobID, force("Kill the job first if it is running")},
			Response:    job, Status: http.StatusOK, Errors: []int{http.StatusConflict}},
		{Op: OpRestartJob, Method: http.MethodPost, Path: Prefix + "/jobs/{id}/restart", Tag: "jobs", Perm: authz.JobsOperate,
			Summary:     "Restart a job",
			Description: "Replaces a running job's VMs, keeping storage and GPUs (state restarting); a failed or stopped job is queued again.",
			Params:      []Param{jobID}, Response: job, Status: http.StatusOK, Errors: []int{http.StatusConflict}},
		{Op: OpKillJob, Method: http.MethodPost, Path: Prefix + "/jobs/{id}/kill", Tag: "jobs", Perm: authz.JobsOperate,
			Summary:     "Kill a job",
			Description: "Stops a job: state stopped, GPUs released, storage kept; restart runs it again.",
			Params:      []Param{jobID}, Response: job, Status: http.StatusOK, Errors: []int{http.StatusConflict}},
		{Op: OpDataSyncJob, Method: http.MethodPost, Path: Prefix + "/jobs/{id}/datasync", Tag: "jobs", Perm: authz.JobsOperate,
			Summary: "Pull or push a running job's datastore volumes now",
			Description: "direction pull copies the datastore's objects into the volume; push sends back what the job wrote (RW, RWD: RWD deletes the remote objects the job deleted). " +
				"volume names one volume by its name, else its mount path; absent, every datastore volume of the job (for a push, every RW and RWD one). " +
				"The replica's agent does it (replica, default 0) with requests the platform signs, and the answer comes when every volume is done (state done): per volume, what moved, and error and reason where it failed (its files kept). " +
				"With wait=false it comes once the sync has begun (state running, each volume queued), and GET …/datasync follows it; a sync runs on when its caller goes. " +
				"A job that is not running, or a replica whose last datasync still runs, is 409; a volume that is not a datastore volume, or a push of a read-only one, 400. " +
				"The simulated and QEMU racks sync; an agent that syncs no volume answers 501 (docs/data.md).",
			Params:  []Param{jobID, replicaQuery, {Name: QueryWait, In: InQuery, Type: false, Description: "false: answer once the sync has begun, not when it ends (default true)"}},
			Request: DataSync{}, Response: DataSyncResult{}, Status: http.StatusOK,
			Errors: []int{http.StatusConflict, http.StatusNotImplemented}},
		{Op: OpGetDataSync, Method: http.MethodGet, Path: Prefix + "/jobs/{id}/datasync", Tag: "jobs", Perm: authz.JobsRead,
			Summary: "Follow a running job's last datasync",
			Description: "The replica's (replica, default 0) last datasync since its agent started, as it is now: state running, with each volume's state and what moved so far (and, for a pull whose listing is read, in all), or done. " +
				"404 when the replica's agent has done none; 409 when the job is not running.",
			Params: []Param{jobID, replicaQuery}, Response: DataSyncResult{}, Status: http.StatusOK,
			Errors: []int{http.StatusConflict, http.StatusNotImplemented}},
		{Op: OpLabelJob, Method: http.MethodPut, Path: Prefix + "/jobs/{id}/label", Tag: "jobs", Perm: authz.JobsOperate,
			Summary: "Set or remove a job label", Description: "Sets label name to value; an empty value removes it. Keys under cosmicac/ are reserved.",
			Params: []Param{jobID}, Request: Label{}, Response: job, Status: http.StatusOK},
		{Op: OpInferenceAuth, Method: http.MethodPut, Path: Prefix + "/jobs/{id}/inference/auth", Tag: "jobs", Perm: authz.JobsOperate,
			Summary: "Turn a managed-inference job's \"require authorization\" on or off",
			Description: "Sets spec.inference.requireAuth of a managed-inference job, running or not, without restarting it: off, its model is reached " +
				"without an API key (and by every team's keys); on, only with a key of its team. proxy-inference follows within 1 s. " +
				"Any other job is refused (409).",
			Params: []Param{jobID}, Request: InferenceAuth{}, Response: job, Status: http.StatusOK, Errors: []int{http.StatusConflict}},
		{Op: OpUpdateJob, Method: http.MethodPut, Path: Prefix + "/jobs/{id}/spec", Tag: "jobs", Perm: authz.JobsOperate,
			Summary: "Update a managed-inference job's spec (a rolling update)",
			Description: "Takes the job's whole new spec, as create does. inference.routing, .requireAuth, .autoscaling, .replicas and labels change at once. " +
				"A change of what the replicas run (inference.model, .args, .adapters, image, envVars, command) of a running job is rolled out: one replica of the new spec " +
				"starts first, then each older replica is drained (no new requests; those in flight end) and replaced, one at a time, and the job serves throughout; " +
				"a replica of the new spec that fails rolls the job back (status.rollout while it runs, status.lastRollout after). A stopped, failed or queued job " +
				"takes the new spec for its next start. Any other field is fixed at create (400, naming it); a job starting, restarting or rolling out is a conflict (409).",
			Params: []Param{jobID}, Request: cosmic.Spec{}, Response: job, Status: http.StatusOK, Errors: []int{http.StatusConflict}},
		{Op: OpJobCommand, Method: http.MethodPost, Path: Prefix + "/jobs/command", Tag: "jobs", Perm: authz.Self,
			Summary: "The CLI command equivalent to a spec",
			Description: "Validates the spec as create does and answers the `cosmicac jobs create` line that creates it. Fields no flag expresses are listed in unexpressed; then use `cosmicac jobs create -f FILE`. " +
				"It changes nothing and is not recorded in the audit log (the web interface's new-job form calls it as you type).",
			Request: cosmic.Spec{}, Response: cosmic.Command{}, Status: http.StatusOK, Preview: true},
		{Op: OpRestartReplica, Method: http.MethodPost, Path: Prefix + "/jobs/{id}/replicas/{n}/restart", Tag: "jobs", Perm: authz.JobsOperate,
			Summary:     "Restart one replica of a job",
			Description: "Only a managed-inference job's replica, while it is queued, pending, starting or failed; otherwise 409.",
			Params:      []Param{jobID, replicaN}, Response: job, Status: http.StatusOK, Errors: []int{http.StatusConflict}},
		{Op: OpDeleteReplica, Method: http.MethodDelete, Path: Prefix + "/jobs/{id}/replicas/{n}", Tag: "jobs", Perm: authz.JobsOperate,
			Summary: "Delete one replica of a job", Description: "Removes the replica's VMs, disks and GPUs; the ork places it again, perhaps elsewhere (use it to move a replica). Only a managed-inference job's replica, while it is queued, pending, starting or failed; otherwise 409.",
			Params: []Param{jobID, replicaN}, Response: job, Status: http.StatusOK, Errors: []int{http.StatusConflict}},
		{Op: OpJobShell, Method: http.MethodPost, Path: Prefix + "/jobs/{id}/shell", Tag: "jobs", Perm: authz.JobsConnect,
			Summary: "Open a shell in a running gpu-container job",
			Description: "Send `Connection: Upgrade` and `Upgrade: " + UpgradeShell + "`. The caller must be on the job's team (or an admin; viewers are refused). " +
				"The app-node opens the session on the job's instance agent over the fabric and answers 101 Switching Protocols with headers X-Cosmicac-Shell-Session and X-Cosmicac-Shell-Pid; " +
				"the connection then carries shellproto frames both ways (docs/shell.md). 409 when the job is not a running gpu-container job, 503 when its agent is not reachable. " +
				"Each session is recorded in the job's system log.",
			Params:  []Param{jobID, replicaQuery},
			Request: ShellRequest{}, Status: http.StatusSwitchingProtocols, Errors: []int{http.StatusConflict}},
		{Op: OpJobSSH, Method: http.MethodPost, Path: Prefix + "/jobs/{id}/ssh", Tag: "jobs", Perm: authz.JobsConnect,
			Summary: "Connect to port 22 of a running gpu-container job",
			Description: "Send `Connection: Upgrade` and `Upgrade: " + UpgradeTCP + "`; the same rules as the shell. After 101 Switching Protocols the connection is spliced to port 22 in the job's VM " +
				"(`cosmicac jobs ssh` uses it as ssh's ProxyCommand).",
			Params: []Param{jobID, replicaQuery}, Status: http.StatusSwitchingProtocols, Errors: []int{http.StatusConflict}},
		{Op: OpJobTerminal, Method: http.MethodGet, Path: Prefix + "/jobs/{id}/terminal", Tag: "jobs", Perm: authz.JobsConnect,
			Summary: "A terminal in a running gpu-container job, over a WebSocket (for browsers)",
			Description: "A WebSocket (RFC 6455) carrying the login shell of the job's replica on a terminal: the same session, over the same path to the job's instance agent, as the shell route, for clients that cannot send its Upgrade (browsers). " +
				"The same rules as the shell: the caller must be on the job's team (or an admin; viewers are refused), 409 when the job is not a running gpu-container job, 503 when its agent is not reachable; each session is recorded in the job's system log. " +
				"A request with an Origin header whose host is not the request's Host is refused (403), Origin null included: the Origin check is what keeps other pages, a job's sandboxed pages among them, from opening a terminal with the visitor's session cookie (docs/security.md). " +
				"Client to server: a binary message is bytes typed into the terminal; a text message is " + `{"type":"resize","cols":N,"rows":N}` + ". " +
				"Server to client: binary messages are the terminal's output; when the shell ends, a text message " + `{"type":"exit","code":N}` + " (with signal or error when there is one), then a close with status 1000. " +
				fmt.Sprintf("A message over %d bytes closes the connection (1009); a text message that is not a resize closes it (1008); sizes are clamped to 1 to %d.", TerminalReadLimit, MaxTerminalSize),
			Params: []Param{jobID, replicaQuery,
				{Name: QueryCols, In: InQuery, Type: 0, Description: fmt.Sprintf("Columns of the terminal at its open, 1 to %d (default %d)", MaxTerminalSize, DefaultTerminalCols)},
				{Name: QueryRows, In: InQuery, Type: 0, Description: fmt.Sprintf("Rows of the terminal at its open, 1 to %d (default %d)", MaxTerminalSize, DefaultTerminalRows)}},
			Status: http.StatusSwitchingProtocols, Errors: []int{http.StatusConflict}},
	}
	for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions} {
		routes = append(routes, jobHTTPRoute(m))
	}
	routes = append(routes, []Route{
		{Op: OpGetFleet, Method: http.MethodGet, Path: Prefix + "/fleet", Tag: "racks", Perm: authz.JobsRead, AllTeams: true,
			Summary: "The platform's GPUs by location and model",
			Description: "For choosing a job's location, GPU model and GPU count: per location and GPU model, the nodes, GPUs, free GPUs (on schedulable, ready nodes), " +
				"the GPUs of the largest node (the most a single-node job may ask for) and the most free on one node (the most such a job gets at once). " +
				"Counted as listRacks counts them, over every rack of the platform, whichever team asks; no rack, node or worker is named. " +
				"Locations and models are sorted by name; a rack whose nodes have not reported shows its location and model with no GPUs. " +
				"Each model also gives the largest node's vCPUs and memory, and its catalogue: the job types, runtimes and images its racks run and the most a VM of them gets " +
				"(a create they cannot run is refused with reason not_in_catalogue). It is the read-only view of the racks for every team member (`cosmicac locations`).",
			Response: Fleet{}, Status: http.StatusOK},
		{Op: OpListRacks, Method: http.MethodGet, Path: Prefix + "/racks", Tag: "racks", Perm: authz.RacksManage,
			Summary: "List racks and their capacity", Response: RackList{}, Status: http.StatusOK},
		{Op: OpRegisterRack, Method: http.MethodPost, Path: Prefix + "/racks", Tag: "racks", Perm: authz.RacksManage,
			Summary: "Register or update a rack", Request: RegisterRack{}, Response: Rack{}, Status: http.StatusOK},
		{Op: OpRemoveRack, Method: http.MethodDelete, Path: Prefix + "/racks/{id}", Tag: "racks", Perm: authz.RacksManage,
			Summary:     "Remove a rack",
			Description: "A rack with jobs holding GPUs is refused (409) unless force=true, which fails those jobs with reason rack_removed.",
			Params: []Param{{Name: "id", In: InPath, Type: "", Required: true, Description: "Rack ID"},
				force("Remove even if jobs hold GPUs on the rack")},
			Status: http.StatusNoContent, Errors: []int{http.StatusConflict}},
		{Op: OpCreateAPIKey, Method: http.MethodPost, Path: Prefix + "/api-keys", Tag: "api-keys", Perm: authz.APIKeysCreate,
			Summary: "Create an inference API key",
			Description: "Makes a key of the caller's team (or of team, another team the caller may make keys in) for the OpenAI-compatible API at /inference/v1: " +
				"a key reaches that team's models only. Members make keys (apikeys.create) and manage the keys they made; team admins every key of the team (apikeys.manage). " +
				"The answer carries the secret (key) this once; only its hash is kept. " +
				fmt.Sprintf("models (at most %d served model names) limits the key to those: others are answered 404 model_not_found and /inference/v1/models lists only those. ", MaxKeyModels) +
				"expiresAt (RFC 3339) or expiresIn (a duration, 720h) ends the key: it is refused from that instant.",
			Request: CreateAPIKey{}, Response: CreatedAPIKey{}, Status: http.StatusCreated},
		{Op: OpRotateAPIKey, Method: http.MethodPost, Path: Prefix + "/api-keys/{id}/rotate", Tag: "api-keys", Perm: authz.APIKeysCreate,
			Summary: "Rotate an inference API key: a new secret, the old one kept for a grace period",
			Description: "Answers the key with a new secret (key), shown this once. The secret it replaces keeps working for grace " +
				fmt.Sprintf("(a duration, default %v, at most %v; 0s ends it at once), then stops; ", DefaultKeyGrace, MaxKeyGrace) +
				"a secret replaced earlier and still in its grace stops at once. The key keeps its ID, name, models and expiry. " +
				"An expired key cannot be rotated (409). Another team's key, and for a member a key another user made, is not found (team admins: any of the team's).",
			Params:  []Param{{Name: "id", In: InPath, Type: "", Required: true, Description: "API key ID (key_…)"}},
			Request: RotateAPIKey{}, Response: CreatedAPIKey{}, Status: http.StatusOK, Errors: []int{http.StatusConflict}},
		{Op: OpListAPIKeys, Method: http.MethodGet, Path: Prefix + "/api-keys", Tag: "api-keys", Perm: authz.APIKeysCreate,
			Summary: "List the caller's team's inference API keys (never their secrets): a team admin's every key, a member's the keys they made", Response: APIKeyList{}, Status: http.StatusOK},
		{Op: OpRevokeAPIKey, Method: http.MethodDelete, Path: Prefix + "/api-keys/{id}", Tag: "api-keys", Perm: authz.APIKeysCreate,
			Summary:     "Revoke an inference API key",
			Description: "The key stops working within 1 s (proxy-inference caches lookups that long). Another team's key, and for a member a key another user made, is not found (team admins: any of the team's).",
			Params:      []Param{{Name: "id", In: InPath, Type: "", Required: true, Description: "API key ID (key_…)"}},
			Status:      http.StatusNoContent},
		{Op: OpCreateDatastore, Method: http.MethodPost, Path: Prefix + "/datastores", Tag: "datastores", Perm: authz.DatastoresManage,
			Summary: "Register an object storage endpoint of the team under an alias",
			Description: "A datastore is an S3-compatible endpoint (endpoint: scheme://host[:port]) with the credentials the platform signs the team's jobs' transfers with. " +
				"Team admins register them (datastores.manage) for the caller's team, or for team, another team they administer. " +
				"The secret key is written, never read: it is kept sealed and no answer, log record or audit record carries it; jobs get short-lived signed requests for their volumes' objects, never the key (docs/data.md). " +
				"The endpoint is not contacted here: a wrong endpoint or key shows at a job's sync, as its reason. An alias taken in the team is 409.",
			Request: CreateDatastore{}, Response: Datastore{}, Status: http.StatusCreated, Errors: []int{http.StatusConflict}},
		{Op: OpListDatastores, Method: http.MethodGet, Path: Prefix + "/datastores", Tag: "datastores", Perm: authz.DatastoresRead,
			Summary: "List the caller's team's datastores (never their secret keys), by alias", Response: DatastoreList{}, Status: http.StatusOK},
		{Op: OpListVolumes, Method: http.MethodGet, Path: Prefix + "/volumes", Tag: "volumes", Perm: authz.JobsRead,
			Summary: "List the caller's team's standalone volumes: the rack that keeps each, its size, and the job that has it mounted",
			Description: "A standalone volume is made by the first job that mounts it (spec.volumes[].volumeSource.standalone) and kept by the rack that ran that job after the job is gone; " +
				"a later job that mounts it is placed on that rack, and waits (volume_in_use) while another job has it. Another team's volumes never appear (docs/data.md).",
			Response: VolumeList{}, Status: http.StatusOK},
		{Op: OpDeleteVolume, Method: http.MethodDelete, Path: Prefix + "/volumes/{name}", Tag: "volumes", Perm: authz.JobsOperate,
			Summary: "Delete a standalone volume of the caller's team, and what it holds",
			Description: "The rack that keeps it removes its disk. While a job has it mounted (its VM runs, boots, or powers off after a kill) it is 409, naming the job; a volume the team does not have, another team's included, is 404. " +
				"A job that mounts a volume of that name later makes a new, empty one.",
			Params: []Param{{Name: "name", In: InPath, Type: "", Required: true, Description: "The volume's name in the caller's team"}},
			Status: http.StatusNoContent, Errors: []int{http.StatusConflict}},
		{Op: OpGetDatastore, Method: http.MethodGet, Path: Prefix + "/datastores/{alias}", Tag: "datastores", Perm: authz.DatastoresRead,
			Summary:  "Read one of the caller's team's datastores (never its secret key)",
			Params:   []Param{datastoreAlias},
			Response: Datastore{}, Status: http.StatusOK},
		{Op: OpSetDatastoreCredentials, Method: http.MethodPut, Path: Prefix + "/datastores/{alias}/credentials", Tag: "datastores", Perm: authz.DatastoresManage,
			Summary:     "Replace a datastore's credentials",
			Description: "Both the access key and the secret key are replaced; the secret key is written, never read. Jobs signed for with the old credentials keep their signed requests until those expire.",
			Params:      []Param{datastoreAlias},
			Request:     DatastoreCredentials{}, Response: Datastore{}, Status: http.StatusOK},
		{Op: OpDeleteDatastore, Method: http.MethodDelete, Path: Prefix + "/datastores/{alias}", Tag: "datastores", Perm: authz.DatastoresManage,
			Summary: "Remove a datastore of the caller's team (its sealed credentials with it)", Params: []Param{datastoreAlias},
			Status: http.StatusNoContent},
		{Op: OpWhoAmI, Method: http.MethodGet, Path: Prefix + "/whoami", Tag: "accounts", Perm: authz.Self,
			Summary: "The caller's user, team and role", Response: WhoAmI{}, Status: http.StatusOK},
	}...)
	routes = append(routes, accountRoutes()...)
	routes = append(routes, quotaRoutes()...)
	routes = append(routes, usageRoutes()...)
	return append(routes, []Route{
		{Op: OpOpenAPI, Method: http.MethodGet, Path: Prefix + "/openapi.json", Tag: "meta", Perm: authz.Public,
			Summary: "This document", Response: map[string]any{}, Status: http.StatusOK},
		{Op: OpHealth, Method: http.MethodGet, Path: Prefix + "/healthz", Tag: "meta", Perm: authz.Public,
			Summary: "Health check", Response: Health{}, Status: http.StatusOK},
	}...)
}

// jobHTTPPerm is what HTTP to a job needs: reading for GET and HEAD
// (without an upgrade, which the handler checks), connecting otherwise.
func jobHTTPPerm(method string) authz.Permission {
	if method == http.MethodGet || method == http.MethodHead {
		return authz.JobsRead
	}
	return authz.JobsConnect
}

// jobHTTPRoute is HTTP to the job with one method (docs/shell.md, "HTTP to
// the job").
func jobHTTPRoute(method string) Route {
	return Route{Op: JobHTTPOps[method], Method: method, Path: Prefix + "/jobs/{id}/http/{path}", Tag: "jobs", Perm: jobHTTPPerm(method), Proxy: true,
		Summary: method + " on the HTTP server of a running gpu-container job",
		Description: "Forwards the request (method, the path after /http, query, headers, body) to the spec's defaultHttpPort on the loopback of the job's VM, " +
			"through the job's instance agent, and answers what the job's server answers, streamed (server-sent events and websocket upgrades pass through). " +
			"A token of the job's team (or an admin's) is required unless the spec sets unsecureHttp; viewers may only GET and HEAD (no upgrades). " +
			"The Authorization header is never forwarded; the job sees Host localhost:PORT, X-Forwarded-For, X-Forwarded-Host, X-Forwarded-Proto and X-Forwarded-Prefix (/api/v1/jobs/{id}/http). " +
			"Header X-Cosmicac-Replica picks the replica (default 0). 409 when the job is not a running gpu-container job with a defaultHttpPort, " +
			"503 when its agent cannot be reached, 502 when nothing listens on the port in the VM. Without a token, a job that is not unsecureHttp is 401 whether it exists or not.",
		Params: []Param{jobID, {Name: "path", In: InPath, Type: "", Required: true,
			Description: "The path on the job's server, without its leading slash; it may contain slashes and be empty"}},
		Status: http.StatusOK, Errors: []int{http.StatusForbidden, http.StatusConflict, http.StatusBadGateway}}
}
