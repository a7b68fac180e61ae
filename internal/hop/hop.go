// Package hop forwards HTTP/1.1 requests over pooled keep-alive
// connections, writing each request and reading its answer in the caller's
// goroutine. net/http's Transport hands every request to two goroutines of
// the connection (its write and read loops) and back; on a proxy hop whose
// upstream answers in microseconds those hand-offs are a large share of the
// cost. The inference proxy uses a Pool to reach the model servers over
// fabric streams, which the inference agents relay to them.
//
// It imports only the standard library; any package may use it.
package hop

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"strings"
	"sync"
	"time"
)

// DialFunc opens a connection to addr.
type DialFunc func(ctx context.Context, addr string) (net.Conn, error)

// Pool keeps idle keep-alive connections per address.
type Pool struct {
	dial    DialFunc
	maxIdle int
	idleFor time.Duration

	mu   sync.Mutex
	idle map[string][]*conn // newest last
}

// NewPool returns a pool that dials with dial, keeps at most maxIdle idle
// connections per address, and drops one that has been idle for idleFor
// (set it below the server's own keep-alive timeout).
func NewPool(dial DialFunc, maxIdle int, idleFor time.Duration) *Pool {
	return &Pool{dial: dial, maxIdle: maxIdle, idleFor: idleFor, idle: map[string][]*conn{}}
}

type conn struct {
	net.Conn
	br   *bufio.Reader // reads through head
	bw   *bufio.Writer
	head *headLimit
	used time.Time // when it went idle
}

// MaxHead bounds an answer's head (its status line and headers, the 1xx
// ones before it included), as net/http's server bounds a request's
// (DefaultMaxHeaderBytes): the server is not trusted to end it (an
// inference runtime is in a tenant's VM), and the standard library's
// ReadResponse reads a head of any length.
const MaxHead = 1 << 20

// headLimit is a connection's reader that fails once more than its budget
// is read while a head is being read (budget < 0: no bound, the body).
type headLimit struct {
	r      io.Reader
	budget int64
}

func (l *headLimit) Read(p []byte) (int, error) {
	if l.budget < 0 {
		return l.r.Read(p)
	}
	if l.budget == 0 {
		return 0, errHeadTooLong
	}
	if int64(len(p)) > l.budget {
		p = p[:l.budget]
	}
	n, err := l.r.Read(p)
	l.budget -= int64(n)
	return n, err
}

var errHeadTooLong = errors.New("hop: the answer's head is longer than hop.MaxHead")

// get returns an idle connection to addr (reused true) or dials one.
func (p *Pool) get(ctx context.Context, addr string) (*conn, bool, error) {
	now := time.Now()
	var stale []*conn
	p.mu.Lock()
	for cs := p.idle[addr]; len(cs) > 0; cs = p.idle[addr] {
		c := cs[len(cs)-1]
		cs[len(cs)-1] = nil
		p.idle[addr] = cs[:len(cs)-1]
		if now.Sub(c.used) < p.idleFor {
			p.mu.Unlock()
			closeAll(stale)
			return c, true, nil
		}
		stale = append(stale, c)
	}
	p.mu.Unlock()
	closeAll(stale)
	nc, err := p.dial(ctx, addr)
	if err != nil {
		return nil, false, err
	}
	head := &headLimit{r: nc, budget: -1}
	return &conn{Conn: nc, br: bufio.NewReaderSize(head, 16<<10), bw: bufio.NewWriterSize(nc, 16<<10), head: head}, false, nil
}

func closeAll(cs []*conn) {
	for _, c := range cs {
		c.Close()
	}
}

func (p *Pool) put(addr string, c *conn) {
	c.used = time.Now()
	p.mu.Lock()
	if len(p.idle[addr]) < p.maxIdle {
		p.idle[addr] = append(p.idle[addr], c)
		c = nil
	}
	p.mu.Unlock()
	if c != nil {
		c.Close()
	}
}

// CloseIdle closes every idle connection.
func (p *Pool) CloseIdle() {
	p.mu.Lock()
	m := p.idle
	p.idle = map[string][]*conn{}
	p.mu.Unlock()
	for _, cs := range m {
		closeAll(cs)
	}
}

// Response is an answer whose body is read from a pooled connection. Read
// the body, then call Finish exactly once.
type Response struct {
	*http.Response
	p    *Pool
	addr string
	c    *conn
	stop func() bool
}

// Finish ends the exchange. With clean true (the body was read to its end
// without error) the connection goes back to the pool, unless the server
// asked to close it or the request's context ended; otherwise it is closed.
func (r *Response) Finish(clean bool) {
	alive := r.stop()
	if !clean || !alive || r.Close {
		r.c.Close()
		return
	}
	r.p.put(r.addr, r.c)
}

// Do writes req to addr on a pooled connection (or a new one) and reads
// the answer's head, skipping informational (1xx) ones. req's URL path and
// query, method, headers, Host and body are sent as they are; set
// ContentLength for a body. When the request's context ends the connection
// is closed, which fails pending reads. A request on a pooled connection
// that the server had closed meanwhile goes again, once, on a fresh one if
// req.GetBody can give its body again (http.NewRequest sets it for
// in-memory bodies).
func (p *Pool) Do(req *http.Request, addr string) (*Response, error) {
	ctx := req.Context()
	for attempt := 0; ; attempt++ {
		c, reused, err := p.get(ctx, addr)
		if err != nil {
			return nil, err
		}
		if attempt > 0 && req.GetBody != nil {
			if req.Body, err = req.GetBody(); err != nil {
				c.Close()
				return nil, err
			}
		}
		resp, stop, err := roundTrip(ctx, c, req)
		if err == nil {
			return &Response{Response: resp, p: p, addr: addr, c: c, stop: stop}, nil
		}
		stop()
		c.Close()
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		if reused && attempt == 0 && (req.GetBody != nil || req.Body == nil || req.Body == http.NoBody) && staleConn(err) {
			continue
		}
		return nil, err
	}
}

// staleConn reports whether err is what a request meets on a keep-alive
// connection the server closed while it was idle.
func staleConn(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		strings.Contains(err.Error(), "connection reset") || strings.Contains(err.Error(), "broken pipe")
}

// roundTrip writes req on c and reads the response's head. stop ends the
// watch that closes c when ctx ends; it reports whether c is still usable.
func roundTrip(ctx context.Context, c *conn, req *http.Request) (*http.Response, func() bool, error) {
	stop := context.AfterFunc(ctx, func() { c.Close() })
	if err := req.Write(c.bw); err != nil {
		return nil, stop, err
	}
	if err := c.bw.Flush(); err != nil {
		return nil, stop, err
	}
	// What the reader holds already counts against no budget; the head's
	// bytes read from the connection from here on do.
	c.head.budget = MaxHead
	defer func() { c.head.budget = -1 }()
	for {
		resp, err := http.ReadResponse(c.br, req)
		if err != nil {
			return nil, stop, err
		}
		if resp.StatusCode >= 100 && resp.StatusCode < 200 && resp.StatusCode != http.StatusSwitchingProtocols {
			continue // an informational answer: the real one follows
		}
		return resp, stop, nil
	}
}

// CopyHeaders copies src's end-to-end headers into dst: every header but
// the hop-by-hop ones (RFC 9110 §7.6.1, and Proxy-Authorization,
// Proxy-Authenticate and Expect, which a proxy answers or consumes itself)
// and those that any of src's Connection lines names, matched in ASCII
// case. src's keys are taken in canonical form, as net/http and
// net/textproto keep them. It makes one pass and deletes nothing.
func CopyHeaders(dst, src http.Header) {
	conn := src["Connection"]
	for k, vs := range src {
		if !isHopHeader(k) && !connectionNames(conn, k) {
			dst[k] = vs
		}
	}
}

// isHopHeader reports whether k, in canonical form, is a hop-by-hop header.
func isHopHeader(k string) bool {
	switch k {
	case "Connection", "Keep-Alive", "Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
		"Proxy-Authorization", "Proxy-Authenticate", "Expect":
		return true
	}
	return false
}

// connectionNames reports whether one of the comma-separated tokens of the
// Connection header's values vs is the header name k.
func connectionNames(vs []string, k string) bool {
	for _, v := range vs {
		for v != "" {
			var tok string
			tok, v, _ = strings.Cut(v, ",")
			if asciiEqualFold(textproto.TrimString(tok), k) {
				return true
			}
		}
	}
	return false
}

// asciiEqualFold is strings.EqualFold for ASCII only: header names are
// tokens, and Unicode folding would make "\u212a" (the Kelvin sign) name
// "K".
func asciiEqualFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}
