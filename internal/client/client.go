// Package client is the Go client of the HTTP API under /api/v1, used by the
// CLI and by the whole-system test harness. It speaks the wire types of
// internal/apiv1 and the domain types of internal/cosmic; where the URL and
// token come from (COSMICAC_URL, COSMICAC_TOKEN, the login file) is the
// CLI's business.
//
// Importers: internal/cli, internal/cosmictest, tests.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cosmicac/cosmicac/internal/apiv1"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/version"
)

// DefaultPollInterval is how often WaitJob polls unless WithPollInterval says otherwise.
const DefaultPollInterval = 500 * time.Millisecond

// maxResponse bounds how much of an answer the client reads.
const maxResponse = 64 << 20

// Client calls one CosmicAC API. It is safe for concurrent use.
type Client struct {
	base      string // scheme://host[:port][/prefix], without /api/v1
	token     string
	team      string // apiv1.HeaderTeam of every request ("" none)
	hc        *http.Client
	userAgent string
	poll      time.Duration
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient makes the client send its requests with hc.
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// WithPollInterval sets how often WaitJob polls.
func WithPollInterval(d time.Duration) Option { return func(c *Client) { c.poll = d } }

// WithUserAgent sets the User-Agent header.
func WithUserAgent(ua string) Option { return func(c *Client) { c.userAgent = ua } }

// New returns a client of the API at baseURL (for example
// "http://127.0.0.1:8080"; a trailing "/api/v1" is accepted too) that
// authenticates with token (empty: none).
func New(baseURL, token string, opts ...Option) *Client {
	base := strings.TrimRight(baseURL, "/")
	base = strings.TrimSuffix(base, apiv1.Prefix)
	c := &Client{
		base:      base,
		token:     token,
		hc:        &http.Client{Timeout: 60 * time.Second},
		userAgent: "cosmicac/" + version.Version,
		poll:      DefaultPollInterval,
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

// APIError is a non-2xx answer of the API.
type APIError struct {
	Status  int             // the HTTP status
	Code    string          // apiv1.Code*, e.g. "not_found"
	Message string          // for people
	Details json.RawMessage // for "invalid": a []apiv1.FieldError
}

func (e *APIError) Error() string {
	msg := fmt.Sprintf("%s (%d)", e.Message, e.Status)
	if fes := e.FieldErrors(); len(fes) > 0 {
		parts := make([]string, len(fes))
		for i, f := range fes {
			parts[i] = f.Error()
		}
		msg += ": " + strings.Join(parts, "; ")
	}
	return msg
}

// FieldErrors decodes the details of an "invalid" error: every invalid field.
func (e *APIError) FieldErrors() []cosmic.FieldError {
	if len(e.Details) == 0 {
		return nil
	}
	var fes []cosmic.FieldError
	if json.Unmarshal(e.Details, &fes) != nil {
		return nil
	}
	return fes
}

// Is lets errors.Is match the domain's sentinel errors by status:
// cosmic.ErrNotFound (404), ErrInvalid (400), ErrConflict (409), ErrForbidden (403).
func (e *APIError) Is(target error) bool {
	switch target {
	case cosmic.ErrNotFound:
		return e.Status == http.StatusNotFound
	case cosmic.ErrInvalid:
		return e.Status == http.StatusBadRequest
	case cosmic.ErrConflict:
		return e.Status == http.StatusConflict
	case cosmic.ErrForbidden:
		return e.Status == http.StatusForbidden
	}
	return false
}

// StatusOf returns the HTTP status of an *APIError in err's chain, or 0.
func StatusOf(err error) int {
	var ae *APIError
	if errors.As(err, &ae) {
		return ae.Status
	}
	return 0
}

// do sends a request and decodes a 2xx answer into out (unless nil).
func (c *Client) do(ctx context.Context, method, path string, query url.Values, in, out any) error {
	_, err := c.doHeader(ctx, method, path, query, in, out)
	return err
}

// doHeader is do, also returning the answer's headers.
func (c *Client) doHeader(ctx context.Context, method, path string, query url.Values, in, out any) (http.Header, error) {
	u := c.base + apiv1.Prefix + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, fmt.Errorf("encode %s %s: %w", method, path, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	req.Header.Set("Accept", "application/json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if c.team != "" {
		req.Header.Set(apiv1.HeaderTeam, c.team)
	}
	if c.userAgent != "" {
		req.Header.Set("User-Agent", c.userAgent)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse))
	if err != nil {
		return nil, fmt.Errorf("%s %s: read answer: %w", method, path, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp.Header, decodeError(resp.StatusCode, data)
	}
	if out == nil || resp.StatusCode == http.StatusNoContent {
		return resp.Header, nil
	}
	if raw, ok := out.(*[]byte); ok { // the answer as it came (CSV)
		*raw = data
		return resp.Header, nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return nil, fmt.Errorf("%s %s: decode answer: %w", method, path, err)
	}
	return resp.Header, nil
}

func decodeError(status int, data []byte) *APIError {
	var er apiv1.ErrorResponse
	if err := json.Unmarshal(data, &er); err != nil || er.Error.Code == "" {
		msg := strings.TrimSpace(string(data))
		if len(msg) > 200 {
			msg = msg[:200]
		}
		if msg == "" {
			msg = http.StatusText(status)
		}
		return &APIError{Status: status, Code: "http_" + strconv.Itoa(status), Message: msg}
	}
	return &APIError{Status: status, Code: er.Error.Code, Message: er.Error.Message, Details: er.Error.Details}
}

func jobPath(id string, rest ...string) string {
	p := "/jobs/" + url.PathEscape(id)
	for _, r := range rest {
		p += "/" + r
	}
	return p
}

// CreateJob creates a job from spec; the server fills defaults and validates.
func (c *Client) CreateJob(ctx context.Context, spec cosmic.Spec) (cosmic.Job, error) {
	var j cosmic.Job
	err := c.do(ctx, http.MethodPost, "/jobs", nil, spec, &j)
	return j, err
}

// GetJob returns one job.
func (c *Client) GetJob(ctx context.Context, id string) (cosmic.Job, error) {
	var j cosmic.Job
	err := c.do(ctx, http.MethodGet, jobPath(id), nil, nil, &j)
	return j, err
}

// ListOptions filters, sorts and pages ListJobs. Zero values leave the
// server's defaults (every job visible to the caller, newest first, page 1
// of 50).
type ListOptions struct {
	Labels        map[string]string // all must match
	States        []cosmic.State
	UserName      string
	Name          string // the job's name, exactly
	UpdatedAfter  time.Time
	UpdatedBefore time.Time
	Sort          string // createdAt | updatedAt | name | state
	Order         string // asc | desc
	Page          int    // from 1
	Size          int    // 1..1000
}

// Query encodes o as listJobs query parameters.
func (o ListOptions) Query() url.Values {
	q := url.Values{}
	if len(o.Labels) > 0 {
		keys := make([]string, 0, len(o.Labels))
		for k := range o.Labels {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = k + "=" + o.Labels[k]
		}
		q.Set(apiv1.QueryLabelSelector, strings.Join(parts, ","))
	}
	for _, s := range o.States {
		q.Add(apiv1.QueryStatusState, string(s))
	}
	if o.UserName != "" {
		q.Set(apiv1.QueryUserName, o.UserName)
	}
	if o.Name != "" {
		q.Set(apiv1.QueryName, o.Name)
	}
	if !o.UpdatedAfter.IsZero() {
		q.Set(apiv1.QueryUpdatedAfter, o.UpdatedAfter.Format(time.RFC3339Nano))
	}
	if !o.UpdatedBefore.IsZero() {
		q.Set(apiv1.QueryUpdatedBefore, o.UpdatedBefore.Format(time.RFC3339Nano))
	}
	if o.Sort != "" {
		q.Set(apiv1.QuerySort, o.Sort)
	}
	if o.Order != "" {
		q.Set(apiv1.QueryOrder, o.Order)
	}
	if o.Page != 0 {
		q.Set(apiv1.QueryPage, strconv.Itoa(o.Page))
	}
	if o.Size != 0 {
		q.Set(apiv1.QuerySize, strconv.Itoa(o.Size))
	}
	return q
}

// ListJobs returns one page of jobs and the total that match.
func (c *Client) ListJobs(ctx context.Context, o ListOptions) (apiv1.JobList, error) {
	var l apiv1.JobList
	err := c.do(ctx, http.MethodGet, "/jobs", o.Query(), nil, &l)
	return l, err
}

// WatchJobs is ListJobs held by the API until the jobs change after
// version (apiv1.QueryWatch; "" answers at once), at most
// apiv1.MaxWatchWait; it returns the page and the version it shows, to
// pass to the next call. A watch is a loop of these: each call blocks on
// the server, not on the client's clock.
func (c *Client) WatchJobs(ctx context.Context, o ListOptions, version string) (apiv1.JobList, string, error) {
	q := o.Query()
	q.Set(apiv1.QueryWatch, version)
	var l apiv1.JobList
	h, err := c.doHeader(ctx, http.MethodGet, "/jobs", q, nil, &l)
	return l, h.Get(apiv1.HeaderJobsVersion), err
}

// WatchJob is GetJob held by the API as WatchJobs is. A job deleted
// meanwhile is a not-found error.
func (c *Client) WatchJob(ctx context.Context, id, version string) (cosmic.Job, string, error) {
	var j cosmic.Job
	h, err := c.doHeader(ctx, http.MethodGet, jobPath(id), url.Values{apiv1.QueryWatch: {version}}, nil, &j)
	return j, h.Get(apiv1.HeaderJobsVersion), err
}

// DeleteJob deletes a job (force: kill it first if it runs) and returns it
// as it now is.
func (c *Client) DeleteJob(ctx context.Context, id string, force bool) (cosmic.Job, error) {
	var q url.Values
	if force {
		q = url.Values{apiv1.QueryForce: {"true"}}
	}
	var j cosmic.Job
	err := c.do(ctx, http.MethodDelete, jobPath(id), q, nil, &j)
	return j, err
}

// RestartJob restarts a job.
func (c *Client) RestartJob(ctx context.Context, id string) (cosmic.Job, error) {
	var j cosmic.Job
	err := c.do(ctx, http.MethodPost, jobPath(id, "restart"), nil, nil, &j)
	return j, err
}

// KillJob stops a job, releasing its GPUs and keeping its storage.
func (c *Client) KillJob(ctx context.Context, id string) (cosmic.Job, error) {
	var j cosmic.Job
	err := c.do(ctx, http.MethodPost, jobPath(id, "kill"), nil, nil, &j)
	return j, err
}

// LabelJob sets label name to value (an empty value removes it).
func (c *Client) LabelJob(ctx context.Context, id, name, value string) (cosmic.Job, error) {
	var j cosmic.Job
	err := c.do(ctx, http.MethodPut, jobPath(id, "label"), nil, apiv1.Label{Name: name, Value: value}, &j)
	return j, err
}

// Command returns the `cosmicac jobs create` command equivalent to spec.
func (c *Client) Command(ctx context.Context, spec cosmic.Spec) (cosmic.Command, error) {
	var cmd cosmic.Command
	err := c.do(ctx, http.MethodPost, "/jobs/command", nil, spec, &cmd)
	return cmd, err
}

// RestartReplica restarts replica n (from 0) of a job.
func (c *Client) RestartReplica(ctx context.Context, id string, n int) (cosmic.Job, error) {
	var j cosmic.Job
	err := c.do(ctx, http.MethodPost, jobPath(id, "replicas", strconv.Itoa(n), "restart"), nil, nil, &j)
	return j, err
}

// DeleteReplica deletes replica n (from 0) of a job; the ork places it again.
func (c *Client) DeleteReplica(ctx context.Context, id string, n int) (cosmic.Job, error) {
	var j cosmic.Job
	err := c.do(ctx, http.MethodDelete, jobPath(id, "replicas", strconv.Itoa(n)), nil, nil, &j)
	return j, err
}

// ListRacks lists the racks and their capacity.
func (c *Client) ListRacks(ctx context.Context) ([]apiv1.Rack, error) {
	var l apiv1.RackList
	err := c.do(ctx, http.MethodGet, "/racks", nil, nil, &l)
	return l.Items, err
}

// Fleet answers the platform's GPUs by location and model (jobs.read in
// the active team).
func (c *Client) Fleet(ctx context.Context) (apiv1.Fleet, error) {
	var f apiv1.Fleet
	err := c.do(ctx, http.MethodGet, "/fleet", nil, nil, &f)
	return f, err
}

// RegisterRack registers or updates a rack (admins only).
func (c *Client) RegisterRack(ctx context.Context, r apiv1.RegisterRack) (apiv1.Rack, error) {
	var out apiv1.Rack
	err := c.do(ctx, http.MethodPost, "/racks", nil, r, &out)
	return out, err
}

// RemoveRack removes a rack (admins only); force removes it even if jobs
// hold GPUs there, failing them.
func (c *Client) RemoveRack(ctx context.Context, id string, force bool) error {
	var q url.Values
	if force {
		q = url.Values{apiv1.QueryForce: {"true"}}
	}
	return c.do(ctx, http.MethodDelete, "/racks/"+url.PathEscape(id), q, nil, nil)
}

// WhoAmI returns the caller's user, team and role.
func (c *Client) WhoAmI(ctx context.Context) (apiv1.WhoAmI, error) {
	var w apiv1.WhoAmI
	err := c.do(ctx, http.MethodGet, "/whoami", nil, nil, &w)
	return w, err
}

// Health checks that the API answers.
func (c *Client) Health(ctx context.Context) (apiv1.Health, error) {
	var h apiv1.Health
	err := c.do(ctx, http.MethodGet, "/healthz", nil, nil, &h)
	return h, err
}

// OpenAPI returns the API's OpenAPI document.
func (c *Client) OpenAPI(ctx context.Context) (json.RawMessage, error) {
	var doc json.RawMessage
	err := c.do(ctx, http.MethodGet, "/openapi.json", nil, nil, &doc)
	return doc, err
}

// WaitJob polls a job until until(job) holds, and returns it. onChange (if
// not nil) sees the job first and then each time its state, reason,
// progress, queue position or update time changes. Unavailable answers (503,
// 504) and transport errors once the job was seen are retried until ctx
// ends; other errors end the wait.
func (c *Client) WaitJob(ctx context.Context, id string, until func(cosmic.Job) bool, onChange func(cosmic.Job)) (cosmic.Job, error) {
	var last cosmic.Job
	seen := false
	t := time.NewTicker(c.poll)
	defer t.Stop()
	for {
		j, err := c.GetJob(ctx, id)
		switch {
		case err == nil:
			if !seen || changed(last, j) {
				seen, last = true, j
				if onChange != nil {
					onChange(j)
				}
			}
			if until(j) {
				return j, nil
			}
		case ctx.Err() != nil:
			return last, ctx.Err()
		case !retryable(err), !seen && StatusOf(err) == 0:
			// A transport error before any answer is a wrong URL or a
			// server that is down, not a restart to ride out.
			return last, err
		}
		select {
		case <-ctx.Done():
			return last, ctx.Err()
		case <-t.C:
		}
	}
}

func changed(a, b cosmic.Job) bool {
	sa, sb := a.Status, b.Status
	return sa.State != sb.State || reasonCode(sa.Reason) != reasonCode(sb.Reason) ||
		sa.Message != sb.Message || sa.QueuePosition != sb.QueuePosition ||
		!a.UpdatedAt.Equal(b.UpdatedAt) || progress(sa.Progress) != progress(sb.Progress)
}

func reasonCode(r *cosmic.Reason) cosmic.ReasonCode {
	if r == nil {
		return ""
	}
	return r.Code
}

func progress(p *cosmic.Progress) cosmic.Progress {
	if p == nil {
		return cosmic.Progress{}
	}
	return *p
}

func retryable(err error) bool {
	var ae *APIError
	if errors.As(err, &ae) {
		return ae.Status == http.StatusServiceUnavailable || ae.Status == http.StatusGatewayTimeout ||
			ae.Status == http.StatusBadGateway
	}
	return true // transport errors: the server may be restarting
}

// Settled reports whether a job has stopped moving on its own: running,
// failed, stopped or degraded. It is the usual until of WaitJob.
func Settled(j cosmic.Job) bool {
	switch j.Status.State {
	case cosmic.StateRunning, cosmic.StateFailed, cosmic.StateStopped, cosmic.StateDegraded:
		return true
	}
	return false
}
