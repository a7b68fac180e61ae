package benchtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/waittest"
)

// The baselines a serving path is measured against (docs/benchmarks.md,
// "Inference"): nginx, Debian's, as one hop or two, with or without TLS
// between them, and Go byte relays, the least a hop written in Go costs.

// Cert is a self-signed certificate for 127.0.0.1 (ECDSA P-256), in
// memory and as PEM files (for nginx).
type Cert struct {
	TLS               tls.Certificate
	Pool              *x509.CertPool
	CertFile, KeyFile string
}

// NewCert makes a Cert whose files are in a temp dir of tb's.
func NewCert(tb testing.TB) *Cert {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		tb.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		tb.Fatal(err)
	}
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		tb.Fatal(err)
	}
	dir := tb.TempDir()
	c := &Cert{TLS: tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, Pool: x509.NewCertPool(),
		CertFile: filepath.Join(dir, "cert.pem"), KeyFile: filepath.Join(dir, "key.pem")}
	c.Pool.AddCert(leaf)
	if err := os.WriteFile(c.CertFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(c.KeyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		tb.Fatal(err)
	}
	return c
}

// ServerConfig serves c, TLS 1.3 only.
func (c *Cert) ServerConfig() *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{c.TLS}, MinVersion: tls.VersionTLS13}
}

// ClientConfig trusts c alone, TLS 1.3 only.
func (c *Cert) ClientConfig() *tls.Config {
	return &tls.Config{RootCAs: c.Pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS13}
}

// StartRelay listens on loopback and relays each connection to upstream
// ("host:port", or "unix:PATH") byte for byte, a goroutine per direction
// (io.Copy): the least a hop written in Go does. With serve it serves TLS
// with that certificate; with dial it reaches upstream over TLS, trusting
// that one. It returns its address; the relay stops with tb.
func StartRelay(tb testing.TB, upstream string, serve, dial *Cert) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ln.Close() })
	if serve != nil {
		ln = tls.NewListener(ln, serve.ServerConfig())
	}
	network, addr := "tcp", upstream
	if path, ok := strings.CutPrefix(upstream, "unix:"); ok {
		network, addr = "unix", path
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				var u net.Conn
				var err error
				if dial != nil {
					u, err = tls.Dial(network, addr, dial.ClientConfig())
				} else {
					u, err = net.Dial(network, addr)
				}
				if err != nil {
					return
				}
				defer u.Close()
				go func() {
					io.Copy(u, c)
					closeWrite(u)
				}()
				io.Copy(c, u)
			}()
		}
	}()
	return ln.Addr().String()
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
}

// Nginx is a running nginx: its base URL and its master's pid (its one
// worker is the master's child).
type Nginx struct {
	URL string
	PID int
}

// Addr is n's address, URL without its scheme.
func (n Nginx) Addr() string {
	_, a, _ := strings.Cut(n.URL, "://")
	return a
}

// NginxOptions are how StartNginx serves and reaches its upstream.
type NginxOptions struct {
	// ServeTLS serves TLS 1.3 with this certificate.
	ServeTLS *Cert
	// UpstreamTLS reaches the upstream over TLS 1.3, checking its
	// certificate against this one and reusing sessions.
	UpstreamTLS *Cert
}

// StartNginx runs nginx (Debian's, when installed) on loopback in front of
// upstream ("host:port", or "unix:PATH"), one worker, `proxy_buffering
// off`, HTTP/1.1 with keep-alive to the upstream, its config in a temp
// dir; it stops with tb. ok is false when nginx is not installed (said in
// tb's log).
func StartNginx(tb testing.TB, upstream string, o NginxOptions) (n Nginx, ok bool) {
	tb.Helper()
	bin, err := exec.LookPath("nginx")
	if err != nil {
		if bin, err = exec.LookPath("/usr/sbin/nginx"); err != nil {
			tb.Log("nginx not installed: its paths are left out")
			return Nginx{}, false
		}
	}
	dir := tb.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	listen, scheme, upstreamTLS, base := addr, "http", "", "http://"
	if c := o.ServeTLS; c != nil {
		listen = fmt.Sprintf("%s ssl;\n\t\tssl_certificate %s;\n\t\tssl_certificate_key %s;\n\t\tssl_protocols TLSv1.3", addr, c.CertFile, c.KeyFile)
		base = "https://"
	}
	if c := o.UpstreamTLS; c != nil {
		scheme = "https"
		upstreamTLS = fmt.Sprintf(`
			proxy_ssl_protocols TLSv1.3;
			proxy_ssl_session_reuse on;
			proxy_ssl_verify on;
			proxy_ssl_trusted_certificate %s;
			proxy_ssl_name 127.0.0.1;`, c.CertFile)
	}
	// Started as root, nginx's worker would run as nobody, which may not
	// reach a unix socket of the test's (the engine's).
	user := ""
	if os.Geteuid() == 0 {
		user = "user root;\n"
	}
	conf := fmt.Sprintf(`%[6]sworker_processes 1;
daemon off;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
events { worker_connections 4096; }
http {
	access_log off;
	client_body_temp_path %[1]s/body;
	proxy_temp_path %[1]s/proxy;
	fastcgi_temp_path %[1]s/fastcgi;
	uwsgi_temp_path %[1]s/uwsgi;
	scgi_temp_path %[1]s/scgi;
	upstream backend { server %[2]s; keepalive 256; }
	server {
		listen %[3]s;
		location / {
			proxy_pass %[4]s://backend;
			proxy_http_version 1.1;
			proxy_set_header Connection "";
			proxy_buffering off;%[5]s
		}
	}
}
`, dir, upstream, listen, scheme, upstreamTLS, user)
	path := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(bin, "-c", path, "-p", dir, "-e", filepath.Join(dir, "error.log"))
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
	})
	waittest.NoError(tb, func() error {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err
	}, "nginx to listen on %s", addr)
	return Nginx{URL: base + addr, PID: cmd.Process.Pid}, true
}

// NginxVersion is the installed nginx's version ("" without one).
func NginxVersion() string {
	out, _ := exec.Command("nginx", "-v").CombinedOutput()
	if len(out) == 0 {
		out, _ = exec.Command("/usr/sbin/nginx", "-v").CombinedOutput()
	}
	v := strings.TrimSpace(string(out))
	if i := strings.Index(v, "nginx/"); i >= 0 {
		return strings.Fields(v[i+6:])[0]
	}
	return ""
}
