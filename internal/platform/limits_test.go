package platform

import (
	"flag"
	"os"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite docs/security.md's limits table")

// TestSecurityDocLimits: docs/security.md's limits table is Limits(), the
// components' own defaults (go test ./internal/platform -run SecurityDoc
// -update rewrites it).
func TestSecurityDocLimits(t *testing.T) {
	const path = "../../docs/security.md"
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	begin, end := "<!-- BEGIN generated limits (internal/platform) -->\n", "<!-- END generated limits -->"
	i, j := strings.Index(doc, begin), strings.Index(doc, end)
	if i < 0 || j < i {
		t.Fatalf("%s has no %q … %q section", path, begin, end)
	}
	if doc[i+len(begin):j] == LimitsTable() {
		return
	}
	if !*update {
		t.Fatalf("%s: the limits table is not Limits(); run go test ./internal/platform -run SecurityDoc -update", path)
	}
	doc = doc[:i+len(begin)] + LimitsTable() + doc[j:]
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
}
