// Package authztest reads docs/permissions.md, the permission matrix as
// people read it, so that tests can check the code against it.
package authztest

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/cosmicac/cosmicac/internal/authz"
	"github.com/cosmicac/cosmicac/internal/cosmic"
)

// Doc is what docs/permissions.md says.
type Doc struct {
	// Grants says, for each permission, each column's answer: the role
	// columns (viewer, member, admin, owner), "platform admin", and the
	// token columns ("read", "operator").
	Grants map[authz.Permission]map[string]bool
	// Routes gives each route ("METHOD /path") its permission.
	Routes map[string]authz.Permission
}

// Read parses docs/permissions.md of the repository.
func Read() (Doc, error) {
	_, file, _, _ := runtime.Caller(0)
	path := filepath.Join(filepath.Dir(file), "..", "..", "..", "docs", "permissions.md")
	b, err := os.ReadFile(path)
	if err != nil {
		return Doc{}, err
	}
	return Parse(b)
}

// Parse reads the matrix table (its header starts "| permission | viewer")
// and the routes table (its header starts "| route |").
func Parse(md []byte) (Doc, error) {
	d := Doc{Grants: map[authz.Permission]map[string]bool{}, Routes: map[string]authz.Permission{}}
	var cols []string
	table := ""
	sc := bufio.NewScanner(bytes.NewReader(md))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, "|") {
			table = ""
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.Trim(strings.TrimSpace(cells[i]), "`")
		}
		switch {
		case cells[0] == "permission" && len(cells) > 1 && cells[1] == "viewer":
			table, cols = "matrix", cells[1:]
			for i, c := range cols {
				cols[i] = strings.TrimSuffix(strings.Trim(strings.TrimSuffix(c, " token"), "`"), "`")
			}
			continue
		case cells[0] == "route":
			table = "routes"
			continue
		case strings.HasPrefix(cells[0], "---"):
			continue
		}
		switch table {
		case "matrix":
			if len(cells) != len(cols)+1 {
				return d, fmt.Errorf("permissions.md:%d: %d cells, want %d", n, len(cells), len(cols)+1)
			}
			p := authz.Permission(cells[0])
			row := map[string]bool{}
			for i, c := range cells[1:] {
				switch c {
				case "yes":
					row[cols[i]] = true
				case "no":
				default:
					return d, fmt.Errorf("permissions.md:%d: %q is not yes or no", n, c)
				}
			}
			d.Grants[p] = row
		case "routes":
			if len(cells) != 2 {
				return d, fmt.Errorf("permissions.md:%d: want | route | permission |", n)
			}
			d.Routes[cells[0]] = authz.Permission(cells[1])
		}
	}
	if len(d.Grants) == 0 || len(d.Routes) == 0 {
		return d, fmt.Errorf("permissions.md: no matrix or no routes table")
	}
	return d, sc.Err()
}

// Columns of the matrix.
const (
	ColPlatformAdmin = "platform admin"
	ColRead          = "read"
	ColOperator      = "operator"
)

// Caller is a kind of caller of the API as the model sees it. The model's
// world: team ml, where the job the paths name ({id}) lives, labelled
// app=x; team web; a caller is in ml with Role, or none.
type Caller struct {
	Name string
	// Role is the caller's role in team ml ("" none); PlatformAdmin a
	// platform admin (who names ml as the active team).
	Role          cosmic.Role
	PlatformAdmin bool
	// Scope and Selector are the token's; a scoped token is bound to ml.
	Scope    authz.Scope
	Selector map[string]string
	// HasTeam: the caller acts in ml (its only team, or named).
	HasTeam bool
	// ReadUser: the job's spec names this caller, who is in no team.
	ReadUser bool
	// Foreign: a member of web who names team ml.
	Foreign bool
	// Anon: no credential.
	Anon bool
}

// Allows says whether c holds p by the doc's matrix, in team ml when the
// permission is a team's.
func Allows(doc Doc, c Caller, p authz.Permission) bool {
	row := doc.Grants[p]
	if c.Scope != "" && !row[string(c.Scope)] {
		return false
	}
	bound := c.Scope != ""
	switch authz.KindOf(p) {
	case authz.KindPublic:
		return true
	case authz.KindUser:
		return row[string(cosmic.RoleViewer)]
	case authz.KindPlatform:
		return c.PlatformAdmin && !bound && row[ColPlatformAdmin]
	}
	if c.PlatformAdmin {
		return row[ColPlatformAdmin]
	}
	return c.Role != "" && row[string(c.Role)]
}

// Expect is the status the route METHOD path (its pattern, as in the doc's
// routes table) should answer c: 0 when allowed, else the denial (401,
// 403, 404, or 400 for a team route without an active team).
func Expect(doc Doc, method, path string, c Caller) int {
	p := doc.Routes[method+" "+path]
	switch {
	case p == authz.Public:
		return 0
	case c.Anon:
		return 401
	case c.Foreign:
		return 404 // the team named is not theirs
	}
	inTeam := c.Role != "" || c.PlatformAdmin
	switch {
	case authz.KindOf(p) != authz.KindTeam:
	case strings.HasPrefix(path, "/api/v1/jobs/{id}"):
		if c.Selector != nil && c.Selector["app"] != "x" {
			return 404
		}
		if !inTeam {
			if c.ReadUser && p == authz.JobsRead {
				return 0
			}
			return 404
		}
		if !Allows(doc, c, p) {
			if Allows(doc, c, authz.JobsRead) {
				return 403
			}
			return 404
		}
		return 0
	case strings.Contains(path, "{team}"):
		if !inTeam {
			return 404
		}
	case !c.HasTeam:
		return 400 // no active team
	}
	if !Allows(doc, c, p) {
		return 403
	}
	return 0
}

// Callers are the kinds of caller the access tests try.
var Callers = []Caller{
	{Name: "anonymous", Anon: true},
	{Name: "owner", Role: cosmic.RoleOwner, HasTeam: true},
	{Name: "admin", Role: cosmic.RoleAdmin, HasTeam: true},
	{Name: "member", Role: cosmic.RoleMember, HasTeam: true},
	{Name: "viewer", Role: cosmic.RoleViewer, HasTeam: true},
	{Name: "platform admin", PlatformAdmin: true, HasTeam: true},
	{Name: "other team", Foreign: true},
	{Name: "no team"},
	{Name: "readUser", ReadUser: true},
	{Name: "read token in selector", Role: cosmic.RoleMember, Scope: authz.ScopeRead, Selector: map[string]string{"app": "x"}, HasTeam: true},
	{Name: "operator token in selector", Role: cosmic.RoleMember, Scope: authz.ScopeOperator, Selector: map[string]string{"app": "x"}, HasTeam: true},
	{Name: "operator token outside selector", Role: cosmic.RoleMember, Scope: authz.ScopeOperator, Selector: map[string]string{"app": "y"}, HasTeam: true},
	{Name: "read token of an owner", Role: cosmic.RoleOwner, Scope: authz.ScopeRead, HasTeam: true},
}
