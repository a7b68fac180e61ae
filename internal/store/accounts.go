package store

import (
	"context"
	"time"

	"github.com/cosmicac/cosmicac/internal/cosmic"
)

// Accounts is what the app-node keeps of people: teams, users, their
// memberships, their tokens and browser sessions, and the audit log.
type Accounts interface {
	// CreateTeam adds a team; an existing name is ErrConflict, an invalid
	// one (cosmic.ValidAccountName) ErrInvalid.
	CreateTeam(ctx context.Context, t cosmic.Team) error
	// GetTeam returns a team, or ErrNotFound.
	GetTeam(ctx context.Context, name string) (cosmic.Team, error)
	// ListTeams lists the teams by name.
	ListTeams(ctx context.Context) ([]cosmic.Team, error)
	// DeleteTeam removes a team with its memberships, the tokens bound to
	// it and its inference API keys. A team that still has jobs is
	// ErrConflict; an unknown one ErrNotFound.
	DeleteTeam(ctx context.Context, name string) error

	// CreateUser adds a user with a password hash ("" for none); an
	// existing name is ErrConflict, an invalid one ErrInvalid.
	CreateUser(ctx context.Context, u cosmic.User, passwordHash string) error
	// GetUser returns a user, or ErrNotFound.
	GetUser(ctx context.Context, name string) (cosmic.User, error)
	// ListUsers lists the users by name.
	ListUsers(ctx context.Context) ([]cosmic.User, error)
	// DeleteUser removes a user with their memberships, tokens and
	// sessions, or returns ErrNotFound. Their jobs stay, with their name.
	DeleteUser(ctx context.Context, name string) error
	// SetPlatformAdmin sets a user's platform-admin flag, or returns
	// ErrNotFound. Taking it from the last platform admin is ErrConflict.
	SetPlatformAdmin(ctx context.Context, name string, admin bool) error
	// PasswordHash returns a user's password hash ("" for none), or
	// ErrNotFound.
	PasswordHash(ctx context.Context, name string) (string, error)
	// SetPassword replaces a user's password hash and ends every browser
	// session of theirs, or returns ErrNotFound.
	SetPassword(ctx context.Context, name, hash string) error

	// PutMember adds a user to a team with a role, or changes the role.
	// An unknown user or team, or an invalid role, is ErrInvalid.
	PutMember(ctx context.Context, m cosmic.Member) error
	// DeleteMember removes a user from a team, with the user's tokens bound
	// to it, or returns ErrNotFound.
	DeleteMember(ctx context.Context, team, user string) error
	// Members lists a team's members by user name.
	Members(ctx context.Context, team string) ([]cosmic.Member, error)
	// Memberships lists the teams a user belongs to, by team name.
	Memberships(ctx context.Context, user string) ([]cosmic.Member, error)

	// CreateToken stores a token or a session; an existing ID or hash is
	// ErrConflict, an unknown user or an empty ID or hash ErrInvalid.
	CreateToken(ctx context.Context, t Token) error
	// TokenByHash returns the token whose secret hashes to hash and its
	// user. An unknown hash, or a token whose ExpiresAt has passed at now,
	// is ErrNotFound.
	TokenByHash(ctx context.Context, hash []byte, now time.Time) (Token, cosmic.User, error)
	// Credential is TokenByHash with the user's memberships (by team), in
	// one read: what authenticating a request needs.
	Credential(ctx context.Context, hash []byte, now time.Time) (Token, cosmic.User, []cosmic.Member, error)
	// ListTokens lists a user's tokens of kind, oldest first.
	ListTokens(ctx context.Context, user string, kind TokenKind) ([]Token, error)
	// GetToken returns a token, or ErrNotFound.
	GetToken(ctx context.Context, id string) (Token, error)
	// TouchToken records that a token was used at t (kept only when later
	// than the last use recorded).
	TouchToken(ctx context.Context, id string, t time.Time) error
	// DeleteToken removes a token, or returns ErrNotFound.
	DeleteToken(ctx context.Context, id string) error

	// AppendAudit adds a record to the audit log; its ID is the store's.
	AppendAudit(ctx context.Context, r AuditRecord) error
	// ListAudit returns the records q selects, newest first, and whether
	// more match beyond them.
	ListAudit(ctx context.Context, q AuditQuery) ([]AuditRecord, bool, error)
	// PruneAudit deletes the records older than before and says how many.
	PruneAudit(ctx context.Context, before time.Time) (int, error)
}

// TokenKind tells a personal access token from a browser session.
type TokenKind string

// The token kinds.
const (
	KindToken   TokenKind = "token"
	KindSession TokenKind = "session"
)

// Token is a personal access token or a browser session of a user. Only
// the hash of its secret is kept.
type Token struct {
	ID       string
	Kind     TokenKind // "" is KindToken
	Name     string
	UserName string
	Hash     []byte // sha256 of the secret
	// Team binds the token to one team ("" for none): it acts there only.
	Team string
	// Scope limits the token below its user's rights (authz.Scope: "",
	// "read" or "operator").
	Scope string
	// Selector confines the token to the jobs whose labels it matches; the
	// jobs it creates get these labels. Only with a Team.
	Selector map[string]string
	// CSRF is the hash of a session's CSRF token.
	CSRF       []byte
	CreatedAt  time.Time // returned in UTC
	ExpiresAt  time.Time // zero = never
	LastUsedAt time.Time // zero = never used
}

// AuditRecord is one entry of the audit log: who did what, in which team,
// when, from where, and how it ended.
type AuditRecord struct {
	ID     int64
	At     time.Time // UTC
	User   string    // "" for an anonymous caller (a failed sign-in names the user tried in Target)
	Team   string    // the team acted in ("" for none)
	Action string    // the API operation (apiv1.Op*), or "shell.open" etc.
	Target string    // what it acted on: a job ID, a user, a team, a key ID
	Remote string    // the caller's address
	Status int       // the HTTP status answered
	Detail string    // a short, secret-free note (the error's code)
}

// AuditQuery selects audit records. Zero values mean no filter.
type AuditQuery struct {
	User   string
	Team   string
	Action string
	Since  time.Time // inclusive
	Until  time.Time // exclusive
	// Before pages backwards: only records with an ID below it.
	Before int64
	Limit  int // 0 is DefaultAuditLimit; at most MaxAuditLimit
}

// Audit page sizes.
const (
	DefaultAuditLimit = 100
	MaxAuditLimit     = 1000
)
