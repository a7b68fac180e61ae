package qemuworker

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"
)

// GuestEgressPort is the guest port of GuestIP at which a VM reaches the
// rack's egress proxy (Config.Egress), when the rack has one: past the
// peers' ports (GuestPortBase on), and no byte-swap of any of them
// (qemu.CheckForwards).
const GuestEgressPort = 7100

// egressProxy is the QEMU rack's one door from its VMs to the world: an
// HTTP forward proxy on the host's loopback, forwarded into each VM whose
// job has datastore volumes, that reaches the endpoints the operator
// listed (Config.Egress) and nothing else. The agent sends its volumes'
// presigned requests through it (vmboot.AgentConfig.DataProxy): a plain
// http:// request in absolute form is forwarded as it is (its Host, and
// so its signature, unchanged); an https:// one is a CONNECT tunnel, the
// TLS between the agent and the store. The proxy holds no credential and
// adds none.
type egressProxy struct {
	allow map[string]bool // host:port, lower case
	ln    net.Listener
	srv   *http.Server
	rp    *httputil.ReverseProxy
	dial  net.Dialer
	log   *slog.Logger

	mu      sync.Mutex
	tunnels map[net.Conn]bool
}

// egressTarget is an endpoint of Config.Egress as host:port: a URL
// (http://s3.example:9000, https://s3.example, its default port) or
// host:port as it is.
func egressTarget(s string) (string, error) {
	if strings.Contains(s, "://") {
		u, err := url.Parse(s)
		if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
			return "", fmt.Errorf("egress %q: want http(s)://HOST[:PORT] or HOST:PORT", s)
		}
		return canonicalHost(u.Scheme, u.Host), nil
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil || host == "" || port == "" {
		return "", fmt.Errorf("egress %q: want http(s)://HOST[:PORT] or HOST:PORT", s)
	}
	return strings.ToLower(net.JoinHostPort(host, port)), nil
}

// canonicalHost is a request's host:port, the scheme's port when it names
// none.
func canonicalHost(scheme, hostport string) string {
	if _, _, err := net.SplitHostPort(hostport); err != nil {
		port := "80"
		if scheme == "https" {
			port = "443"
		}
		hostport = net.JoinHostPort(strings.Trim(hostport, "[]"), port)
	}
	return strings.ToLower(hostport)
}

// startEgress listens on the host's loopback and serves the proxy for the
// endpoints of allow.
func startEgress(allow []string, log *slog.Logger) (*egressProxy, error) {
	p := &egressProxy{allow: map[string]bool{}, log: log, tunnels: map[net.Conn]bool{}, dial: net.Dialer{Timeout: 10 * time.Second}}
	for _, a := range allow {
		t, err := egressTarget(a)
		if err != nil {
			return nil, fmt.Errorf("qemuworker: %w", err)
		}
		p.allow[t] = true
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("qemuworker: egress proxy: %w", err)
	}
	p.ln = ln
	p.rp = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL = pr.In.URL
			pr.Out.Host = pr.In.Host
		},
		// No proxy from the environment, no redirect followed: the
		// request goes where the allowlist let it, and only there.
		Transport: &http.Transport{DialContext: p.dialListed, MaxIdleConnsPerHost: 16, IdleConnTimeout: 90 * time.Second,
			ResponseHeaderTimeout: 5 * time.Minute},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			http.Error(w, "egress: "+r.URL.Host+" did not answer: "+err.Error(), http.StatusBadGateway)
		},
	}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 30 * time.Second}
	go p.srv.Serve(ln)
	return p, nil
}

// dialListed dials a listed endpoint. A name is resolved here, once, and
// refused if it leads to the host's own or a private network (loopback,
// link-local such as a cloud's metadata service, RFC 1918, unique local,
// unspecified, multicast): a tenant who controls a listed name's DNS
// cannot turn the proxy on the host's neighbours. An address the operator
// listed as an IP literal is dialled as it is (a datastore on the host's
// loopback, as the tests run one).
func (p *egressProxy) dialListed(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	if net.ParseIP(host) != nil {
		return p.dial.DialContext(ctx, network, addr)
	}
	ips, err := net.DefaultResolver.LookupIPAddr(ctx, host)
	if err != nil {
		return nil, err
	}
	for _, ip := range ips {
		if a := ip.IP; a.IsLoopback() || a.IsPrivate() || a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() || a.IsUnspecified() || a.IsMulticast() {
			return nil, fmt.Errorf("egress: %s resolves to %s, an address of the host's own or a private network: list it by IP to allow it", host, a)
		}
	}
	if len(ips) == 0 {
		return nil, fmt.Errorf("egress: %s has no address", host)
	}
	return p.dial.DialContext(ctx, network, net.JoinHostPort(ips[0].IP.String(), port))
}

// Addr is where the proxy listens on the host.
func (p *egressProxy) Addr() string { return p.ln.Addr().String() }

// Close stops the proxy and cuts its tunnels.
func (p *egressProxy) Close() error {
	err := p.srv.Close()
	p.mu.Lock()
	for c := range p.tunnels {
		c.Close()
	}
	p.mu.Unlock()
	return err
}

// ServeHTTP forwards a request in absolute form, or opens a CONNECT
// tunnel, to an endpoint of the allowlist; anything else is refused with
// 403 (an endpoint not listed) or 400 (not a proxy request).
func (p *egressProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodConnect {
		p.tunnel(w, r)
		return
	}
	if !r.URL.IsAbs() || r.URL.Scheme != "http" || r.URL.Host == "" {
		http.Error(w, "egress: a proxy request wants an absolute http:// URL (or CONNECT for https)", http.StatusBadRequest)
		return
	}
	target := canonicalHost("http", r.URL.Host)
	if !p.allow[target] {
		p.refuse(w, target)
		return
	}
	p.rp.ServeHTTP(w, r)
}

func (p *egressProxy) refuse(w http.ResponseWriter, target string) {
	p.log.Warn("egress refused: not an endpoint of the rack's egress", "target", target)
	http.Error(w, "egress: "+target+" is not an endpoint this rack's VMs may reach (its egress list)", http.StatusForbidden)
}

// tunnel relays a CONNECT to an allowed endpoint, both ways, until either
// side closes.
func (p *egressProxy) tunnel(w http.ResponseWriter, r *http.Request) {
	target := canonicalHost("https", r.Host)
	if !p.allow[target] {
		p.refuse(w, target)
		return
	}
	up, err := p.dialListed(r.Context(), "tcp", target)
	if err != nil {
		http.Error(w, "egress: "+target+" did not answer: "+err.Error(), http.StatusBadGateway)
		return
	}
	// The 200 is written on the hijacked connection: a response to a
	// CONNECT has no body framing (RFC 9110, 9.3.6), which net/http would
	// add to a 200 it writes itself.
	down, buf, err := http.NewResponseController(w).Hijack()
	if err != nil {
		up.Close()
		return
	}
	if _, err := down.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n")); err != nil {
		up.Close()
		down.Close()
		return
	}
	p.mu.Lock()
	p.tunnels[down], p.tunnels[up] = true, true
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.tunnels, down)
		delete(p.tunnels, up)
		p.mu.Unlock()
		down.Close()
		up.Close()
	}()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		// What the client sent after its CONNECT, already buffered, first.
		if n := buf.Reader.Buffered(); n > 0 {
			b, _ := buf.Reader.Peek(n)
			if _, err := up.Write(b); err != nil {
				cancel()
				return
			}
		}
		io.Copy(up, down)
		if c, ok := up.(*net.TCPConn); ok {
			c.CloseWrite()
		}
		<-ctx.Done()
	}()
	io.Copy(down, up)
}
