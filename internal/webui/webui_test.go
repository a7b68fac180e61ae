package webui_test

import (
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/cosmicac/cosmicac/internal/webui"
)

func get(t *testing.T, h http.Handler, path string, hdr ...string) *http.Response {
	t.Helper()
	r := httptest.NewRequest("GET", path, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	return rec.Result()
}

func body(t *testing.T, res *http.Response) string {
	t.Helper()
	rd := res.Body
	if res.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(rd)
		if err != nil {
			t.Fatal(err)
		}
		rd = zr
	}
	b, err := io.ReadAll(rd)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestServesThePage: every page path is the single page with its CSP; the
// assets it names are there, typed, compressed when asked and revalidated
// by ETag; a missing asset is a 404, not HTML.
func TestServesThePage(t *testing.T) {
	h, err := webui.New()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/", "/jobs", "/jobs/8d7c8a4e-0000-4000-8000-000000000000/logs", "/team/keys"} {
		res := get(t, h, p)
		if res.StatusCode != 200 || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/html") || res.Header.Get("Content-Security-Policy") != webui.CSP {
			t.Errorf("GET %s: %d %q CSP %q", p, res.StatusCode, res.Header.Get("Content-Type"), res.Header.Get("Content-Security-Policy"))
		}
		if b := body(t, res); !strings.Contains(b, `<script type="module" src="/app.js">`) {
			t.Errorf("GET %s is not the page: %.200s", p, b)
		}
	}
	res := get(t, h, "/app.js", "Accept-Encoding", "gzip, br")
	if res.StatusCode != 200 || res.Header.Get("Content-Encoding") != "gzip" || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/javascript") {
		t.Fatalf("GET /app.js: %d %v", res.StatusCode, res.Header)
	}
	if b := body(t, res); !strings.Contains(b, "/api/v1") {
		t.Error("app.js does not speak the API")
	}
	etag := res.Header.Get("ETag")
	if res := get(t, h, "/app.js", "Accept-Encoding", "gzip", "If-None-Match", etag); res.StatusCode != http.StatusNotModified {
		t.Errorf("revalidation with the ETag: %d", res.StatusCode)
	}
	if res := get(t, h, "/app.js"); res.Header.Get("Content-Encoding") != "" || res.Header.Get("ETag") == etag {
		t.Errorf("without gzip: encoding %q, ETag %q (the gzip one is %q)", res.Header.Get("Content-Encoding"), res.Header.Get("ETag"), etag)
	}
	if res := get(t, h, "/chunk-nope.js"); res.StatusCode != 404 {
		t.Errorf("a missing chunk: %d", res.StatusCode)
	}
	r := httptest.NewRequest("POST", "/", nil)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	if rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST /: %d", rec.Code)
	}
	raw, gz := h.Size()
	t.Logf("embedded interface: %d bytes, %d gzipped", raw, gz)
}
