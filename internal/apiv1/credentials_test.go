package apiv1_test

import (
	"flag"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/cosmicac/cosmicac/internal/apiv1"
)

var update = flag.Bool("update", false, "rewrite docs/security.md's credentials table and web/types/openapi.json")

// TestSecurityDocCredentials: docs/security.md's table of platform
// credentials is apiv1.Credentials (go test ./internal/apiv1 -run
// SecurityDoc -update rewrites it).
func TestSecurityDocCredentials(t *testing.T) {
	const path = "../../docs/security.md"
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	begin, end := "<!-- BEGIN generated credentials (internal/apiv1) -->\n", "<!-- END generated credentials -->"
	i, j := strings.Index(doc, begin), strings.Index(doc, end)
	if i < 0 || j < i {
		t.Fatalf("%s has no %q … %q section", path, begin, end)
	}
	if doc[i+len(begin):j] == apiv1.CredentialsTable() {
		return
	}
	if !*update {
		t.Fatalf("%s: the credentials table is not apiv1.Credentials; run go test ./internal/apiv1 -run SecurityDoc -update", path)
	}
	doc = doc[:i+len(begin)] + apiv1.CredentialsTable() + doc[j:]
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestStripCredentials: every credential header goes, and of the cookies
// only the session's (in any case, on any Cookie line); an answer's
// Set-Cookie of the session cookie goes, the job's own stay.
func TestStripCredentials(t *testing.T) {
	h := http.Header{
		"Authorization":  {"Bearer cac_x"},
		"X-Api-Key":      {"sk-cac-x"},
		"X-Csrf-Token":   {"csrf_x"},
		"Cookie":         {"a=1; " + apiv1.SessionCookie + "=cas_x", "COSMICAC_SESSION=cas_y;b=2", apiv1.SessionCookie + "=cas_z"},
		"X-Kept":         {"1"},
		"Content-Type":   {"application/json"},
		"Accept-Charset": {"utf-8"},
	}
	apiv1.StripCredentials(h)
	want := http.Header{"Cookie": {"a=1; b=2"}, "X-Kept": {"1"}, "Content-Type": {"application/json"}, "Accept-Charset": {"utf-8"}}
	if len(h) != len(want) {
		t.Fatalf("left %v, want %v", h, want)
	}
	for k, v := range want {
		if !slices.Equal(h[k], v) {
			t.Errorf("%s: %q, want %q", k, h[k], v)
		}
	}
	resp := http.Header{"Set-Cookie": {apiv1.SessionCookie + "=cas_fixed; Path=/", "app=1; Path=/", "Cosmicac_Session=cas_2", apiv1.SessionCookie + "=bad;;;\x00"}}
	apiv1.StripCredentialCookies(resp)
	if got := resp.Values("Set-Cookie"); !slices.Equal(got, []string{"app=1; Path=/"}) {
		t.Errorf("Set-Cookie left %q, want only the job's own", got)
	}
}
