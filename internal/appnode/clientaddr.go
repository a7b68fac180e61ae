package appnode

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// Behind a gateway (Caddy, docs/gateway.md) every request comes from the
// gateway's address. The app-node believes X-Forwarded-For only from the
// proxies its config trusts (trustedProxies: addresses or CIDR prefixes),
// and then takes the rightmost address that is not itself a trusted proxy:
// the client as the first trusted hop saw it. From anyone else the header
// is ignored, so a client cannot choose the address its sign-in attempts
// are limited by, or that the audit log records.

// parsePrefixes reads trusted proxies: IPs or CIDR prefixes.
func parsePrefixes(list []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
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

func trusted(nets []netip.Prefix, a netip.Addr) bool {
	for _, p := range nets {
		if p.Contains(a.Unmap()) {
			return true
		}
	}
	return false
}

// clientAddr is the address of r's client: the TCP peer, or, when the peer
// is a trusted proxy, what X-Forwarded-For says (see above).
func (s *Server) clientAddr(r *http.Request) string {
	if len(s.proxies) == 0 {
		return r.RemoteAddr
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	peer, err := netip.ParseAddr(host)
	if err != nil || !trusted(s.proxies, peer) {
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
		if !trusted(s.proxies, a) {
			return a.Unmap().String()
		}
	}
	return r.RemoteAddr
}
