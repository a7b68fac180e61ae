// Package authz is CosmicAC's permission matrix: what each team role, a
// platform admin and each token scope may do (docs/permissions.md, which a
// test keeps equal to this file).
//
// A caller is a Subject: the user's role in the request's active team (or
// none), whether the user is a platform admin, and the scope of the
// credential the request carried. Allowed answers whether a Subject holds a
// Permission; the app-node asks it for every route (each route of
// internal/apiv1 names its Permission) and then confines the answer to the
// objects the credential reaches (a token's label selector, a job's
// readUser).
//
// The package is pure and imports only the domain.
package authz

import (
	"slices"

	"github.com/cosmicac/cosmicac/internal/cosmic"
)

// Permission is one thing a caller may do.
type Permission string

// The permissions. Team permissions act within one team (the request's
// active team, or the team a path names); platform permissions act on the
// platform; the last few need only a signed-in user, or nobody at all.
const (
	// Team permissions.
	JobsRead         Permission = "jobs.read"         // list and read jobs, their logs and models
	JobsCreate       Permission = "jobs.create"       // create jobs
	JobsOperate      Permission = "jobs.operate"      // delete, restart, kill, label, replicas, datasync
	JobsConnect      Permission = "jobs.connect"      // shell, ssh and the HTTP relay into a job
	MembersRead      Permission = "members.read"      // list the team's members
	MembersManage    Permission = "members.manage"    // add, remove and change members below owner
	OwnersManage     Permission = "owners.manage"     // make, change and remove owners
	APIKeysCreate    Permission = "apikeys.create"    // create the team's inference API keys; list, rotate and revoke one's own
	APIKeysManage    Permission = "apikeys.manage"    // list, rotate and revoke every inference API key of the team
	QuotasRead       Permission = "quotas.read"       // read the team's quotas
	UsageRead        Permission = "usage.read"        // read the team's inference usage
	AuditRead        Permission = "audit.read"        // read the team's audit log
	DatastoresRead   Permission = "datastores.read"   // list and read the team's datastores (never their secret keys)
	DatastoresManage Permission = "datastores.manage" // register, change the credentials of and remove the team's datastores
	TeamDelete       Permission = "team.delete"       // delete the team (it must have no jobs)

	// Platform permissions (platform admins only; never through a token
	// bound to a team or a scoped one).
	UsersManage Permission = "users.manage" // create, list, delete users, set passwords and platform admin
	TeamsCreate Permission = "teams.create" // create teams, list every team
	QuotasSet   Permission = "quotas.set"   // set and remove any team's quotas
	RacksManage Permission = "racks.manage" // list, register and remove racks

	// Any signed-in user.
	Self          Permission = "self"           // whoami, one's own teams
	AccountManage Permission = "account.manage" // one's own tokens and password (not with a scoped token)

	// Anyone.
	Public Permission = "public"
)

// Kind says where a permission acts.
type Kind int

// The kinds of permission.
const (
	KindTeam     Kind = iota // in a team: needs a role there
	KindPlatform             // platform admins only
	KindUser                 // any signed-in user
	KindPublic               // no credential needed
)

// Scope is what a token may do beyond its user's rights: "" (Full) all of
// them, Read only reading, Operator reading and operating jobs.
type Scope string

// The token scopes.
const (
	ScopeFull     Scope = ""
	ScopeRead     Scope = "read"
	ScopeOperator Scope = "operator"
)

// Valid reports whether s is a scope.
func (s Scope) Valid() bool { return s == ScopeFull || s == ScopeRead || s == ScopeOperator }

// rule is one row of the matrix.
type rule struct {
	kind   Kind
	roles  []cosmic.Role // team roles that hold it (KindTeam)
	scopes []Scope       // scoped tokens that keep it (the full scope keeps everything)
}

var (
	all      = []cosmic.Role{cosmic.RoleOwner, cosmic.RoleAdmin, cosmic.RoleMember, cosmic.RoleViewer}
	members  = []cosmic.Role{cosmic.RoleOwner, cosmic.RoleAdmin, cosmic.RoleMember}
	admins   = []cosmic.Role{cosmic.RoleOwner, cosmic.RoleAdmin}
	owners   = []cosmic.Role{cosmic.RoleOwner}
	readers  = []Scope{ScopeRead, ScopeOperator}
	operator = []Scope{ScopeOperator}
)

// matrix is the permission matrix; docs/permissions.md is its text.
var matrix = map[Permission]rule{
	JobsRead:         {kind: KindTeam, roles: all, scopes: readers},
	JobsCreate:       {kind: KindTeam, roles: members, scopes: operator},
	JobsOperate:      {kind: KindTeam, roles: members, scopes: operator},
	JobsConnect:      {kind: KindTeam, roles: members, scopes: operator},
	MembersRead:      {kind: KindTeam, roles: all, scopes: readers},
	MembersManage:    {kind: KindTeam, roles: admins},
	OwnersManage:     {kind: KindTeam, roles: owners},
	APIKeysCreate:    {kind: KindTeam, roles: members},
	APIKeysManage:    {kind: KindTeam, roles: admins},
	QuotasRead:       {kind: KindTeam, roles: all, scopes: readers},
	UsageRead:        {kind: KindTeam, roles: all, scopes: readers},
	AuditRead:        {kind: KindTeam, roles: admins},
	DatastoresRead:   {kind: KindTeam, roles: all, scopes: readers},
	DatastoresManage: {kind: KindTeam, roles: admins},
	TeamDelete:       {kind: KindTeam, roles: owners},

	UsersManage: {kind: KindPlatform},
	TeamsCreate: {kind: KindPlatform},
	QuotasSet:   {kind: KindPlatform},
	RacksManage: {kind: KindPlatform},

	Self:          {kind: KindUser, scopes: readers},
	AccountManage: {kind: KindUser},

	Public: {kind: KindPublic},
}

// Permissions lists every permission, in the matrix's order.
var Permissions = []Permission{
	JobsRead, JobsCreate, JobsOperate, JobsConnect, MembersRead, MembersManage, OwnersManage,
	APIKeysCreate, APIKeysManage, QuotasRead, UsageRead, AuditRead, DatastoresRead, DatastoresManage, TeamDelete,
	UsersManage, TeamsCreate, QuotasSet, RacksManage,
	Self, AccountManage, Public,
}

// KindOf says where p acts; an unknown permission is KindPlatform (the
// most closed).
func KindOf(p Permission) Kind {
	r, ok := matrix[p]
	if !ok {
		return KindPlatform
	}
	return r.kind
}

// Known reports whether p is a permission of the matrix.
func Known(p Permission) bool { _, ok := matrix[p]; return ok }

// Subject is a caller as the matrix sees it.
type Subject struct {
	// Signed says a credential was presented and is valid.
	Signed bool
	// PlatformAdmin is the user's platform-admin flag.
	PlatformAdmin bool
	// Role is the user's role in the team the permission acts in ("" when
	// the user is not a member, or for a permission of no team).
	Role cosmic.Role
	// Scope is the credential's scope.
	Scope Scope
	// Bound says the credential is bound to one team: it keeps only that
	// team's permissions (and Self), never the platform's.
	Bound bool
}

// Allowed reports whether s holds p. A platform admin acts as an owner in
// every team. Unknown permissions are refused.
func Allowed(s Subject, p Permission) bool {
	r, ok := matrix[p]
	if !ok {
		return false
	}
	if r.kind == KindPublic {
		return true
	}
	if !s.Signed {
		return false
	}
	if s.Scope != ScopeFull && !slices.Contains(r.scopes, s.Scope) {
		return false
	}
	switch r.kind {
	case KindUser:
		return true
	case KindPlatform:
		return s.PlatformAdmin && !s.Bound && s.Scope == ScopeFull
	default: // KindTeam
		role := s.Role
		if s.PlatformAdmin && !s.Bound {
			role = cosmic.RoleOwner
		}
		return slices.Contains(r.roles, role)
	}
}

// RoleGrants reports whether a member of role holds p through a full-scope
// credential (the matrix's role columns).
func RoleGrants(role cosmic.Role, p Permission) bool {
	return Allowed(Subject{Signed: true, Role: role}, p)
}

// ScopeKeeps reports whether a token of scope keeps p (the matrix's token
// columns): a scoped token never holds more than its scope, nor more than
// its user.
func ScopeKeeps(scope Scope, p Permission) bool {
	r, ok := matrix[p]
	if !ok {
		return false
	}
	return scope == ScopeFull || r.kind == KindPublic || slices.Contains(r.scopes, scope)
}

// CanGrant reports whether a member of role may give, change or take away
// role target in the team: owners any role, admins up to admin.
func CanGrant(s Subject, target cosmic.Role) bool {
	if target == cosmic.RoleOwner {
		return Allowed(s, OwnersManage)
	}
	return Allowed(s, MembersManage)
}
