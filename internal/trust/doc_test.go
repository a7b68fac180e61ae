package trust

import (
	"flag"
	"os"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite docs/security.md's generated tables")

const securityDoc = "../../docs/security.md"

// The tables of docs/security.md are the declaration's: a test keeps them
// from drifting (go test ./internal/trust -run SecurityDoc -update rewrites
// them).
func TestSecurityDocMatchesGraph(t *testing.T) {
	b, err := os.ReadFile(securityDoc)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for name, table := range map[string]string{"matrix": Matrix(), "admissions": Admissions()} {
		begin, end := "<!-- BEGIN generated "+name+" (internal/trust) -->\n", "<!-- END generated "+name+" -->"
		i, j := strings.Index(doc, begin), strings.Index(doc, end)
		if i < 0 || j < i {
			t.Fatalf("%s has no %q … %q section", securityDoc, begin, end)
		}
		if got := doc[i+len(begin) : j]; got != table {
			if !*update {
				t.Errorf("%s: the %s table is not the declaration's; run go test ./internal/trust -run SecurityDoc -update", securityDoc, name)
				continue
			}
			doc = doc[:i+len(begin)] + table + doc[j:]
		}
	}
	if *update {
		if err := os.WriteFile(securityDoc, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
