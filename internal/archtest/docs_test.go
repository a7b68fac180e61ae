package archtest

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// root is the repository's root, from this package's directory.
const root = "../.."

// pages are the repository's markdown pages: README.md, docs/ and the
// packages' own READMEs.
func pages(t *testing.T) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || d.Name() == ".git" || d.Name() == "testdata" || d.Name() == "dist") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			out = append(out, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) < 20 {
		t.Fatalf("%d markdown pages found: the walk missed them", len(out))
	}
	return out
}

var (
	testName = regexp.MustCompile(`\bTest[A-Z][A-Za-z0-9_]*`)
	testFunc = regexp.MustCompile(`(?m)^func (Test[A-Za-z0-9_]+)\(`)
	// A repository path in code quotes: internal/…, cmd/…, hack/…, and
	// so on, up to the first character no path of ours has.
	repoPath = regexp.MustCompile("`((?:internal|cmd|hack|docs|web|deploy|\\.ci)/[A-Za-z0-9_./-]*)")
	mdLink   = regexp.MustCompile(`\]\(([^)#:\s]+\.md)(?:#[^)]*)?\)`)
)

// TestDocsCiteWhatExists: every test a page names is a test function of
// the module, every repository path a page puts in code quotes exists,
// every page a page links to exists, and no page or Go file cites the
// design brief outside the repository; a design doc says its status
// (issue 33: docs named a removed test and cited a file not in the
// repository 14 times).
func TestDocsCiteWhatExists(t *testing.T) {
	have := map[string]bool{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || d.Name() == ".git") {
			return filepath.SkipDir
		}
		if strings.HasSuffix(p, ".go") {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			if strings.Contains(string(b), "DESIGN "+"§") {
				t.Errorf("%s cites the design brief, a file outside the repository: cite the page of docs/ instead", p)
			}
			for _, m := range testFunc.FindAllStringSubmatch(string(b), -1) {
				have[m[1]] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	placeholders := map[string]bool{"TestName": true} // go test -run TestName
	var missing []string
	for _, page := range pages(t) {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		name := strings.TrimPrefix(page, root+"/")
		if strings.Contains(text, "DESIGN "+"§") || strings.Contains(text, "DESIGN"+".md") {
			missing = append(missing, name+": cites DESIGN, a file outside the repository")
		}
		for _, m := range testName.FindAllString(text, -1) {
			if !have[m] && !placeholders[m] {
				missing = append(missing, name+": test "+m)
			}
		}
		for _, m := range repoPath.FindAllStringSubmatch(text, -1) {
			p := strings.TrimRight(m[1], ".")
			if strings.ContainsAny(p, "*") || strings.Contains(p, "...") || strings.Contains(p, "NNNN") {
				continue // a pattern
			}
			if _, err := os.Stat(filepath.Join(root, p)); err == nil {
				continue
			}
			if i := strings.LastIndex(p, "."); i > strings.LastIndex(p, "/") && i+1 < len(p) && p[i+1] >= 'A' && p[i+1] <= 'Z' {
				p = p[:i] // internal/apiv1.Routes: a package's identifier
			}
			if st, err := os.Stat(filepath.Join(root, p)); err != nil || !st.IsDir() && p != m[1] {
				missing = append(missing, name+": path "+p)
			}
		}
		for _, m := range mdLink.FindAllStringSubmatch(text, -1) {
			if strings.HasPrefix(m[1], "http") {
				continue
			}
			if _, err := os.Stat(filepath.Join(filepath.Dir(page), m[1])); err != nil {
				missing = append(missing, name+": link "+m[1])
			}
		}
		if strings.Contains(page, "/docs/design/") {
			if !regexp.MustCompile(`(?m)^Status: `).MatchString(text) {
				missing = append(missing, name+": no Status: line")
			}
		}
	}
	sort.Strings(missing)
	for _, m := range missing {
		t.Error(m)
	}
	if len(have) < 500 {
		t.Errorf("%d test functions found: the walk missed them", len(have))
	}
}

// TestOneWayToSkipOrFail: whether a test may skip what the machine lacks
// is decided in one place, internal/testenv (skip locally, fail under CI);
// no other file reads CI itself.
func TestOneWayToSkipOrFail(t *testing.T) {
	n := 0
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || d.Name() == ".git" || strings.HasSuffix(p, "internal/testenv")) {
			return filepath.SkipDir
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "internal/archtest/docs_test.go") {
			return nil
		}
		n++
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if strings.Contains(string(b), `Getenv("CI")`) || strings.Contains(string(b), `LookupEnv("CI")`) {
			t.Errorf("%s reads CI itself: use testenv.Require", p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 200 {
		t.Errorf("%d Go files read: the walk missed them", n)
	}
}
