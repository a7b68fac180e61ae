package gittest_test

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cosmicac/cosmicac/internal/gittest"
)

// TestServe: git's own client clones what Start served, files, modes and
// links as given, and the commit is the same on every run.
func TestServe(t *testing.T) {
	s := gittest.Start(t, map[string]gittest.Repo{
		"demo": {
			Files: map[string]string{"README.md": "hello\n", "bin/run.sh": "#!/bin/sh\necho hi\n"},
			Exec:  []string{"bin/run.sh"},
			Links: map[string]string{"docs": "README.md"},
		},
	})
	dir := filepath.Join(t.TempDir(), "clone")
	s.Git("", "clone", "-q", s.RepoURL("demo"), dir)

	for p, want := range map[string]string{"README.md": "hello\n", "bin/run.sh": "#!/bin/sh\necho hi\n"} {
		got, err := os.ReadFile(filepath.Join(dir, p))
		if err != nil || string(got) != want {
			t.Errorf("%s: %q, %v; want %q", p, got, err, want)
		}
	}
	if fi, err := os.Stat(filepath.Join(dir, "bin/run.sh")); err != nil || fi.Mode().Perm()&0o100 == 0 {
		t.Errorf("bin/run.sh: %v, %v; want executable", fi.Mode(), err)
	}
	if target, err := os.Readlink(filepath.Join(dir, "docs")); err != nil || target != "README.md" {
		t.Errorf("docs: a link to %q, %v; want README.md", target, err)
	}
	// Deterministic: the same files, names, dates, the same hash.
	again := gittest.Start(t, map[string]gittest.Repo{"demo": {
		Files: map[string]string{"README.md": "hello\n", "bin/run.sh": "#!/bin/sh\necho hi\n"},
		Exec:  []string{"bin/run.sh"},
		Links: map[string]string{"docs": "README.md"},
	}})
	if a, b := s.Head("demo"), again.Head("demo"); a != b || len(a) != 40 {
		t.Errorf("two makes of one repository: commits %s and %s", a, b)
	}
	if got := strings.TrimSpace(s.Git(dir, "rev-parse", "HEAD")); got != s.Head("demo") {
		t.Errorf("the clone's HEAD is %s, the server's %s", got, s.Head("demo"))
	}
}

// TestMissing: a repository not served is 404, as on a real host.
func TestMissing(t *testing.T) {
	s := gittest.Start(t, nil)
	resp, err := http.Get(s.RepoURL("nope") + "/info/refs?service=git-upload-pack")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("status %d; want 404", resp.StatusCode)
	}
}
