package gitsync_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/cosmicac/cosmicac/internal/datasync/gitsync"
	"github.com/cosmicac/cosmicac/internal/gittest"
)

// entry is what a test sees of a path of a working tree.
type entry struct {
	Mode   fs.FileMode // type and permission bits
	SHA256 string      // of a regular file's content
}

// tree is the working tree under dir, without .git: slash-separated path
// → entry. Links are entries too (Lstat), so a test sees one written.
func tree(t *testing.T, dir string) map[string]entry {
	t.Helper()
	out := map[string]entry{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		switch {
		case rel == ".":
			return nil
		case rel == ".git":
			return filepath.SkipDir
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		e := entry{Mode: fi.Mode().Type() | fi.Mode().Perm()}
		if fi.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			e.SHA256 = hex.EncodeToString(sum[:])
		}
		out[filepath.ToSlash(rel)] = e
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func sum(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// TestClone: every file of the commit lands with its content (sha256),
// directories nest, the executable keeps its exec bit, the link is not
// written but listed, the submodule is an empty directory, listed; the
// tree is what `git clone --depth 1` checks out, less the link; and .git
// makes it a clone git itself reads: HEAD is the commit, the status is
// clean but for the link not written.
func TestClone(t *testing.T) {
	files := map[string]string{
		"README.md":          "# demo\n",
		"empty":              "",
		"bin/train.sh":       "#!/bin/sh\npython train.py\n",
		"src/pkg/deep/a.py":  "print('a')\n",
		"src/pkg/deep/b.bin": "\x00\x01\x02\xff binary\n",
		"src/pkg/c.txt":      strings.Repeat("c", 70_000),
	}
	s := gittest.Start(t, map[string]gittest.Repo{"demo": {
		Files:      files,
		Exec:       []string{"bin/train.sh"},
		Links:      map[string]string{"latest": "src/pkg/c.txt", "escape": "/etc/passwd"},
		Submodules: map[string]string{"third_party/lib": strings.Repeat("ab", 20)},
	}})
	dir := filepath.Join(t.TempDir(), "vol")

	st, err := gitsync.Clone(context.Background(), s.RepoURL("demo"), dir, gitsync.Options{})
	if err != nil {
		t.Fatal(err)
	}

	want := map[string]entry{
		"bin":             {Mode: fs.ModeDir | 0o755},
		"src":             {Mode: fs.ModeDir | 0o755},
		"src/pkg":         {Mode: fs.ModeDir | 0o755},
		"src/pkg/deep":    {Mode: fs.ModeDir | 0o755},
		"third_party":     {Mode: fs.ModeDir | 0o755},
		"third_party/lib": {Mode: fs.ModeDir | 0o755},
	}
	var bytes int64
	for p, c := range files {
		want[p] = entry{Mode: 0o644, SHA256: sum(c)}
		bytes += int64(len(c))
	}
	want["bin/train.sh"] = entry{Mode: 0o755, SHA256: sum(files["bin/train.sh"])}
	if diff := cmp.Diff(want, tree(t, dir)); diff != "" {
		t.Errorf("the working tree (-want +got):\n%s", diff)
	}
	wantStats := gitsync.Stats{Files: int64(len(files)), Bytes: bytes, Commit: s.Head("demo"), Branch: "main",
		Skipped: []string{"escape", "latest", "third_party/lib"}}
	if diff := cmp.Diff(wantStats, st); diff != "" {
		t.Errorf("stats (-want +got):\n%s", diff)
	}

	// git's own shallow clone checks out the same, and the links.
	cli := filepath.Join(t.TempDir(), "cli")
	s.Git("", "clone", "-q", "--depth", "1", s.RepoURL("demo"), cli)
	fromGit := tree(t, cli)
	delete(fromGit, "latest")
	delete(fromGit, "escape")
	if diff := cmp.Diff(fromGit, tree(t, dir)); diff != "" {
		t.Errorf("against git clone --depth 1 (-git +gitsync):\n%s", diff)
	}

	// .git is a shallow clone git reads.
	if got := strings.TrimSpace(s.Git(dir, "rev-parse", "HEAD")); got != st.Commit {
		t.Errorf("git rev-parse HEAD: %s; want %s", got, st.Commit)
	}
	if got := strings.TrimSpace(s.Git(dir, "rev-parse", "--abbrev-ref", "HEAD", "@{upstream}")); got != "main\norigin/main" {
		t.Errorf("branch and upstream: %q", got)
	}
	if got := strings.TrimSpace(s.Git(dir, "rev-parse", "--is-shallow-repository")); got != "true" {
		t.Errorf("shallow: %s", got)
	}
	if got := s.Git(dir, "status", "--porcelain"); got != " D escape\n D latest\n" {
		t.Errorf("git status --porcelain: %q; want the two links deleted only", got)
	}
	s.Git(dir, "fsck", "--no-progress")
}

// TestEscape: a repository whose tree names a path out of the directory,
// into .git, or one path twice (made by hand, as no git client would make
// it, and served by git's own server) is refused and writes nothing:
// neither outside the directory nor in it.
func TestEscape(t *testing.T) {
	s := gittest.Start(t, nil)
	tests := map[string]func(*forge) hash{
		"dotdot dir":  func(f *forge) hash { return f.tree(f.dir("..", f.tree(f.file("x", "pwned")))) },
		"dotdot file": func(f *forge) hash { return f.tree(f.file("..", "pwned")) },
		"dot":         func(f *forge) hash { return f.tree(f.dir(".", f.tree(f.file("x", "pwned")))) },
		"slash":       func(f *forge) hash { return f.tree(f.file("../x", "pwned")) },
		"absolute":    func(f *forge) hash { return f.tree(f.file("/tmp/x", "pwned")) },
		"deep dotdot": func(f *forge) hash {
			return f.tree(f.dir("a", f.tree(f.dir("..", f.tree(f.dir("..", f.tree(f.file("x", "pwned"))))))))
		},
		".git hook": func(f *forge) hash {
			return f.tree(f.dir(".git", f.tree(f.dir("hooks", f.tree(f.exec("post-checkout", "#!/bin/sh\n"))))))
		},
		".GIT config": func(f *forge) hash {
			return f.tree(f.dir(".GIT", f.tree(f.file("config", "[core]\n\tfsmonitor = evil\n"))))
		},
		"nested .git":    func(f *forge) hash { return f.tree(f.dir("sub", f.tree(f.dir(".git", f.tree(f.file("HEAD", "x")))))) },
		"twice":          func(f *forge) hash { return f.tree(f.file("a", "1"), f.file("a", "2")) },
		"file then dir":  func(f *forge) hash { return f.tree(f.file("a", "1"), f.dir("a", f.tree(f.file("x", "2")))) },
		"link then dir":  func(f *forge) hash { return f.tree(f.link("a", "/tmp"), f.dir("a", f.tree(f.file("x", "2")))) },
		"link and files": func(f *forge) hash { return f.tree(f.link("out", ".."), f.dir("out2", f.tree(f.file("x", "1")))) },
	}
	for name, build := range tests {
		t.Run(name, func(t *testing.T) {
			repo := strings.NewReplacer(" ", "-", ".", "_").Replace(name)
			s.Git("", "init", "-q", "--bare", s.Path(repo))
			f := &forge{t: t, s: s, repo: repo}
			f.commit(build(f))

			parent := t.TempDir()
			dir := filepath.Join(parent, "vol")
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			_, err := gitsync.Clone(context.Background(), s.RepoURL(repo), dir, gitsync.Options{})
			t.Logf("Clone: %v", err)
			switch name {
			case "link and files": // nothing to refuse: the link is skipped
				if err != nil {
					t.Fatalf("Clone: %v", err)
				}
				if diff := cmp.Diff(map[string]entry{"out2": {Mode: fs.ModeDir | 0o755}, "out2/x": {Mode: 0o644, SHA256: sum("1")}}, tree(t, dir)); diff != "" {
					t.Errorf("the working tree (-want +got):\n%s", diff)
				}
			default:
				if !errors.Is(err, gitsync.ErrRefused) {
					t.Fatalf("Clone: %v; want ErrRefused", err)
				}
				if left := tree(t, dir); len(left) != 0 {
					t.Errorf("left in the directory: %v", left)
				}
				if _, err := os.Stat(filepath.Join(dir, ".git")); !errors.Is(err, fs.ErrNotExist) {
					t.Errorf(".git left: %v", err)
				}
			}
			if got, err := os.ReadDir(parent); err != nil || len(got) != 1 {
				t.Errorf("outside the directory: %v, %v", got, err)
			}
			for _, p := range []string{"/tmp/x", filepath.Join(filepath.Dir(parent), "x")} {
				if _, err := os.Lstat(p); err == nil {
					t.Errorf("%s written", p)
				}
			}
		})
	}
}

// TestErrors: each failure wraps the error a job's reason is made of, and
// removes what it wrote: a directory Clone made is gone again.
func TestErrors(t *testing.T) {
	s := gittest.Start(t, map[string]gittest.Repo{"demo": {Files: map[string]string{"a": "1"}}})
	s.Git("", "init", "-q", "--bare", s.Path("empty"))
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedURL := "http://" + closed.Addr().String() + "/x.git"
	closed.Close()
	status := func(code int, body string) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(code)
			fmt.Fprint(w, body)
		}))
		t.Cleanup(srv.Close)
		return srv.URL + "/x.git"
	}
	tests := map[string]struct {
		url  string
		want error
	}{
		"not found":       {s.RepoURL("nope"), gitsync.ErrNoRepository},
		"empty":           {s.RepoURL("empty"), gitsync.ErrNoRepository},
		"auth required":   {status(http.StatusUnauthorized, "login"), gitsync.ErrNoRepository},
		"forbidden":       {status(http.StatusForbidden, ""), gitsync.ErrNoRepository},
		"not git":         {status(http.StatusOK, "<html>a web page</html>"), gitsync.ErrNoRepository},
		"server error":    {status(http.StatusBadGateway, strings.Repeat("x", 1<<20)), gitsync.ErrUnreachable},
		"closed port":     {closedURL, gitsync.ErrUnreachable},
		"no such host":    {"http://gitsync-test.invalid/x.git", gitsync.ErrUnreachable},
		"ssh refused":     {"ssh://git@example.com/x.git", gitsync.ErrRefused},
		"file refused":    {"file://" + s.Path("demo"), gitsync.ErrRefused},
		"a path refused":  {s.Path("demo"), gitsync.ErrRefused},
		"with a password": {strings.Replace(s.RepoURL("demo"), "://", "://u:secret@", 1), gitsync.ErrRefused},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "vol")
			_, err := gitsync.Clone(context.Background(), tt.url, dir, gitsync.Options{})
			t.Logf("Clone: %.300v", err)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Clone: %v; want %v", err, tt.want)
			}
			if strings.Contains(err.Error(), "secret") || len(err.Error()) > 4<<10 {
				t.Errorf("the error carries a credential or a whole body: %.300s", err)
			}
			if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("the directory Clone made is left: %v", err)
			}
		})
	}
}

// TestCheckURL: http(s) with a host only; nothing that carries a
// credential, and nothing local.
func TestCheckURL(t *testing.T) {
	tests := map[string]struct {
		url string
		ok  bool
	}{
		"https":          {"https://github.com/cosmicac/demo.git", true},
		"http with port": {"http://127.0.0.1:8080/demo.git", true},
		"ipv6":           {"http://[::1]:8080/demo", true},
		"no .git":        {"https://gitlab.com/group/sub/demo", true},
		"upper scheme":   {"HTTPS://github.com/x/y", true},
		"user":           {"https://token@github.com/x/y", false},
		"user password":  {"https://u:p@github.com/x/y", false},
		"fragment":       {"https://github.com/x/y#main", false},
		"empty fragment": {"https://github.com/x/y#", false},
		"query":          {"https://github.com/x/y?token=t", false},
		"empty query":    {"https://github.com/x/y?", false},
		"no host":        {"https:///x/y", false},
		"port only":      {"https://:443/x/y", false},
		"opaque":         {"https:github.com/x/y", false},
		"file":           {"file:///srv/git/x.git", false},
		"ssh":            {"ssh://git@github.com/x/y.git", false},
		"scp-like":       {"git@github.com:x/y.git", false},
		"git":            {"git://github.com/x/y.git", false},
		"ftp":            {"ftp://example.com/x.git", false},
		"absolute path":  {"/srv/git/x.git", false},
		"relative path":  {"../x.git", false},
		"empty":          {"", false},
		"bad escape":     {"https://u:p%zz@github.com/x", false},
		"space":          {"https://github.com/x y\n", false},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			err := gitsync.CheckURL(tt.url)
			if (err == nil) != tt.ok {
				t.Fatalf("CheckURL(%q): %v; want ok %v", tt.url, err, tt.ok)
			}
			if err != nil && !errors.Is(err, gitsync.ErrRefused) {
				t.Errorf("%v does not wrap ErrRefused", err)
			}
			if err != nil && (strings.Contains(err.Error(), ":p@") || strings.Contains(err.Error(), "token")) {
				t.Errorf("the error repeats the credential: %v", err)
			}
		})
	}
}

// TestLimits: past MaxBytes (the download, or the files) or MaxFiles the
// clone fails with ErrTooLarge and removes what it wrote, leaving the
// directory it was given, empty.
func TestLimits(t *testing.T) {
	files := map[string]string{}
	for i := range 20 {
		files[fmt.Sprintf("f%02d", i)] = strings.Repeat(string(rune('a'+i)), 1000) // compresses well
	}
	s := gittest.Start(t, map[string]gittest.Repo{"demo": {Files: files}})
	tests := map[string]gitsync.Options{
		"download": {MaxBytes: 500},    // the ref listing alone passes it
		"files":    {MaxBytes: 19_999}, // a pack of ~1.5 kB, 20,000 bytes of files
		"entries":  {MaxFiles: len64(files) - 1},
	}
	for name, opt := range tests {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			_, err := gitsync.Clone(context.Background(), s.RepoURL("demo"), dir, opt)
			t.Logf("Clone: %v", err)
			if !errors.Is(err, gitsync.ErrTooLarge) {
				t.Fatalf("Clone: %v; want ErrTooLarge", err)
			}
			left, err := os.ReadDir(dir)
			if err != nil || len(left) != 0 {
				t.Errorf("left: %v, %v", left, err)
			}
		})
	}
	t.Run("at the bound", func(t *testing.T) {
		st, err := gitsync.Clone(context.Background(), s.RepoURL("demo"), t.TempDir(), gitsync.Options{MaxBytes: 20_000, MaxFiles: len64(files)})
		if err != nil || st.Bytes != 20_000 {
			t.Fatalf("Clone: %+v, %v", st, err)
		}
	})
}

func len64[M ~map[K]V, K comparable, V any](m M) int64 { return int64(len(m)) }

// TestNotEmpty: a directory with anything in it is refused and left as it
// was; a file is no directory.
func TestNotEmpty(t *testing.T) {
	s := gittest.Start(t, map[string]gittest.Repo{"demo": {Files: map[string]string{"a": "1"}}})
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "mine"), []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := gitsync.Clone(context.Background(), s.RepoURL("demo"), dir, gitsync.Options{}); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("Clone into a non-empty directory: %v; want fs.ErrExist", err)
	}
	if diff := cmp.Diff(map[string]entry{"mine": {Mode: 0o644, SHA256: sum("keep")}}, tree(t, dir)); diff != "" {
		t.Errorf("the directory changed (-want +got):\n%s", diff)
	}
	if _, err := gitsync.Clone(context.Background(), s.RepoURL("demo"), filepath.Join(dir, "mine"), gitsync.Options{}); err == nil {
		t.Fatal("Clone into a file: no error")
	}
}

// TestCancel: cancelling ctx stops a clone whose server is stalled, with
// ctx's error, and removes what it wrote; a cancelled ctx starts none.
func TestCancel(t *testing.T) {
	started := make(chan struct{})
	var once atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if once.CompareAndSwap(false, true) {
			close(started)
		}
		<-r.Context().Done() // a server that never answers
	}))
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-started
		cancel()
	}()
	dir := filepath.Join(t.TempDir(), "vol")
	if _, err := gitsync.Clone(ctx, srv.URL+"/x.git", dir, gitsync.Options{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Clone: %v; want context.Canceled", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the directory is left: %v", err)
	}

	s := gittest.Start(t, map[string]gittest.Repo{"demo": {Files: map[string]string{"a": "1"}}})
	if _, err := gitsync.Clone(ctx, s.RepoURL("demo"), t.TempDir(), gitsync.Options{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Clone with a cancelled ctx: %v; want context.Canceled", err)
	}
}

// TestClient: the requests go through Options.Client, the caller's (a
// proxy, a CA), and no other.
func TestClient(t *testing.T) {
	s := gittest.Start(t, map[string]gittest.Repo{"demo": {Files: map[string]string{"a": "1"}}})
	var n atomic.Int64
	hc := &http.Client{Transport: roundTripper(func(r *http.Request) (*http.Response, error) {
		n.Add(1)
		return http.DefaultTransport.RoundTrip(r)
	})}
	if _, err := gitsync.Clone(context.Background(), s.RepoURL("demo"), t.TempDir(), gitsync.Options{Client: hc}); err != nil {
		t.Fatal(err)
	}
	if n.Load() != 2 { // the ref listing, the pack
		t.Errorf("%d requests through the client; want 2", n.Load())
	}
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
