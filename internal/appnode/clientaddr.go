package appnode

import "net/http"

// clientAddr is the address of r's client: the TCP peer, or, when the peer
// is one of the config's trusted proxies, what X-Forwarded-For says
// (httpserve.Proxies).
func (s *Server) clientAddr(r *http.Request) string { return s.proxies.ClientAddr(r) }
