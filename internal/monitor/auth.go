package monitor

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/cosmicac/cosmicac/internal/apiv1"
)

// Authorizer decides whether the caller of r may read job's logs. An
// *AuthError answers the viewer with its status; another error is a 502.
type Authorizer interface {
	AuthorizeJob(r *http.Request, job string) error
}

// ViewerIdentifier is an Authorizer that also names the user a request
// is from: the key of the per-user follow limit (Config.MaxFollowsPerUser),
// so that one user's tokens and sessions count together.
type ViewerIdentifier interface {
	ViewerOf(r *http.Request) (string, error)
}

// viewerKey names the viewer of r for the follow limit: the user, when
// auth names users (and answers); else the request's credential; else,
// for an authorizer that admits requests without one, the client's
// address.
func viewerKey(r *http.Request, auth Authorizer) string {
	if vi, ok := auth.(ViewerIdentifier); ok {
		if u, err := vi.ViewerOf(r); err == nil && u != "" {
			return "user " + u
		}
	}
	if authz, cookie := credential(r); authz != "" || cookie != "" {
		sum := sha256.Sum256([]byte(authz + "\x00" + cookie))
		return "credential " + hex.EncodeToString(sum[:16])
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	return "address " + host
}

// credential is the viewer's credential, as the app-node reads it: a
// bearer token (the Authorization header), else the browser session's
// cookie (only that one, as a Cookie header).
func credential(r *http.Request) (authz, cookie string) {
	authz = r.Header.Get("Authorization")
	if authz == "" {
		if ck, err := r.Cookie(apiv1.SessionCookie); err == nil {
			cookie = (&http.Cookie{Name: ck.Name, Value: ck.Value}).String()
		}
	}
	return authz, cookie
}

// AuthError refuses a viewer.
type AuthError struct {
	Status  int
	Code    string
	Message string
}

func (e *AuthError) Error() string { return fmt.Sprintf("%s (%d)", e.Message, e.Status) }

// APIAuthorizer asks the app-node: the viewer may read a job's logs when
// GET /api/v1/jobs/{id} with the viewer's own Authorization header (or,
// without one, the browser session's cookie) answers 200. So the monitor honours exactly the app-node's tokens, roles and team
// visibility (admins see every job, others their team's) without a store of
// its own. Positive answers are cached for TTL per token and job (1 s: a
// revoked token, or a job moved out of the viewer's reach, is refused
// within a second; the cost is at most one GET a second per viewer and
// job, and a follow asks once, when it opens).
//
// It also names the user behind a follow, for the per-user follow limit
// (ViewerOf: GET /api/v1/whoami, cached per credential for a minute).
//
// In one process (cosmicac up) Transport is HandlerTransport(api.Handler())
// and no request leaves the process; as separate processes it is nil (the
// default transport) and BaseURL is the app-node's URL.
type APIAuthorizer struct {
	BaseURL   string
	Transport http.RoundTripper
	TTL       time.Duration // default 1s; negative: no cache

	mu    sync.Mutex
	cache map[[32]byte]time.Time
	users map[[32]byte]cachedUser
	hc    *http.Client
	once  sync.Once
}

// NewAPIAuthorizer returns an authorizer asking the API at baseURL through
// rt (nil: http.DefaultTransport).
func NewAPIAuthorizer(baseURL string, rt http.RoundTripper) *APIAuthorizer {
	return &APIAuthorizer{BaseURL: strings.TrimRight(baseURL, "/"), Transport: rt}
}

// AuthorizeJob implements Authorizer.
func (a *APIAuthorizer) AuthorizeJob(r *http.Request, job string) error {
	a.once.Do(a.init)
	authz, cookie := credential(r)
	if authz == "" && cookie == "" {
		return &AuthError{Status: http.StatusUnauthorized, Code: apiv1.CodeUnauthorized, Message: "missing or invalid token: send Authorization: Bearer TOKEN"}
	}
	key := sha256.Sum256([]byte(authz + "\x00" + cookie + "\x00" + job))
	now := time.Now()
	a.mu.Lock()
	exp, ok := a.cache[key]
	a.mu.Unlock()
	if ok && now.Before(exp) {
		return nil
	}
	status, body, err := a.get(r, "/jobs/"+url.PathEscape(job), authz, cookie)
	if err != nil {
		return err
	}
	if status == http.StatusOK {
		if a.TTL > 0 {
			a.mu.Lock()
			if len(a.cache) > 10000 {
				clear(a.cache)
			}
			a.cache[key] = now.Add(a.TTL)
			a.mu.Unlock()
		}
		return nil
	}
	var er apiv1.ErrorResponse
	if json.Unmarshal(body, &er) != nil || er.Error.Code == "" {
		er.Error.Code, er.Error.Message = "http_"+fmt.Sprint(status), strings.TrimSpace(string(body))
	}
	switch status {
	case http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound, http.StatusBadRequest:
		return &AuthError{Status: status, Code: er.Error.Code, Message: er.Error.Message}
	}
	return fmt.Errorf("ask the app-node: %d %s: %s", status, er.Error.Code, er.Error.Message)
}

// ViewerOf implements ViewerIdentifier: the user GET /api/v1/whoami
// names for the request's credential. Answers are cached per credential
// for a minute (a credential's user does not change; one revoked is
// refused by AuthorizeJob).
func (a *APIAuthorizer) ViewerOf(r *http.Request) (string, error) {
	a.once.Do(a.init)
	authz, cookie := credential(r)
	if authz == "" && cookie == "" {
		return "", errors.New("no credential")
	}
	key := sha256.Sum256([]byte(authz + "\x00" + cookie))
	now := time.Now()
	a.mu.Lock()
	u, ok := a.users[key]
	a.mu.Unlock()
	if ok && now.Before(u.exp) {
		return u.name, nil
	}
	status, body, err := a.get(r, "/whoami", authz, cookie)
	if err != nil {
		return "", err
	}
	var who apiv1.WhoAmI
	if status != http.StatusOK || json.Unmarshal(body, &who) != nil || who.User == "" {
		return "", fmt.Errorf("ask the app-node who the viewer is: %d", status)
	}
	a.mu.Lock()
	if len(a.users) > 10000 {
		clear(a.users)
	}
	a.users[key] = cachedUser{name: who.User, exp: now.Add(time.Minute)}
	a.mu.Unlock()
	return who.User, nil
}

type cachedUser struct {
	name string
	exp  time.Time
}

func (a *APIAuthorizer) init() {
	rt := a.Transport
	if rt == nil {
		rt = http.DefaultTransport
	}
	a.hc = &http.Client{Transport: rt, Timeout: 10 * time.Second}
	a.cache = map[[32]byte]time.Time{}
	a.users = map[[32]byte]cachedUser{}
	if a.TTL == 0 {
		a.TTL = time.Second
	}
}

// get asks the API for path (under apiv1.Prefix) with the viewer's
// credential, returning the answer's status and (first 64 KiB of) body.
func (a *APIAuthorizer) get(r *http.Request, path, authz, cookie string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(r.Context(), http.MethodGet, a.BaseURL+apiv1.Prefix+path, nil)
	if err != nil {
		return 0, nil, err
	}
	if authz != "" {
		req.Header.Set("Authorization", authz)
	} else {
		req.Header.Set("Cookie", cookie)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := a.hc.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("ask the app-node: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return resp.StatusCode, body, nil
}

// AuthorizerFunc adapts a function to Authorizer.
type AuthorizerFunc func(r *http.Request, job string) error

// AuthorizeJob implements Authorizer.
func (f AuthorizerFunc) AuthorizeJob(r *http.Request, job string) error { return f(r, job) }

// HandlerTransport is a RoundTripper that serves each request with h in
// this process (for APIAuthorizer in `cosmicac up`).
func HandlerTransport(h http.Handler) http.RoundTripper { return handlerTransport{h} }

type handlerTransport struct{ h http.Handler }

func (t handlerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	rec := &recorder{header: http.Header{}, status: http.StatusOK}
	r := req.Clone(req.Context())
	if r.Body == nil {
		r.Body = http.NoBody
	}
	r.RequestURI = req.URL.RequestURI()
	if r.RemoteAddr == "" {
		r.RemoteAddr = "127.0.0.1:0"
	}
	t.h.ServeHTTP(rec, r)
	return &http.Response{
		StatusCode: rec.status, Status: fmt.Sprintf("%d %s", rec.status, http.StatusText(rec.status)),
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: rec.header, Body: io.NopCloser(&rec.body), ContentLength: int64(rec.body.Len()), Request: req,
	}, nil
}

type recorder struct {
	header http.Header
	status int
	wrote  bool
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }
func (r *recorder) WriteHeader(s int) {
	if !r.wrote {
		r.status, r.wrote = s, true
	}
}
func (r *recorder) Write(p []byte) (int, error) {
	r.wrote = true
	return r.body.Write(p)
}
