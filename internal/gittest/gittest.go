// Package gittest serves Git repositories over HTTP for tests, with git's
// own server: bare repositories made by the real git binary, served on
// loopback by git-http-backend (the smart HTTP protocol, as GitHub and
// GitLab speak it) through net/http/cgi. Tests and test harnesses import
// it; production code does not (archtest).
//
// git must be installed: CI installs it, so Start fails rather than skips
// without it. Commits are deterministic (fixed author, committer and
// dates, no user or system configuration read), so a repository's commit
// hash is the same on every run and machine.
package gittest

import (
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Repo is what a repository's one commit, on branch main, holds. Paths are
// slash-separated and relative to the repository's root.
type Repo struct {
	// Files are the regular files: path → content.
	Files map[string]string
	// Exec are the paths of Files that are executable (mode 100755).
	Exec []string
	// Links are symbolic links: path → target, as written.
	Links map[string]string
	// Submodules are gitlinks (mode 160000): path → a commit's hash in
	// hex. No .gitmodules is written.
	Submodules map[string]string
}

// Server is git-http-backend serving the bare repositories under Root.
type Server struct {
	// URL is the server's address, http://127.0.0.1:PORT; a repository
	// NAME is at URL/NAME.git.
	URL string
	// Root is the project root: the repository NAME is the bare
	// repository Root/NAME.git, which a test may change (or add to) while
	// the server runs.
	Root string

	t   testing.TB
	env []string
}

// Start makes a bare repository NAME.git of each repos[NAME] and serves
// them until the test ends.
func Start(t testing.TB, repos map[string]Repo) *Server {
	t.Helper()
	gitPath, err := exec.LookPath("git")
	if err != nil {
		t.Fatalf("gittest: git is not installed (apt-get install git): %v", err)
	}
	s := &Server{Root: t.TempDir(), t: t, env: Env(t)}
	execPath := strings.TrimSpace(s.git("", "--exec-path"))
	backend := filepath.Join(execPath, "git-http-backend")
	if _, err := os.Stat(backend); err != nil {
		t.Fatalf("gittest: git %s has no git-http-backend: %v", gitPath, err)
	}
	for name, r := range repos {
		s.make(name, r)
	}
	srv := httptest.NewServer(&cgi.Handler{
		Path: backend,
		Root: "/",
		Dir:  s.Root,
		Env:  append([]string{"GIT_PROJECT_ROOT=" + s.Root, "GIT_HTTP_EXPORT_ALL=1"}, s.env...),
		// What git-http-backend says ("Not a git repository: …") goes to
		// the test's log; the server is closed, every request done,
		// before the test ends.
		Stderr: logWriter{t},
	})
	t.Cleanup(srv.Close)
	s.URL = srv.URL
	return s
}

// RepoURL is the URL of the repository name.
func (s *Server) RepoURL(name string) string { return s.URL + "/" + name + ".git" }

// Path is the bare repository of name, Root/NAME.git.
func (s *Server) Path(name string) string { return filepath.Join(s.Root, name+".git") }

// Head is the hash of the commit HEAD names in the repository name.
func (s *Server) Head(name string) string {
	s.t.Helper()
	return strings.TrimSpace(s.git(s.Path(name), "rev-parse", "HEAD"))
}

// Git runs git with args in dir ("" the current directory) under the
// server's deterministic environment and returns its standard output,
// failing the test if git fails.
func (s *Server) Git(dir string, args ...string) string {
	s.t.Helper()
	return s.git(dir, args...)
}

// Env is an environment for git that reads no user or system
// configuration and makes the same commit on every run: HOME a temporary
// directory, fixed names, e-mail addresses and dates.
func Env(t testing.TB) []string {
	const date = "2026-01-02T03:04:05Z"
	return []string{
		"HOME=" + t.TempDir(),
		"PATH=" + os.Getenv("PATH"),
		"LC_ALL=C",
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_TERMINAL_PROMPT=0",
		"GIT_AUTHOR_NAME=gittest", "GIT_AUTHOR_EMAIL=gittest@example.invalid", "GIT_AUTHOR_DATE=" + date,
		"GIT_COMMITTER_NAME=gittest", "GIT_COMMITTER_EMAIL=gittest@example.invalid", "GIT_COMMITTER_DATE=" + date,
	}
}

// make writes r into a work tree, commits it and clones it bare to
// Root/NAME.git.
func (s *Server) make(name string, r Repo) {
	s.t.Helper()
	work := s.t.TempDir()
	s.git(work, "init", "-q", "-b", "main")
	for p, content := range r.Files {
		perm := os.FileMode(0o644)
		if slices.Contains(r.Exec, p) {
			perm = 0o755
		}
		full := filepath.Join(work, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			s.t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), perm); err != nil {
			s.t.Fatal(err)
		}
		if err := os.Chmod(full, perm); err != nil { // past the umask
			s.t.Fatal(err)
		}
	}
	for p, target := range r.Links {
		full := filepath.Join(work, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			s.t.Fatal(err)
		}
		if err := os.Symlink(target, full); err != nil {
			s.t.Fatal(err)
		}
	}
	s.git(work, "add", "-A")
	for p, commit := range r.Submodules {
		s.git(work, "update-index", "--add", "--cacheinfo", "160000,"+commit+","+p)
	}
	s.git(work, "-c", "core.fileMode=true", "commit", "-q", "--allow-empty", "-m", "gittest: "+name)
	s.git("", "clone", "-q", "--bare", work, s.Path(name))
}

func (s *Server) git(dir string, args ...string) string {
	s.t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = s.env
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		s.t.Fatalf("gittest: git %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out)
}

// logWriter writes to a test's log.
type logWriter struct{ t testing.TB }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Logf("git-http-backend: %s", strings.TrimSpace(string(p)))
	return len(p), nil
}
