package appnode

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cosmicac/cosmicac/internal/agent/agentapi"
	"github.com/cosmicac/cosmicac/internal/apiv1"
	"github.com/cosmicac/cosmicac/internal/authz"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/httpserve"
)

// HTTP to the job (docs/shell.md, "HTTP to the job"): every method on
// /api/v1/jobs/{id}/http/{path...} is forwarded to the spec's
// defaultHttpPort on the loopback of the job's VM, over the agent's
// tcp.connect stream. The route is a Proxy route: the handler authenticates
// (the spec's unsecureHttp waives the token) and the query is the job's.

// HeaderReplica picks the replica whose VM answers (default 0). It is the
// platform's and is not forwarded.
const HeaderReplica = "X-Cosmicac-Replica"

// HeaderForwardedPrefix tells the job's server under which path the
// platform serves it (/api/v1/jobs/{id}/http), for links it builds.
const HeaderForwardedPrefix = "X-Forwarded-Prefix"

// JobPageCSP is the Content-Security-Policy of every answer relayed from a
// job: a sandbox without allow-same-origin, so that a job's page runs in an
// opaque origin although it is served from the API's. Its requests to the
// API are cross-site (the SameSite=Strict session cookie stays home), it
// cannot read the API's answers, and its WebSockets carry Origin null,
// which the terminal refuses (docs/security.md, "Job pages").
const JobPageCSP = "sandbox allow-scripts allow-forms allow-popups allow-modals allow-downloads"

// jobHTTP proxies a request to the job's defaultHttpPort.
func (s *Server) jobHTTP(w http.ResponseWriter, r *http.Request, _ *caller) (any, error) {
	j, replica, user, err := s.httpTarget(r)
	if err != nil {
		return nil, err
	}
	if in, _ := r.Context().Value(infoKey{}).(*info); in != nil {
		in.user = user
	}
	port := j.Spec.DefaultHTTPPort
	prefix := apiv1.Prefix + "/jobs/" + r.PathValue("id") + "/http"
	// The job's server sets its own pace: a long upload, a long poll or an
	// event stream to the job must outlive the API's body and write limits.
	// Its body is read without a deadline (cleared while it is still unread,
	// so that net/http's background read never meets one), each write of
	// its answer is bounded (httpserve.Stream), and a websocket is hijacked
	// by the reverse proxy, deadlines cleared.
	_ = http.NewResponseController(w).SetReadDeadline(time.Time{})

	var (
		mu      sync.Mutex
		dialErr error // the last failure to open the stream
	)
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			dctx, cancel := context.WithTimeout(ctx, 15*time.Second)
			defer cancel()
			st, err := s.shells.DialTCP(dctx, j, replica, port)
			if err != nil {
				mu.Lock()
				dialErr = err
				mu.Unlock()
				return nil, err
			}
			return &streamConn{Conn: st}, nil
		},
		DisableKeepAlives:  true, // one fabric stream per request; streams are cheap
		DisableCompression: true, // pass Accept-Encoding and bodies as they are
		MaxIdleConns:       -1,
	}
	defer tr.CloseIdleConnections()
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			out := pr.Out
			rest := strings.TrimPrefix(pr.In.URL.EscapedPath(), prefix)
			if !strings.HasPrefix(rest, "/") {
				rest = "/" + rest
			}
			out.URL.Scheme, out.URL.Host = "http", "localhost:"+strconv.Itoa(port)
			out.URL.Path, out.URL.RawPath = pathUnescape(rest), rest
			out.URL.RawQuery = pr.In.URL.RawQuery
			// As a local client would: dev servers refuse unknown Hosts
			// (DNS rebinding); the platform's host is in X-Forwarded-Host.
			out.Host = out.URL.Host
			// Never hand the caller's CosmicAC credential to the job: its
			// token, its browser session's cookie or CSRF token.
			apiv1.StripCredentials(out.Header)
			out.Header.Del(HeaderReplica)
			out.Header.Del(HeaderForwardedPrefix)
			pr.SetXForwarded()
			out.Header.Set(HeaderForwardedPrefix, prefix)
		},
		// Nor may the job set the platform's session cookie (a session
		// fixed on the caller's browser), nor leave the sandbox: a policy
		// of the job's own is kept beside JobPageCSP, and a browser
		// enforces both (the sandbox flags of either cannot lift the
		// other's).
		ModifyResponse: func(resp *http.Response) error {
			resp.Header.Add("Content-Security-Policy", JobPageCSP)
			apiv1.StripCredentialCookies(resp.Header)
			return nil
		},
		Transport:     tr,
		FlushInterval: -1, // SSE and long polls reach the caller as they come
		ErrorLog:      slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			mu.Lock()
			de := dialErr
			mu.Unlock()
			w.Header().Set("Content-Security-Policy", JobPageCSP)
			s.writeError(w, r, proxyError(de, err, port))
		},
	}
	s.log.Debug("job http", "job_id", j.ID, "replica", replica, "user", user, "method", r.Method, "path", r.URL.Path)
	rp.ServeHTTP(httpserve.Stream(w), r)
	return written{}, nil
}

// httpTarget authenticates and checks a request to a job's HTTP port. The
// token is looked at before the job is shown: without one, a job that is
// not unsecureHttp (or does not exist) is 401 alike.
func (s *Server) httpTarget(r *http.Request) (j cosmic.Job, replica int, user string, err error) {
	id, err := cosmic.ParseJobID(r.PathValue("id"))
	if err != nil {
		return j, 0, "", err
	}
	ctx, cancel := s.orkCtx(r)
	j, jerr := s.ork.GetJob(ctx, id)
	cancel()
	if jerr != nil || !j.Spec.UnsecureHTTP {
		c, err := s.authenticateAs(r, true) // ?team= is the job's
		if err != nil {
			return j, 0, "", err
		}
		if jerr != nil {
			return j, 0, "", jerr
		}
		perm := authz.JobsRead
		if r.Method != http.MethodGet && r.Method != http.MethodHead || r.Header.Get("Upgrade") != "" {
			perm = authz.JobsConnect
		}
		c.perm = perm
		if err := c.reaches(j); err != nil {
			return j, 0, "", err
		}
		user = c.user.Name
	}
	if v := r.Header.Get(HeaderReplica); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return j, 0, user, badRequest("%s %q: want an index from 0", HeaderReplica, v)
		}
		replica = n
	}
	switch {
	case j.Spec.Type != cosmic.TypeGPUContainer:
		return j, 0, user, errorf(http.StatusConflict, apiv1.CodeConflict, "job %s is a %s job; only gpu-container jobs serve HTTP here", j.ID, j.Spec.Type)
	case j.Spec.DefaultHTTPPort == 0:
		return j, 0, user, errorf(http.StatusConflict, apiv1.CodeConflict, "job %s has no defaultHttpPort", j.ID)
	case j.Status.State != cosmic.StateRunning && j.Status.State != cosmic.StateDegraded:
		return j, 0, user, errorf(http.StatusConflict, apiv1.CodeConflict, "job %s is %s; its HTTP port needs it running", j.ID, j.Status.State)
	case replica >= j.Spec.Replicas():
		return j, 0, user, badRequest("job %s has no replica %d (it has %d)", j.ID, replica, j.Spec.Replicas())
	case replica < len(j.Status.Replicas) && j.Status.Replicas[replica].State != cosmic.StateRunning:
		return j, 0, user, errorf(http.StatusConflict, apiv1.CodeConflict, "replica %d of job %s is %s; its HTTP port needs it running", replica, j.ID, j.Status.Replicas[replica].State)
	case s.shells == nil:
		return j, 0, user, errorf(http.StatusServiceUnavailable, apiv1.CodeUnavailable, "this app-node does not reach the jobs' agents")
	}
	return j, replica, user, nil
}

// proxyError maps a failed forward: the agent could not be reached (503),
// the agent reached nothing on the port (502), or the job's server broke
// off (502).
func proxyError(dialErr, err error, port int) error {
	switch {
	case dialErr != nil && portClosed(dialErr, port):
		return errorf(http.StatusBadGateway, apiv1.CodeUnavailable, "nothing answers on port %d in the job's VM: %v", port, dialErr)
	case dialErr != nil && fabric.ErrorCode(dialErr) == fabric.CodeForbidden:
		return errorf(http.StatusForbidden, apiv1.CodeForbidden, "the job's agent refused port %d: %v", port, dialErr)
	case dialErr != nil:
		return errorf(http.StatusServiceUnavailable, apiv1.CodeUnavailable, "reach the job's agent: %v", dialErr)
	case errors.Is(err, context.Canceled):
		return errorf(http.StatusBadGateway, apiv1.CodeUnavailable, "the request was canceled")
	}
	return errorf(http.StatusBadGateway, apiv1.CodeUnavailable, "the job's HTTP server on port %d: %v", port, err)
}

// portClosed reports whether err is the agent's own answer that it could not
// connect to port in the VM (agent.handleTCP: CodeUnavailable "connect to
// port N in the VM: …", sent by the agent, so without a local cause), as
// opposed to the agent itself being unreachable.
func portClosed(err error, port int) bool {
	var fe *fabric.Error
	return errors.As(err, &fe) && fe.Code == fabric.CodeUnavailable && fe.Unwrap() == nil &&
		strings.HasPrefix(fe.Message, fmt.Sprintf("connect to port %d in the VM", port))
}

func pathUnescape(p string) string {
	// EscapedPath came from a parsed URL, so it unescapes; keep it if not.
	if u, err := url.PathUnescape(p); err == nil {
		return u
	}
	return p
}

// streamConn is a tcp.connect stream as the net.Conn http.Transport wants.
type streamConn struct {
	agentapi.Conn
}

type fabricAddr struct{}

func (fabricAddr) Network() string { return "fabric" }
func (fabricAddr) String() string  { return "agent" }

func (c *streamConn) LocalAddr() net.Addr  { return fabricAddr{} }
func (c *streamConn) RemoteAddr() net.Addr { return fabricAddr{} }
func (c *streamConn) SetDeadline(t time.Time) error {
	if err := c.SetReadDeadline(t); err != nil {
		return err
	}
	return c.SetWriteDeadline(t)
}
func (c *streamConn) SetReadDeadline(t time.Time) error {
	if d, ok := c.Conn.(interface{ SetReadDeadline(time.Time) error }); ok {
		return d.SetReadDeadline(t)
	}
	return nil
}
func (c *streamConn) SetWriteDeadline(t time.Time) error {
	if d, ok := c.Conn.(interface{ SetWriteDeadline(time.Time) error }); ok {
		return d.SetWriteDeadline(t)
	}
	return nil
}
