package gitsync

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"sync/atomic"

	"github.com/go-git/go-billy/v5/osfs"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp/capability"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp/sideband"
	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	"github.com/go-git/go-git/v5/storage/filesystem"
)

// errorBodyLimit bounds what is read of a non-2xx response's body: go-git
// reads it whole into its error (plumbing/transport/http/common.go,
// NewErr).
const errorBodyLimit = 1 << 10

// clone fetches the repository into dir/.git and writes its tree into
// dir.
func clone(ctx context.Context, rawURL, dir string, opt Options) (_ Stats, err error) {
	u, _ := url.Parse(rawURL) // CheckURL parsed it
	name := redact(u)
	bud := &budget{max: opt.MaxBytes}
	head, branch, shallow, st, err := fetch(ctx, rawURL, dir, opt.Client, bud)
	if err != nil {
		return Stats{}, fmt.Errorf("clone %s: %w", name, classify(ctx, bud, err))
	}
	defer func() {
		if closeErr := st.Close(); closeErr != nil && err == nil {
			err = fmt.Errorf("clone %s: %w", name, closeErr)
		}
	}()
	w := &tree{st: st, maxBytes: opt.MaxBytes, maxFiles: opt.MaxFiles}
	if err := w.checkout(ctx, dir, head); err != nil {
		return Stats{}, fmt.Errorf("clone %s: check out %s: %w", name, head, err)
	}
	if err := describe(st, rawURL, head, branch, shallow, w.index); err != nil {
		return Stats{}, fmt.Errorf("clone %s: %w", name, err)
	}
	return Stats{Files: w.files, Bytes: w.bytes, Commit: head.String(), Branch: branch.Short(), Skipped: w.skipped}, nil
}

// fetch asks the server for its HEAD's commit at depth 1 and writes the
// pack into dir/.git. branch is the branch HEAD names, "" where the server
// names none or names one Git would refuse; shallow is whether the server
// cut the history (it has the capability).
//
// Why the plumbing and not git.CloneContext: go-git v5 takes the transport
// for a URL from a global table (plumbing/transport/client/client.go:
// client.Protocols, changed by InstallProtocol), and CloneOptions has no
// field for an *http.Client (options.go), so a clone's own client would be
// global state shared by every clone in the process. The HTTP transport's
// constructor takes one (plumbing/transport/http/common.go: NewClient(c
// *http.Client) transport.Transport), and an upload-pack session of it is
// what git.Remote.fetch drives (remote.go: newUploadPackRequest,
// fetchPack): advertised refs, one request, the pack into the storage.
// Doing the same here keeps the client per call and links no ssh://,
// git:// or file:// transport into the agent.
func fetch(ctx context.Context, rawURL, dir string, hc *http.Client, bud *budget) (
	head plumbing.Hash, branch plumbing.ReferenceName, shallow bool, st *filesystem.Storage, err error) {

	var c http.Client
	if hc != nil {
		c = *hc
	}
	base := c.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	c.Transport = &budgetTransport{base: base, bud: bud}
	ep, err := transport.NewEndpoint(rawURL)
	if err != nil {
		return head, "", false, nil, fmt.Errorf("%w: %v", ErrRefused, err)
	}
	sess, err := githttp.NewClient(&c).NewUploadPackSession(ep, nil)
	if err != nil {
		return head, "", false, nil, err
	}
	defer sess.Close()
	ar, err := sess.AdvertisedReferencesContext(ctx)
	if err != nil {
		if sentinel(err) == nil && !errors.Is(err, io.ErrUnexpectedEOF) {
			// An answer, but no Git server's: a web page, a redirect
			// to a sign-in page.
			err = fmt.Errorf("%w: not a Git server's answer: %w", ErrNoRepository, err)
		}
		return head, "", false, nil, err
	}
	if ar.Head == nil {
		return head, "", false, nil, fmt.Errorf("%w: the server names no HEAD", ErrNoRepository)
	}
	head, branch = *ar.Head, headBranch(ar)

	req := packp.NewUploadPackRequestFromCapabilities(ar.Capabilities)
	req.Wants = []plumbing.Hash{head}
	if ar.Capabilities.Supports(capability.Shallow) {
		req.Depth = packp.DepthCommits(1)
		if err := req.Capabilities.Set(capability.Shallow); err != nil {
			return head, "", false, nil, err
		}
	}
	if ar.Capabilities.Supports(capability.NoProgress) {
		if err := req.Capabilities.Set(capability.NoProgress); err != nil {
			return head, "", false, nil, err
		}
	}
	resp, err := sess.UploadPack(ctx, req)
	if err != nil {
		return head, "", false, nil, err
	}
	defer resp.Close()

	// osfs's bound OS resolves every path under .git and refuses one
	// that leaves it; the names are go-git's own and the branch's,
	// which headBranch checked. KeepDescriptors: the pack stays open
	// until st.Close, not opened again for each object read (a third
	// of a clone's CPU time, BenchmarkClone).
	st = filesystem.NewStorageWithOptions(osfs.New(filepath.Join(dir, ".git"), osfs.WithBoundOS()), cache.NewObjectLRUDefault(),
		filesystem.Options{KeepDescriptors: true})
	if err := st.Init(); err != nil {
		st.Close()
		return head, "", false, nil, err
	}
	var pack io.Reader = resp
	switch {
	case req.Capabilities.Supports(capability.Sideband64k):
		pack = sideband.NewDemuxer(sideband.Sideband64k, resp)
	case req.Capabilities.Supports(capability.Sideband):
		pack = sideband.NewDemuxer(sideband.Sideband, resp)
	}
	if err := packfile.UpdateObjectStorage(st, pack); err != nil {
		st.Close()
		return head, "", false, nil, err
	}
	return head, branch, len(resp.Shallows) > 0, st, nil
}

// headBranch is the branch the server's HEAD names (its symref
// capability) if it is one Git would write and it points at HEAD's commit.
func headBranch(ar *packp.AdvRefs) plumbing.ReferenceName {
	for _, v := range ar.Capabilities.Get(capability.SymRef) {
		target, ok := strings.CutPrefix(v, "HEAD:")
		ref := plumbing.ReferenceName(target)
		if !ok || !ref.IsBranch() || ref.Validate() != nil || !ref.IsSafe() || ar.References[target] != *ar.Head {
			continue
		}
		return ref
	}
	return ""
}

// classify wraps err in the sentinel that says what happened; ctx's error
// and a spent budget come first, as go-git flattens some errors into text.
func classify(ctx context.Context, bud *budget, err error) error {
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("%w (%v)", ctx.Err(), err)
	case bud.spent.Load():
		return fmt.Errorf("%w: more than %d bytes to download", ErrTooLarge, bud.max)
	}
	if s := sentinel(err); s != nil && !errors.Is(err, s) {
		return fmt.Errorf("%w: %w", s, err)
	}
	return err
}

// sentinel is the package error err amounts to, or nil.
func sentinel(err error) error {
	var (
		unexpected *plumbing.UnexpectedError
		permanent  *plumbing.PermanentError
		status     *githttp.Err
		netErr     net.Error
		opErr      *net.OpError
		dnsErr     *net.DNSError
		urlErr     *url.Error
		certErr    *tls.CertificateVerificationError
		authority  x509.UnknownAuthorityError
		hostname   x509.HostnameError
	)
	for _, s := range []error{ErrRefused, ErrUnreachable, ErrNoRepository, ErrTooLarge} {
		if errors.Is(err, s) {
			return s
		}
	}
	switch {
	// go-git's two wrappers have no Unwrap (plumbing/error.go).
	case errors.As(err, &unexpected):
		return sentinel(unexpected.Err)
	case errors.As(err, &permanent):
		return sentinel(permanent.Err)
	case errors.As(err, &status):
		if c := status.StatusCode(); c >= 500 || c == http.StatusTooManyRequests {
			return ErrUnreachable
		}
		return ErrNoRepository
	case errors.Is(err, transport.ErrRepositoryNotFound), errors.Is(err, transport.ErrAuthenticationRequired),
		errors.Is(err, transport.ErrAuthorizationFailed), errors.Is(err, transport.ErrEmptyRemoteRepository),
		errors.Is(err, packp.ErrEmptyAdvRefs), errors.Is(err, packp.ErrEmptyInput):
		return ErrNoRepository
	case errors.As(err, &opErr), errors.As(err, &dnsErr), errors.As(err, &netErr) && netErr.Timeout(),
		errors.As(err, &certErr), errors.As(err, &authority), errors.As(err, &hostname):
		return ErrUnreachable
	case errors.As(err, &urlErr):
		return ErrUnreachable // a request that got no response
	}
	return nil
}

// budget is the bytes a clone may download, shared by its requests.
type budget struct {
	max   int64
	used  atomic.Int64
	spent atomic.Bool // used passed max
}

// budgetTransport counts every response body against the budget, and
// reads at most errorBodyLimit of a non-2xx one.
type budgetTransport struct {
	base http.RoundTripper
	bud  *budget
}

func (t *budgetTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	body := &countedBody{ReadCloser: resp.Body, bud: t.bud}
	resp.Body = body
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		resp.Body = struct {
			io.Reader
			io.Closer
		}{io.LimitReader(body, errorBodyLimit), body}
	}
	return resp, nil
}

// countedBody is a response body that fails once the clone's downloads
// pass the budget.
type countedBody struct {
	io.ReadCloser
	bud *budget
}

func (b *countedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if b.bud.used.Add(int64(n)) > b.bud.max {
		b.bud.spent.Store(true)
		return n, fmt.Errorf("%w: more than %d bytes to download", ErrTooLarge, b.bud.max)
	}
	return n, err
}
