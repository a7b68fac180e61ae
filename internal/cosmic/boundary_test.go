package cosmic

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestImportsNoIO keeps the domain free of I/O: no network, database,
// file system or Kubernetes packages.
func TestImportsNoIO(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	banned := []string{"net", "os", "io/fs", "database/", "k8s.io/", "sigs.k8s.io/", "github.com/cosmicac/cosmicac/"}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		af, err := parser.ParseFile(token.NewFileSet(), f, src, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range af.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			for _, b := range banned {
				if p == strings.TrimSuffix(b, "/") || strings.HasPrefix(p, b) || strings.HasPrefix(p, b+"/") {
					t.Errorf("%s imports %s", f, p)
				}
			}
		}
	}
}
