package httpserve

import (
	"net/http/httptest"
	"strings"
	"testing"
)

// TestClientAddr: X-Forwarded-For is believed only from a trusted proxy,
// and then its rightmost untrusted hop is the client.
func TestClientAddr(t *testing.T) {
	proxies, err := ParseProxies([]string{"10.0.0.0/8", "192.0.2.1"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, remote string
		xff          []string
		want         string
	}{
		{"no proxy in between", "203.0.113.9:4000", nil, "203.0.113.9:4000"},
		{"an untrusted peer's header is ignored", "203.0.113.9:4000", []string{"198.51.100.1"}, "203.0.113.9:4000"},
		{"the gateway's client", "10.1.2.3:5000", []string{"198.51.100.1"}, "198.51.100.1"},
		{"a spoofed hop before the client", "10.1.2.3:5000", []string{"6.6.6.6, 198.51.100.1"}, "198.51.100.1"},
		{"two trusted hops", "192.0.2.1:80", []string{"198.51.100.7", "10.9.9.9"}, "198.51.100.7"},
		{"a trusted peer without the header", "10.1.2.3:5000", nil, "10.1.2.3:5000"},
		{"a malformed chain", "10.1.2.3:5000", []string{"nonsense"}, "10.1.2.3:5000"},
		{"IPv4 in IPv6", "[::ffff:10.1.2.3]:5000", []string{"198.51.100.1"}, "198.51.100.1"},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = tc.remote
		for _, v := range tc.xff {
			r.Header.Add("X-Forwarded-For", v)
		}
		if got := proxies.ClientAddr(r); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
		if got, want := proxies.ClientIP(r), strings.TrimSuffix(strings.TrimSuffix(tc.want, ":4000"), ":5000"); got != want {
			t.Errorf("%s: ClientIP %q, want %q", tc.name, got, want)
		}
	}
	if Proxies(nil).ClientAddr(httptest.NewRequest("GET", "/", nil)) != "192.0.2.1:1234" {
		t.Error("without trusted proxies the peer is the client")
	}
	if _, err := ParseProxies([]string{"not-an-ip"}); err == nil {
		t.Error("ParseProxies took not-an-ip")
	}
}
