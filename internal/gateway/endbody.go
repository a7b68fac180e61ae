package gateway

import (
	"errors"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// endBodyModule is the Caddy handler, first in every route, that stops
// reading a request's body once its answer begins.
//
// Why. A component (internal/httpserve) cuts a body that does not arrive
// within its limit: it answers (408, or its refusal without reading the
// body) and closes the connection. Behind Caddy, an HTTP/1 client's
// connection then stayed open about a minute longer: when the upstream
// connection closed, the reverse proxy's transport closed the request
// body, and net/http's server read on what was left of it (up to 256 KiB,
// hoping to reuse the connection) while holding back the answer, until
// Caddy's read idle timeout (60 s from the last read) fired; and as that
// read failed under the server's own discard of the body, net/http took
// the body as consumed and read the client's next bytes as a new request,
// until read_header_timeout. So a body sent a byte every few seconds was
// answered limit+60 s after its headers, and its connection closed 10 s
// later.
//
// What. Once the answer begins (its status, 200 or more, or its first
// byte) or the proxy returns while an HTTP/1 request's body has not
// arrived whole, nothing will read the rest: the handler sets the
// connection's read deadline to now, so that no read of the body waits,
// and answers Connection: close, so that net/http neither discards the
// rest nor reads it as a request; the client has the component's answer
// and the connection closes at once. A component's Go server reads a
// body whole before it answers unless it gives up on it (when it closes
// the connection anyway), so a body that is read (an upload, the job
// relay's, a streamed completion's request) is never cut here, and
// requests without a body (server-sent events, WebSocket upgrades) are
// left alone. HTTP/2 and HTTP/3 need none of it: the stream ends with the
// handler and an unread body with it.
const endBodyModule = "cosmicac_end_body"

func init() { caddy.RegisterModule(endBody{}) }

// endBody is the http.handlers.cosmicac_end_body module.
type endBody struct{}

func (endBody) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers." + endBodyModule,
		New: func() caddy.Module { return new(endBody) },
	}
}

func (endBody) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	if r.ProtoMajor != 1 || r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
		return next.ServeHTTP(w, r)
	}
	b := &trackedBody{ReadCloser: r.Body, length: r.ContentLength}
	r.Body = b
	ew := &endWriter{ResponseWriterWrapper: &caddyhttp.ResponseWriterWrapper{ResponseWriter: w}, body: b}
	err := next.ServeHTTP(ew, r)
	// The proxy failed (Caddy writes its error status after this
	// handler) or wrote nothing (net/http writes a 200): the same.
	ew.end()
	b.stop()
	return err
}

// trackedBody is a request's body that knows when it has arrived whole:
// its declared length read, or EOF. The reverse proxy's transport reads
// it on its own goroutine.
type trackedBody struct {
	io.ReadCloser
	length int64 // -1: chunked
	read   atomic.Int64
	whole  atomic.Bool

	mu      sync.Mutex // held by a Read, and by stop
	stopped bool
}

// errBodyEnded is what a read of a body after its handler returned gets.
var errBodyEnded = errors.New("gateway: the request's handler has returned; its body is no longer read")

func (b *trackedBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.stopped {
		return 0, errBodyEnded
	}
	n, err := b.ReadCloser.Read(p)
	if got := b.read.Add(int64(n)); err == io.EOF || b.length >= 0 && got >= b.length {
		b.whole.Store(true)
	}
	return n, err
}

// stop ends the reads of the body as its handler returns: a Read in
// flight ends first (it does at once: the body has arrived whole, or
// endWriter.end has set the connection's read deadline to now), and later
// ones read nothing. Without it the reverse proxy's transport, which
// writes the body upstream on a goroutine of its own, could still be
// reading when Caddy's request log reads the count its body reader keeps
// (caddyhttp's lengthReader, unsynchronized): the race detector caught
// the two in TestSlowBodyIsCutAsTheComponentCutsIt.
func (b *trackedBody) stop() {
	b.mu.Lock()
	b.stopped = true
	b.mu.Unlock()
}

// endWriter ends the body when the answer begins. Only the handler's
// goroutine writes.
type endWriter struct {
	*caddyhttp.ResponseWriterWrapper
	body *trackedBody
	once sync.Once
}

// end stops reading the body unless it has arrived whole (see
// endBodyModule).
func (w *endWriter) end() {
	w.once.Do(func() {
		if w.body.whole.Load() {
			return
		}
		// Before the header is written: net/http then skips its discard
		// of the body and closes the connection after the answer.
		w.Header().Set("Connection", "close")
		// Through Caddy's read idle timeout, which keeps it as the
		// ceiling of its own deadlines.
		_ = http.NewResponseController(w.ResponseWriterWrapper).SetReadDeadline(time.Now())
	})
}

func (w *endWriter) WriteHeader(code int) {
	if code >= http.StatusOK {
		w.end()
	}
	w.ResponseWriterWrapper.WriteHeader(code)
}

func (w *endWriter) Write(p []byte) (int, error) {
	w.end()
	return w.ResponseWriterWrapper.Write(p)
}

func (w *endWriter) ReadFrom(r io.Reader) (int64, error) {
	w.end()
	return w.ResponseWriterWrapper.ReadFrom(r)
}

// FlushError is what http.ResponseController.Flush calls: a flush before
// the status writes a 200.
func (w *endWriter) FlushError() error {
	w.end()
	return http.NewResponseController(w.ResponseWriterWrapper).Flush()
}

// Flush implements http.Flusher for the handlers that look for one.
func (w *endWriter) Flush() { _ = w.FlushError() }

// Interface guards.
var (
	_ caddyhttp.MiddlewareHandler = endBody{}
	_ io.ReaderFrom               = (*endWriter)(nil)
)
