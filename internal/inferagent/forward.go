package inferagent

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// forwarder passes a request the proxy sent on to the local runtime over
// pooled HTTP/1.1 keep-alive connections, written and read in the handler's
// own goroutine: no request clone, no transport read/write loops. Every read
// of a streamed answer (an SSE event) is flushed at once; an answer of known
// length is copied without per-read flushes.
type forwarder struct {
	mu   sync.Mutex
	idle map[string][]*runtimeConn // by runtime address
	// maxIdle bounds the idle connections kept per address; idleFor how long
	// one may rest before it is dropped (below uvicorn's 5 s keep-alive).
	maxIdle int
	idleFor time.Duration
	dialer  net.Dialer
}

type runtimeConn struct {
	net.Conn
	br   *bufio.Reader
	bw   *bufio.Writer
	used time.Time // when it went idle
}

func newForwarder() *forwarder {
	return &forwarder{idle: map[string][]*runtimeConn{}, maxIdle: 1024, idleFor: 3 * time.Second,
		dialer: net.Dialer{Timeout: 5 * time.Second}}
}

// get returns an idle connection to addr (reused true) or dials one.
func (f *forwarder) get(ctx context.Context, addr string) (*runtimeConn, bool, error) {
	now := time.Now()
	f.mu.Lock()
	for cs := f.idle[addr]; len(cs) > 0; cs = f.idle[addr] {
		c := cs[len(cs)-1]
		cs[len(cs)-1] = nil
		f.idle[addr] = cs[:len(cs)-1]
		if now.Sub(c.used) < f.idleFor {
			f.mu.Unlock()
			return c, true, nil
		}
		c.Close()
	}
	f.mu.Unlock()
	c, err := f.dial(ctx, addr)
	return c, false, err
}

func (f *forwarder) dial(ctx context.Context, addr string) (*runtimeConn, error) {
	nc, err := f.dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return &runtimeConn{Conn: nc, br: bufio.NewReaderSize(nc, 16<<10), bw: bufio.NewWriterSize(nc, 16<<10)}, nil
}

func (f *forwarder) put(addr string, c *runtimeConn) {
	c.used = time.Now()
	f.mu.Lock()
	if len(f.idle[addr]) < f.maxIdle {
		f.idle[addr] = append(f.idle[addr], c)
		c = nil
	}
	f.mu.Unlock()
	if c != nil {
		c.Close()
	}
}

// closeIdle drops every idle connection.
func (f *forwarder) closeIdle() {
	f.mu.Lock()
	m := f.idle
	f.idle = map[string][]*runtimeConn{}
	f.mu.Unlock()
	for _, cs := range m {
		for _, c := range cs {
			c.Close()
		}
	}
}

// hopHeaders are not passed on either way.
var hopHeaders = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
	"Proxy-Authorization", "Proxy-Authenticate", "Expect"}

// maxReplayBody bounds the request bodies kept to resend on a fresh
// connection when a pooled one turns out closed (the proxy caps bodies at
// 64 MiB; larger ones go through once).
const maxReplayBody = 64 << 20

var copyBufPool = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// serve forwards r to the runtime at addr and copies the answer to w.
func (f *forwarder) serve(w http.ResponseWriter, r *http.Request, addr string, fail func(error)) {
	ctx := r.Context()
	// The body, kept so that a request on a pooled connection the runtime
	// had closed can go again on a fresh one.
	var body []byte
	replay := r.ContentLength >= 0 && r.ContentLength <= maxReplayBody
	if replay && r.ContentLength > 0 {
		body = make([]byte, r.ContentLength)
		if _, err := io.ReadFull(r.Body, body); err != nil {
			if ctx.Err() == nil {
				fail(err)
			}
			return
		}
	}
	out := &http.Request{Method: r.Method, URL: r.URL, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: make(http.Header, len(r.Header)), Host: addr}
	for k, vs := range r.Header {
		out.Header[k] = vs
	}
	for _, h := range hopHeaders {
		out.Header.Del(h)
	}
	if c := r.Header.Get("Connection"); c != "" {
		for _, h := range strings.Split(c, ",") {
			out.Header.Del(strings.TrimSpace(h))
		}
	}
	for attempt := 0; ; attempt++ {
		c, reused, err := f.get(ctx, addr)
		if err != nil {
			if ctx.Err() == nil {
				fail(err)
			}
			return
		}
		if replay {
			out.ContentLength = int64(len(body))
			out.Body = nil
			if len(body) > 0 {
				out.Body = io.NopCloser(bytes.NewReader(body))
			}
		} else {
			out.ContentLength = r.ContentLength
			out.Body = r.Body
		}
		resp, stop, err := roundTrip(ctx, c, out)
		if err != nil {
			stop()
			c.Close()
			if ctx.Err() != nil {
				return
			}
			if reused && replay && attempt == 0 {
				continue // the runtime had closed the idle connection
			}
			fail(err)
			return
		}
		f.copyResponse(w, resp, c, addr, stop)
		return
	}
}

// roundTrip writes req on c and reads the response's head. stop ends the
// watch that closes c when ctx ends; it reports whether c is still usable.
func roundTrip(ctx context.Context, c *runtimeConn, req *http.Request) (*http.Response, func() bool, error) {
	stop := context.AfterFunc(ctx, func() { c.Close() })
	if err := req.Write(c.bw); err != nil {
		return nil, stop, err
	}
	if err := c.bw.Flush(); err != nil {
		return nil, stop, err
	}
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

func (f *forwarder) copyResponse(w http.ResponseWriter, resp *http.Response, c *runtimeConn, addr string, stop func() bool) {
	h := w.Header()
	for k, vs := range resp.Header {
		h[k] = vs
	}
	for _, hh := range hopHeaders {
		h.Del(hh)
	}
	if resp.ContentLength >= 0 && resp.Header.Get("Content-Length") != "" {
		// net/http sends it as given; a HEAD or 204/304 has none to copy.
		h.Set("Content-Length", resp.Header.Get("Content-Length"))
	}
	w.WriteHeader(resp.StatusCode)
	bp := copyBufPool.Get().(*[]byte)
	defer copyBufPool.Put(bp)
	buf := *bp
	var err error
	if resp.ContentLength >= 0 && !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		// A whole answer of known length: the server flushes it at the end.
		_, err = io.CopyBuffer(w, resp.Body, buf)
	} else {
		// Streamed: every read (an SSE event, as the runtime flushed it)
		// goes out at once.
		fl := http.NewResponseController(w)
		for {
			n, rerr := resp.Body.Read(buf)
			if n > 0 {
				if _, werr := w.Write(buf[:n]); werr != nil {
					err = werr
					break
				}
				if ferr := fl.Flush(); ferr != nil {
					err = ferr
					break
				}
			}
			if rerr == io.EOF {
				break
			}
			if rerr != nil {
				err = rerr
				break
			}
		}
	}
	alive := stop()
	if err != nil {
		c.Close()
		// Tell the proxy the answer broke off (no clean end of the chunked
		// body), as httputil.ReverseProxy does.
		panic(http.ErrAbortHandler)
	}
	if !alive || resp.Close {
		c.Close()
		return
	}
	f.put(addr, c)
}
