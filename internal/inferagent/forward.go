package inferagent

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/cosmicac/cosmicac/internal/hop"
)

// forwarder passes a request the proxy sent on to the local runtime over
// pooled HTTP/1.1 keep-alive connections (hop.Pool: written and read in the
// handler's own goroutine, no transport read/write loops). Every read of a
// streamed answer (an SSE event) is flushed at once; an answer of known
// length is copied without per-read flushes.
type forwarder struct {
	pool *hop.Pool
}

// runtimeIdleFor is how long a connection to the runtime may rest before it
// is dropped: below uvicorn's 5 s keep-alive.
const runtimeIdleFor = 3 * time.Second

func newForwarder() *forwarder {
	d := net.Dialer{Timeout: 5 * time.Second}
	return &forwarder{pool: hop.NewPool(func(ctx context.Context, addr string) (net.Conn, error) {
		return d.DialContext(ctx, "tcp", addr)
	}, 1024, runtimeIdleFor)}
}

// closeIdle drops every idle connection.
func (f *forwarder) closeIdle() { f.pool.CloseIdle() }

// maxReplayBody bounds the request bodies kept to resend on a fresh
// connection when a pooled one turns out closed (the proxy caps bodies at
// 64 MiB; larger ones go through once).
const maxReplayBody = 64 << 20

var copyBufPool = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// serve forwards r to the runtime at addr and copies the answer to w.
func (f *forwarder) serve(w http.ResponseWriter, r *http.Request, addr string, fail func(error)) {
	ctx := r.Context()
	out := &http.Request{Method: r.Method, URL: r.URL, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: make(http.Header, len(r.Header)), Host: addr, ContentLength: r.ContentLength}
	out = out.WithContext(ctx)
	hop.CopyHeaders(out.Header, r.Header)
	if r.ContentLength >= 0 && r.ContentLength <= maxReplayBody {
		// The body, kept so that a request on a pooled connection the
		// runtime had closed can go again on a fresh one.
		var body []byte
		if r.ContentLength > 0 {
			body = make([]byte, r.ContentLength)
			if _, err := io.ReadFull(r.Body, body); err != nil {
				if ctx.Err() == nil {
					fail(err)
				}
				return
			}
			out.Body = io.NopCloser(bytes.NewReader(body))
		}
		out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	} else {
		out.Body = r.Body
	}
	resp, err := f.pool.Do(out, addr)
	if err != nil {
		if ctx.Err() == nil {
			fail(err)
		}
		return
	}
	copyResponse(w, resp)
}

func copyResponse(w http.ResponseWriter, resp *hop.Response) {
	h := w.Header()
	hop.CopyHeaders(h, resp.Header)
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
	resp.Finish(err == nil)
	if err != nil {
		// Tell the proxy the answer broke off (no clean end of the chunked
		// body), as httputil.ReverseProxy does.
		panic(http.ErrAbortHandler)
	}
}
