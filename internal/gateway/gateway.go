// Package gateway is the platform's HTTP gateway: Caddy, embedded as a Go
// library, routing /api to the app-node, /inference to proxy-inference,
// /monitor to wrk-monitor and every other path to the web interface (the
// app-node, which serves it, by default), with automatic HTTPS when a domain is
// given. Its config is Caddy's JSON, built in Go from the components'
// addresses (Config.CaddyJSON); deploy/Caddyfile routes the same for an
// operator's own Caddy (docs/gateway.md).
//
// Caddy keeps one running config per process: Start replaces it, so a
// process runs one Gateway at a time. Only the wiring (internal/cli/components, internal/platform) may import it.
package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	_ "github.com/caddyserver/caddy/v2/modules/caddyhttp"              // the http app
	_ "github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy" // reverse_proxy
	_ "github.com/caddyserver/caddy/v2/modules/caddytls"               // automatic HTTPS
	_ "github.com/caddyserver/caddy/v2/modules/filestorage"            // Storage
	_ "github.com/caddyserver/caddy/v2/modules/logging"                // json encoder

	"github.com/cosmicac/cosmicac/internal/httpserve"
)

// Config is the gateway's: where it listens and where each route goes.
type Config struct {
	// Listen is the address served (default 127.0.0.1:8080, plain HTTP;
	// with a Domain, :443).
	Listen string `json:"listen,omitempty"`
	// Domain, when set, is the site's name: Caddy serves it over HTTPS
	// with a certificate it obtains and renews (ACME), redirects HTTP on
	// :80 to it, and answers only requests for that host.
	Domain string `json:"domain,omitempty"`
	// AppNode, Inference and Monitor are the base URLs (scheme, host and
	// port, no path) of the app-node's API, proxy-inference's and
	// wrk-monitor's HTTP servers.
	AppNode   string `json:"appNode"`
	Inference string `json:"inference"`
	Monitor   string `json:"monitor"`
	// UI serves every other path: the web interface; AppNode when empty.
	UI string `json:"ui,omitempty"`
	// Storage is the directory of Caddy's certificates and keys (a
	// Domain's); empty: Caddy's default ($XDG_DATA_HOME/caddy).
	Storage string `json:"storage,omitempty"`
	// HTTP bounds the clients: Header, Idle and MaxHeaderBytes hold at
	// the gateway as at every HTTP server (httpserve); Body, Upload and
	// Write are the components' own, behind it.
	HTTP httpserve.Limits `json:"http"`
}

// DefaultListen is the gateway's address without a domain.
const DefaultListen = "127.0.0.1:8080"

// DefaultConfig is the gateway in front of the standalone components'
// default addresses on this host.
func DefaultConfig() Config {
	return Config{
		Listen:    DefaultListen,
		AppNode:   "http://127.0.0.1:8081",
		Monitor:   "http://127.0.0.1:8082",
		Inference: "http://127.0.0.1:8083",
	}
}

// Validate reports every missing or malformed field.
func (c Config) Validate() error {
	var errs []error
	for _, u := range []struct{ name, v string }{{"appNode", c.AppNode}, {"inference", c.Inference}, {"monitor", c.Monitor}, {"ui", c.UI}} {
		if u.v == "" && u.name == "ui" {
			continue
		}
		if _, err := parseUpstreams(u.v); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", u.name, err))
		}
	}
	if c.Listen != "" {
		if _, _, err := net.SplitHostPort(c.Listen); err != nil {
			errs = append(errs, fmt.Errorf("listen %q: %w", c.Listen, err))
		}
	}
	if err := c.HTTP.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// proxy is a reverse_proxy handler to one upstream, or to several of one
// component (several app-nodes on one database) taken in turn.
type proxy struct {
	dials []string
	tls   bool
}

// parseUpstreams parses a component's base URL, or several separated by
// commas, all http:// or all https://.
func parseUpstreams(raw string) (proxy, error) {
	var all proxy
	for i, part := range strings.Split(raw, ",") {
		p, err := upstream(strings.TrimSpace(part))
		if err != nil {
			return proxy{}, err
		}
		if i > 0 && p.tls != all.tls {
			return proxy{}, fmt.Errorf("%q: mixes http:// and https://", raw)
		}
		all.dials, all.tls = append(all.dials, p.dials...), p.tls
	}
	return all, nil
}

// upstream parses a component's base URL.
func upstream(raw string) (proxy, error) {
	if raw == "" {
		return proxy{}, errors.New("a URL is required")
	}
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "http" && u.Scheme != "https" {
		return proxy{}, fmt.Errorf("%q: want http:// or https://", raw)
	}
	if u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
		return proxy{}, fmt.Errorf("%q: want scheme://host:port and no path", raw)
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	return proxy{dials: []string{net.JoinHostPort(u.Hostname(), port)}, tls: u.Scheme == "https"}, nil
}

// handler is the reverse_proxy handler's JSON: every answer flushed as
// it arrives (flush_interval -1: server-sent events and streamed
// answers), no request buffering (uploads stream; Caddy's default), and
// Upgrade (WebSocket) relayed as Caddy does by default. Caddy sets
// X-Forwarded-For, -Proto and -Host, replacing what the client sent.
//
// Several upstreams are taken round robin, request by request (any
// app-node answers any request: docs/architecture.md). One that refuses
// a connection is marked down for failDuration (Caddy's passive health
// check) and the request tried on the next: Caddy retries only what
// failed before it was sent, so no request runs twice.
func (p proxy) handler() map[string]any {
	var ups []any
	for _, d := range p.dials {
		ups = append(ups, map[string]any{"dial": d})
	}
	h := map[string]any{
		"handler":        "reverse_proxy",
		"upstreams":      ups,
		"flush_interval": -1,
	}
	if len(p.dials) > 1 {
		h["load_balancing"] = map[string]any{
			"selection_policy": map[string]any{"policy": "round_robin"},
			"retries":          len(p.dials) - 1,
		}
		h["health_checks"] = map[string]any{"passive": map[string]any{"fail_duration": failDuration.String()}}
	}
	if p.tls {
		h["transport"] = map[string]any{"protocol": "http", "tls": map[string]any{}}
	}
	return h
}

// failDuration is how long an upstream that refused a connection is left
// out of the rotation.
const failDuration = 10 * time.Second

// accessLogger is the name of the server's access logs.
const accessLogger = "http.log.access.gateway"

// CaddyJSON is Caddy's config for c (which Validate accepts): the admin
// endpoint off and nothing persisted, one server, and the logs (the
// access log at info, Caddy's own at warn) as JSON lines to the writer
// Start is given.
func (c Config) CaddyJSON() ([]byte, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	ui := c.UI
	if ui == "" {
		ui = c.AppNode
	}
	var routes []any
	for _, r := range []struct {
		paths []string
		to    string
	}{
		{[]string{"/api", "/api/*"}, c.AppNode},
		{[]string{"/inference", "/inference/*"}, c.Inference},
		{[]string{"/monitor", "/monitor/*"}, c.Monitor},
		{nil, ui},
	} {
		p, _ := parseUpstreams(r.to) // Validate checked it
		// endBodyModule first: a body the component gave up on ends
		// with its answer.
		route := map[string]any{"handle": []any{map[string]any{"handler": endBodyModule}, p.handler()}, "terminal": true}
		if r.paths != nil {
			route["match"] = []any{map[string]any{"path": r.paths}}
		}
		routes = append(routes, route)
	}
	l := c.HTTP.WithDefaults()
	server := map[string]any{
		"read_header_timeout": l.Header.D(),
		"idle_timeout":        l.Idle.D(),
		"max_header_bytes":    l.MaxHeaderBytes,
		// No read_timeout or write_timeout: they would cut streams (see
		// internal/httpserve); the components bound bodies and writes.
		"logs": map[string]any{"default_logger_name": "gateway"},
	}
	listen := c.Listen
	if c.Domain == "" {
		if listen == "" {
			listen = DefaultListen
		}
		server["routes"] = routes
		server["automatic_https"] = map[string]any{"disable": true}
	} else {
		if listen == "" {
			listen = ":443"
		}
		server["routes"] = []any{map[string]any{
			"match":    []any{map[string]any{"host": []string{c.Domain}}},
			"handle":   []any{map[string]any{"handler": "subroute", "routes": routes}},
			"terminal": true,
		}}
	}
	server["listen"] = []string{listen}
	jsonLog := func(m map[string]any) map[string]any {
		m["writer"] = map[string]any{"output": writerModule}
		m["encoder"] = map[string]any{"format": "json"}
		return m
	}
	cfg := map[string]any{
		"admin": map[string]any{"disabled": true, "config": map[string]any{"persist": false}},
		"logging": map[string]any{"logs": map[string]any{
			"default": jsonLog(map[string]any{"level": "WARN", "exclude": []string{accessLogger}}),
			"access":  jsonLog(map[string]any{"level": "INFO", "include": []string{accessLogger}}),
		}},
		"apps": map[string]any{"http": map[string]any{"servers": map[string]any{"gateway": server}}},
	}
	if c.Storage != "" {
		cfg["storage"] = map[string]any{"module": "file_system", "root": c.Storage}
	}
	return json.MarshalIndent(cfg, "", "\t")
}

// Gateway is the running Caddy.
type Gateway struct {
	addr, domain string
}

// running guards Caddy's one config per process.
var running sync.Mutex

// Start runs Caddy with c's config until Close. Caddy's logs (the access
// log and its own warnings and errors) are JSON lines written to logs
// (nil: standard error). A second Start before Close fails.
func Start(c Config, logs io.Writer) (*Gateway, error) {
	if host, port, err := net.SplitHostPort(c.Listen); err == nil && port == "0" {
		// Caddy does not say which port it got: pick a free one first
		// (another process could take it in between; tests only).
		ln, err := net.Listen("tcp", c.Listen)
		if err != nil {
			return nil, fmt.Errorf("start gateway: %w", err)
		}
		_, port, _ = net.SplitHostPort(ln.Addr().String())
		ln.Close()
		c.Listen = net.JoinHostPort(host, port)
	}
	b, err := c.CaddyJSON()
	if err != nil {
		return nil, err
	}
	if !running.TryLock() {
		return nil, errors.New("start gateway: one is running in this process")
	}
	if logs == nil {
		logs = os.Stderr
	}
	setLogOutput(logs)
	if err := caddy.Load(b, true); err != nil {
		running.Unlock()
		return nil, fmt.Errorf("start caddy: %w", err)
	}
	addr := c.Listen
	if addr == "" {
		addr = DefaultListen
		if c.Domain != "" {
			addr = ":443"
		}
	}
	return &Gateway{addr: addr, domain: c.Domain}, nil
}

// Addr is the address the gateway serves.
func (g *Gateway) Addr() string { return g.addr }

// URL is the gateway's base URL: https://DOMAIN with a domain, else
// http://ADDR.
func (g *Gateway) URL() string {
	if g.domain != "" {
		return "https://" + g.domain
	}
	return "http://" + g.addr
}

// Close stops Caddy: its listeners close and the requests in flight end.
func (g *Gateway) Close() error {
	defer running.Unlock()
	if err := caddy.Stop(); err != nil {
		return fmt.Errorf("stop caddy: %w", err)
	}
	return nil
}
