package apiv1

import (
	"net/http"
	"time"

	"github.com/cosmicac/cosmicac/internal/authz"
	"github.com/cosmicac/cosmicac/internal/cosmic"
)

// Operation IDs of the people side: sign-in, users, teams, members,
// tokens and the audit log.
const (
	OpLogin          = "login"
	OpCreateSession  = "createSession"
	OpDeleteSession  = "deleteSession"
	OpChangePassword = "changePassword"
	OpListUsers      = "listUsers"
	OpCreateUser     = "createUser"
	OpGetUser        = "getUser"
	OpUpdateUser     = "updateUser"
	OpDeleteUser     = "deleteUser"
	OpSetPassword    = "setPassword"
	OpListTeams      = "listTeams"
	OpCreateTeam     = "createTeam"
	OpDeleteTeam     = "deleteTeam"
	OpListMembers    = "listMembers"
	OpPutMember      = "putMember"
	OpDeleteMember   = "deleteMember"
	OpListTokens     = "listTokens"
	OpCreateToken    = "createToken"
	OpRevokeToken    = "revokeToken"
	OpListAudit      = "listAudit"
)

// HeaderTeam names the request's active team; QueryTeam does the same in
// the query (for links). Without either the active team is the one a token
// is bound to, else the caller's only team, else none.
// AllTeams, as the team, lets a platform admin list across every team (on
// the routes that allow it).
const (
	HeaderTeam = "X-Cosmicac-Team"
	QueryTeam  = "team"
	AllTeams   = "*"
)

// The browser session: its cookie, and the header that must repeat the
// session's CSRF token on every request that changes something.
const (
	SessionCookie = "cosmicac_session"
	HeaderCSRF    = "X-CSRF-Token"
)

// SessionCookiePaths are the paths the session cookie is set for: the API
// and wrk-monitor's log streams, the only servers that take a session.
// The browser never sends it to /inference (a model's runtime, in a
// tenant's VM, is behind it) nor to the web interface's pages
// (docs/security.md, "Platform credentials").
var SessionCookiePaths = []string{"/api", "/monitor"}

// Login signs in with a password and answers a personal access token (for
// the CLI); CreateSession does the same and answers a browser session.
type Login struct {
	User     string `json:"user"`
	Password string `json:"password"`
	// TokenName names the token made (default "login"); ExpiresIn bounds
	// its life (a Go duration, default 720h, at most MaxTokenLife).
	TokenName string `json:"tokenName,omitempty"`
	ExpiresIn string `json:"expiresIn,omitempty"`
}

// Session is the answer of createSession: the cookie is set, and the CSRF
// token to send as X-CSRF-Token is here.
// CreateSession opens a browser session: with a user and password, or
// with Token, a personal access token that is neither bound, scoped nor
// limited by a selector (the web interface's "sign in with a token"; the
// session ends no later than the token).
type CreateSession struct {
	User     string `json:"user,omitempty"`
	Password string `json:"password,omitempty"`
	Token    string `json:"token,omitempty"`
}

type Session struct {
	User      string    `json:"user"`
	CSRFToken string    `json:"csrfToken"`
	ExpiresAt time.Time `json:"expiresAt"`
}

// ChangePassword changes the caller's own password.
type ChangePassword struct {
	CurrentPassword string `json:"currentPassword"`
	Password        string `json:"password"`
}

// SetPassword sets a user's password (platform admins).
type SetPassword struct {
	Password string `json:"password"`
}

// CreateUser makes a user; Password is optional (a user without one signs
// in with tokens only).
type CreateUser struct {
	Name          string `json:"name"`
	Password      string `json:"password,omitempty"`
	PlatformAdmin bool   `json:"platformAdmin,omitempty"`
}

// UpdateUser changes what is given.
type UpdateUser struct {
	PlatformAdmin *bool `json:"platformAdmin,omitempty"`
}

// UserInfo is a user and their teams.
type UserInfo struct {
	cosmic.User
	Teams []cosmic.Member `json:"teams"`
}

// UserList lists users.
type UserList struct {
	Items []UserInfo `json:"items"`
	Total int        `json:"total"`
}

// CreateTeam makes a team; Owner, when given, becomes its first owner.
type CreateTeam struct {
	Name  string `json:"name"`
	Owner string `json:"owner,omitempty"`
}

// TeamInfo is a team and the caller's role in it ("" for a platform admin
// who is not a member).
type TeamInfo struct {
	cosmic.Team
	Role cosmic.Role `json:"role,omitempty"`
}

// TeamList lists teams.
type TeamList struct {
	Items []TeamInfo `json:"items"`
	Total int        `json:"total"`
}

// PutMember gives a user a role in a team.
type PutMember struct {
	Role cosmic.Role `json:"role"`
}

// MemberList lists a team's members.
type MemberList struct {
	Items []cosmic.Member `json:"items"`
	Total int             `json:"total"`
}

// Token lifetimes.
const (
	DefaultTokenLife = 90 * 24 * time.Hour
	DefaultLoginLife = 30 * 24 * time.Hour
	MaxTokenLife     = 366 * 24 * time.Hour
)

// CreateToken makes a personal access token of the caller.
type CreateToken struct {
	Name string `json:"name"`
	// ExpiresIn is a Go duration (default DefaultTokenLife, at most
	// MaxTokenLife).
	ExpiresIn string `json:"expiresIn,omitempty"`
	// Team binds the token to one of the caller's teams.
	Team string `json:"team,omitempty"`
	// Scope limits it: "read" or "operator" (needs Team); "" keeps all
	// the caller's rights.
	Scope string `json:"scope,omitempty"`
	// Selector confines it to the jobs with these labels (needs Team); the
	// jobs it creates get them.
	Selector map[string]string `json:"selector,omitempty"`
}

// Token is a personal access token, never its secret.
type Token struct {
	ID         string            `json:"id"`
	Name       string            `json:"name"`
	User       string            `json:"user"`
	Team       string            `json:"team,omitempty"`
	Scope      string            `json:"scope,omitempty"`
	Selector   map[string]string `json:"selector,omitempty"`
	CreatedAt  time.Time         `json:"createdAt"`
	ExpiresAt  time.Time         `json:"expiresAt,omitzero"`
	LastUsedAt time.Time         `json:"lastUsedAt,omitzero"`
}

// CreatedToken is a new token with its secret, shown this once.
type CreatedToken struct {
	Token
	Secret string `json:"token"`
}

// TokenList lists the caller's tokens.
type TokenList struct {
	Items []Token `json:"items"`
	Total int     `json:"total"`
}

// AuditRecord is one entry of the audit log.
type AuditRecord struct {
	ID     int64     `json:"id"`
	At     time.Time `json:"at"`
	User   string    `json:"user"`
	Team   string    `json:"team"`
	Action string    `json:"action"`
	Target string    `json:"target"`
	Remote string    `json:"remote"`
	Status int       `json:"status"`
	// Outcome is "ok" (2xx, 101), "denied" (401, 403, 404, 429) or
	// "failed".
	Outcome string `json:"outcome"`
	Detail  string `json:"detail,omitempty"`
}

// AuditList is a page of the audit log, newest first; Next, when set, is
// the before= of the next (older) page.
type AuditList struct {
	Items []AuditRecord `json:"items"`
	Next  int64         `json:"next,omitempty"`
}

// Query parameters of listAudit.
const (
	QueryUser   = "user"
	QueryAction = "action"
	QuerySince  = "since"
	QueryUntil  = "until"
	QueryBefore = "before"
	QueryLimit  = "limit"
)

var (
	userName = Param{Name: "name", In: InPath, Type: "", Required: true, Description: "User name"}
	teamName = Param{Name: "team", In: InPath, Type: "", Required: true, Description: "Team name"}
	member   = Param{Name: "user", In: InPath, Type: "", Required: true, Description: "User name"}
)

// accountRoutes are the people side's routes.
func accountRoutes() []Route {
	tooMany := []int{http.StatusTooManyRequests}
	return []Route{
		{Op: OpLogin, Method: http.MethodPost, Path: Prefix + "/login", Tag: "accounts", Perm: authz.Public,
			Summary:     "Sign in with a password; answers a personal access token",
			Description: "For the CLI (`cosmicac login`). Attempts are rate limited per user and per address (429 with Retry-After). A wrong user or password is 401 alike.",
			Request:     Login{}, Response: CreatedToken{}, Status: http.StatusCreated, Errors: append([]int{http.StatusUnauthorized}, tooMany...)},
		{Op: OpCreateSession, Method: http.MethodPost, Path: Prefix + "/session", Tag: "accounts", Perm: authz.Public,
			Summary: "Sign in with a password or a full personal access token; answers a browser session",
			Description: "Sets the " + SessionCookie + " cookie (HttpOnly, SameSite=Strict, Secure over TLS). Requests with the cookie that change something must send the answer's csrfToken as " + HeaderCSRF + ". " +
				"Rate limited as login. A token that is bound to a team, scoped or limited by a selector is refused (403): a session holds all of its user's rights. The session ends no later than the token.",
			Request: CreateSession{}, Response: Session{}, Status: http.StatusCreated, Errors: append([]int{http.StatusUnauthorized, http.StatusForbidden}, tooMany...)},
		{Op: OpDeleteSession, Method: http.MethodDelete, Path: Prefix + "/session", Tag: "accounts", Perm: authz.Self,
			Summary: "Sign out: end the session (or revoke the token) the request carries", Status: http.StatusNoContent},
		{Op: OpChangePassword, Method: http.MethodPut, Path: Prefix + "/whoami/password", Tag: "accounts", Perm: authz.AccountManage,
			Summary: "Change one's own password (ends one's browser sessions)",
			Description: "A password the user has is changed with currentPassword. A first password (the user has none) takes a browser session or a full token: " +
				"a token bound to a team or limited by a selector is refused (403), since a password opens sessions with all of the user's rights.",
			Request: ChangePassword{}, Status: http.StatusNoContent, Errors: tooMany},
		{Op: OpListTokens, Method: http.MethodGet, Path: Prefix + "/tokens", Tag: "accounts", Perm: authz.AccountManage,
			Summary: "List one's personal access tokens (never their secrets), with their last use", Response: TokenList{}, Status: http.StatusOK},
		{Op: OpCreateToken, Method: http.MethodPost, Path: Prefix + "/tokens", Tag: "accounts", Perm: authz.AccountManage,
			Summary: "Make a personal access token; its secret is in the answer this once",
			Description: "A token makes no token stronger than itself. Made with a token bound to a team or limited by a selector, the new token is bound to that team, " +
				"of its scope or a narrower one, limited by every label of its selector, and ends no later; what the request leaves out is inherited, " +
				"what it asks beyond is refused (403, the message naming the field). A browser session or a full token makes any token.",
			Request: CreateToken{}, Response: CreatedToken{}, Status: http.StatusCreated},
		{Op: OpRevokeToken, Method: http.MethodDelete, Path: Prefix + "/tokens/{id}", Tag: "accounts", Perm: authz.AccountManage,
			Summary: "Revoke one of one's tokens (it stops working at once)", Params: []Param{{Name: "id", In: InPath, Type: "", Required: true, Description: "Token ID (tok_…)"}},
			Status: http.StatusNoContent},

		{Op: OpListUsers, Method: http.MethodGet, Path: Prefix + "/users", Tag: "users", Perm: authz.UsersManage,
			Summary: "List users and their teams", Response: UserList{}, Status: http.StatusOK},
		{Op: OpCreateUser, Method: http.MethodPost, Path: Prefix + "/users", Tag: "users", Perm: authz.UsersManage,
			Summary: "Create a user", Request: CreateUser{}, Response: UserInfo{}, Status: http.StatusCreated, Errors: []int{http.StatusConflict}},
		{Op: OpGetUser, Method: http.MethodGet, Path: Prefix + "/users/{name}", Tag: "users", Perm: authz.UsersManage,
			Summary: "A user and their teams", Params: []Param{userName}, Response: UserInfo{}, Status: http.StatusOK},
		{Op: OpUpdateUser, Method: http.MethodPatch, Path: Prefix + "/users/{name}", Tag: "users", Perm: authz.UsersManage,
			Summary: "Make a user a platform admin, or not (the last one stays)", Params: []Param{userName}, Request: UpdateUser{}, Response: UserInfo{},
			Status: http.StatusOK, Errors: []int{http.StatusConflict}},
		{Op: OpDeleteUser, Method: http.MethodDelete, Path: Prefix + "/users/{name}", Tag: "users", Perm: authz.UsersManage,
			Summary: "Delete a user with their memberships, tokens and sessions (their jobs stay)", Params: []Param{userName},
			Status: http.StatusNoContent, Errors: []int{http.StatusConflict}},
		{Op: OpSetPassword, Method: http.MethodPut, Path: Prefix + "/users/{name}/password", Tag: "users", Perm: authz.UsersManage,
			Summary: "Set a user's password (ends their browser sessions)", Params: []Param{userName}, Request: SetPassword{}, Status: http.StatusNoContent},

		{Op: OpListTeams, Method: http.MethodGet, Path: Prefix + "/teams", Tag: "teams", Perm: authz.Self,
			Summary: "The caller's teams with their role (platform admins: every team)", Response: TeamList{}, Status: http.StatusOK},
		{Op: OpCreateTeam, Method: http.MethodPost, Path: Prefix + "/teams", Tag: "teams", Perm: authz.TeamsCreate,
			Summary: "Create a team", Request: CreateTeam{}, Response: TeamInfo{}, Status: http.StatusCreated, Errors: []int{http.StatusConflict}},
		{Op: OpDeleteTeam, Method: http.MethodDelete, Path: Prefix + "/teams/{team}", Tag: "teams", Perm: authz.TeamDelete,
			Summary: "Delete a team that has no jobs left, with its memberships, bound tokens, API keys and quotas", Params: []Param{teamName},
			Status: http.StatusNoContent, Errors: []int{http.StatusConflict}},
		{Op: OpListMembers, Method: http.MethodGet, Path: Prefix + "/teams/{team}/members", Tag: "teams", Perm: authz.MembersRead,
			Summary: "A team's members and their roles", Params: []Param{teamName}, Response: MemberList{}, Status: http.StatusOK},
		{Op: OpPutMember, Method: http.MethodPut, Path: Prefix + "/teams/{team}/members/{user}", Tag: "teams", Perm: authz.MembersManage,
			Summary:     "Add a member, or change their role",
			Description: "Admins give and change the roles admin, member and viewer; owners any role. The last owner cannot be demoted (409).",
			Params:      []Param{teamName, member}, Request: PutMember{}, Response: cosmic.Member{}, Status: http.StatusOK, Errors: []int{http.StatusConflict}},
		{Op: OpDeleteMember, Method: http.MethodDelete, Path: Prefix + "/teams/{team}/members/{user}", Tag: "teams", Perm: authz.MembersManage,
			Summary: "Remove a member (with their tokens bound to the team); the last owner stays (409)", Params: []Param{teamName, member},
			Status: http.StatusNoContent, Errors: []int{http.StatusConflict}},

		{Op: OpListAudit, Method: http.MethodGet, Path: Prefix + "/audit", Tag: "audit", Perm: authz.AuditRead, AllTeams: true,
			Summary:     "The audit log of the active team, newest first (platform admins, with team *: every team)",
			Description: "Every change through the API and every shell and SSH session: who, which team, what, when, from where, and the outcome.",
			Params: []Param{
				{Name: QueryUser, In: InQuery, Type: "", Description: "Only this user's actions"},
				{Name: QueryTeam, In: InQuery, Type: "", Description: "The team (as " + HeaderTeam + ")"},
				{Name: QueryAction, In: InQuery, Type: "", Description: "Only this action (an operationId, or shell.open / ssh.open)"},
				{Name: QuerySince, In: InQuery, Type: time.Time{}, Description: "From this time (RFC 3339, inclusive)"},
				{Name: QueryUntil, In: InQuery, Type: time.Time{}, Description: "Until this time (RFC 3339, exclusive)"},
				{Name: QueryBefore, In: InQuery, Type: 0, Description: "Only records older than this ID (the next of the last page)"},
				{Name: QueryLimit, In: InQuery, Type: 0, Description: "At most this many records (default 100, at most 1000)"},
			},
			Response: AuditList{}, Status: http.StatusOK},
	}
}

// Operation IDs of quotas.
const (
	OpListQuotas     = "listQuotas"
	OpListTeamQuotas = "listTeamQuotas"
	OpSetQuota       = "setQuota"
	OpDeleteQuota    = "deleteQuota"
)

// Quota caps the GPUs a team's jobs hold at once in a location, of one GPU
// model or (GPUModel empty) of every model there together; Used is what
// they hold under it now (docs/scheduling.md).
type Quota struct {
	Team      string    `json:"team"`
	Location  string    `json:"location"`
	GPUModel  string    `json:"gpuModel,omitempty"`
	GPUs      int       `json:"gpus"`
	Used      int       `json:"used"`
	UpdatedAt time.Time `json:"updatedAt,omitzero"`
	UpdatedBy string    `json:"updatedBy,omitempty"`
}

// QuotaList lists quotas by team, location and GPU model.
type QuotaList struct {
	Items []Quota `json:"items"`
	Total int     `json:"total"`
}

// SetQuota sets the quota of the path's team and location for GPUModel.
type SetQuota struct {
	GPUModel string `json:"gpuModel,omitempty"`
	GPUs     int    `json:"gpus"`
}

// QueryGPUModel names the GPU model of a quota to delete.
const QueryGPUModel = "gpuModel"

// MaxQuotaGPUs bounds a quota.
const MaxQuotaGPUs = 1 << 20

func quotaRoutes() []Route {
	location := Param{Name: "location", In: InPath, Type: "", Required: true, Description: "Location"}
	return []Route{
		{Op: OpListQuotas, Method: http.MethodGet, Path: Prefix + "/quotas", Tag: "quotas", Perm: authz.QuotasSet,
			Summary: "Every team's quotas with their use (platform admins)", Response: QuotaList{}, Status: http.StatusOK},
		{Op: OpListTeamQuotas, Method: http.MethodGet, Path: Prefix + "/teams/{team}/quotas", Tag: "quotas", Perm: authz.QuotasRead,
			Summary: "A team's quotas with their use", Params: []Param{teamName}, Response: QuotaList{}, Status: http.StatusOK},
		{Op: OpSetQuota, Method: http.MethodPut, Path: Prefix + "/teams/{team}/quotas/{location}", Tag: "quotas", Perm: authz.QuotasSet,
			Summary:     "Set a team's GPU quota in a location (platform admins)",
			Description: "At most gpus GPUs of gpuModel (every model together when empty) held at once; a job that would go over waits queued with reason team_quota. Jobs already placed keep their GPUs.",
			Params:      []Param{teamName, location}, Request: SetQuota{}, Response: Quota{}, Status: http.StatusOK},
		{Op: OpDeleteQuota, Method: http.MethodDelete, Path: Prefix + "/teams/{team}/quotas/{location}", Tag: "quotas", Perm: authz.QuotasSet,
			Summary: "Remove a team's quota (platform admins)",
			Params:  []Param{teamName, location, {Name: QueryGPUModel, In: InQuery, Type: "", Description: "The quota's GPU model (none: the quota of every model)"}},
			Status:  http.StatusNoContent},
	}
}
