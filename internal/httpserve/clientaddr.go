package httpserve

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// Behind a gateway (Caddy, docs/gateway.md) every request comes from the
// gateway's address. A server believes X-Forwarded-For only from the
// proxies it trusts (addresses or CIDR prefixes: Proxies), and then takes
// the rightmost address that is not itself a trusted proxy: the client as
// the first trusted hop saw it. From anyone else the header is ignored, so
// a client cannot choose the address its limits count it by, or that the
// audit log records. The app-node (sign-in limits, the audit log) and
// proxy-inference (the limits of callers without a key) use it.

// Proxies are the trusted gateways.
type Proxies []netip.Prefix

// ParseProxies reads trusted proxies: IP addresses or CIDR prefixes.
func ParseProxies(list []string) (Proxies, error) {
	var out Proxies
	for _, s := range list {
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("trustedProxies: %q is neither an IP address nor a CIDR prefix", s)
		}
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}

func (ps Proxies) trusts(a netip.Addr) bool {
	for _, p := range ps {
		if p.Contains(a.Unmap()) {
			return true
		}
	}
	return false
}

// ClientAddr is the address of r's client: the TCP peer (host:port), or,
// when the peer is a trusted proxy, what X-Forwarded-For says (an IP).
func (ps Proxies) ClientAddr(r *http.Request) string {
	if len(ps) == 0 {
		return r.RemoteAddr
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	peer, err := netip.ParseAddr(host)
	if err != nil || !ps.trusts(peer) {
		return r.RemoteAddr
	}
	var hops []string
	for _, v := range r.Header.Values("X-Forwarded-For") {
		hops = append(hops, strings.Split(v, ",")...)
	}
	for i := len(hops) - 1; i >= 0; i-- {
		a, err := netip.ParseAddr(strings.TrimSpace(hops[i]))
		if err != nil {
			return r.RemoteAddr // a malformed chain: believe only the peer
		}
		if !ps.trusts(a) {
			return a.Unmap().String()
		}
	}
	return r.RemoteAddr
}

// ClientIP is ClientAddr without the port: what a client is limited by.
func (ps Proxies) ClientIP(r *http.Request) string {
	addr := ps.ClientAddr(r)
	if host, _, err := net.SplitHostPort(addr); err == nil {
		return host
	}
	return addr
}
