package appnode

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/cosmicac/cosmicac/internal/apiv1"
	"github.com/cosmicac/cosmicac/internal/authz"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/store"
)

// The people side's handlers: sign-in, sessions, tokens, users, teams and
// members (docs/security.md, docs/permissions.md).

// readJSON reads the body strictly into v.
func (s *Server) readJSON(w http.ResponseWriter, r *http.Request, v any) error {
	raw, err := s.readBody(w, r)
	if err != nil {
		return err
	}
	return decodeStrict(raw, v)
}

// signIn checks a user's password, rate limited, and says nothing of which
// names exist: a wrong name and a wrong password are the same 401, and
// take as long.
func (s *Server) signIn(w http.ResponseWriter, r *http.Request, in apiv1.Login) (cosmic.User, error) {
	if inf, _ := r.Context().Value(infoKey{}).(*info); inf != nil {
		inf.target = auditText(in.User)
	}
	if in.User == "" || in.Password == "" {
		return cosmic.User{}, invalid(&cosmic.FieldError{Field: "user", Message: "user and password are required"})
	}
	ok, wait, err := s.logins.allow(r.Context(), in.User, s.clientAddr(r), s.now())
	if err != nil {
		return cosmic.User{}, fmt.Errorf("sign-in limit: %w", err)
	}
	if !ok {
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(wait.Seconds()))))
		return cosmic.User{}, errorf(http.StatusTooManyRequests, apiv1.CodeTooManyRequests, "too many sign-in attempts; retry in %v", wait.Round(time.Second))
	}
	hash, err := s.acc.PasswordHash(r.Context(), in.User)
	if err != nil && !errors.Is(err, cosmic.ErrNotFound) {
		return cosmic.User{}, err
	}
	if !VerifyPassword(hash, in.Password) { // an empty hash costs a hash too
		return cosmic.User{}, errorf(http.StatusUnauthorized, apiv1.CodeUnauthorized, "wrong user name or password")
	}
	u, err := s.acc.GetUser(r.Context(), in.User)
	if err != nil {
		return cosmic.User{}, err
	}
	return u, nil
}

// lifetime reads an expiresIn: a Go duration from a minute to max (""
// is def), or says what is wrong with it.
func lifetime(field, v string, def, max time.Duration) (time.Duration, *cosmic.FieldError) {
	if v == "" {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < time.Minute || d > max {
		return 0, &cosmic.FieldError{Field: field, Message: fmt.Sprintf("%s: want a duration from 1m to %v (e.g. 720h)", clip(v), max)}
	}
	return d, nil
}

func (s *Server) login(w http.ResponseWriter, r *http.Request, _ *caller) (any, error) {
	var in apiv1.Login
	if err := s.readJSON(w, r, &in); err != nil {
		return nil, err
	}
	life, fe := lifetime("expiresIn", in.ExpiresIn, apiv1.DefaultLoginLife, apiv1.MaxTokenLife)
	if fe != nil {
		return nil, invalid(fe)
	}
	name := strings.TrimSpace(in.TokenName)
	if name == "" {
		name = "login"
	}
	if fe := checkName("tokenName", name); fe != nil {
		return nil, invalid(fe)
	}
	u, err := s.signIn(w, r, in)
	if err != nil {
		return nil, err
	}
	return s.makeToken(r, u.Name, store.Token{Name: name}, life)
}

// makeToken stores a new token of user shaped like t, living life.
func (s *Server) makeToken(r *http.Request, user string, t store.Token, life time.Duration) (apiv1.CreatedToken, error) {
	secret, hash, err := NewToken()
	if err != nil {
		return apiv1.CreatedToken{}, err
	}
	if t.ID, err = NewTokenID(); err != nil {
		return apiv1.CreatedToken{}, err
	}
	now := s.now().UTC()
	t.Kind, t.UserName, t.Hash, t.CreatedAt, t.ExpiresAt = store.KindToken, user, hash, now, now.Add(life)
	if err := s.acc.CreateToken(r.Context(), t); err != nil {
		return apiv1.CreatedToken{}, err
	}
	s.log.Info("token created", "id", t.ID, "user", user, "team", t.Team, "scope", t.Scope)
	return apiv1.CreatedToken{Token: tokenOut(t), Secret: secret}, nil
}

func tokenOut(t store.Token) apiv1.Token {
	return apiv1.Token{ID: t.ID, Name: t.Name, User: t.UserName, Team: t.Team, Scope: t.Scope, Selector: t.Selector,
		CreatedAt: t.CreatedAt, ExpiresAt: t.ExpiresAt, LastUsedAt: t.LastUsedAt}
}

func (s *Server) createSession(w http.ResponseWriter, r *http.Request, _ *caller) (any, error) {
	var in apiv1.CreateSession
	if err := s.readJSON(w, r, &in); err != nil {
		return nil, err
	}
	var (
		u       cosmic.User
		err     error
		expires = s.now().UTC().Add(s.cfg.SessionLife.D())
	)
	if in.Token != "" {
		if in.User != "" || in.Password != "" {
			return nil, invalid(&cosmic.FieldError{Field: "token", Message: "give either a token or a user and password"})
		}
		var tokExpires time.Time
		if u, tokExpires, err = s.tokenSignIn(r, in.Token); err != nil {
			return nil, err
		}
		if !tokExpires.IsZero() && tokExpires.Before(expires) {
			expires = tokExpires.UTC()
		}
	} else if u, err = s.signIn(w, r, apiv1.Login{User: in.User, Password: in.Password}); err != nil {
		return nil, err
	}
	secret, hash, err := newSecret(SessionPrefix)
	if err != nil {
		return nil, err
	}
	csrf := csrfToken(secret)
	csrfHash := HashToken(csrf)
	id, err := newID("ses_")
	if err != nil {
		return nil, err
	}
	t := store.Token{ID: id, Kind: store.KindSession, Name: "browser", UserName: u.Name, Hash: hash, CSRF: csrfHash,
		CreatedAt: s.now().UTC(), ExpiresAt: expires}
	if err := s.acc.CreateToken(r.Context(), t); err != nil {
		return nil, err
	}
	s.setSessionCookie(w, r, secret, t.ExpiresAt)
	s.log.Info("session created", "id", id, "user", u.Name)
	return apiv1.Session{User: u.Name, CSRFToken: csrf, ExpiresAt: t.ExpiresAt}, nil
}

// csrfToken is a session's CSRF token: derived from the session's secret
// (HMAC-SHA256), so that whoami can give it again to a reloaded page that
// sends the cookie, and nobody without the cookie (HttpOnly) can compute
// it. Only its hash is stored, as the secret's is.
func csrfToken(sessionSecret string) string {
	m := hmac.New(sha256.New, []byte(sessionSecret))
	m.Write([]byte("cosmicac session csrf v1"))
	return "csrf_" + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// tokenSignIn opens a session with a personal access token (the web
// interface's "sign in with a token"): only a full one, neither bound to a
// team, scoped nor limited by a selector, since a session holds all of
// its user's rights. It answers the token's user and expiry; a wrong
// token is 401 like a wrong password.
func (s *Server) tokenSignIn(r *http.Request, secret string) (cosmic.User, time.Time, error) {
	if inf, _ := r.Context().Value(infoKey{}).(*info); inf != nil {
		inf.target = "token"
	}
	hash := HashToken(secret)
	tok, u, _, err := s.acc.Credential(r.Context(), hash, s.now())
	switch {
	case errors.Is(err, cosmic.ErrNotFound):
		return cosmic.User{}, time.Time{}, errorf(http.StatusUnauthorized, apiv1.CodeUnauthorized, "unknown, expired or revoked token")
	case err != nil:
		return cosmic.User{}, time.Time{}, fmt.Errorf("look up token: %w", err)
	case subtle.ConstantTimeCompare(tok.Hash, hash) != 1, tok.Kind != store.KindToken, strings.HasPrefix(secret, SessionPrefix):
		return cosmic.User{}, time.Time{}, errorf(http.StatusUnauthorized, apiv1.CodeUnauthorized, "unknown, expired or revoked token")
	case tok.Team != "" || tok.Scope != "" || len(tok.Selector) > 0:
		return cosmic.User{}, time.Time{}, errorf(http.StatusForbidden, apiv1.CodeForbidden,
			"token %s is bound, scoped or limited by a selector: a browser session holds all of its user's rights, so it needs a full token or the password", tok.ID)
	}
	return u, tok.ExpiresAt, nil
}

func (s *Server) deleteSession(w http.ResponseWriter, r *http.Request, c *caller) (any, error) {
	if err := s.acc.DeleteToken(r.Context(), c.tok.ID); err != nil && !errors.Is(err, cosmic.ErrNotFound) {
		return nil, err
	}
	c.auditTarget = c.tok.ID
	if c.tok.Kind == store.KindSession {
		s.setSessionCookie(w, r, "", time.Time{})
	}
	return nil, nil
}

// setSessionCookie sets the session cookie to secret until expires, on
// each of apiv1.SessionCookiePaths, or ends it there (secret ""). It also
// ends the cookie of Path=/ that earlier releases set, so that
// a browser that kept one sends it nowhere from now on.
func (s *Server) setSessionCookie(w http.ResponseWriter, r *http.Request, secret string, expires time.Time) {
	secure := r.TLS != nil || s.cfg.SecureCookies
	end := func(path string) {
		http.SetCookie(w, &http.Cookie{Name: apiv1.SessionCookie, Value: "", Path: path, MaxAge: -1,
			HttpOnly: true, Secure: secure, SameSite: http.SameSiteStrictMode})
	}
	end("/")
	for _, path := range apiv1.SessionCookiePaths {
		if secret == "" {
			end(path)
			continue
		}
		http.SetCookie(w, &http.Cookie{Name: apiv1.SessionCookie, Value: secret, Path: path, Expires: expires,
			HttpOnly: true, Secure: secure, SameSite: http.SameSiteStrictMode})
	}
}

func (s *Server) changePassword(w http.ResponseWriter, r *http.Request, c *caller) (any, error) {
	var in apiv1.ChangePassword
	if err := s.readJSON(w, r, &in); err != nil {
		return nil, err
	}
	if err := checkPassword(in.Password); err != nil {
		return nil, invalid(&cosmic.FieldError{Field: "password", Message: err.Error()})
	}
	if !c.user.HasPassword && !unconfined(c.tok) {
		// A first password opens sessions with all of the user's rights:
		// a token confined to a team, a scope or a selector may not set it.
		return nil, errorf(http.StatusForbidden, apiv1.CodeForbidden,
			"token %s is bound, scoped or limited by a selector: a first password needs a browser session or a token with all of your rights", c.tok.ID)
	}
	if c.user.HasPassword {
		// The current password proves it is the user, not a stolen token;
		// rate limited as a sign-in.
		if _, err := s.signIn(w, r, apiv1.Login{User: c.user.Name, Password: in.CurrentPassword}); err != nil {
			var ae *apiError
			if errors.As(err, &ae) && ae.status == http.StatusUnauthorized {
				return nil, errorf(http.StatusForbidden, apiv1.CodeForbidden, "the current password is wrong")
			}
			return nil, err
		}
	}
	return nil, s.setPassword(r, c.user.Name, in.Password)
}

func (s *Server) setPassword(r *http.Request, user, pw string) error {
	h, err := HashPassword(pw)
	if err != nil {
		return err
	}
	return s.acc.SetPassword(r.Context(), user, h)
}

func (s *Server) listTokens(_ http.ResponseWriter, r *http.Request, c *caller) (any, error) {
	toks, err := s.acc.ListTokens(r.Context(), c.user.Name, store.KindToken)
	if err != nil {
		return nil, err
	}
	out := apiv1.TokenList{Items: make([]apiv1.Token, len(toks)), Total: len(toks)}
	for i, t := range toks {
		out.Items[i] = tokenOut(t)
	}
	return out, nil
}

// maxTokenName bounds the names of tokens and API keys.
const maxTokenName = 128

// checkName says what is wrong with the name of a token or an API key.
func checkName(field, name string) *cosmic.FieldError {
	switch {
	case name == "":
		return &cosmic.FieldError{Field: field, Message: "is required"}
	case utf8.RuneCountInString(name) > maxTokenName || !utf8.ValidString(name):
		return &cosmic.FieldError{Field: field, Message: fmt.Sprintf("at most %d characters of UTF-8", maxTokenName)}
	}
	return nil
}

func (s *Server) createToken(w http.ResponseWriter, r *http.Request, c *caller) (any, error) {
	var in apiv1.CreateToken
	if err := s.readJSON(w, r, &in); err != nil {
		return nil, err
	}
	in.Name = strings.TrimSpace(in.Name)
	var fes []*cosmic.FieldError
	if fe := checkName("name", in.Name); fe != nil {
		fes = append(fes, fe)
	}
	life, fe := lifetime("expiresIn", in.ExpiresIn, apiv1.DefaultTokenLife, apiv1.MaxTokenLife)
	if fe != nil {
		fes = append(fes, fe)
	}
	if fe == nil {
		var err error
		if life, err = confineToken(c.tok, &in, life, s.now()); err != nil {
			return nil, err
		}
	}
	scope := authz.Scope(in.Scope)
	if !scope.Valid() {
		fes = append(fes, &cosmic.FieldError{Field: "scope", Message: fmt.Sprintf("%s: want read or operator (or none, for all your rights)", clip(in.Scope))})
	}
	if (scope != authz.ScopeFull || len(in.Selector) > 0) && in.Team == "" {
		fes = append(fes, &cosmic.FieldError{Field: "team", Message: "a scoped token, or one with a selector, must be bound to a team"})
	}
	if len(in.Selector) > apiv1.MaxLabelSelectorTerms {
		fes = append(fes, &cosmic.FieldError{Field: "selector", Message: fmt.Sprintf("at most %d labels", apiv1.MaxLabelSelectorTerms)})
	}
	for k, v := range in.Selector {
		if err := cosmic.ValidateLabel("selector", k, v); err != nil {
			fes = append(fes, &cosmic.FieldError{Field: "selector." + clip(k), Message: cosmic.MessageOf(err)})
		}
	}
	if len(fes) > 0 {
		return nil, invalid(fes...)
	}
	if in.Team != "" {
		if !c.inTeam(in.Team) {
			return nil, teamNotFound(in.Team)
		}
		if _, member := c.roles[in.Team]; !member {
			return nil, errorf(http.StatusConflict, apiv1.CodeConflict, "you are not a member of team %s; a token bound to it would have no rights there", in.Team)
		}
	}
	c.auditTeam = in.Team
	out, err := s.makeToken(r, c.user.Name, store.Token{Name: in.Name, Team: in.Team, Scope: string(scope), Selector: in.Selector}, life)
	if err == nil {
		c.auditTarget = out.ID
	}
	return out, err
}

// unconfined reports whether t holds all of its user's rights: a browser
// session, or a token bound to no team, of no scope and no selector.
func unconfined(t store.Token) bool {
	return t.Kind == store.KindSession || t.Team == "" && t.Scope == "" && len(t.Selector) == 0
}

// confineToken makes in, a token that the token tok asks for at now to live
// life, at most as strong as tok, and answers its life. A token confined to
// a team, a scope or a selector makes only tokens bound to its team, of its
// scope or a narrower one (read under operator), limited by every label of
// its selector (more labels narrow it), and ending no later than it. What
// in leaves out it inherits (with no expiresIn, the new token ends with tok
// if tok ends first), so that `tokens create NAME` with a confined token
// just works; what it asks beyond is refused, 403 naming the field. A
// session, or a token with all of its user's rights, makes any token (it
// could open a session anyway): docs/permissions.md, "Narrower than a role".
func confineToken(tok store.Token, in *apiv1.CreateToken, life time.Duration, now time.Time) (time.Duration, error) {
	if unconfined(tok) {
		return life, nil
	}
	refuse := func(field, format string, args ...any) error {
		fe := &cosmic.FieldError{Field: field, Message: fmt.Sprintf("this token (%s) makes no token stronger than itself: ", tok.ID) + fmt.Sprintf(format, args...)}
		e := errorf(http.StatusForbidden, apiv1.CodeForbidden, "%s", fe.Error())
		e.body.Details, _ = json.Marshal([]*cosmic.FieldError{fe})
		return e
	}
	switch {
	case tok.Team == "":
	case in.Team == "":
		in.Team = tok.Team
	case in.Team != tok.Team:
		return 0, refuse("team", "it is bound to team %s, and so is any token it makes (leave team out to inherit it)", tok.Team)
	}
	switch have, asked := authz.Scope(tok.Scope), authz.Scope(in.Scope); {
	case have == authz.ScopeFull, !asked.Valid(): // an unknown scope is a 400 below
	case asked == authz.ScopeFull:
		in.Scope = tok.Scope
	case asked != have && !(have == authz.ScopeOperator && asked == authz.ScopeRead):
		return 0, refuse("scope", "its scope is %s; a token it makes has that scope or a narrower one", have)
	}
	for _, k := range slices.Sorted(maps.Keys(tok.Selector)) {
		v := tok.Selector[k]
		switch got, ok := in.Selector[k]; {
		case !ok:
			if in.Selector == nil {
				in.Selector = map[string]string{}
			}
			in.Selector[k] = v
		case got != v:
			return 0, refuse("selector."+k, "it is limited to %s=%s; a token it makes keeps that label (and may add others)", k, v)
		}
	}
	if end := tok.ExpiresAt; !end.IsZero() && now.Add(life).After(end) {
		if in.ExpiresIn != "" {
			return 0, refuse("expiresIn", "it ends at %s; a token it makes ends no later (leave expiresIn out to end with it)", end.UTC().Format(time.RFC3339))
		}
		life = end.Sub(now)
	}
	return life, nil
}

func (s *Server) revokeToken(_ http.ResponseWriter, r *http.Request, c *caller) (any, error) {
	id := r.PathValue("id")
	t, err := s.acc.GetToken(r.Context(), id)
	if err == nil && (t.UserName != c.user.Name || t.Kind != store.KindToken) {
		err = cosmic.ErrNotFound // another's: IDs do not leak
	}
	if err == nil && c.user.PlatformAdmin && fullToken(t, s.now()) {
		if err := s.keepAdminWayIn(r.Context(), losing{token: t.ID}, fmt.Sprintf("revoking token %s", t.ID)); err != nil {
			return nil, err
		}
	}
	if err == nil {
		err = s.acc.DeleteToken(r.Context(), id)
	}
	if errors.Is(err, cosmic.ErrNotFound) {
		return nil, errorf(http.StatusNotFound, apiv1.CodeNotFound, "token %s not found", clip(id))
	}
	return nil, err
}

// ---- users (platform admins)

func (s *Server) userInfo(r *http.Request, u cosmic.User) (apiv1.UserInfo, error) {
	ms, err := s.acc.Memberships(r.Context(), u.Name)
	return apiv1.UserInfo{User: u, Teams: ms}, err
}

func (s *Server) listUsers(_ http.ResponseWriter, r *http.Request, _ *caller) (any, error) {
	users, err := s.acc.ListUsers(r.Context())
	if err != nil {
		return nil, err
	}
	out := apiv1.UserList{Items: make([]apiv1.UserInfo, len(users)), Total: len(users)}
	for i, u := range users {
		if out.Items[i], err = s.userInfo(r, u); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func nameError(field, name string) *cosmic.FieldError {
	return &cosmic.FieldError{Field: field, Message: fmt.Sprintf("%s: want 1 to %d of a-z, 0-9, '.', '_', '-', starting with a letter or digit", clip(name), cosmic.MaxAccountName)}
}

func (s *Server) createUser(w http.ResponseWriter, r *http.Request, c *caller) (any, error) {
	var in apiv1.CreateUser
	if err := s.readJSON(w, r, &in); err != nil {
		return nil, err
	}
	var fes []*cosmic.FieldError
	if !cosmic.ValidAccountName(in.Name) {
		fes = append(fes, nameError("name", in.Name))
	}
	if in.Password != "" {
		if err := checkPassword(in.Password); err != nil {
			fes = append(fes, &cosmic.FieldError{Field: "password", Message: err.Error()})
		}
	}
	if len(fes) > 0 {
		return nil, invalid(fes...)
	}
	c.auditTarget = in.Name
	hash := ""
	if in.Password != "" {
		var err error
		if hash, err = HashPassword(in.Password); err != nil {
			return nil, err
		}
	}
	u := cosmic.User{Name: in.Name, PlatformAdmin: in.PlatformAdmin, CreatedAt: s.now().UTC(), HasPassword: hash != ""}
	if err := s.acc.CreateUser(r.Context(), u, hash); err != nil {
		return nil, err
	}
	return apiv1.UserInfo{User: u, Teams: []cosmic.Member{}}, nil
}

func (s *Server) pathUser(r *http.Request, c *caller) (cosmic.User, error) {
	name := r.PathValue("name")
	if c != nil {
		c.auditTarget = auditText(name)
	}
	u, err := s.acc.GetUser(r.Context(), name)
	if errors.Is(err, cosmic.ErrNotFound) {
		return u, errorf(http.StatusNotFound, apiv1.CodeNotFound, "user %s not found", clip(name))
	}
	return u, err
}

func (s *Server) getUser(_ http.ResponseWriter, r *http.Request, c *caller) (any, error) {
	u, err := s.pathUser(r, c)
	if err != nil {
		return nil, err
	}
	return s.userInfo(r, u)
}

func (s *Server) updateUser(w http.ResponseWriter, r *http.Request, c *caller) (any, error) {
	var in apiv1.UpdateUser
	if err := s.readJSON(w, r, &in); err != nil {
		return nil, err
	}
	u, err := s.pathUser(r, c)
	if err != nil {
		return nil, err
	}
	if in.PlatformAdmin != nil {
		if !*in.PlatformAdmin {
			if err := s.userLosesAdmin(r.Context(), u, fmt.Sprintf("taking platform admin from %s", u.Name)); err != nil {
				return nil, err
			}
		}
		if err := s.acc.SetPlatformAdmin(r.Context(), u.Name, *in.PlatformAdmin); err != nil {
			return nil, err
		}
		u.PlatformAdmin = *in.PlatformAdmin
	}
	return s.userInfo(r, u)
}

func (s *Server) deleteUser(_ http.ResponseWriter, r *http.Request, c *caller) (any, error) {
	u, err := s.pathUser(r, c)
	if err != nil {
		return nil, err
	}
	if err := s.userLosesAdmin(r.Context(), u, fmt.Sprintf("deleting %s", u.Name)); err != nil {
		return nil, err
	}
	if u.PlatformAdmin {
		// The last platform admin stays: SetPlatformAdmin refuses it.
		if err := s.acc.SetPlatformAdmin(r.Context(), u.Name, false); err != nil {
			return nil, err
		}
	}
	return nil, s.acc.DeleteUser(r.Context(), u.Name)
}

func (s *Server) setUserPassword(w http.ResponseWriter, r *http.Request, c *caller) (any, error) {
	var in apiv1.SetPassword
	if err := s.readJSON(w, r, &in); err != nil {
		return nil, err
	}
	if err := checkPassword(in.Password); err != nil {
		return nil, invalid(&cosmic.FieldError{Field: "password", Message: err.Error()})
	}
	u, err := s.pathUser(r, c)
	if err != nil {
		return nil, err
	}
	return nil, s.setPassword(r, u.Name, in.Password)
}

// ---- teams and members

func (s *Server) listTeams(_ http.ResponseWriter, r *http.Request, c *caller) (any, error) {
	var teams []cosmic.Team
	if c.platformAdmin() {
		var err error
		if teams, err = s.acc.ListTeams(r.Context()); err != nil {
			return nil, err
		}
	} else {
		all, err := s.acc.ListTeams(r.Context())
		if err != nil {
			return nil, err
		}
		for _, t := range all {
			if c.inTeam(t.Name) {
				teams = append(teams, t)
			}
		}
	}
	out := apiv1.TeamList{Items: make([]apiv1.TeamInfo, len(teams)), Total: len(teams)}
	for i, t := range teams {
		out.Items[i] = apiv1.TeamInfo{Team: t, Role: c.roles[t.Name]}
	}
	return out, nil
}

func (s *Server) createTeam(w http.ResponseWriter, r *http.Request, c *caller) (any, error) {
	var in apiv1.CreateTeam
	if err := s.readJSON(w, r, &in); err != nil {
		return nil, err
	}
	var fes []*cosmic.FieldError
	if !cosmic.ValidAccountName(in.Name) {
		fes = append(fes, nameError("name", in.Name))
	}
	if in.Owner != "" && !cosmic.ValidAccountName(in.Owner) {
		fes = append(fes, nameError("owner", in.Owner))
	}
	if len(fes) > 0 {
		return nil, invalid(fes...)
	}
	c.auditTeam, c.auditTarget = in.Name, in.Name
	if in.Owner != "" {
		if _, err := s.acc.GetUser(r.Context(), in.Owner); err != nil {
			if errors.Is(err, cosmic.ErrNotFound) {
				return nil, invalid(&cosmic.FieldError{Field: "owner", Message: fmt.Sprintf("no user %s", in.Owner)})
			}
			return nil, err
		}
	}
	t := cosmic.Team{Name: in.Name, CreatedAt: s.now().UTC()}
	if err := s.acc.CreateTeam(r.Context(), t); err != nil {
		return nil, err
	}
	out := apiv1.TeamInfo{Team: t}
	if in.Owner != "" {
		if err := s.acc.PutMember(r.Context(), cosmic.Member{Team: t.Name, User: in.Owner, Role: cosmic.RoleOwner}); err != nil {
			return nil, err
		}
		if in.Owner == c.user.Name {
			out.Role = cosmic.RoleOwner
		}
	}
	return out, nil
}

func (s *Server) deleteTeam(_ http.ResponseWriter, r *http.Request, c *caller) (any, error) {
	team := r.PathValue("team")
	c.auditTarget = team
	if err := s.acc.DeleteTeam(r.Context(), team); err != nil {
		if errors.Is(err, cosmic.ErrNotFound) {
			return nil, teamNotFound(team)
		}
		return nil, err
	}
	s.dropQuotas(r.Context(), team)
	return nil, nil
}

func (s *Server) listMembers(_ http.ResponseWriter, r *http.Request, _ *caller) (any, error) {
	ms, err := s.acc.Members(r.Context(), r.PathValue("team"))
	if err != nil {
		return nil, err
	}
	return apiv1.MemberList{Items: ms, Total: len(ms)}, nil
}

// owners counts a team's owners.
func owners(ms []cosmic.Member) int {
	n := 0
	for _, m := range ms {
		if m.Role == cosmic.RoleOwner {
			n++
		}
	}
	return n
}

// memberChange checks that the caller may change user's role in team from
// what it is (ms) to role ("" to remove), and that an owner remains.
func (s *Server) memberChange(r *http.Request, c *caller, team, user string, role cosmic.Role) (old cosmic.Role, err error) {
	c.auditTarget = auditText(user)
	ms, err := s.acc.Members(r.Context(), team)
	if err != nil {
		return "", err
	}
	i := slices.IndexFunc(ms, func(m cosmic.Member) bool { return m.User == user })
	if i >= 0 {
		old = ms[i].Role
	}
	sub := c.subject(team)
	for _, rl := range []cosmic.Role{old, role} {
		if rl != "" && !authz.CanGrant(sub, rl) {
			return old, errorf(http.StatusForbidden, apiv1.CodeForbidden, "only owners may give or take the role owner in team %s", team)
		}
	}
	if old == cosmic.RoleOwner && role != cosmic.RoleOwner && owners(ms) == 1 {
		return old, errorf(http.StatusConflict, apiv1.CodeConflict, "%s is the last owner of team %s; make another owner first", user, team)
	}
	return old, nil
}

func (s *Server) putMember(w http.ResponseWriter, r *http.Request, c *caller) (any, error) {
	var in apiv1.PutMember
	if err := s.readJSON(w, r, &in); err != nil {
		return nil, err
	}
	if !in.Role.Valid() {
		return nil, invalid(&cosmic.FieldError{Field: "role", Message: fmt.Sprintf("%s: want owner, admin, member or viewer", clip(string(in.Role)))})
	}
	team, user := r.PathValue("team"), r.PathValue("user")
	if _, err := s.acc.GetUser(r.Context(), user); err != nil {
		if errors.Is(err, cosmic.ErrNotFound) {
			return nil, errorf(http.StatusNotFound, apiv1.CodeNotFound, "user %s not found", clip(user))
		}
		return nil, err
	}
	if _, err := s.memberChange(r, c, team, user, in.Role); err != nil {
		return nil, err
	}
	m := cosmic.Member{Team: team, User: user, Role: in.Role}
	return m, s.acc.PutMember(r.Context(), m)
}

func (s *Server) deleteMember(_ http.ResponseWriter, r *http.Request, c *caller) (any, error) {
	team, user := r.PathValue("team"), r.PathValue("user")
	old, err := s.memberChange(r, c, team, user, "")
	if err != nil {
		return nil, err
	}
	if old == "" {
		return nil, errorf(http.StatusNotFound, apiv1.CodeNotFound, "%s is not a member of team %s", clip(user), team)
	}
	return nil, s.acc.DeleteMember(r.Context(), team, user)
}
