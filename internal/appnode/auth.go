package appnode

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/cosmicac/cosmicac/internal/apiv1"
	"github.com/cosmicac/cosmicac/internal/authz"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/store"
)

// Accounts is what the app-node needs of the accounts store; store.Store
// implements it.
type Accounts = store.Accounts

// Token shape: TokenPrefix then the base64url (unpadded) encoding of
// tokenBytes random bytes. Sessions have their own prefix, so that a
// session secret is never mistaken for a token in a log or a paste.
const (
	TokenPrefix   = "cac_"
	SessionPrefix = "cas_"
	tokenBytes    = 32
	tokenLen      = len(TokenPrefix) + (tokenBytes*8+5)/6
)

// NewToken returns a fresh API token secret and the hash to store.
func NewToken() (secret string, hash []byte, err error) { return newSecret(TokenPrefix) }

func newSecret(prefix string) (secret string, hash []byte, err error) {
	b := make([]byte, tokenBytes)
	if _, err := rand.Read(b); err != nil {
		return "", nil, fmt.Errorf("read random: %w", err)
	}
	secret = prefix + base64.RawURLEncoding.EncodeToString(b)
	return secret, HashToken(secret), nil
}

// HashToken is the hash under which a token secret is stored: sha256 of
// the whole secret, prefix included. The secrets are 256 random bits, so
// a fast hash is enough (a password hash would only slow every request).
func HashToken(secret string) []byte {
	h := sha256.Sum256([]byte(secret))
	return h[:]
}

// NewTokenID returns a random token ID ("tok_" and 16 hex digits); the ID
// names a token (to list or delete it) and is no secret.
func NewTokenID() (string, error) { return newID("tok_") }

func newID(prefix string) (string, error) {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("read random: %w", err)
	}
	return prefix + hex.EncodeToString(b), nil
}

// wellFormed reports whether s is shaped like a secret of prefix, so that
// garbage never reaches the store.
func wellFormed(s, prefix string) bool {
	if len(s) != tokenLen || !strings.HasPrefix(s, prefix) {
		return false
	}
	_, err := base64.RawURLEncoding.DecodeString(s[len(prefix):])
	return err == nil
}

// caller is the authenticated user of a request, with the credential it
// carried and the team it acts in.
type caller struct {
	user cosmic.User
	tok  store.Token
	// team is the request's active team ("" for none) and role the
	// caller's role there ("" when a platform admin who is not a member).
	team string
	role cosmic.Role
	// roles are the caller's roles by team.
	roles map[string]cosmic.Role
	// allTeams: a platform admin named every team (apiv1.AllTeams).
	allTeams bool
	// perm is the route's permission; visibleJob checks it on the job.
	perm authz.Permission
	// audit is what the audit log says of the request: the team acted in
	// and the object acted on, set by the handler.
	auditTeam, auditTarget string
	// csrf is the session's CSRF token when the credential came in the
	// session cookie (whoami gives it to a reloaded page).
	csrf string
}

// subject is the caller as the matrix sees it, acting in team ("" for no
// team). A credential bound to a team has no role elsewhere.
func (c *caller) subject(team string) authz.Subject {
	bound := c.tok.Team != ""
	role := c.roles[team]
	if bound && team != c.tok.Team {
		role = ""
	}
	return authz.Subject{Signed: true, PlatformAdmin: c.user.PlatformAdmin, Role: role, Scope: authz.Scope(c.tok.Scope), Bound: bound}
}

// can reports whether the caller holds p in team.
func (c *caller) can(team string, p authz.Permission) bool {
	return (len(c.tok.Selector) == 0 || selectorKeeps(p)) && authz.Allowed(c.subject(team), p)
}

// selectorKeeps reports whether a token limited by a label selector may
// hold p: what acts on jobs (which the selector confines) or only reads
// the team, as an operator token may, and its user's own account (which
// makes only tokens as confined, confineToken). Not the team's members,
// owners, API keys, audit log or the team itself: they reach beyond the
// selected jobs (an API key serves every model of the team, a member sees
// every job).
func selectorKeeps(p authz.Permission) bool {
	return authz.ScopeKeeps(authz.ScopeOperator, p) || authz.KindOf(p) == authz.KindUser
}

// platformAdmin reports whether the caller acts as a platform admin: the
// flag, through a credential that is neither bound nor scoped.
func (c *caller) platformAdmin() bool { return c.can("", authz.UsersManage) }

// inTeam reports whether the caller may act in team at all: a member (as
// the credential allows) or a platform admin.
func (c *caller) inTeam(team string) bool {
	if c.tok.Team != "" && team != c.tok.Team {
		return false
	}
	_, member := c.roles[team]
	return member || c.platformAdmin()
}

// selects reports whether the caller's credential reaches a job with
// labels: a token with a selector reaches only the jobs it matches.
func (c *caller) selects(labels map[string]string) bool {
	for k, v := range c.tok.Selector {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

var errUnauthorized = errorf(http.StatusUnauthorized, apiv1.CodeUnauthorized,
	"missing or invalid token: send Authorization: Bearer TOKEN, or sign in")

// teamNotFound is the answer for a team the caller may not see: the same
// whether it exists or not.
func teamNotFound(team string) error {
	return errorf(http.StatusNotFound, apiv1.CodeNotFound, "team %s not found (see `cosmicac teams list`)", clip(team))
}

// credential reads the request's secret: a bearer token, else the session
// cookie. fromCookie says which.
func credential(r *http.Request) (secret string, fromCookie bool, err error) {
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, secret, ok := strings.Cut(h, " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") {
			return "", false, errUnauthorized
		}
		secret = strings.TrimSpace(secret)
		if !wellFormed(secret, TokenPrefix) && !wellFormed(secret, SessionPrefix) {
			return "", false, errUnauthorized
		}
		return secret, false, nil
	}
	ck, err := r.Cookie(apiv1.SessionCookie)
	if err != nil || !wellFormed(ck.Value, SessionPrefix) {
		return "", false, errUnauthorized
	}
	return ck.Value, true, nil
}

// unsafeMethod reports whether a request may change something (and so
// needs a session's CSRF token).
func unsafeMethod(m string) bool {
	return m != http.MethodGet && m != http.MethodHead && m != http.MethodOptions
}

// touchEvery bounds how often a credential's last use is written.
const touchEvery = time.Minute

// authenticate finds the caller of r (a token, or a session with its CSRF
// token on unsafe methods) and the request's active team.
func (s *Server) authenticate(r *http.Request) (*caller, error) { return s.authenticateAs(r, false) }

// authenticateAs is authenticate; for a proxy route (HTTP to a job, whose
// query is the job's) the active team comes from the header only.
func (s *Server) authenticateAs(r *http.Request, proxy bool) (*caller, error) {
	secret, fromCookie, err := credential(r)
	if err != nil {
		return nil, err
	}
	hash := HashToken(secret)
	now := s.now()
	tok, u, ms, err := s.acc.Credential(r.Context(), hash, now)
	switch {
	case errors.Is(err, cosmic.ErrNotFound):
		return nil, errUnauthorized
	case err != nil:
		return nil, fmt.Errorf("look up token: %w", err)
	case subtle.ConstantTimeCompare(tok.Hash, hash) != 1:
		return nil, errUnauthorized
	case (tok.Kind == store.KindSession) != strings.HasPrefix(secret, SessionPrefix):
		return nil, errUnauthorized
	}
	if fromCookie && unsafeMethod(r.Method) {
		got := r.Header.Get(apiv1.HeaderCSRF)
		if got == "" || subtle.ConstantTimeCompare(HashToken(got), tok.CSRF) != 1 {
			return nil, errorf(http.StatusForbidden, apiv1.CodeForbidden, "missing or wrong %s: a signed-in browser sends the session's CSRF token with every change", apiv1.HeaderCSRF)
		}
	}
	if now.Sub(tok.LastUsedAt) >= touchEvery {
		if err := s.acc.TouchToken(r.Context(), tok.ID, now); err != nil {
			s.log.Warn("record token use", "token", tok.ID, "err", err)
		}
	}
	c := &caller{user: u, tok: tok, roles: make(map[string]cosmic.Role, len(ms))}
	if fromCookie {
		c.csrf = csrfToken(secret)
	}
	for _, m := range ms {
		c.roles[m.Team] = m.Role
	}
	if err := s.activeTeam(r, c, !proxy); err != nil {
		return nil, err
	}
	return c, nil
}

// activeTeam sets the request's active team: the X-Cosmicac-Team header or
// (when query) the team query parameter; else the team the credential is bound to; else
// the caller's only team; else none. A team the caller may not act in is
// not found; one that differs from the credential's binding is forbidden.
func (s *Server) activeTeam(r *http.Request, c *caller, query bool) error {
	named := r.Header.Get(apiv1.HeaderTeam)
	if q := r.URL.Query()[apiv1.QueryTeam]; query && len(q) > 0 {
		if len(q) > 1 || named != "" && q[0] != named {
			return badRequest("the team is given more than once (%s and ?%s=)", apiv1.HeaderTeam, apiv1.QueryTeam)
		}
		named = q[0]
	}
	switch {
	case named == apiv1.AllTeams:
		if !c.platformAdmin() {
			return teamNotFound(named)
		}
		c.allTeams = true
		return nil
	case named == "" && c.tok.Team != "":
		named = c.tok.Team
	case named == "" && len(c.roles) == 1:
		for t := range c.roles {
			named = t
		}
	case named == "":
		return nil
	case !cosmic.ValidAccountName(named):
		return invalid(&cosmic.FieldError{Field: apiv1.HeaderTeam, Message: fmt.Sprintf("%s is not a team name", clip(named))})
	case c.tok.Team != "" && named != c.tok.Team:
		return errorf(http.StatusForbidden, apiv1.CodeForbidden, "this token is bound to team %s; it cannot act in %s", c.tok.Team, named)
	}
	if !c.inTeam(named) {
		return teamNotFound(named)
	}
	if _, member := c.roles[named]; !member {
		// A platform admin in a team they are not in: it must exist.
		if _, err := s.acc.GetTeam(r.Context(), named); err != nil {
			if errors.Is(err, cosmic.ErrNotFound) {
				return teamNotFound(named)
			}
			return err
		}
	}
	c.team, c.role = named, c.roles[named]
	return nil
}

// teamNames lists the caller's teams, for messages.
func (c *caller) teamNames() string {
	names := slices.Sorted(maps.Keys(c.roles))
	if len(names) == 0 {
		return "you are in no team; ask an admin to add you to one"
	}
	return "you are in " + strings.Join(names, ", ")
}

// authorize checks the route's permission before the handler runs. A team
// permission acts in the job of the path's {id} (checked by visibleJob,
// which knows the job's team), else in the team of the path's {team}, else
// in the active team.
func (s *Server) authorize(r *http.Request, rt apiv1.Route, c *caller) error {
	c.perm = rt.Perm
	if authz.KindOf(rt.Perm) != authz.KindTeam {
		if !c.can("", rt.Perm) {
			return forbidden(c, rt.Perm, "")
		}
		return nil
	}
	for _, p := range rt.Params {
		if p.In == apiv1.InPath && p.Name == "id" && strings.HasPrefix(rt.Path, apiv1.Prefix+"/jobs/") {
			return nil // visibleJob
		}
	}
	team := c.team
	if r.PathValue("team") != "" {
		team = r.PathValue("team")
		if !cosmic.ValidAccountName(team) || !c.inTeam(team) {
			return teamNotFound(team)
		}
		if _, member := c.roles[team]; !member {
			if _, err := s.acc.GetTeam(r.Context(), team); err != nil {
				if errors.Is(err, cosmic.ErrNotFound) {
					return teamNotFound(team)
				}
				return err
			}
		}
	}
	c.auditTeam = team
	if team == "" {
		if rt.AllTeams && c.allTeams {
			return nil
		}
		return errorf(http.StatusBadRequest, apiv1.CodeInvalid, "no active team: name one with `cosmicac teams use TEAM`, --team or the %s header (%s)", apiv1.HeaderTeam, c.teamNames())
	}
	if !c.can(team, rt.Perm) {
		return forbidden(c, rt.Perm, team)
	}
	return nil
}

// forbidden says what the caller lacks.
func forbidden(c *caller, p authz.Permission, team string) error {
	switch {
	case c.tok.Scope != "" && !authz.ScopeKeeps(authz.Scope(c.tok.Scope), p):
		return errorf(http.StatusForbidden, apiv1.CodeForbidden, "this token's scope is %s; it may not %s", c.tok.Scope, p)
	case len(c.tok.Selector) > 0 && !selectorKeeps(p):
		return errorf(http.StatusForbidden, apiv1.CodeForbidden, "this token is limited by a selector (%s); it may not %s, which reaches beyond the jobs it selects", selectorText(c.tok.Selector), p)
	case authz.KindOf(p) == authz.KindPlatform && c.user.PlatformAdmin:
		return errorf(http.StatusForbidden, apiv1.CodeForbidden, "%s needs a platform admin's own token, not one bound to a team or scoped", p)
	case authz.KindOf(p) == authz.KindPlatform:
		return errorf(http.StatusForbidden, apiv1.CodeForbidden, "only platform admins may %s", p)
	case team != "":
		role := c.roles[team]
		if role == "" {
			role = "no role"
		}
		return errorf(http.StatusForbidden, apiv1.CodeForbidden, "you are %s in team %s; %s needs a higher role (docs/permissions.md)", role, team, p)
	}
	return errorf(http.StatusForbidden, apiv1.CodeForbidden, "you may not %s", p)
}

// selectorText writes a selector as k=v,... in key order.
func selectorText(sel map[string]string) string {
	terms := make([]string, 0, len(sel))
	for _, k := range slices.Sorted(maps.Keys(sel)) {
		terms = append(terms, k+"="+sel[k])
	}
	return strings.Join(terms, ",")
}

// Bootstrap names.
const (
	AdminTokenFile = "admin.token"
	BootstrapTeam  = "default"
	BootstrapUser  = "admin"
	bootstrapToken = "bootstrap-admin" // the token's ID
)

// Bootstrap makes the first admin on first start: when no user exists it
// creates team "default", user "admin" (a platform admin who owns that
// team) and a token, and writes the token to dataDir/admin.token (mode
// 0600; dataDir is created 0700). It returns that file's path and whether
// it wrote it now; when users exist it does nothing and created is false.
//
// The token is first written to admin.token.new, then stored, then the
// file is renamed: a bootstrap interrupted half-way finishes on the next
// start from the .new file, so the admin is never left without a token.
func Bootstrap(ctx context.Context, acc Accounts, dataDir string) (path string, created bool, err error) {
	path = filepath.Join(dataDir, AdminTokenFile)
	pending := path + ".new"
	secret := ""
	switch b, err := os.ReadFile(pending); {
	case err == nil && wellFormed(strings.TrimSpace(string(b)), TokenPrefix):
		secret = strings.TrimSpace(string(b))
	case err == nil || errors.Is(err, os.ErrNotExist):
		users, err := acc.ListUsers(ctx)
		if err != nil {
			return path, false, fmt.Errorf("bootstrap: list users: %w", err)
		}
		if len(users) > 0 {
			return path, false, nil
		}
		if secret, _, err = NewToken(); err != nil {
			return path, false, fmt.Errorf("bootstrap: %w", err)
		}
		if err := writeSecret(dataDir, pending, secret); err != nil {
			return path, false, fmt.Errorf("bootstrap: %w", err)
		}
	default:
		return path, false, fmt.Errorf("bootstrap: %w", err)
	}
	now := time.Now().UTC()
	if err := acc.CreateTeam(ctx, cosmic.Team{Name: BootstrapTeam, CreatedAt: now}); err != nil && !errors.Is(err, cosmic.ErrConflict) {
		return path, false, fmt.Errorf("bootstrap: create team: %w", err)
	}
	if err := acc.CreateUser(ctx, cosmic.User{Name: BootstrapUser, PlatformAdmin: true, CreatedAt: now}, ""); err != nil && !errors.Is(err, cosmic.ErrConflict) {
		return path, false, fmt.Errorf("bootstrap: create user: %w", err)
	}
	if err := acc.PutMember(ctx, cosmic.Member{Team: BootstrapTeam, User: BootstrapUser, Role: cosmic.RoleOwner}); err != nil {
		return path, false, fmt.Errorf("bootstrap: add to team: %w", err)
	}
	tok := store.Token{ID: bootstrapToken, Kind: store.KindToken, Name: "bootstrap admin token", UserName: BootstrapUser, Hash: HashToken(secret), CreatedAt: now}
	if err := acc.CreateToken(ctx, tok); err != nil && !errors.Is(err, cosmic.ErrConflict) {
		return path, false, fmt.Errorf("bootstrap: create token: %w", err)
	} else if err != nil {
		// The bootstrap token exists: this start's own, stored before an
		// interruption, or another app-node's on the same database that
		// bootstrapped at the same moment. Only the first is this token.
		if _, _, err := acc.TokenByHash(ctx, tok.Hash, now); errors.Is(err, cosmic.ErrNotFound) {
			if err := os.Remove(pending); err != nil {
				return path, false, fmt.Errorf("bootstrap: %w", err)
			}
			return path, false, nil
		} else if err != nil {
			return path, false, fmt.Errorf("bootstrap: %w", err)
		}
	}
	if err := os.Rename(pending, path); err != nil {
		return path, false, fmt.Errorf("bootstrap: %w", err)
	}
	return path, true, nil
}

func writeSecret(dir, name, secret string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create data dir: %w", err)
	}
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("write token file: %w", err)
	}
	err = f.Chmod(0o600) // a leftover file keeps its mode otherwise
	if err == nil {
		_, err = f.WriteString(secret + "\n")
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write token file %s: %w", name, err)
	}
	return nil
}
