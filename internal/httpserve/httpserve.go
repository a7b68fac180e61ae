// Package httpserve builds the platform's HTTP servers with limits that an
// anonymous client cannot outlast: the time its headers, its body and each
// write of its answer may take, and how long its connection may idle
// between requests. Every HTTP server CosmicAC runs (the API of `cosmicac
// up` and of the app-node, wrk-monitor, proxy-inference, every metrics
// listener) is made with New; docs/security.md ("HTTP servers") has the
// table of limits.
//
// Why not http.Server's ReadTimeout and WriteTimeout. Both are one limit
// for every route of a server, counted from the request's first byte: a
// ReadTimeout short enough to stop a client that sends a job spec one byte
// every 5 s also refuses a slow audio upload, and a WriteTimeout ends every
// server-sent-event stream (streamed completions, log follows) when it
// fires, whatever the handler does. So the servers set ReadHeaderTimeout,
// IdleTimeout and MaxHeaderBytes, and Limit bounds each request through
// http.ResponseController: a read deadline while its body arrives, a write
// deadline once its answer begins, which a streaming handler moves on as it
// streams (Stream, or its own ResponseController).
//
// One rule of net/http shapes Limit (server.go, Go 1.26): once a request's
// body has been read to its end (at once, for a request without a body),
// the server reads the connection in the background to notice the client
// leaving, and a read that fails, a deadline's timeout included, cancels
// the request's context. So a read deadline may only be set on a request
// whose body is still unread, and Limit clears it at the body's end: a read
// deadline set on a request without a body would cut a long answer (and
// cancel the handler's context) when it fires. (A server's ReadTimeout does
// not end a stream by itself: net/http clears it when the body ends.) A
// hijacked connection must keep no deadline: the code that hijacks clears
// the connection's deadlines (net/http's Hijack clears them too, in Go
// 1.26), and Limit sets none on it afterwards.
//
// It imports only the standard library; any package may import it.
package httpserve

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/cosmicac/cosmicac/internal/config"
)

// Limits bound what one client may hold of a server. A zero field takes
// DefaultLimits' value; none may be negative.
type Limits struct {
	// Header bounds the time to read a request's line and headers
	// (http.Server.ReadHeaderTimeout; for the first request, from the
	// connection's start).
	Header config.Duration `json:"header,omitempty"`
	// Body bounds the time for a request's body to arrive, from the end of
	// its headers. A client too slow is answered what the handler answers
	// to a failed read (the API: 408) and its connection is closed; a
	// handler that reads no body has the server discard it, within the
	// same limit.
	Body config.Duration `json:"body,omitempty"`
	// Upload is Body for the routes mounted with Upload (audio to
	// transcribe).
	Upload config.Duration `json:"upload,omitempty"`
	// Write bounds writing an answer, from its first byte (not the
	// handler's work before it: a model's answer may take minutes to
	// begin). For a stream (Stream) it bounds each write: a client that
	// stops reading is dropped, a long stream is not.
	Write config.Duration `json:"write,omitempty"`
	// Idle bounds the time a keep-alive connection may wait for its next
	// request (http.Server.IdleTimeout).
	Idle config.Duration `json:"idle,omitempty"`
	// MaxHeaderBytes bounds a request's line and headers
	// (http.Server.MaxHeaderBytes).
	MaxHeaderBytes int `json:"maxHeaderBytes,omitempty"`
}

// DefaultLimits are the limits of every server unless its config says
// otherwise:
//
//   - Header 10 s: a request line and headers fit in MaxHeaderBytes, which
//     the slowest link sends in well under that.
//   - Body 30 s: the JSON bodies are small (the API takes at most 1 MiB,
//     which 30 s allows at 35 KB/s); a client slower than that is holding
//     the connection, not sending.
//   - Upload 5 min: an audio file to transcribe (proxy-inference takes up
//     to 64 MiB, 220 KB/s over 5 min; OpenAI's own limit of 25 MB at
//     85 KB/s).
//   - Write 60 s: from the first byte of an answer, or for each write of a
//     stream; the API's answers fit in the connection's buffers at once, so
//     only a client that stops reading a large one meets it.
//   - Idle 30 s: longer than the gaps between a client's requests (the
//     CLI's, a browser's), so their connections are reused; Go's client
//     retries a request it can replay on a connection the server closed
//     while idle.
//   - MaxHeaderBytes 64 KiB: a token or API key is under 100 bytes, so this
//     is far above any legitimate request and a sixteenth of net/http's
//     default (1 MiB).
func DefaultLimits() Limits {
	return Limits{
		Header:         config.Duration(10 * time.Second),
		Body:           config.Duration(30 * time.Second),
		Upload:         config.Duration(5 * time.Minute),
		Write:          config.Duration(60 * time.Second),
		Idle:           config.Duration(30 * time.Second),
		MaxHeaderBytes: 64 << 10,
	}
}

// Validate reports every negative field.
func (l Limits) Validate() error {
	var errs []error
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"header", l.Header.D()}, {"body", l.Body.D()}, {"upload", l.Upload.D()}, {"write", l.Write.D()}, {"idle", l.Idle.D()}} {
		if f.d < 0 {
			errs = append(errs, fmt.Errorf("http.%s %v: must not be negative", f.name, f.d))
		}
	}
	if l.MaxHeaderBytes < 0 {
		errs = append(errs, fmt.Errorf("http.maxHeaderBytes %d: must not be negative", l.MaxHeaderBytes))
	}
	return errors.Join(errs...)
}

// WithDefaults is l with each zero field set to DefaultLimits' value.
func (l Limits) WithDefaults() Limits {
	d := DefaultLimits()
	for _, f := range []struct{ v, def *config.Duration }{
		{&l.Header, &d.Header}, {&l.Body, &d.Body}, {&l.Upload, &d.Upload}, {&l.Write, &d.Write}, {&l.Idle, &d.Idle},
	} {
		if *f.v == 0 {
			*f.v = *f.def
		}
	}
	if l.MaxHeaderBytes == 0 {
		l.MaxHeaderBytes = d.MaxHeaderBytes
	}
	return l
}

// New returns a server of h bounded by l (zero fields: the defaults):
// ReadHeaderTimeout, IdleTimeout and MaxHeaderBytes on the server, Limit
// around h, and no ReadTimeout or WriteTimeout (see the package comment).
// Its errors (a failed accept, a panicking handler) go to log at warn
// level; nil keeps net/http's (standard error). The caller sets the rest
// (BaseContext, shutdown hooks) and serves it.
func New(h http.Handler, l Limits, log *slog.Logger) *http.Server {
	l = l.WithDefaults()
	s := &http.Server{
		Handler:           Limit(l, h),
		ReadHeaderTimeout: l.Header.D(),
		IdleTimeout:       l.Idle.D(),
		MaxHeaderBytes:    l.MaxHeaderBytes,
	}
	if log != nil {
		s.ErrorLog = slog.NewLogLogger(log.Handler(), slog.LevelWarn)
	}
	return s
}

// Limit bounds each request of h by l (zero fields: the defaults): a
// request with a body must send it within l.Body (l.Upload under Upload),
// and its answer must be written within l.Write of its first byte. It is
// the handler of New's servers; use it alone only where a server is built
// otherwise.
func Limit(l Limits, h http.Handler) http.Handler {
	l = l.WithDefaults()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		lw := &writer{ResponseWriter: w, rc: http.NewResponseController(w), lim: l, start: time.Now()}
		// A request without a body has the server's background read going
		// already: a read deadline now would end it, and the request.
		if r.Body != nil && r.Body != http.NoBody {
			lw.body = &body{ReadCloser: r.Body, rc: lw.rc}
			_ = lw.rc.SetReadDeadline(lw.start.Add(l.Body.D()))
			r = r.WithContext(r.Context())
			r.Body = lw.body
		}
		h.ServeHTTP(lw, r)
		// What the handler left buffered, the server writes after it.
		if !lw.hijacked {
			lw.arm()
		}
	})
}

// Upload gives the requests of h Limits.Upload for their body instead of
// Limits.Body: mount the routes that take files with it, under a server's
// Limit.
func Upload(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Nothing has read the body yet: the route's handler is the reader.
		if lw := find(w); lw != nil && lw.body != nil && !lw.body.done.Load() {
			_ = lw.rc.SetReadDeadline(lw.start.Add(lw.lim.Upload.D()))
		}
		h.ServeHTTP(w, r)
	})
}

// Stream returns w for a streamed answer (server-sent events, an answer
// relayed as it comes): each write and flush through it first moves the
// connection's write deadline to now plus the server's Limits.Write, so
// that the limit bounds each write (a client that stops reading is
// dropped) and never the stream's length. Write through the returned
// writer only; under no Limit it uses DefaultLimits' Write.
func Stream(w http.ResponseWriter) http.ResponseWriter {
	d := DefaultLimits().Write
	if lw := find(w); lw != nil {
		d = lw.lim.Write
		lw.armed = true // the stream keeps the deadline from now on
	}
	return &stream{ResponseWriter: w, rc: http.NewResponseController(w), d: d.D()}
}

// find returns Limit's writer under w, through the Unwrap of the writers
// wrapping it (as http.ResponseController finds the server's).
func find(w http.ResponseWriter) *writer {
	for {
		switch t := w.(type) {
		case *writer:
			return t
		case interface{ Unwrap() http.ResponseWriter }:
			w = t.Unwrap()
		default:
			return nil
		}
	}
}

// writer is Limit's ResponseWriter: it sets the write deadline when the
// answer begins. Only the handler's goroutine writes, so armed needs no
// lock.
type writer struct {
	http.ResponseWriter
	rc    *http.ResponseController
	lim   Limits
	start time.Time
	body  *body // nil without a body
	armed bool  // the write deadline is set (or a Stream keeps it)
	// hijacked: the connection is the handler's (and its deadlines).
	hijacked bool
}

func (w *writer) arm() {
	if !w.armed {
		w.armed = true
		_ = w.rc.SetWriteDeadline(time.Now().Add(w.lim.Write.D()))
	}
}

func (w *writer) WriteHeader(code int) {
	if code >= 200 || code == http.StatusSwitchingProtocols {
		w.arm()
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *writer) Write(p []byte) (int, error) {
	w.arm()
	return w.ResponseWriter.Write(p)
}

// Flush implements http.Flusher for the handlers that look for one.
func (w *writer) Flush() { _ = w.FlushError() }

// FlushError is what http.ResponseController.Flush calls.
func (w *writer) FlushError() error {
	w.arm()
	return w.rc.Flush()
}

// Hijack is what http.ResponseController.Hijack calls: the connection is
// the caller's from then on, and Limit leaves its deadlines alone.
func (w *writer) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := w.rc.Hijack()
	if err == nil {
		w.hijacked = true
	}
	return c, brw, err
}

// Unwrap lets http.ResponseController reach the server's writer
// (deadlines, full duplex).
func (w *writer) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// body clears the read deadline once the request's body has been read to
// its end, before the server's background read could meet it. It may be
// read on another goroutine than the handler's (a reverse proxy's
// transport), hence the atomic.
type body struct {
	io.ReadCloser
	rc   *http.ResponseController
	done atomic.Bool
}

func (b *body) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && b.done.CompareAndSwap(false, true) {
		// net/http clears it as well, starting its background read; this
		// does not count on that.
		_ = b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}

// stream is Stream's writer.
type stream struct {
	http.ResponseWriter
	rc *http.ResponseController
	d  time.Duration
}

func (s *stream) arm() { _ = s.rc.SetWriteDeadline(time.Now().Add(s.d)) }

func (s *stream) Write(p []byte) (int, error) {
	s.arm()
	return s.ResponseWriter.Write(p)
}

// Flush implements http.Flusher for the handlers that look for one.
func (s *stream) Flush() { _ = s.FlushError() }

// FlushError is what http.ResponseController.Flush calls.
func (s *stream) FlushError() error {
	s.arm()
	return s.rc.Flush()
}

// Unwrap lets http.ResponseController reach the server's writer.
func (s *stream) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// Run serves hs on ln until ctx ends, then shuts it down, giving the
// requests in flight grace to finish (at most 5 s when grace is 0). It
// returns once hs has stopped: nil after a shutdown in time, else why it
// stopped. It closes ln. Every component that serves HTTP of its own
// (the app-node, wrk-monitor, proxy-inference) runs its server with it.
func Run(ctx context.Context, hs *http.Server, ln net.Listener, grace time.Duration) error {
	if grace <= 0 {
		grace = 5 * time.Second
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		if errors.Is(err, http.ErrServerClosed) { // closed by its owner
			return nil
		}
		return fmt.Errorf("serve on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grace)
	defer cancel()
	err := hs.Shutdown(sctx)
	<-errc // Serve returned ErrServerClosed
	if err != nil {
		return fmt.Errorf("shut down the server on %s: %w", ln.Addr(), err)
	}
	return nil
}
