package appnode_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/apiv1"
	"github.com/cosmicac/cosmicac/internal/appnode"
	"github.com/cosmicac/cosmicac/internal/appnode/appnodetest"
	"github.com/cosmicac/cosmicac/internal/authz/authztest"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/inferproxy"
	"github.com/cosmicac/cosmicac/internal/ork/orkapi"
	"github.com/cosmicac/cosmicac/internal/store"
)

// The access matrix (docs/permissions.md) tried on the real handlers: every
// route of apiv1.Routes, with every kind of caller, against what the doc's
// tables say it should answer.

// who is a kind of caller, as the model (authztest.Expect) sees it.
type who = authztest.Caller

var callers = authztest.Callers

// accessEnv is one app-node with team ml (owner, admin, member, viewer,
// the viewer zed), team web (wes), nora and rita in no team, a job of ml
// labelled app=x whose readUser is rita, a rack, an API key and a quota.
type accessEnv struct {
	*appnodetest.Env
	job   cosmic.Job
	keyID string
	// tokens of each caller, and their IDs.
	tokens, tokenIDs map[string]string
}

const zedPassword = "zed-password-1"

func newAccessEnv(t *testing.T, withPassword bool) *accessEnv {
	t.Helper()
	e := &accessEnv{Env: appnodetest.NewEnv(t), tokens: map[string]string{}, tokenIDs: map[string]string{}}
	e.App.SetAPIKeys(e.Accounts)
	ctx := context.Background()
	add := func(caller, user, team string, role cosmic.Role) {
		e.tokens[caller] = e.AddUser(t, user, team, role)
	}
	add("owner", "olive", "ml", cosmic.RoleOwner)
	add("admin", "adam", "ml", cosmic.RoleAdmin)
	add("member", "mia", "ml", cosmic.RoleMember)
	add("viewer", "vic", "ml", cosmic.RoleViewer)
	add("other team", "wes", "web", cosmic.RoleMember)
	appnodetest.AddUser(t, e.Accounts, "zed", "ml", cosmic.RoleViewer)
	for caller, user := range map[string]string{"no team": "nora", "readUser": "rita"} {
		if err := e.Accounts.CreateUser(ctx, cosmic.User{Name: user}, ""); err != nil {
			t.Fatal(err)
		}
		e.tokens[caller] = appnodetest.AddToken(t, e.Accounts, store.Token{UserName: user, Name: user})
	}
	e.tokens["platform admin"] = e.AdminToken
	for _, w := range callers {
		if w.Scope != "" {
			user := "mia"
			if w.Role == cosmic.RoleOwner {
				user = "olive"
			}
			e.tokens[w.Name] = appnodetest.AddToken(t, e.Accounts, store.Token{UserName: user, Name: w.Name, Team: "ml", Scope: string(w.Scope), Selector: w.Selector})
		}
	}
	for name, secret := range e.tokens {
		tok, _, err := e.Accounts.TokenByHash(ctx, appnode.HashToken(secret), time.Now())
		if err != nil {
			t.Fatal(err)
		}
		e.tokenIDs[name] = tok.ID
	}
	if withPassword {
		h, err := appnode.HashPassword(zedPassword)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Accounts.SetPassword(ctx, "zed", h); err != nil {
			t.Fatal(err)
		}
	}
	spec := `{"type":"gpu-container","name":"a","location":"us","image":"ubuntu:24.04","labels":{"app":"x"},"readUser":"rita"}`
	e.job = create(t, e.Env, e.tokens["owner"], spec)
	if _, err := e.Ork.RegisterRack(ctx, orkapi.RegisterRackParams{Rack: cosmic.Rack{ID: "r1", Type: "server", Location: "us", GPUModel: "H100", WorkerKey: rackKey}}); err != nil {
		t.Fatal(err)
	}
	k, _, err := inferproxy.NewAPIKey("k", "ml", "olive", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Accounts.CreateAPIKey(ctx, k); err != nil {
		t.Fatal(err)
	}
	e.keyID = k.ID
	if _, err := e.Ork.SetQuota(ctx, orkapi.SetQuotaParams{Team: "ml", Location: "us", GPUs: 8}); err != nil {
		t.Fatal(err)
	}
	return e
}

// request makes rt's request as w: the path filled in with the env's
// objects, and a valid body.
func (e *accessEnv) request(rt apiv1.Route, w who) *http.Request {
	path := rt.Path
	tokenID := e.tokenIDs[w.Name]
	if tokenID == "" {
		tokenID = "tok_0000000000000000"
	}
	for k, v := range map[string]string{"{id}": e.job.ID, "{team}": "ml", "{n}": "0", "{location}": "us", "{name}": "zed", "{user}": "zed", "{path}": ""} {
		path = strings.ReplaceAll(path, k, v)
	}
	switch rt.Op {
	case apiv1.OpRevokeToken:
		path = apiv1.Prefix + "/tokens/" + tokenID
	case apiv1.OpRevokeAPIKey:
		path = apiv1.Prefix + "/api-keys/" + e.keyID
	case apiv1.OpRotateAPIKey:
		path = apiv1.Prefix + "/api-keys/" + e.keyID + "/rotate"
	case apiv1.OpRemoveRack:
		path = apiv1.Prefix + "/racks/r1"
	}
	body := map[string]string{
		apiv1.OpCreateJob:      `{"type":"gpu-container","name":"b","location":"us","image":"ubuntu:24.04"}`,
		apiv1.OpJobCommand:     containerSpec,
		apiv1.OpLabelJob:       `{"name":"b","value":"c"}`,
		apiv1.OpDataSyncJob:    `{"direction":"push","volume":"v"}`,
		apiv1.OpRegisterRack:   `{"id":"r2","location":"us","gpuModel":"H100","workerKey":"` + rackKey + `"}`,
		apiv1.OpCreateAPIKey:   `{"name":"k2"}`,
		apiv1.OpLogin:          `{"user":"zed","password":"` + zedPassword + `"}`,
		apiv1.OpCreateSession:  `{"user":"zed","password":"` + zedPassword + `"}`,
		apiv1.OpChangePassword: `{"password":"a-new-password"}`,
		apiv1.OpCreateToken:    `{"name":"t"}`,
		apiv1.OpCreateUser:     `{"name":"newbie"}`,
		apiv1.OpUpdateUser:     `{"platformAdmin":false}`,
		apiv1.OpSetPassword:    `{"password":"another-password"}`,
		apiv1.OpCreateTeam:     `{"name":"newteam"}`,
		apiv1.OpPutMember:      `{"role":"viewer"}`,
		apiv1.OpSetQuota:       `{"gpus":4}`,
		apiv1.OpInferenceAuth:  `{"requireAuth":false}`,
		apiv1.OpRotateAPIKey:   `{}`,
	}[rt.Op]
	req := httptest.NewRequest(rt.Method, path, strings.NewReader(body))
	req.RemoteAddr = fmt.Sprintf("192.0.2.%d:4000", len(w.Name))
	if tok := e.tokens[w.Name]; tok != "" && !w.Anon {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	if w.PlatformAdmin || w.Foreign {
		req.Header.Set(apiv1.HeaderTeam, "ml")
	}
	return req
}

// TestAccessMatrix: each route answers each kind of caller as
// docs/permissions.md says: allowed (anything but 401, 403 and 404; the
// request is valid, so the handler's own answer), or the denial the model
// expects. A route that changes something gets a fresh platform for each
// caller.
func TestAccessMatrix(t *testing.T) {
	doc, err := authztest.Read()
	if err != nil {
		t.Fatal(err)
	}
	shared := newAccessEnv(t, false)
	for _, rt := range apiv1.Routes() {
		t.Run(rt.Op, func(t *testing.T) {
			for _, w := range callers {
				e := shared
				if rt.Method != http.MethodGet && rt.Method != http.MethodHead {
					e = newAccessEnv(t, rt.Op == apiv1.OpLogin || rt.Op == apiv1.OpCreateSession)
				}
				want := authztest.Expect(doc, rt.Method, rt.Path, w)
				before := e.Ork.Writes()
				rec := httptest.NewRecorder()
				e.App.Handler().ServeHTTP(rec, e.request(rt, w))
				got := rec.Code
				switch {
				case want == 0 && (got == 401 || got == 403 || got == 404 || got == 400):
					t.Errorf("%s: %d, want it allowed: %s", w.Name, got, rec.Body)
				case want != 0 && got != want:
					t.Errorf("%s: %d, want %d: %s", w.Name, got, want, rec.Body)
				case want != 0 && e.Ork.Writes() != before:
					t.Errorf("%s: denied (%d), but the ork saw a write", w.Name, got)
				}
				if want == http.StatusNotFound && strings.Contains(rec.Body.String(), e.job.Spec.Name+`"`) {
					t.Errorf("%s: a 404 shows the job: %s", w.Name, rec.Body)
				}
			}
		})
	}
}
