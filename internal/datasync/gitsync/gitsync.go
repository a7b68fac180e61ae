// Package gitsync fills a volume's directory from a public Git repository
// (a volume whose source is publicGit, issue 36): a shallow clone over
// HTTP(S) of the default branch's last commit, in Go, for the agents in the
// VMs, whose image may have no git. The agents import it; the servers have
// no use for it.
//
// What Clone leaves in the directory is what `git clone --depth 1
// --single-branch --no-tags URL DIR` leaves: the files of the commit's tree
// and a .git directory (the objects as one pack, the branch, origin, the
// shallow boundary and an index), so that a job's `git log`, `git status`
// or an experiment tracker that records the commit work as after git's own
// clone. Keeping .git costs no memory and little disk: the pack has to be
// written somewhere, and writing it to the volume's disk rather than into
// memory is what bounds the agent's memory to a small fraction of the
// repository's size.
//
// Safety is gitsync's own, not go-git's: go-git fetches the pack into .git
// (every name under .git is gitsync's, or go-git's from a hash; the
// branch's name from the server is checked first), and gitsync writes the
// working tree itself through an os.Root of the directory. It writes
// regular files and directories only, each created anew (O_EXCL, never
// through an existing entry), and refuses a tree entry named "", ".", "..",
// with a slash, or ".git" in any case, at any depth; os.Root refuses any
// path that would leave the directory. Symbolic links are not written and
// submodules are left as empty directories (as git leaves an uninitialised
// one): both are listed in Stats.Skipped.
//
// On any error Clone removes what it wrote (the directory's contents, and
// the directory if Clone made it), so that a retry starts from an empty
// directory and a job never sees half a repository.
package gitsync

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"strings"
)

// Errors callers map to a job's reason. Clone's errors wrap one of them,
// or ctx's error, or none (an I/O error of the directory's disk, a corrupt
// pack).
var (
	// ErrRefused: the URL is not one Clone fetches (CheckURL), or the
	// repository's tree names a path that is not safe to write.
	ErrRefused = errors.New("refused")
	// ErrUnreachable: the server could not be reached (DNS, connection,
	// TLS), or it answered with a server error (5xx, 429).
	ErrUnreachable = errors.New("unreachable")
	// ErrNoRepository: the server answered, but not with a public
	// repository that has a commit: not found, authentication required
	// (a public clone sends no credentials), not a Git server, or empty.
	ErrNoRepository = errors.New("no such public repository")
	// ErrTooLarge: the repository is larger than Options.MaxBytes or
	// Options.MaxFiles allow.
	ErrTooLarge = errors.New("too large")
)

// The bounds Options' zero values stand for.
const (
	DefaultMaxBytes = 10 << 30 // 10 GiB
	DefaultMaxFiles = 1 << 20  // 1,048,576
)

// Options are a clone's HTTP client and bounds.
type Options struct {
	// Client makes the requests (its Transport sets a proxy, trusted
	// CAs); nil is a client on http.DefaultTransport, which takes a proxy
	// from the environment. Bound a clone's time with Clone's ctx.
	Client *http.Client
	// MaxBytes bounds the bytes downloaded (the pack and the ref
	// listing) and, separately, the bytes of the files written; 0 is
	// DefaultMaxBytes.
	MaxBytes int64
	// MaxFiles bounds the entries of the tree written (files,
	// directories, skipped links and submodules), so that a small pack
	// whose trees name one another many times cannot fill the disk's
	// inodes; 0 is DefaultMaxFiles.
	MaxFiles int64
}

// Stats is what Clone wrote.
type Stats struct {
	// Files and Bytes count the regular files of the working tree and
	// their bytes (not .git).
	Files, Bytes int64
	// Commit is the commit cloned, in hex; Branch is the default branch
	// it is the head of ("" for a detached HEAD).
	Commit, Branch string
	// Skipped are the paths not written: symbolic links and submodules,
	// slash-separated, in tree order.
	Skipped []string
}

// Clone makes a shallow clone (depth 1, the default branch, no tags) of
// the public repository at rawURL into dir, which must be empty or absent,
// and says what it wrote. See the package comment for what dir holds after
// and what it holds after an error (nothing).
func Clone(ctx context.Context, rawURL, dir string, opt Options) (Stats, error) {
	if err := CheckURL(rawURL); err != nil {
		return Stats{}, err
	}
	if opt.MaxBytes <= 0 {
		opt.MaxBytes = DefaultMaxBytes
	}
	if opt.MaxFiles <= 0 {
		opt.MaxFiles = DefaultMaxFiles
	}
	created, err := prepare(dir)
	if err != nil {
		return Stats{}, err
	}
	st, err := clone(ctx, rawURL, dir, opt)
	if err != nil {
		if rmErr := clean(dir, created); rmErr != nil {
			err = errors.Join(err, rmErr)
		}
		return Stats{}, err
	}
	return st, nil
}

// CheckURL says whether Clone fetches rawURL: an http:// or https:// URL
// with a host, and no user information, query or fragment (a credential
// has no place in a public repository's URL, and Git's smart HTTP URLs
// take neither of the others). Its error wraps ErrRefused and never
// repeats the user information.
func CheckURL(rawURL string) error {
	u, err := url.Parse(rawURL)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err // url.Error repeats the URL, credentials included
		}
		return fmt.Errorf("%w: parse url: %v", ErrRefused, err)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("%w: %s: only http:// and https:// URLs", ErrRefused, redact(u))
	case u.Opaque != "" || u.Hostname() == "":
		return fmt.Errorf("%w: %s: no host", ErrRefused, redact(u))
	case u.User != nil:
		return fmt.Errorf("%w: %s: credentials in the URL (a public repository needs none)", ErrRefused, redact(u))
	case u.RawQuery != "" || u.ForceQuery:
		return fmt.Errorf("%w: %s: a query", ErrRefused, redact(u))
	case u.Fragment != "" || strings.Contains(rawURL, "#"):
		return fmt.Errorf("%w: %s: a fragment", ErrRefused, redact(u))
	}
	return nil
}

// redact is u for an error: without user information, query or fragment.
func redact(u *url.URL) string {
	c := *u
	c.User, c.RawQuery, c.ForceQuery, c.Fragment, c.RawFragment = nil, "", false, "", ""
	return c.String()
}

// prepare makes dir if it is absent (created) and refuses it unless it is
// an empty directory.
func prepare(dir string) (created bool, err error) {
	f, err := os.Open(dir)
	if errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return false, fmt.Errorf("clone into %s: %w", dir, err)
		}
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("clone into %s: %w", dir, err)
	}
	defer f.Close()
	names, err := f.Readdirnames(1)
	switch {
	case err == nil && len(names) > 0:
		return false, fmt.Errorf("clone into %s: %w: the directory is not empty (%s)", dir, fs.ErrExist, names[0])
	case err != nil && !errors.Is(err, io.EOF):
		return false, fmt.Errorf("clone into %s: %w", dir, err) // not a directory, unreadable
	}
	return false, nil
}

// clean removes what a failed clone wrote: dir if Clone made it, else its
// contents. os.Root.RemoveAll removes a link, never what it points to
// (and Clone makes none).
func clean(dir string, created bool) error {
	if created {
		return os.RemoveAll(dir)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("remove the partial clone: %w", err)
	}
	defer root.Close()
	f, err := root.Open(".")
	if err != nil {
		return fmt.Errorf("remove the partial clone: %w", err)
	}
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		return fmt.Errorf("remove the partial clone: %w", err)
	}
	var errs []error
	for _, n := range names {
		if err := root.RemoveAll(n); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("remove the partial clone: %w", err)
	}
	return nil
}
