package appnode_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/cosmicac/cosmicac/internal/apiv1"
	"github.com/cosmicac/cosmicac/internal/appnode"
	"github.com/cosmicac/cosmicac/internal/appnode/appnodetest"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/ork/orkapi"
	"github.com/cosmicac/cosmicac/internal/store"
)

// recordingOrk is the fake ork, remembering the last list query it got.
type recordingOrk struct {
	*appnodetest.Ork
	mu   sync.Mutex
	last *orkapi.ListJobsParams
}

func (o *recordingOrk) ListJobs(ctx context.Context, p orkapi.ListJobsParams) (orkapi.ListJobsReply, error) {
	o.mu.Lock()
	o.last = &p
	o.mu.Unlock()
	return o.Ork.ListJobs(ctx, p)
}

func (o *recordingOrk) take() *orkapi.ListJobsParams {
	o.mu.Lock()
	defer o.mu.Unlock()
	p := o.last
	o.last = nil
	return p
}

// noAPIKeys is an empty API-key store: every key is not found.
type noAPIKeys struct{}

func (noAPIKeys) CreateAPIKey(context.Context, store.APIKey) error { return nil }
func (noAPIKeys) ListAPIKeys(context.Context, string) ([]store.APIKey, error) {
	return nil, nil
}
func (noAPIKeys) GetAPIKey(_ context.Context, id string) (store.APIKey, error) {
	return store.APIKey{}, fmt.Errorf("api key %s: %w", id, cosmic.ErrNotFound)
}
func (noAPIKeys) RotateAPIKey(_ context.Context, id string, _ store.APIKeyRotation) (store.APIKey, error) {
	return store.APIKey{}, fmt.Errorf("api key %s: %w", id, cosmic.ErrNotFound)
}
func (noAPIKeys) DeleteAPIKey(_ context.Context, id string) error {
	return fmt.Errorf("api key %s: %w", id, cosmic.ErrNotFound)
}
func (noAPIKeys) APIKeyByHash(context.Context, []byte) (store.APIKey, error) {
	return store.APIKey{}, fmt.Errorf("api key: %w", cosmic.ErrNotFound)
}

// fuzzServer is an app-node on fakes, its admin's token and its ork.
func fuzzServer(f *testing.F) (http.Handler, string, *recordingOrk) {
	f.Helper()
	ork := &recordingOrk{Ork: appnodetest.NewOrk()}
	cfg := appnode.DefaultConfig()
	cfg.DataDir = f.TempDir()
	s, err := appnode.New(cfg, appnode.Deps{Ork: ork, Accounts: appnodetest.NewAccounts(f), Log: slog.New(slog.DiscardHandler), APIKeys: noAPIKeys{}})
	if err != nil {
		f.Fatal(err)
	}
	path, _, err := s.Bootstrap(context.Background())
	if err != nil {
		f.Fatal(err)
	}
	tok, err := os.ReadFile(path)
	if err != nil {
		f.Fatal(err)
	}
	return s.Handler(), strings.TrimSpace(string(tok)), ork
}

// serveFuzz answers one request; the target is built by hand, as a client
// may send anything (httptest.NewRequest panics on a bad URL).
func serveFuzz(h http.Handler, token, method, path, rawQuery string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, "/", nil)
	req.URL.Path, req.URL.RawPath, req.URL.RawQuery = "", "", rawQuery
	if u, err := url.Parse("http://x" + path); err == nil {
		req.URL.Path, req.URL.RawPath = u.Path, u.RawPath
	}
	req.RequestURI = req.URL.RequestURI()
	req.Header.Set("Authorization", "Bearer "+token)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w
}

// checkRefusal is the fuzz property of every answer: never a 5xx, and an
// error is the API's JSON error shape with a code and a message.
func checkRefusal(t *testing.T, w *httptest.ResponseRecorder, what string) {
	t.Helper()
	if w.Code >= 500 {
		t.Fatalf("%s: %d %s", what, w.Code, w.Body)
	}
	if w.Code < 400 {
		return
	}
	var er apiv1.ErrorResponse
	if err := json.Unmarshal(w.Body.Bytes(), &er); err != nil || er.Error.Code == "" || er.Error.Message == "" {
		t.Fatalf("%s: %d with a body that is not a JSON error: %q", what, w.Code, w.Body)
	}
	if ct := w.Header().Get("Content-Type"); ct != "application/json" {
		t.Fatalf("%s: %d with Content-Type %q", what, w.Code, ct)
	}
}

// FuzzListJobsQuery: GET /api/v1/jobs with any query never panics, never
// answers 5xx, refuses with 400 and the JSON error shape, and what it
// accepts the store accepts too (so a filter cannot become an SQL
// failure, as 70 label terms once did).
func FuzzListJobsQuery(f *testing.F) {
	h, tok, ork := fuzzServer(f)
	many := func(n int, term string) string {
		return strings.TrimSuffix(strings.Repeat(term, n), ",")
	}
	for _, q := range []string{
		"",
		"labelSelector=app%3Dx",
		"labelSelector=n%3D1,kind%3Dtrain&order=asc",
		"labelSelector=" + many(70, "a%3Db,"),
		"labelSelector=" + many(16, "a%3Db,"),
		"labelSelector=" + many(17, "a%3Db,"),
		"labelSelector=a%3Db,a%3Dc",
		"labelSelector=,,,",
		"labelSelector=%3D",
		"labelSelector=example.com%2Fk%3Dv",
		"labelSelector=a&labelSelector=b",
		"statusState=running&statusState=queued,stopped",
		strings.Repeat("statusState=running&", 33),
		"statusState=" + many(40, ","),
		"statusState=RUNNING",
		"sort=name&order=asc&page=2&size=3",
		"sort=id&order=up&page=0&size=0",
		"page=-1&size=1001",
		"page=99999999999999999999&size=1e3",
		"page=1000000&size=1000",
		"updatedAfter=2030-01-01T00:00:00Z&updatedBefore=2020-01-01T00:00:00Z",
		"updatedAfter=2026-01-01T00:00:00.123456789%2B01:00",
		"updatedBefore=0000-01-01T00:00:00Z",
		"updatedAfter=9999-12-31T23:59:59Z",
		"userName=alice",
		"userName=" + strings.Repeat("u", 129),
		"userName=",
		"bogus=1",
		"%zz=%zz&;&=",
		"labelSelector=%00%3D%00",
	} {
		f.Add(q)
	}
	f.Fuzz(func(t *testing.T, q string) {
		w := serveFuzz(h, tok, http.MethodGet, apiv1.Prefix+"/jobs", q)
		checkRefusal(t, w, "GET /jobs?"+q)
		p := ork.take()
		switch {
		case w.Code == http.StatusOK:
			if p == nil {
				t.Fatalf("200 without asking the ork")
			}
			sq := store.ListJobsQuery{Team: p.Team, User: p.User, States: p.States, Labels: p.Labels,
				UpdatedAfter: p.UpdatedAfter, UpdatedBefore: p.UpdatedBefore, Sort: p.Sort, Order: p.Order, Page: p.Page, Size: p.Size}
			if _, err := sq.Normalize(); err != nil {
				t.Fatalf("the API accepted %q, which the store refuses: %v", q, err)
			}
		case w.Code == http.StatusBadRequest:
			if p != nil {
				t.Fatalf("refused %q after asking the ork", q)
			}
		default:
			t.Fatalf("%q: %d %s, want 200 or 400", q, w.Code, w.Body)
		}
	})
}

// FuzzJobRoutes: the routes that parse a path segment ({id}, {n}) or a
// query parameter (force, replica) never panic or answer 5xx, whatever
// they are given, and refuse with the JSON error shape.
func FuzzJobRoutes(f *testing.F) {
	h, tok, _ := fuzzServer(f)
	const id = "3f2a9c1e-0b7d-4c1e-9a55-2b8e4f6d7a10"
	for _, s := range []struct {
		route           uint8
		id, n, rawQuery string
	}{
		{0, id, "0", ""},
		{1, id, "0", "force=true"},
		{1, id, "0", "force=maybe&force=true"},
		{2, id, "0", ""},
		{2, id, "-1", ""},
		{2, id, "99999999999999999999", ""},
		{3, id, "1", ""},
		{4, id, "", "replica=0"},
		{4, id, "", "replica=-3"},
		{4, "not-a-uuid", "", "replica=x"},
		{5, id, "", "replica=1"},
		{6, "r1", "", "force=true"},
		{6, strings.Repeat("r", 64), "", ""},
		{6, "", "", ""},
		{7, "key_1", "", ""},
		{8, id, "", ""},
		{9, id, "", ""},
		{0, "3F2A9C1E-0B7D-4C1E-9A55-2B8E4F6D7A10", "", ""},
		{0, "%", "", ""},
		{0, "a/b", "", ""},
		{2, id, "0x1", ""},
		{0, id, "", "unknown=1"},
	} {
		f.Add(s.route, s.id, s.n, s.rawQuery)
	}
	f.Fuzz(func(t *testing.T, route uint8, id, n, rawQuery string) {
		id, n = url.PathEscape(id), url.PathEscape(n)
		routes := []struct{ method, path string }{
			{http.MethodGet, "/jobs/" + id},
			{http.MethodDelete, "/jobs/" + id},
			{http.MethodPost, "/jobs/" + id + "/replicas/" + n + "/restart"},
			{http.MethodDelete, "/jobs/" + id + "/replicas/" + n},
			{http.MethodPost, "/jobs/" + id + "/shell"},
			{http.MethodPost, "/jobs/" + id + "/ssh"},
			{http.MethodDelete, "/racks/" + id},
			{http.MethodDelete, "/api-keys/" + id},
			{http.MethodPost, "/jobs/" + id + "/restart"},
			{http.MethodPost, "/jobs/" + id + "/kill"},
		}
		rt := routes[int(route)%len(routes)]
		w := serveFuzz(h, tok, rt.method, apiv1.Prefix+rt.path, rawQuery)
		checkRefusal(t, w, rt.method+" "+rt.path+"?"+rawQuery)
	})
}
