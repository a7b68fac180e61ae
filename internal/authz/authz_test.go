package authz_test

import (
	"testing"

	"github.com/cosmicac/cosmicac/internal/apiv1"
	"github.com/cosmicac/cosmicac/internal/authz"
	"github.com/cosmicac/cosmicac/internal/authz/authztest"
	"github.com/cosmicac/cosmicac/internal/cosmic"
)

// TestMatrixMatchesTheDoc: every cell of docs/permissions.md's matrix is
// what authz answers, and the doc lists every permission.
func TestMatrixMatchesTheDoc(t *testing.T) {
	doc, err := authztest.Read()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range authz.Permissions {
		row, ok := doc.Grants[p]
		if !ok {
			t.Errorf("docs/permissions.md has no row for %s", p)
			continue
		}
		for _, r := range cosmic.Roles {
			if got := authz.RoleGrants(r, p); got != row[string(r)] {
				t.Errorf("%s, %s: authz says %v, the doc %v", p, r, got, row[string(r)])
			}
		}
		if got := authz.Allowed(authz.Subject{Signed: true, PlatformAdmin: true}, p); got != row[authztest.ColPlatformAdmin] {
			t.Errorf("%s, platform admin: authz says %v, the doc %v", p, got, row[authztest.ColPlatformAdmin])
		}
		for col, sc := range map[string]authz.Scope{authztest.ColRead: authz.ScopeRead, authztest.ColOperator: authz.ScopeOperator} {
			if got := authz.ScopeKeeps(sc, p); got != row[col] {
				t.Errorf("%s, %s token: authz says %v, the doc %v", p, col, got, row[col])
			}
		}
	}
	for p := range doc.Grants {
		if !authz.Known(p) {
			t.Errorf("docs/permissions.md names %s, which authz does not know", p)
		}
	}
}

// TestRoutesMatchTheDoc: the doc's routes table is the API's routes and
// their permissions, both ways.
func TestRoutesMatchTheDoc(t *testing.T) {
	doc, err := authztest.Read()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, r := range apiv1.Routes() {
		key := r.Method + " " + r.Path
		seen[key] = true
		if got, ok := doc.Routes[key]; !ok {
			t.Errorf("docs/permissions.md does not list %s", key)
		} else if got != r.Perm {
			t.Errorf("%s: the doc says %s, the route %s", key, got, r.Perm)
		}
		if !authz.Known(r.Perm) {
			t.Errorf("%s needs %q, which is no permission", key, r.Perm)
		}
	}
	for key := range doc.Routes {
		if !seen[key] {
			t.Errorf("docs/permissions.md lists %s, which is no route", key)
		}
	}
}

// TestAllowed covers what the matrix alone does not show: binding, scope
// over role, and unknown permissions.
func TestAllowed(t *testing.T) {
	for _, tc := range []struct {
		s    authz.Subject
		p    authz.Permission
		want bool
	}{
		{authz.Subject{}, authz.JobsRead, false},
		{authz.Subject{}, authz.Public, true},
		{authz.Subject{Signed: true}, authz.Self, true},
		{authz.Subject{Signed: true}, authz.JobsRead, false}, // no role in the team
		{authz.Subject{Signed: true, Role: cosmic.RoleViewer, Scope: authz.ScopeOperator}, authz.JobsCreate, false},
		{authz.Subject{Signed: true, Role: cosmic.RoleOwner, Scope: authz.ScopeRead}, authz.JobsCreate, false},
		{authz.Subject{Signed: true, Role: cosmic.RoleOwner, Scope: authz.ScopeRead}, authz.AccountManage, false},
		{authz.Subject{Signed: true, PlatformAdmin: true, Bound: true}, authz.UsersManage, false},
		{authz.Subject{Signed: true, PlatformAdmin: true, Bound: true}, authz.JobsCreate, false}, // bound elsewhere: no role
		{authz.Subject{Signed: true, PlatformAdmin: true, Bound: true, Role: cosmic.RoleMember}, authz.JobsCreate, true},
		{authz.Subject{Signed: true, PlatformAdmin: true, Scope: authz.ScopeRead}, authz.RacksManage, false},
		{authz.Subject{Signed: true, PlatformAdmin: true}, "made.up", false},
	} {
		if got := authz.Allowed(tc.s, tc.p); got != tc.want {
			t.Errorf("Allowed(%+v, %s) = %v", tc.s, tc.p, got)
		}
	}
	for _, tc := range []struct {
		role, target cosmic.Role
		want         bool
	}{
		{cosmic.RoleAdmin, cosmic.RoleAdmin, true},
		{cosmic.RoleAdmin, cosmic.RoleOwner, false},
		{cosmic.RoleOwner, cosmic.RoleOwner, true},
		{cosmic.RoleMember, cosmic.RoleViewer, false},
	} {
		if got := authz.CanGrant(authz.Subject{Signed: true, Role: tc.role}, tc.target); got != tc.want {
			t.Errorf("CanGrant(%s, %s) = %v", tc.role, tc.target, got)
		}
	}
}
