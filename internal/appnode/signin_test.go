package appnode_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/apiv1"
	"github.com/cosmicac/cosmicac/internal/appnode"
	"github.com/cosmicac/cosmicac/internal/appnode/appnodetest"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/store"
	"github.com/cosmicac/cosmicac/internal/waittest"
)

// do sends one request to e's handler.
func do(e *appnodetest.Env, method, path, body string, hdr map[string]string, cookies ...*http.Cookie) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	r.RemoteAddr = "192.0.2.7:5000"
	for k, v := range hdr {
		r.Header.Set(k, v)
	}
	for _, c := range cookies {
		r.AddCookie(c)
	}
	rec := httptest.NewRecorder()
	e.App.Handler().ServeHTTP(rec, r)
	return rec
}

func withPassword(t *testing.T, e *appnodetest.Env, user, pw string) {
	t.Helper()
	h, err := appnode.HashPassword(pw)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Accounts.SetPassword(context.Background(), user, h); err != nil {
		t.Fatal(err)
	}
}

// TestLoginWithPassword: a password signs in to a token that works; a
// wrong password and an unknown user are the same 401; neither leaks.
func TestLoginWithPassword(t *testing.T) {
	e := appnodetest.NewEnv(t)
	e.AddUser(t, "alice", "ml", cosmic.RoleMember)
	withPassword(t, e, "alice", "correct horse")
	rec := do(e, "POST", "/api/v1/login", `{"user":"alice","password":"correct horse","expiresIn":"1h"}`, nil)
	if rec.Code != http.StatusCreated {
		t.Fatalf("login: %d %s", rec.Code, rec.Body)
	}
	var tok apiv1.CreatedToken
	if err := json.Unmarshal(rec.Body.Bytes(), &tok); err != nil || !strings.HasPrefix(tok.Secret, appnode.TokenPrefix) || tok.ExpiresAt.IsZero() {
		t.Fatalf("login answer %s: %v", rec.Body, err)
	}
	if rec := do(e, "GET", "/api/v1/whoami", "", map[string]string{"Authorization": "Bearer " + tok.Secret}); rec.Code != 200 || !strings.Contains(rec.Body.String(), `"user":"alice"`) {
		t.Errorf("whoami with the login's token: %d %s", rec.Code, rec.Body)
	}
	wrong := do(e, "POST", "/api/v1/login", `{"user":"alice","password":"wrong horse"}`, nil)
	unknown := do(e, "POST", "/api/v1/login", `{"user":"nobody","password":"wrong horse"}`, nil)
	if wrong.Code != 401 || unknown.Code != 401 || wrong.Body.String() != unknown.Body.String() {
		t.Errorf("wrong password %d %s; unknown user %d %s: want the same 401", wrong.Code, wrong.Body, unknown.Code, unknown.Body)
	}
	for _, rec := range []*httptest.ResponseRecorder{wrong, unknown} {
		if strings.Contains(rec.Body.String(), "horse") {
			t.Errorf("an answer shows the password: %s", rec.Body)
		}
	}
	// The failed attempts are in the audit log, under the name tried.
	rec = do(e, "GET", "/api/v1/audit?action=login&team=*", "", map[string]string{"Authorization": "Bearer " + e.AdminToken})
	var log apiv1.AuditList
	if err := json.Unmarshal(rec.Body.Bytes(), &log); err != nil || len(log.Items) != 3 {
		t.Fatalf("audit of logins: %d %s", rec.Code, rec.Body)
	}
	if r := log.Items[0]; r.Target != "nobody" || r.Status != 401 || r.Outcome != "denied" || r.User != "" {
		t.Errorf("newest login record = %+v", r)
	}
	if r := log.Items[2]; r.User != "alice" || r.Status != 201 || r.Outcome != "ok" {
		t.Errorf("oldest login record = %+v", r)
	}
}

// TestLoginIsRateLimited: past its burst a user name is refused 429 with
// Retry-After, even with the right password; another user is not.
func TestLoginIsRateLimited(t *testing.T) {
	e := appnodetest.NewEnv(t)
	e.AddUser(t, "alice", "ml", cosmic.RoleMember)
	e.AddUser(t, "bob", "ml", cosmic.RoleMember)
	withPassword(t, e, "alice", "correct horse")
	withPassword(t, e, "bob", "battery staple")
	codes := []int{}
	for range 6 {
		codes = append(codes, do(e, "POST", "/api/v1/login", `{"user":"alice","password":"wrong horse"}`, nil).Code)
	}
	if codes[4] != 401 || codes[5] != 429 {
		t.Errorf("six wrong passwords: %v, want five 401s then 429", codes)
	}
	rec := do(e, "POST", "/api/v1/login", `{"user":"alice","password":"correct horse"}`, nil)
	if rec.Code != 429 || rec.Header().Get("Retry-After") == "" {
		t.Errorf("the right password past the limit: %d, Retry-After %q", rec.Code, rec.Header().Get("Retry-After"))
	}
	if rec := do(e, "POST", "/api/v1/login", `{"user":"bob","password":"battery staple"}`, nil); rec.Code != 201 {
		t.Errorf("another user: %d %s", rec.Code, rec.Body)
	}
}

// TestSession: a browser session is an HttpOnly, SameSite=Strict cookie;
// it reads without more, changes only with its CSRF token, ends on sign
// out and with a new password.
func TestSession(t *testing.T) {
	e := appnodetest.NewEnv(t)
	e.AddUser(t, "alice", "ml", cosmic.RoleMember)
	withPassword(t, e, "alice", "correct horse")
	rec := do(e, "POST", "/api/v1/session", `{"user":"alice","password":"correct horse"}`, nil)
	if rec.Code != http.StatusCreated {
		t.Fatalf("session: %d %s", rec.Code, rec.Body)
	}
	var ses apiv1.Session
	if err := json.Unmarshal(rec.Body.Bytes(), &ses); err != nil || ses.CSRFToken == "" {
		t.Fatalf("session answer %s", rec.Body)
	}
	ck := sessionCookie(t, rec)
	if strings.Contains(rec.Body.String(), ck.Value) {
		t.Error("the answer's body shows the session secret")
	}
	if rec := do(e, "GET", "/api/v1/jobs", "", nil, ck); rec.Code != 200 {
		t.Errorf("read with the cookie: %d %s", rec.Code, rec.Body)
	}
	spec := `{"type":"gpu-container","name":"a","location":"us","image":"ubuntu:24.04"}`
	before := e.Ork.Writes()
	for name, hdr := range map[string]map[string]string{"no CSRF token": nil, "a wrong one": {apiv1.HeaderCSRF: "csrf_nope"}} {
		if rec := do(e, "POST", "/api/v1/jobs", spec, hdr, ck); rec.Code != 403 {
			t.Errorf("create with the cookie and %s: %d %s", name, rec.Code, rec.Body)
		}
	}
	if e.Ork.Writes() != before {
		t.Error("a refused request wrote")
	}
	if rec := do(e, "POST", "/api/v1/jobs", spec, map[string]string{apiv1.HeaderCSRF: ses.CSRFToken}, ck); rec.Code != 201 {
		t.Errorf("create with the CSRF token: %d %s", rec.Code, rec.Body)
	}
	// whoami gives a reloaded page its CSRF token again (with the cookie
	// only: a token has none).
	if rec := do(e, "GET", "/api/v1/whoami", "", nil, ck); rec.Code != 200 || !strings.Contains(rec.Body.String(), `"csrfToken":"`+ses.CSRFToken+`"`) {
		t.Errorf("whoami with the cookie: %d %s, want csrfToken %s", rec.Code, rec.Body, ses.CSRFToken)
	}
	if rec := do(e, "GET", "/api/v1/whoami", "", map[string]string{"Authorization": "Bearer " + e.AdminToken}); strings.Contains(rec.Body.String(), "csrfToken") {
		t.Errorf("whoami with a token shows a CSRF token: %s", rec.Body)
	}
	// A new password ends the session.
	withPassword(t, e, "alice", "another horse")
	if rec := do(e, "GET", "/api/v1/jobs", "", nil, ck); rec.Code != 401 {
		t.Errorf("the cookie after a new password: %d", rec.Code)
	}
	// Sign out.
	rec = do(e, "POST", "/api/v1/session", `{"user":"alice","password":"another horse"}`, nil)
	ck = sessionCookie(t, rec)
	json.Unmarshal(rec.Body.Bytes(), &ses) //nolint:errcheck // checked above
	rec = do(e, "DELETE", "/api/v1/session", "", map[string]string{apiv1.HeaderCSRF: ses.CSRFToken}, ck)
	if rec.Code != 204 {
		t.Fatalf("sign out: %d %s", rec.Code, rec.Body)
	}
	if sent := browserSends(t, rec, ck); len(sent) > 0 {
		t.Errorf("after signing out a browser still sends the cookie to %v", sent)
	}
	if rec := do(e, "GET", "/api/v1/jobs", "", nil, ck); rec.Code != 401 {
		t.Errorf("the cookie after signing out: %d", rec.Code)
	}
	// A session secret is no bearer token the other way round, and a token no cookie.
	if rec := do(e, "GET", "/api/v1/jobs", "", nil, &http.Cookie{Name: apiv1.SessionCookie, Value: e.AdminToken}); rec.Code != 401 {
		t.Errorf("a token as the cookie: %d", rec.Code)
	}
}

// sessionCookie is the session cookie rec sets, checked as a browser
// would keep it: HttpOnly, SameSite=Strict, and sent only to the API and
// wrk-monitor's log streams, never to /inference (a model's runtime is in
// a tenant's VM) nor to the web interface's pages.
func sessionCookie(t *testing.T, rec *httptest.ResponseRecorder) *http.Cookie {
	t.Helper()
	var secret string
	for _, c := range rec.Result().Cookies() {
		if c.Name != apiv1.SessionCookie || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode {
			t.Fatalf("cookie %+v: want %s, HttpOnly, SameSite=Strict", c, apiv1.SessionCookie)
		}
		if c.Value != "" {
			secret = c.Value
		}
	}
	if secret == "" {
		t.Fatalf("no session cookie in %v", rec.Result().Cookies())
	}
	ck := &http.Cookie{Name: apiv1.SessionCookie, Value: secret}
	want := []string{"/api/v1/jobs", "/monitor/v1/jobs/j/logs"}
	if sent := browserSends(t, rec, &http.Cookie{Name: apiv1.SessionCookie, Value: "cas_old"}); !slices.Equal(sent, want) {
		t.Errorf("a browser sends the session cookie to %v, want %v", sent, want)
	}
	return ck
}

// browserSends answers the paths of a few the platform serves to which a
// browser that had old (a session cookie of Path=/, as set before) and
// then got rec's cookies sends the session cookie.
func browserSends(t *testing.T, rec *httptest.ResponseRecorder, old *http.Cookie) []string {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	base, _ := url.Parse("http://cosmicac.test/")
	if old != nil {
		jar.SetCookies(base, []*http.Cookie{{Name: old.Name, Value: old.Value, Path: "/"}})
	}
	jar.SetCookies(base, rec.Result().Cookies())
	var sent []string
	for _, p := range []string{"/", "/jobs/j", "/api/v1/jobs", "/monitor/v1/jobs/j/logs", "/inference/v1/chat/completions"} {
		u, _ := url.Parse("http://cosmicac.test" + p)
		for _, c := range jar.Cookies(u) {
			if c.Name == apiv1.SessionCookie {
				sent = append(sent, p)
				break
			}
		}
	}
	return sent
}

// TestTokens: a token made through the API works, is listed with its last
// use, and stops at once when revoked; a scoped token cannot make tokens.
func TestTokens(t *testing.T) {
	e := appnodetest.NewEnv(t)
	alice := e.AddUser(t, "alice", "ml", cosmic.RoleMember)
	auth := func(tok string) map[string]string { return map[string]string{"Authorization": "Bearer " + tok} }
	rec := do(e, "POST", "/api/v1/tokens", `{"name":"ci","team":"ml","scope":"read","selector":{"app":"x"},"expiresIn":"24h"}`, auth(alice))
	if rec.Code != 201 {
		t.Fatalf("create token: %d %s", rec.Code, rec.Body)
	}
	var ct apiv1.CreatedToken
	json.Unmarshal(rec.Body.Bytes(), &ct) //nolint:errcheck // checked below
	if ct.Scope != "read" || ct.Team != "ml" || ct.Selector["app"] != "x" {
		t.Fatalf("token %+v", ct.Token)
	}
	if rec := do(e, "GET", "/api/v1/jobs", "", auth(ct.Secret)); rec.Code != 200 {
		t.Errorf("list with the read token: %d %s", rec.Code, rec.Body)
	}
	for _, body := range []string{`{"name":"more"}`, `{"name":"more","team":"ml","scope":"operator"}`} {
		if rec := do(e, "POST", "/api/v1/tokens", body, auth(ct.Secret)); rec.Code != 403 {
			t.Errorf("a read token makes a token %s: %d %s", body, rec.Code, rec.Body)
		}
	}
	for name, body := range map[string]string{
		"scope without team":    `{"name":"x","scope":"read"}`,
		"bad scope":             `{"name":"x","team":"ml","scope":"root"}`,
		"too long":              `{"name":"x","expiresIn":"9000h"}`,
		"another team":          `{"name":"x","team":"web"}`,
		"no name":               `{"name":""}`,
		"selector without team": `{"name":"x","selector":{"a":"b"}}`,
	} {
		if rec := do(e, "POST", "/api/v1/tokens", body, auth(alice)); rec.Code/100 != 4 {
			t.Errorf("%s: %d %s", name, rec.Code, rec.Body)
		}
	}
	rec = do(e, "GET", "/api/v1/tokens", "", auth(alice))
	var list apiv1.TokenList
	json.Unmarshal(rec.Body.Bytes(), &list) //nolint:errcheck // checked below
	if list.Total != 2 || strings.Contains(rec.Body.String(), ct.Secret) {
		t.Fatalf("tokens: %s", rec.Body)
	}
	for _, tk := range list.Items {
		if tk.ID == ct.ID && tk.LastUsedAt.IsZero() {
			t.Errorf("the read token shows no last use")
		}
	}
	if rec := do(e, "DELETE", "/api/v1/tokens/"+ct.ID, "", auth(e.AdminToken)); rec.Code != 404 {
		t.Errorf("another user revokes alice's token: %d", rec.Code)
	}
	if rec := do(e, "DELETE", "/api/v1/tokens/"+ct.ID, "", auth(alice)); rec.Code != 204 {
		t.Fatalf("revoke: %d %s", rec.Code, rec.Body)
	}
	if rec := do(e, "GET", "/api/v1/jobs", "", auth(ct.Secret)); rec.Code != 401 {
		t.Errorf("the revoked token: %d", rec.Code)
	}
}

// TestMembers: admins manage members below owner, owners everyone, and a
// team keeps its last owner.
func TestMembers(t *testing.T) {
	e := appnodetest.NewEnv(t)
	owner := e.AddUser(t, "olive", "ml", cosmic.RoleOwner)
	admin := e.AddUser(t, "adam", "ml", cosmic.RoleAdmin)
	e.AddUser(t, "zed", "web", cosmic.RoleViewer)
	auth := func(tok string) map[string]string { return map[string]string{"Authorization": "Bearer " + tok} }
	for _, tc := range []struct {
		name, method, path, token, body string
		want                            int
	}{
		{"admin adds a member", "PUT", "/api/v1/teams/ml/members/zed", admin, `{"role":"member"}`, 200},
		{"admin makes an owner", "PUT", "/api/v1/teams/ml/members/zed", admin, `{"role":"owner"}`, 403},
		{"admin demotes the owner", "PUT", "/api/v1/teams/ml/members/olive", admin, `{"role":"member"}`, 403},
		{"owner demotes themselves, the last owner", "PUT", "/api/v1/teams/ml/members/olive", owner, `{"role":"admin"}`, 409},
		{"owner makes an owner", "PUT", "/api/v1/teams/ml/members/zed", owner, `{"role":"owner"}`, 200},
		{"then the first may step down", "PUT", "/api/v1/teams/ml/members/olive", owner, `{"role":"admin"}`, 200},
		{"unknown user", "PUT", "/api/v1/teams/ml/members/nobody", admin, `{"role":"member"}`, 404},
		{"bad role", "PUT", "/api/v1/teams/ml/members/zed", admin, `{"role":"root"}`, 400},
		{"admin removes an owner", "DELETE", "/api/v1/teams/ml/members/zed", admin, "", 403},
		{"a team one is not in", "GET", "/api/v1/teams/web/members", admin, "", 404},
		{"a team that does not exist", "GET", "/api/v1/teams/nope/members", admin, "", 404},
	} {
		if rec := do(e, tc.method, tc.path, tc.body, auth(tc.token)); rec.Code != tc.want {
			t.Errorf("%s: %d, want %d: %s", tc.name, rec.Code, tc.want, rec.Body)
		}
	}
}

// TestAuditRetention: the app-node deletes audit records older than its
// retention (a year by default) and keeps the others.
func TestAuditRetention(t *testing.T) {
	e := appnodetest.NewEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	now := time.Now().UTC()
	for _, at := range []time.Time{now.Add(-400 * 24 * time.Hour), now.Add(-time.Hour)} {
		if err := e.Accounts.AppendAudit(ctx, store.AuditRecord{At: at, User: "u", Action: "createJob", Status: 201}); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan error, 1)
	go func() { done <- e.App.RunAuditRetention(ctx) }()
	waittest.NoError(t, func() error {
		recs, _, err := e.Accounts.ListAudit(context.Background(), store.AuditQuery{})
		if err != nil || len(recs) != 1 {
			return fmt.Errorf("%d records, %v", len(recs), err)
		}
		if recs[0].At.Before(now.Add(-2 * time.Hour)) {
			return fmt.Errorf("kept the old record: %+v", recs[0])
		}
		return nil
	}, "the old record pruned")
	cancel()
	if err := <-done; err != nil {
		t.Errorf("RunAuditRetention = %v", err)
	}
}

// TestSecretsStayOutOfTheLog: signing in, making tokens, sessions and API
// keys, and failing to, write no password or secret to the app-node's log.
func TestSecretsStayOutOfTheLog(t *testing.T) {
	var logged bytes.Buffer
	acc := appnodetest.NewAccounts(t)
	cfg := appnode.DefaultConfig()
	cfg.DataDir = t.TempDir()
	app, err := appnode.New(cfg, appnode.Deps{Ork: appnodetest.NewOrk(), Accounts: acc, APIKeys: acc,
		Log: slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	path, _, err := app.Bootstrap(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	adminTok, _ := os.ReadFile(path)
	e := &appnodetest.Env{App: app, Accounts: acc, AdminToken: strings.TrimSpace(string(adminTok))}
	e.AddUser(t, "alice", "default", cosmic.RoleAdmin)
	withPassword(t, e, "alice", "correct horse")
	auth := func(tok string) map[string]string { return map[string]string{"Authorization": "Bearer " + tok} }
	var secrets []string
	grab := func(rec *httptest.ResponseRecorder, field string) {
		var m map[string]any
		json.Unmarshal(rec.Body.Bytes(), &m) //nolint:errcheck // a missing field fails below
		s, _ := m[field].(string)
		if s == "" {
			t.Fatalf("no %s in %s", field, rec.Body)
		}
		secrets = append(secrets, s)
	}
	grab(do(e, "POST", "/api/v1/login", `{"user":"alice","password":"correct horse"}`, nil), "token")
	ses := do(e, "POST", "/api/v1/session", `{"user":"alice","password":"correct horse"}`, nil)
	grab(ses, "csrfToken")
	secrets = append(secrets, sessionCookie(t, ses).Value)
	grab(do(e, "POST", "/api/v1/tokens", `{"name":"x"}`, auth(secrets[0])), "token")
	grab(do(e, "POST", "/api/v1/api-keys", `{"name":"k"}`, auth(secrets[0])), "key")
	do(e, "POST", "/api/v1/login", `{"user":"alice","password":"wrong horse battery"}`, nil)
	do(e, "GET", "/api/v1/jobs", "", auth("cac_"+strings.Repeat("Z", 43)))
	do(e, "PUT", "/api/v1/whoami/password", `{"currentPassword":"correct horse","password":"new horse staple"}`, auth(secrets[0]))
	secrets = append(secrets, e.AdminToken, "correct horse", "wrong horse battery", "new horse staple", "cac_"+strings.Repeat("Z", 43))
	for _, s := range secrets {
		if strings.Contains(logged.String(), s) {
			t.Errorf("the log shows the secret %q", s)
		}
	}
	if !strings.Contains(logged.String(), "http request") {
		t.Fatalf("nothing was logged: %s", logged.String())
	}
}

// TestSessionFromToken: a full personal access token opens a browser
// session (the web interface's token sign-in) that ends no later than the
// token; a bound, scoped or selector-limited token cannot, since the
// session would hold more than it; a wrong one is 401.
func TestSessionFromToken(t *testing.T) {
	e := appnodetest.NewEnv(t)
	alice := e.AddUser(t, "alice", "ml", cosmic.RoleMember)
	auth := map[string]string{"Authorization": "Bearer " + alice}
	limited := map[string]string{}
	for name, body := range map[string]string{
		"bound":    `{"name":"b","team":"ml","expiresIn":"2h"}`,
		"scoped":   `{"name":"s","team":"ml","scope":"read","expiresIn":"2h"}`,
		"selector": `{"name":"l","team":"ml","selector":{"app":"x"},"expiresIn":"2h"}`,
		"full":     `{"name":"f","expiresIn":"2h"}`,
	} {
		rec := do(e, "POST", "/api/v1/tokens", body, auth)
		var ct apiv1.CreatedToken
		if err := json.Unmarshal(rec.Body.Bytes(), &ct); err != nil || rec.Code != 201 {
			t.Fatalf("token %s: %d %s", name, rec.Code, rec.Body)
		}
		limited[name] = ct.Secret
	}
	for _, name := range []string{"bound", "scoped", "selector"} {
		if rec := do(e, "POST", "/api/v1/session", `{"token":"`+limited[name]+`"}`, nil); rec.Code != 403 || len(rec.Result().Cookies()) != 0 {
			t.Errorf("session from a %s token: %d %s", name, rec.Code, rec.Body)
		}
	}
	for _, body := range []string{`{"token":"cat_wrong"}`, `{"token":"` + limited["full"] + `x"}`} {
		if rec := do(e, "POST", "/api/v1/session", body, nil); rec.Code != 401 {
			t.Errorf("session from %s: %d %s", body, rec.Code, rec.Body)
		}
	}
	if rec := do(e, "POST", "/api/v1/session", `{"token":"`+limited["full"]+`","user":"alice"}`, nil); rec.Code != 400 {
		t.Errorf("a token and a user: %d %s", rec.Code, rec.Body)
	}
	rec := do(e, "POST", "/api/v1/session", `{"token":"`+limited["full"]+`"}`, nil)
	if rec.Code != 201 {
		t.Fatalf("session from a full token: %d %s", rec.Code, rec.Body)
	}
	var ses apiv1.Session
	if err := json.Unmarshal(rec.Body.Bytes(), &ses); err != nil || ses.User != "alice" {
		t.Fatalf("session %s", rec.Body)
	}
	if left := time.Until(ses.ExpiresAt); left > 2*time.Hour+time.Minute || left < time.Hour {
		t.Errorf("the session ends in %v, want no later than the token (2h)", left)
	}
	ck := sessionCookie(t, rec)
	rec = do(e, "GET", "/api/v1/whoami", "", nil, &http.Cookie{Name: ck.Name, Value: ck.Value})
	var w apiv1.WhoAmI
	if err := json.Unmarshal(rec.Body.Bytes(), &w); err != nil || w.Credential != "session" || w.User != "alice" {
		t.Fatalf("whoami with the session: %d %s", rec.Code, rec.Body)
	}
}

// TestWhoAmIPermissions: whoami lists what the credential may do in the
// active team, as the matrix grants it: a viewer reads, a member also
// creates, neither manages keys; a read token only reads.
func TestWhoAmIPermissions(t *testing.T) {
	e := appnodetest.NewEnv(t)
	viewer := e.AddUser(t, "vera", "ml", cosmic.RoleViewer)
	member := e.AddUser(t, "mia", "ml", cosmic.RoleMember)
	perms := func(tok string) []string {
		t.Helper()
		rec := do(e, "GET", "/api/v1/whoami", "", map[string]string{"Authorization": "Bearer " + tok})
		var w struct{ Permissions []string }
		if err := json.Unmarshal(rec.Body.Bytes(), &w); err != nil || rec.Code != 200 {
			t.Fatalf("whoami: %d %s", rec.Code, rec.Body)
		}
		return w.Permissions
	}
	has := func(ps []string, p string) bool {
		for _, q := range ps {
			if q == p {
				return true
			}
		}
		return false
	}
	v, m, a := perms(viewer), perms(member), perms(e.AdminToken)
	for _, c := range []struct {
		who   string
		ps    []string
		perm  string
		wants bool
	}{
		{"viewer", v, "jobs.read", true}, {"viewer", v, "jobs.create", false}, {"viewer", v, "jobs.connect", false},
		{"member", m, "jobs.create", true}, {"member", m, "jobs.connect", true}, {"member", m, "apikeys.manage", false},
		{"member", m, "racks.manage", false}, {"admin", a, "racks.manage", true}, {"admin", a, "apikeys.manage", true},
	} {
		if has(c.ps, c.perm) != c.wants {
			t.Errorf("%s holds %s: %v, want %v (%v)", c.who, c.perm, !c.wants, c.wants, c.ps)
		}
	}
}
