package archtest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// synonyms are log keys spelled another way somewhere: one spelling each.
var synonyms = map[string]string{
	"job": "job_id", "jobid": "job_id", "jobId": "job_id", "jobID": "job_id",
	"error": "err", "vmi": "vmi_index", "vmiIndex": "vmi_index",
	"replica_index": "replica", "rackId": "rack", "rack_id": "rack",
}

var snake = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// TestLogKeys: the slog keys of the product code are snake_case and spelled
// one way (job_id, replica, rack, err, …), so that a log query for one finds
// every line.
func TestLogKeys(t *testing.T) {
	levels := map[string]int{"Debug": 1, "Info": 1, "Warn": 1, "Error": 1, "With": 0}
	fset := token.NewFileSet()
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			first, ok := levels[sel.Sel.Name]
			if !ok || len(call.Args) <= first {
				return true
			}
			if first == 1 { // a message first: a log call has a constant one
				if lit, ok := call.Args[0].(*ast.BasicLit); !ok || lit.Kind != token.STRING {
					return true
				}
			}
			for i := first; i < len(call.Args); i += 2 {
				lit, ok := call.Args[i].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					return true // not key-value pairs (or a slog.Attr): leave it
				}
				key, _ := strconv.Unquote(lit.Value)
				pos := fset.Position(lit.Pos())
				if want, ok := synonyms[key]; ok {
					t.Errorf("%s: log key %q: spell it %q", pos, key, want)
				} else if !snake.MatchString(key) {
					t.Errorf("%s: log key %q is not snake_case", pos, key)
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
