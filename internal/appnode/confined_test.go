package appnode_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/apiv1"
	"github.com/cosmicac/cosmicac/internal/appnode/appnodetest"
	"github.com/cosmicac/cosmicac/internal/cosmic"
)

// TestConfinedTokenMintsNoStrongerToken: a token bound to a team, limited
// by a selector, or ending soon used to mint an unbound, unlimited token
// of its user. Now what it asks for beyond its own confinement is refused
// 403, naming the field, and what it leaves out it inherits; a full token
// and a session still make any token.
func TestConfinedTokenMintsNoStrongerToken(t *testing.T) {
	e := appnodetest.NewEnv(t)
	alice := e.AddUser(t, "alice", "ml", cosmic.RoleAdmin)
	e.AddUser(t, "alice", "web", cosmic.RoleAdmin)
	auth := func(tok string) map[string]string { return map[string]string{"Authorization": "Bearer " + tok} }
	mint := func(tok, body string) (int, apiv1.CreatedToken, string) {
		rec := do(e, "POST", "/api/v1/tokens", body, auth(tok))
		var ct apiv1.CreatedToken
		json.Unmarshal(rec.Body.Bytes(), &ct) //nolint:errcheck // the status says
		return rec.Code, ct, rec.Body.String()
	}
	code, bound, body := mint(alice, `{"name":"bound","team":"ml","selector":{"app":"x"},"expiresIn":"24h"}`)
	if code != 201 {
		t.Fatalf("a bound token: %d %s", code, body)
	}
	for name, req := range map[string]string{
		"unbound, with its own team left out": `{"name":"n","team":"web"}`,
		"another selector value":              `{"name":"n","selector":{"app":"y"}}`,
		"a longer life":                       `{"name":"n","expiresIn":"720h"}`,
	} {
		if code, _, body := mint(bound.Secret, req); code != http.StatusForbidden {
			t.Errorf("the bound token mints %s: %d %s, want 403", name, code, body)
		}
	}
	code, child, body := mint(bound.Secret, `{"name":"child"}`)
	switch {
	case code != 201:
		t.Fatalf("the bound token mints a token asking nothing: %d %s", code, body)
	case child.Team != "ml" || child.Selector["app"] != "x" || child.ExpiresAt.After(bound.ExpiresAt):
		t.Errorf("the bound token's child %+v: want team ml, selector app=x, ending no later than %v", child.Token, bound.ExpiresAt)
	}
	if code, ct, body := mint(bound.Secret, `{"name":"narrower","scope":"read","selector":{"app":"x","tier":"1"},"expiresIn":"1h"}`); code != 201 || ct.Scope != "read" || ct.Team != "ml" {
		t.Errorf("the bound token mints a narrower one: %d %s", code, body)
	}
	// The child works where the parent does, and no further.
	if rec := do(e, "GET", "/api/v1/jobs?team=web", "", auth(child.Secret)); rec.Code/100 == 2 {
		t.Errorf("the child lists team web's jobs: %d", rec.Code)
	}
	// A full token and a session still make anything.
	if code, ct, body := mint(alice, `{"name":"full","expiresIn":"720h"}`); code != 201 || ct.Team != "" || time.Until(ct.ExpiresAt) < 700*time.Hour {
		t.Errorf("a full token mints a full one: %d %s", code, body)
	}
}

// TestConfinedTokenSetsNoFirstPassword: a user without a password could
// set one with any of its tokens, a confined one too, and then open
// sessions with all of its rights. A first password now takes a session
// or a token with all of the user's rights.
func TestConfinedTokenSetsNoFirstPassword(t *testing.T) {
	e := appnodetest.NewEnv(t)
	bob := e.AddUser(t, "bob", "ml", cosmic.RoleMember)
	auth := func(tok string) map[string]string { return map[string]string{"Authorization": "Bearer " + tok} }
	rec := do(e, "POST", "/api/v1/tokens", `{"name":"bound","team":"ml"}`, auth(bob))
	var bound apiv1.CreatedToken
	if err := json.Unmarshal(rec.Body.Bytes(), &bound); err != nil || rec.Code != 201 {
		t.Fatalf("bound token: %d %s", rec.Code, rec.Body)
	}
	pw := `{"password":"correct horse battery"}`
	if rec := do(e, "PUT", "/api/v1/whoami/password", pw, auth(bound.Secret)); rec.Code != http.StatusForbidden {
		t.Fatalf("a bound token sets the first password: %d %s, want 403", rec.Code, rec.Body)
	}
	if rec := do(e, "POST", "/api/v1/login", `{"user":"bob","password":"correct horse battery"}`, nil); rec.Code != http.StatusUnauthorized {
		t.Errorf("sign-in with the refused password: %d", rec.Code)
	}
	if rec := do(e, "PUT", "/api/v1/whoami/password", pw, auth(bob)); rec.Code/100 != 2 {
		t.Fatalf("the full token sets the first password: %d %s", rec.Code, rec.Body)
	}
}
