package qemuworker

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// TestEgressReachesTheListedEndpointsAlone: through the rack's egress
// proxy, a VM's request reaches an endpoint of the egress list, in plain
// HTTP (its Host unchanged, as a presigned request's signature needs)
// and through a CONNECT tunnel for HTTPS, and no other endpoint: 403
// naming it; a request that is not a proxy request is 400.
func TestEgressReachesTheListedEndpointsAlone(t *testing.T) {
	store := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "store saw host "+r.Host+" path "+r.URL.Path)
	}))
	defer store.Close()
	tlsStore := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "tls store")
	}))
	defer tlsStore.Close()
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("the unlisted endpoint was reached: %s %s", r.Method, r.URL)
	}))
	defer other.Close()

	p, err := startEgress([]string{store.URL, strings.TrimPrefix(tlsStore.URL, "https://")}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	proxy, _ := url.Parse("http://" + p.Addr())
	tr := tlsStore.Client().Transport.(*http.Transport).Clone()
	tr.Proxy = http.ProxyURL(proxy)
	c := &http.Client{Transport: tr}
	get := func(u string) (int, string) {
		t.Helper()
		resp, err := c.Get(u)
		if err != nil {
			t.Fatalf("GET %s: %v", u, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get(store.URL + "/bucket/key?X-Amz-Signature=abc"); code != 200 || body != "store saw host "+strings.TrimPrefix(store.URL, "http://")+" path /bucket/key" {
		t.Errorf("the listed endpoint: %d %q", code, body)
	}
	if code, body := get(tlsStore.URL + "/x"); code != 200 || body != "tls store" {
		t.Errorf("the listed endpoint over TLS: %d %q", code, body)
	}
	if code, body := get(other.URL + "/bucket/key"); code != http.StatusForbidden || !strings.Contains(body, strings.TrimPrefix(other.URL, "http://")) {
		t.Errorf("an unlisted endpoint: %d %q, want 403 naming it", code, body)
	}
	if _, err := (&http.Client{Transport: tr}).Get(strings.Replace(other.URL, "http://", "https://", 1)); err == nil {
		t.Error("a CONNECT to an unlisted endpoint succeeded")
	}
	resp, err := http.Get("http://" + p.Addr() + "/bucket/key")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("a request that is no proxy request: %d, want 400", resp.StatusCode)
	}
}

func TestEgressTarget(t *testing.T) {
	for in, want := range map[string]string{
		"http://S3.example:9000": "s3.example:9000", "https://s3.example": "s3.example:443", "http://s3.example": "s3.example:80",
		"127.0.0.1:9000": "127.0.0.1:9000", "http://[::1]:9000": "[::1]:9000",
	} {
		if got, err := egressTarget(in); err != nil || got != want {
			t.Errorf("egressTarget(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"s3.example", "ftp://s3.example", "http://", ":9000"} {
		if got, err := egressTarget(bad); err == nil {
			t.Errorf("egressTarget(%q) = %q, want an error", bad, got)
		}
	}
}

// TestEgressRefusesNamesOfTheHostsNetworks: a listed name that resolves
// to the host's own or a private network is refused (a tenant who
// controls a listed name's DNS cannot reach the host's neighbours); the
// same endpoint listed by its IP is reached.
func TestEgressRefusesNamesOfTheHostsNetworks(t *testing.T) {
	store := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "store") }))
	defer store.Close()
	port := store.URL[strings.LastIndex(store.URL, ":")+1:]
	p, err := startEgress([]string{"localhost:" + port, store.URL}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	proxy, _ := url.Parse("http://" + p.Addr())
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxy)}}
	for u, want := range map[string]string{"http://localhost:" + port + "/x": "resolves to", store.URL + "/x": "store"} {
		resp, err := c.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(b), want) {
			t.Errorf("GET %s through the proxy: %d %q, want %q", u, resp.StatusCode, b, want)
		}
	}
}
