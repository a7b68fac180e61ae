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
