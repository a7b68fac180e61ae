package appnode_test

import (
	"encoding/json"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/apiv1"
	"github.com/cosmicac/cosmicac/internal/appnode/appnodetest"
	"github.com/cosmicac/cosmicac/internal/authz"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/store"
)

// withToken is the header that carries tok.
func withToken(tok string) map[string]string {
	return map[string]string{"Authorization": "Bearer " + tok}
}

// browserSession opens a session with the full token tok and answers the
// credentials of a request that changes something with it.
func browserSession(t *testing.T, e *appnodetest.Env, tok string) (map[string]string, *http.Cookie) {
	t.Helper()
	rec := do(e, "POST", "/api/v1/session", `{"token":"`+tok+`"}`, nil)
	var ses apiv1.Session
	if err := json.Unmarshal(rec.Body.Bytes(), &ses); err != nil || rec.Code != http.StatusCreated {
		t.Fatalf("session: %d %s", rec.Code, rec.Body)
	}
	return map[string]string{apiv1.HeaderCSRF: ses.CSRFToken}, sessionCookie(t, rec)
}

// TestConfinedTokenMintsNoStrongerToken: a token bound to a team or limited
// by a selector used to mint an unbound, unlimited, longer-lived token of
// its user (issue 31). Now what it asks beyond its own confinement is 403
// naming the field, and what it leaves out it inherits. A full token, one
// that expires too, and a session still make any token.
func TestConfinedTokenMintsNoStrongerToken(t *testing.T) {
	e := appnodetest.NewEnv(t)
	full := e.AddUser(t, "alice", "ml", cosmic.RoleAdmin)
	e.AddUser(t, "alice", "web", cosmic.RoleAdmin)
	day := time.Now().Add(24 * time.Hour).UTC()
	callers := map[string]map[string]string{
		"full":     withToken(full),
		"bound":    withToken(appnodetest.AddToken(t, e.Accounts, store.Token{UserName: "alice", Name: "b", Team: "ml", ExpiresAt: day})),
		"selector": withToken(appnodetest.AddToken(t, e.Accounts, store.Token{UserName: "alice", Name: "s", Team: "ml", Selector: map[string]string{"app": "x"}, ExpiresAt: day})),
		// A CLI login's: full, but ending (a full token can open a
		// session anyway, so its end binds nothing it makes).
		"full, ending": withToken(appnodetest.AddToken(t, e.Accounts, store.Token{UserName: "alice", Name: "l", ExpiresAt: day})),
	}
	csrf, ck := browserSession(t, e, full)
	type want struct {
		code     int
		field    string // the field a 403 names
		team     string
		scope    string
		selector map[string]string
		// ends is when the token ends, within a minute.
		ends time.Time
	}
	def, long := time.Now().Add(apiv1.DefaultTokenLife), time.Now().Add(720*time.Hour)
	for name, tc := range map[string]struct {
		caller string
		body   string
		want   want
	}{
		"bound: another team":               {"bound", `{"team":"web"}`, want{code: 403, field: "team"}},
		"bound: asks nothing":               {"bound", `{}`, want{code: 201, team: "ml", ends: day}},
		"bound: a longer life":              {"bound", `{"expiresIn":"720h"}`, want{code: 403, field: "expiresIn"}},
		"bound: a shorter life, read scope": {"bound", `{"team":"ml","scope":"read","expiresIn":"1h"}`, want{code: 201, team: "ml", scope: "read", ends: time.Now().Add(time.Hour)}},
		"bound: a selector":                 {"bound", `{"selector":{"app":"y"}}`, want{code: 201, team: "ml", selector: map[string]string{"app": "y"}, ends: day}},
		"selector: another team":            {"selector", `{"team":"web","selector":{"app":"x"}}`, want{code: 403, field: "team"}},
		"selector: another value":           {"selector", `{"selector":{"app":"y"}}`, want{code: 403, field: "selector.app"}},
		"selector: other labels only":       {"selector", `{"selector":{"tier":"1"}}`, want{code: 201, team: "ml", selector: map[string]string{"app": "x", "tier": "1"}, ends: day}},
		"selector: asks nothing":            {"selector", `{}`, want{code: 201, team: "ml", selector: map[string]string{"app": "x"}, ends: day}},
		"selector: a longer life":           {"selector", `{"expiresIn":"48h"}`, want{code: 403, field: "expiresIn"}},
		"full: another team":                {"full", `{"team":"web"}`, want{code: 201, team: "web", ends: def}},
		"full, ending: a longer life":       {"full, ending", `{"expiresIn":"720h"}`, want{code: 201, ends: long}},
		"full, ending: asks nothing":        {"full, ending", `{}`, want{code: 201, ends: def}},
		"session: a longer life":            {"session", `{"expiresIn":"720h"}`, want{code: 201, ends: long}},
	} {
		t.Run(name, func(t *testing.T) {
			body := `{"name":"n"}`
			if tc.body != `{}` {
				body = `{"name":"n",` + strings.TrimPrefix(tc.body, "{")
			}
			hdr, cookies := callers[tc.caller], []*http.Cookie(nil)
			if tc.caller == "session" {
				hdr, cookies = csrf, []*http.Cookie{ck}
			}
			rec := do(e, "POST", "/api/v1/tokens", body, hdr, cookies...)
			if rec.Code != tc.want.code {
				t.Fatalf("%s: %d %s, want %d", body, rec.Code, rec.Body, tc.want.code)
			}
			if tc.want.code == http.StatusForbidden {
				var er apiv1.ErrorResponse
				if err := json.Unmarshal(rec.Body.Bytes(), &er); err != nil || er.Error.Code != apiv1.CodeForbidden || !strings.HasPrefix(er.Error.Message, tc.want.field+": ") {
					t.Errorf("the refusal %s: want code %s, the message naming %s", rec.Body, apiv1.CodeForbidden, tc.want.field)
				}
				return
			}
			var ct apiv1.CreatedToken
			if err := json.Unmarshal(rec.Body.Bytes(), &ct); err != nil {
				t.Fatal(err)
			}
			if ct.Team != tc.want.team || ct.Scope != tc.want.scope || !maps.Equal(ct.Selector, tc.want.selector) {
				t.Errorf("got team %q scope %q selector %v, want %q %q %v", ct.Team, ct.Scope, ct.Selector, tc.want.team, tc.want.scope, tc.want.selector)
			}
			if d := ct.ExpiresAt.Sub(tc.want.ends); d > time.Minute || d < -time.Minute {
				t.Errorf("ends at %v, want %v", ct.ExpiresAt, tc.want.ends)
			}
		})
	}
	// A bound token's child acts where its parent does, and no further.
	rec := do(e, "POST", "/api/v1/tokens", `{"name":"child"}`, callers["selector"])
	var child apiv1.CreatedToken
	if err := json.Unmarshal(rec.Body.Bytes(), &child); err != nil || rec.Code != 201 {
		t.Fatalf("child: %d %s", rec.Code, rec.Body)
	}
	if rec := do(e, "GET", "/api/v1/jobs?team=web", "", withToken(child.Secret)); rec.Code != http.StatusForbidden {
		t.Errorf("the child lists team web's jobs: %d", rec.Code)
	}
	if rec := do(e, "POST", "/api/v1/session", `{"token":"`+child.Secret+`"}`, nil); rec.Code != http.StatusForbidden {
		t.Errorf("the child opens a session: %d", rec.Code)
	}
}

// TestConfinedTokenSetsNoFirstPassword: a user without a password could
// set one with any of its tokens, a confined one too, and then sign in to
// all of its rights (issue 31). A first password now takes a session or a
// full token; a user who has a password changes it with any token that
// may manage the account, as the current password proves the user.
func TestConfinedTokenSetsNoFirstPassword(t *testing.T) {
	e := appnodetest.NewEnv(t)
	const pw = "correct horse battery"
	for name, tc := range map[string]struct {
		user string
		// caller shapes the caller's token; nil is a browser session.
		caller      *store.Token
		hasPassword bool
		want        int
	}{
		"bound":                      {"bea", &store.Token{Team: "ml"}, false, http.StatusForbidden},
		"limited by a selector":      {"sel", &store.Token{Team: "ml", Selector: map[string]string{"app": "x"}}, false, http.StatusForbidden},
		"bound, changing a password": {"chad", &store.Token{Team: "ml"}, true, http.StatusNoContent},
		"full":                       {"fay", &store.Token{}, false, http.StatusNoContent},
		"a session":                  {"sam", nil, false, http.StatusNoContent},
	} {
		t.Run(name, func(t *testing.T) {
			full := e.AddUser(t, tc.user, "ml", cosmic.RoleMember)
			body := `{"password":"` + pw + `"}`
			if tc.hasPassword {
				withPassword(t, e, tc.user, "the old password")
				body = `{"password":"` + pw + `","currentPassword":"the old password"}`
			}
			var (
				hdr     map[string]string
				cookies []*http.Cookie
			)
			if tc.caller == nil {
				var ck *http.Cookie
				hdr, ck = browserSession(t, e, full)
				cookies = append(cookies, ck)
			} else {
				tk := *tc.caller
				tk.UserName, tk.Name = tc.user, "t"
				hdr = withToken(appnodetest.AddToken(t, e.Accounts, tk))
			}
			if rec := do(e, "PUT", "/api/v1/whoami/password", body, hdr, cookies...); rec.Code != tc.want {
				t.Fatalf("set the password: %d %s, want %d", rec.Code, rec.Body, tc.want)
			}
			signIn := do(e, "POST", "/api/v1/login", `{"user":"`+tc.user+`","password":"`+pw+`"}`, nil)
			if ok := signIn.Code == http.StatusCreated; ok != (tc.want == http.StatusNoContent) {
				t.Errorf("sign-in with the password asked for: %d %s", signIn.Code, signIn.Body)
			}
		})
	}
}

// TestSelectorTokenManagesNoTeam: a token limited by a selector reaches
// only the jobs it selects, yet could make the team's API keys (which
// serve every model of the team), add members, read the whole team's
// audit log or delete the team. It now keeps what acts on jobs and reads
// the team; a bound token without a selector manages its own team's keys,
// never another team's.
func TestSelectorTokenManagesNoTeam(t *testing.T) {
	e := appnodetest.NewEnv(t)
	e.AddUser(t, "olive", "ml", cosmic.RoleOwner)
	e.AddUser(t, "olive", "web", cosmic.RoleOwner)
	e.AddUser(t, "bob", "web", cosmic.RoleMember)
	selector := withToken(appnodetest.AddToken(t, e.Accounts, store.Token{UserName: "olive", Name: "s", Team: "ml", Selector: map[string]string{"app": "x"}}))
	bound := withToken(appnodetest.AddToken(t, e.Accounts, store.Token{UserName: "olive", Name: "b", Team: "ml"}))
	for name, tc := range map[string]struct {
		hdr                map[string]string
		method, path, body string
		want               int
	}{
		"selector: make an API key":     {selector, "POST", "/api/v1/api-keys", `{"name":"k"}`, http.StatusForbidden},
		"selector: add a member":        {selector, "PUT", "/api/v1/teams/ml/members/bob", `{"role":"admin"}`, http.StatusForbidden},
		"selector: read the audit log":  {selector, "GET", "/api/v1/audit", "", http.StatusForbidden},
		"selector: delete the team":     {selector, "DELETE", "/api/v1/teams/ml", "", http.StatusForbidden},
		"selector: list jobs":           {selector, "GET", "/api/v1/jobs", "", http.StatusOK},
		"selector: list members":        {selector, "GET", "/api/v1/teams/ml/members", "", http.StatusOK},
		"bound: make an API key":        {bound, "POST", "/api/v1/api-keys", `{"name":"k"}`, http.StatusCreated},
		"bound: another team's API key": {bound, "POST", "/api/v1/api-keys", `{"name":"k","team":"web"}`, http.StatusNotFound},
		"bound: acting in another team": {map[string]string{"Authorization": bound["Authorization"], apiv1.HeaderTeam: "web"}, "POST", "/api/v1/api-keys", `{"name":"k"}`, http.StatusForbidden},
		"bound: another team's members": {bound, "PUT", "/api/v1/teams/web/members/bob", `{"role":"admin"}`, http.StatusNotFound},
	} {
		t.Run(name, func(t *testing.T) {
			if rec := do(e, tc.method, tc.path, tc.body, tc.hdr); rec.Code != tc.want {
				t.Errorf("%s %s: %d %s, want %d", tc.method, tc.path, rec.Code, rec.Body, tc.want)
			}
		})
	}
	// whoami (what the web interface offers) says the same.
	rec := do(e, "GET", "/api/v1/whoami", "", selector)
	var w apiv1.WhoAmI
	if err := json.Unmarshal(rec.Body.Bytes(), &w); err != nil {
		t.Fatal(err)
	}
	for _, p := range []authz.Permission{authz.APIKeysCreate, authz.APIKeysManage, authz.MembersManage, authz.OwnersManage, authz.AuditRead, authz.TeamDelete} {
		if slices.Contains(w.Permissions, p) {
			t.Errorf("whoami of the selector token lists %s: %v", p, w.Permissions)
		}
	}
	if !slices.Contains(w.Permissions, authz.JobsConnect) || !slices.Contains(w.Permissions, authz.AccountManage) {
		t.Errorf("whoami of the selector token: %v, want jobs.connect and account.manage", w.Permissions)
	}
}
