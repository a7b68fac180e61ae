package appnode_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/cosmicac/cosmicac/internal/apiv1"
	"github.com/cosmicac/cosmicac/internal/appnode"
	"github.com/cosmicac/cosmicac/internal/appnode/appnodetest"
	"github.com/cosmicac/cosmicac/internal/cosmic"
)

// TestThePlatformKeepsAnAdminWayIn: the bootstrap admin has no password
// and one token; revoking it, demoting or deleting the admin while no
// other platform admin has a password or a full token is 409 with a way
// out; a bound token is no way in; a second full token, or another admin
// with a password, lifts the refusal (issue 32, item 2).
func TestThePlatformKeepsAnAdminWayIn(t *testing.T) {
	e := appnodetest.NewEnv(t)
	ctx := context.Background()
	refused := func(what string, a answer) {
		t.Helper()
		if a.status != http.StatusConflict {
			t.Fatalf("%s: %d %s, want 409", what, a.status, a.body)
		}
		if msg := a.err(t).Message; !strings.Contains(msg, "no platform admin a way to sign in") || !strings.Contains(msg, "cosmicac admin token") {
			t.Errorf("%s: message %q says neither why nor the way out", what, msg)
		}
	}
	// A platform admin with no credential at all does not count.
	if err := e.Accounts.CreateUser(ctx, cosmic.User{Name: "bea", PlatformAdmin: true}, ""); err != nil {
		t.Fatal(err)
	}
	refused("revoke the only token", call(t, e, "DELETE", "/api/v1/tokens/bootstrap-admin", e.AdminToken, ""))
	refused("demote the admin", call(t, e, "PATCH", "/api/v1/users/admin", e.AdminToken, `{"platformAdmin":false}`))
	refused("delete the admin", call(t, e, "DELETE", "/api/v1/users/admin", e.AdminToken, ""))

	// A token bound to a team holds no platform permission: no way in.
	var bound apiv1.CreatedToken
	call(t, e, "POST", "/api/v1/tokens", e.AdminToken, `{"name":"bound","team":"`+appnode.BootstrapTeam+`"}`).decode(t, &bound)
	refused("revoke the only full token beside a bound one", call(t, e, "DELETE", "/api/v1/tokens/bootstrap-admin", e.AdminToken, ""))
	if a := call(t, e, "DELETE", "/api/v1/tokens/"+bound.ID, e.AdminToken, ""); a.status != http.StatusNoContent {
		t.Errorf("revoke the bound token: %d %s", a.status, a.body)
	}

	// A second full token: the first may go, then not the second.
	var second apiv1.CreatedToken
	call(t, e, "POST", "/api/v1/tokens", e.AdminToken, `{"name":"second"}`).decode(t, &second)
	if a := call(t, e, "DELETE", "/api/v1/tokens/bootstrap-admin", e.AdminToken, ""); a.status != http.StatusNoContent {
		t.Fatalf("revoke the bootstrap token beside a second: %d %s", a.status, a.body)
	}
	refused("revoke the last token", call(t, e, "DELETE", "/api/v1/tokens/"+second.ID, second.Secret, ""))

	// Another platform admin with a password: admin may go.
	withPassword(t, e, "bea", "bea-password-1")
	if a := call(t, e, "PATCH", "/api/v1/users/admin", second.Secret, `{"platformAdmin":false}`); a.status != http.StatusOK {
		t.Fatalf("demote admin while bea has a password: %d %s", a.status, a.body)
	}
	// bea is now the only platform admin, with a password: deleting her
	// is refused (the last platform admin), and nothing else changed.
	if u, err := e.Accounts.GetUser(ctx, "bea"); err != nil || !u.PlatformAdmin {
		t.Errorf("bea = %+v, %v", u, err)
	}
}
