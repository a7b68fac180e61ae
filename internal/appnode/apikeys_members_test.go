package appnode_test

import (
	"net/http"
	"testing"

	"github.com/cosmicac/cosmicac/internal/apiv1"
	"github.com/cosmicac/cosmicac/internal/appnode/appnodetest"
	"github.com/cosmicac/cosmicac/internal/cosmic"
)

// TestMembersMakeKeysForTheirModels: a member, who may create the team's
// models, makes the team's API keys and manages the ones they made; the
// other members' keys are not found to them; a team admin sees and revokes
// every key of the team; a viewer makes none (docs/permissions.md, "API
// keys"; issue 32, item 5).
func TestMembersMakeKeysForTheirModels(t *testing.T) {
	e := appnodetest.NewEnv(t)
	mia := e.AddUser(t, "mia", "ml", cosmic.RoleMember)
	mo := e.AddUser(t, "mo", "ml", cosmic.RoleMember)
	adam := e.AddUser(t, "adam", "ml", cosmic.RoleAdmin)
	vic := e.AddUser(t, "vic", "ml", cosmic.RoleViewer)
	e.AddUser(t, "wes", "web", cosmic.RoleMember)

	mk := func(who, token, name string) apiv1.CreatedAPIKey {
		t.Helper()
		a := call(t, e, "POST", "/api/v1/api-keys", token, `{"name":"`+name+`"}`)
		if a.status != http.StatusCreated {
			t.Fatalf("%s creates key %s: %d %s", who, name, a.status, a.body)
		}
		var k apiv1.CreatedAPIKey
		a.decode(t, &k)
		if k.Team != "ml" || k.CreatedBy != who || k.Key == "" {
			t.Fatalf("%s's key = %+v", who, k.APIKey)
		}
		return k
	}
	mine, mos := mk("mia", mia, "mine"), mk("mo", mo, "mos")
	if a := call(t, e, "POST", "/api/v1/api-keys", vic, `{"name":"v"}`); a.status != http.StatusForbidden {
		t.Errorf("a viewer creates a key: %d %s", a.status, a.body)
	}
	if a := call(t, e, "POST", "/api/v1/api-keys", mia, `{"name":"w","team":"web"}`); a.status != http.StatusNotFound {
		t.Errorf("a member creates a key of a team she is not in: %d %s", a.status, a.body)
	}
	list := func(token string) []string {
		t.Helper()
		var l apiv1.APIKeyList
		call(t, e, "GET", "/api/v1/api-keys", token, "").decode(t, &l)
		var ids []string
		for _, k := range l.Items {
			ids = append(ids, k.ID)
		}
		if l.Total != len(ids) {
			t.Errorf("total %d of %d keys listed", l.Total, len(ids))
		}
		return ids
	}
	if got := list(mia); len(got) != 1 || got[0] != mine.ID {
		t.Errorf("mia lists %v, want her key only", got)
	}
	if got := list(adam); len(got) != 2 {
		t.Errorf("the team admin lists %v, want both keys", got)
	}
	for what, a := range map[string]answer{
		"rotate": call(t, e, "POST", "/api/v1/api-keys/"+mos.ID+"/rotate", mia, "{}"),
		"revoke": call(t, e, "DELETE", "/api/v1/api-keys/"+mos.ID, mia, ""),
	} {
		if a.status != http.StatusNotFound {
			t.Errorf("mia %ss mo's key: %d %s, want 404", what, a.status, a.body)
		}
	}
	if a := call(t, e, "POST", "/api/v1/api-keys/"+mine.ID+"/rotate", mia, "{}"); a.status != http.StatusOK {
		t.Errorf("mia rotates her key: %d %s", a.status, a.body)
	}
	if a := call(t, e, "DELETE", "/api/v1/api-keys/"+mine.ID, mia, ""); a.status != http.StatusNoContent {
		t.Errorf("mia revokes her key: %d %s", a.status, a.body)
	}
	if a := call(t, e, "DELETE", "/api/v1/api-keys/"+mos.ID, adam, ""); a.status != http.StatusNoContent {
		t.Errorf("the team admin revokes mo's key: %d %s", a.status, a.body)
	}
}
