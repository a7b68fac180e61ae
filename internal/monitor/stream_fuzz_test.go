package monitor

import (
	"context"
	"encoding/json"
	"math"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/apiv1"
)

// FuzzLogsRequest: the log stream's path and query (follow, replica,
// source, since, lastEventId or the Last-Event-ID header) never panic or
// answer 5xx; a refusal is a 400 with the JSON error shape; what is
// accepted means what it says (since is the start of history, clamped to
// the records' numbering).
func FuzzLogsRequest(f *testing.F) {
	m, err := New(DefaultConfig(f.TempDir()), Deps{Viewers: AuthorizerFunc(func(*http.Request, string) error { return nil })})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { m.Close() })
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	m.now = func() time.Time { return now }
	h := m.Handler()
	const job = "3f2a9c1e-0b7d-4c1e-9a55-2b8e4f6d7a10"
	for _, s := range []struct{ id, query, lastEventID string }{
		{job, "", ""},
		{job, "follow=true", ""},
		{job, "follow=1&replica=0&source=system", ""},
		{job, "replica=-1&source=stdout&follow=maybe", ""},
		{job, "since=1h", ""},
		{job, "since=-1h", ""},
		{job, "since=2562047h47m16.854775807s", ""},
		{job, "since=2026-01-01T00:00:00Z", ""},
		{job, "since=1500-01-01T00:00:00Z", ""}, // once read as 2084: UnixNano outside 1678–2262
		{job, "since=0001-01-01T00:00:00Z", ""},
		{job, "since=9999-12-31T23:59:59.999999999Z", ""},
		{job, "since=2300-01-01T00:00:00Z", ""},
		{job, "lastEventId=42", ""},
		{job, "lastEventId=18446744073709551615", ""},
		{job, "", "18446744073709551616"},
		{job, "", " 7 "},
		{"not-a-job", "", ""},
		{"", "", ""},
		{job, "%zz&;&=", "x"},
	} {
		f.Add(s.id, s.query, s.lastEventID)
	}
	f.Fuzz(func(t *testing.T, id, query, lastEventID string) {
		if strings.ContainsAny(lastEventID, "\r\n\x00") {
			return // not a header value a client can send
		}
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.URL.Path, req.URL.RawQuery = LogsPath+url.PathEscape(id)+"/logs", query
		req.RequestURI = req.URL.RequestURI()
		if lastEventID != "" {
			req.Header.Set("Last-Event-ID", lastEventID)
		}
		// A viewer already gone: a stream that is accepted ends at once.
		ctx, cancel := context.WithCancel(req.Context())
		cancel()
		req = req.WithContext(ctx)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		switch {
		case w.Code >= 500:
			t.Fatalf("%d %s", w.Code, w.Body)
		case w.Code >= 300 && w.Code < 400:
			// The mux sends an unclean path (an empty or dot segment) to
			// its clean form.
			if w.Header().Get("Location") == "" {
				t.Fatalf("%d without a Location", w.Code)
			}
			return
		case w.Code >= 400:
			var er apiv1.ErrorResponse
			if err := json.Unmarshal(w.Body.Bytes(), &er); err != nil || er.Error.Code == "" || er.Error.Message == "" {
				t.Fatalf("%d with a body that is not a JSON error: %q", w.Code, w.Body)
			}
		case w.Header().Get("Content-Type") != "text/event-stream":
			t.Fatalf("%d with Content-Type %q", w.Code, w.Header().Get("Content-Type"))
		}

		// The parse, where the route matched.
		req.SetPathValue("id", id)
		lr, err := parseLogsRequest(req, now)
		if err != nil {
			if strings.TrimSpace(err.Error()) == "" {
				t.Fatalf("an empty refusal")
			}
			return
		}
		if v := req.URL.Query().Get("since"); v != "" {
			want := uint64(0)
			if d, err := time.ParseDuration(v); err == nil && d >= 0 {
				want = exactUnixNano(now.Add(-d))
			} else if ts, err := time.Parse(time.RFC3339Nano, v); err == nil {
				want = exactUnixNano(ts)
			}
			if !lr.hasSince || lr.since != want {
				t.Fatalf("since %q: from %d (%v), want %d", v, lr.since, lr.hasSince, want)
			}
		}
		if lr.hasAfter {
			v := req.Header.Get("Last-Event-ID")
			if v == "" {
				v = req.URL.Query().Get("lastEventId")
			}
			if n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64); err != nil || n != lr.after {
				t.Fatalf("Last-Event-ID %q: after %d", v, lr.after)
			}
		}
	})
}

// exactUnixNano is t in Unix nanoseconds, computed exactly and clamped to
// [0, MaxInt64].
func exactUnixNano(t time.Time) uint64 {
	ns := new(big.Int).Mul(big.NewInt(t.Unix()), big.NewInt(1e9))
	ns.Add(ns, big.NewInt(int64(t.Nanosecond())))
	switch {
	case ns.Sign() < 0:
		return 0
	case !ns.IsInt64():
		return math.MaxInt64
	}
	return ns.Uint64()
}
