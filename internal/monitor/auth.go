package monitor

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
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
// In one process (cosmicac up) Transport is HandlerTransport(api.Handler())
// and no request leaves the process; as separate processes it is nil (the
// default transport) and BaseURL is the app-node's URL.
type APIAuthorizer struct {
	BaseURL   string
	Transport http.RoundTripper
	TTL       time.Duration // default 1s; negative: no cache

	mu    sync.Mutex
	cache map[[32]byte]time.Time
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
	a.once.Do(func() {
		rt := a.Transport
		if rt == nil {
			rt = http.DefaultTransport
		}
		a.hc = &http.Client{Transport: rt, Timeout: 10 * time.Second}
		a.cache = map[[32]byte]time.Time{}
		if a.TTL == 0 {
			a.TTL = time.Second
		}
	})
	// The viewer's credential, as the app-node reads it: a bearer token,
	// else the browser session's cookie (only that one is passed on).
	authz, cookie := r.Header.Get("Authorization"), ""
	if authz == "" {
		if ck, err := r.Cookie(apiv1.SessionCookie); err == nil {
			cookie = (&http.Cookie{Name: ck.Name, Value: ck.Value}).String()
		}
	}
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
	req, err := http.NewRequestWithContext(r.Context(), http.MethodGet, a.BaseURL+apiv1.Prefix+"/jobs/"+url.PathEscape(job), nil)
	if err != nil {
		return err
	}
	if authz != "" {
		req.Header.Set("Authorization", authz)
	} else {
		req.Header.Set("Cookie", cookie)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := a.hc.Do(req)
	if err != nil {
		return fmt.Errorf("ask the app-node: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode == http.StatusOK {
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
		er.Error.Code, er.Error.Message = "http_"+fmt.Sprint(resp.StatusCode), strings.TrimSpace(string(body))
	}
	switch resp.StatusCode {
	case http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound, http.StatusBadRequest:
		return &AuthError{Status: resp.StatusCode, Code: er.Error.Code, Message: er.Error.Message}
	}
	return fmt.Errorf("ask the app-node: %d %s: %s", resp.StatusCode, er.Error.Code, er.Error.Message)
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
