package appnodetest

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/appnode"
	"github.com/cosmicac/cosmicac/internal/authz/authztest"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/ork/orkapi"
	"github.com/cosmicac/cosmicac/internal/store"
)

// AccessEnv is one app-node with team ml (owner, admin, member, viewer,
// the viewer zed), team web (wes), nora and rita in no team, a job of ml
// labelled app=x whose readUser is rita, a rack, an API key and a quota.
type AccessEnv struct {
	*Env
	// Job is ml's job, labelled app=x, whose readUser is rita.
	Job cosmic.Job
	// KeyID is ml's inference API key.
	KeyID string
	// Tokens and TokenIDs are each caller's (authztest.Callers, by name).
	Tokens, TokenIDs map[string]string
}

// ZedPassword is zed's password, when NewAccessEnv gives him one.
const ZedPassword = "zed-password-1"

// NewAccessEnv makes the access tests' world, with a password for zed
// when withPassword.
func NewAccessEnv(t testing.TB, withPassword bool) *AccessEnv {
	t.Helper()
	e := &AccessEnv{Env: NewEnv(t), Tokens: map[string]string{}, TokenIDs: map[string]string{}}
	ctx := context.Background()
	add := func(caller, user, team string, role cosmic.Role) {
		e.Tokens[caller] = e.AddUser(t, user, team, role)
	}
	add("owner", "olive", "ml", cosmic.RoleOwner)
	add("admin", "adam", "ml", cosmic.RoleAdmin)
	add("member", "mia", "ml", cosmic.RoleMember)
	add("viewer", "vic", "ml", cosmic.RoleViewer)
	add("other team", "wes", "web", cosmic.RoleMember)
	AddUser(t, e.Accounts, "zed", "ml", cosmic.RoleViewer)
	for caller, user := range map[string]string{"no team": "nora", "readUser": "rita"} {
		if err := e.Accounts.CreateUser(ctx, cosmic.User{Name: user}, ""); err != nil {
			t.Fatal(err)
		}
		e.Tokens[caller] = AddToken(t, e.Accounts, store.Token{UserName: user, Name: user})
	}
	e.Tokens["platform admin"] = e.AdminToken
	// A second way in for the admin, so that revoking the bootstrap token
	// (as the matrices do) leaves one (appnode's keepAdminWayIn).
	AddToken(t, e.Accounts, store.Token{UserName: appnode.BootstrapUser, Name: "spare"})
	for _, w := range authztest.Callers {
		if w.Scope != "" {
			user := "mia"
			if w.Role == cosmic.RoleOwner {
				user = "olive"
			}
			e.Tokens[w.Name] = AddToken(t, e.Accounts, store.Token{UserName: user, Name: w.Name, Team: "ml", Scope: string(w.Scope), Selector: w.Selector})
		}
	}
	for name, secret := range e.Tokens {
		tok, _, err := e.Accounts.TokenByHash(ctx, appnode.HashToken(secret), time.Now())
		if err != nil {
			t.Fatal(err)
		}
		e.TokenIDs[name] = tok.ID
	}
	if withPassword {
		h, err := appnode.HashPassword(ZedPassword)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Accounts.SetPassword(ctx, "zed", h); err != nil {
			t.Fatal(err)
		}
	}
	spec := `{"type":"gpu-container","name":"a","location":"us","image":"ubuntu:24.04","labels":{"app":"x"},"readUser":"rita"}`
	r := httptest.NewRequest("POST", "/api/v1/jobs", strings.NewReader(spec))
	r.Header.Set("Authorization", "Bearer "+e.Tokens["owner"])
	rec := httptest.NewRecorder()
	e.App.Handler().ServeHTTP(rec, r)
	if rec.Code != 201 || json.Unmarshal(rec.Body.Bytes(), &e.Job) != nil {
		t.Fatalf("create ml's job: %d %s", rec.Code, rec.Body)
	}
	if _, err := e.Ork.RegisterRack(ctx, orkapi.RegisterRackParams{Rack: cosmic.Rack{ID: "r1", Type: "server", Location: "us", GPUModel: "H100", WorkerKey: "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"}}); err != nil {
		t.Fatal(err)
	}
	// A standalone volume of team ml named as the routes' {name} is.
	e.Ork.KeepVolume("r1", cosmic.StoredVolume{Team: "ml", Name: "zed", Bytes: 1 << 20})
	k, _, err := appnode.NewAPIKey("k", "ml", "mia", time.Now()) // the member's: every role that may manage it reaches it
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Accounts.CreateAPIKey(ctx, k); err != nil {
		t.Fatal(err)
	}
	e.KeyID = k.ID
	// ml's datastore main (its secret is not opened by these tests).
	if err := e.Accounts.CreateDatastore(ctx, store.Datastore{Team: "ml", Alias: "main", Type: "s3", Endpoint: "https://s3.example.net", Region: "us-east-1",
		AccessKey: "AKIAEXAMPLE0001", SealedSecret: []byte("sealed"), CreatedBy: "owner", CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Ork.SetQuota(ctx, orkapi.SetQuotaParams{Team: "ml", Location: "us", GPUs: 8}); err != nil {
		t.Fatal(err)
	}
	return e
}
