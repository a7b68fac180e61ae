package inferagent

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"sync"
	"time"

	"github.com/cosmicac/cosmicac/internal/agent/agentapi"
	"github.com/cosmicac/cosmicac/internal/fabric"
)

// How the agent passes the proxy's HTTP/1.1 (each agentapi.MethodInferenceHTTP
// stream) to the runtime depends on the runtime.
//
// vLLM and Parakeet keep their connections alive: each stream is relayed
// byte for byte to a connection of its own to the runtime (byteRelay), with
// no HTTP parsing in between, the cheapest hop (docs/benchmarks.md,
// "Inference"). Closing either end closes the other.
//
// llama.cpp's llama-server closes its connection after each streamed
// answer, which would cost the proxy a new fabric stream per request: for
// it the agent serves the proxy's HTTP/1.1 on the stream and forwards every
// request to the runtime (a reverse proxy of the
// standard library, on connections of its own to the runtime), flushing
// every write of the runtime's answer to the stream at once, so SSE events
// are never held back. The stream outlives the runtime's connections: a
// runtime that closes its connection after each answer (llama-server does
// after a stream) leaves the proxy's keep-alive stream open, so a request
// costs no new fabric stream. A client that leaves the proxy closes the
// stream, which cancels the request to the runtime, and the runtime stops
// generating. Only the hop-by-hop headers change on the way (RFC 9110
// 7.6.1); no X-Forwarded header is added, and the body is passed as the
// runtime wrote it (no compression is asked for or undone).

// streamIdle is how long a stream may rest between requests; the proxy
// retires its connections to agents sooner (agentIdleFor there).
const streamIdle = 2 * time.Minute

// relayLinger bounds how long, after the runtime closed a connection (its
// keep-alive timeout), the agent waits for the proxy to close its end.
const relayLinger = 10 * time.Second

var relayBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// relay is the agent's HTTP server of the proxy's streams (llama.cpp).
type relay struct {
	srv *http.Server
	ln  *streamListener
}

// newRelay returns the server forwarding to whatever runtime addr answers
// ("" while none runs: 503).
func newRelay(addr func() string) *relay {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			a := addr()
			if a == "" {
				return nil, errors.New("the replica's runtime is not running")
			}
			return dialRuntime(ctx, a)
		},
		// A connection per request: llama-server closes its connections
		// after a streamed answer or a few requests (cpp-httplib's
		// keep-alive count), and a POST written to a connection it has just
		// closed would fail (the transport retries only idempotent
		// requests). A dial to the engine on its socket or loopback costs
		// microseconds.
		DisableKeepAlives:  true,
		DisableCompression: true, // the runtime's bytes as they are
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.Out.URL.Scheme, r.Out.URL.Host = "http", "runtime"
			r.Out.Host = r.In.Host
		},
		Transport:     tr,
		FlushInterval: -1, // every write, at once
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadGateway)
			w.Write([]byte(`{"error":{"message":"the replica's runtime did not answer","type":"runtime_unavailable","code":502}}`))
		},
	}
	r := &relay{ln: newStreamListener()}
	r.srv = &http.Server{Handler: rp, IdleTimeout: streamIdle, ReadHeaderTimeout: streamIdle,
		ErrorLog: nil}
	go r.srv.Serve(r.ln)
	return r
}

// close stops the server and its streams.
func (r *relay) close() {
	r.srv.Close()
	r.ln.Close()
}

// openRelay answers an agentapi.MethodInferenceHTTP stream: refused unless
// this VMI is the replica's head and its runtime runs, else relayed
// (byteRelay) or served (relay) until the proxy closes it.
func (a *Agent) openRelay(ctx context.Context, req *fabric.StreamRequest) error {
	if a.cfg.Placement.Role() != agentapi.PlacementHead {
		return fabric.Errorf(fabric.CodeUnavailable, "this VMI is a headless worker; send requests to the replica's head")
	}
	addr := a.runtimeAddr()
	if addr == "" {
		return fabric.Errorf(fabric.CodeUnavailable, "the replica's runtime is not running")
	}
	if a.relay == nil {
		rc, err := dialRuntime(ctx, addr)
		if err != nil {
			return fabric.Errorf(fabric.CodeUnavailable, "the replica's runtime did not answer: %v", err)
		}
		s, err := req.Accept(nil)
		if err != nil {
			rc.Close()
			return err
		}
		byteRelay(s, rc)
		return nil
	}
	s, err := req.Accept(nil)
	if err != nil {
		return err
	}
	c := &streamConn{Stream: s, done: make(chan struct{})}
	if !a.relay.ln.put(c) {
		s.Close()
		return nil
	}
	select {
	case <-c.done:
	case <-ctx.Done():
		c.Close()
	}
	return nil
}

// streamListener hands the accepted streams to the HTTP server.
type streamListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newStreamListener() *streamListener {
	return &streamListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

// put gives c to the server; false once the listener is closed.
func (l *streamListener) put(c net.Conn) bool {
	select {
	case l.conns <- c:
		return true
	case <-l.done:
		return false
	}
}

func (l *streamListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *streamListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *streamListener) Addr() net.Addr { return streamAddr{} }

// streamConn is a fabric stream as the net.Conn an HTTP server serves.
type streamConn struct {
	*fabric.Stream
	done chan struct{}
	once sync.Once
}

func (c *streamConn) Close() error {
	err := c.Stream.Close()
	c.once.Do(func() { close(c.done) })
	return err
}

func (c *streamConn) LocalAddr() net.Addr  { return streamAddr{} }
func (c *streamConn) RemoteAddr() net.Addr { return streamAddr{peer: c.Peer().Short()} }
func (c *streamConn) SetDeadline(t time.Time) error {
	return errors.Join(c.SetReadDeadline(t), c.SetWriteDeadline(t))
}

// streamAddr names a stream's end: the peer's key.
type streamAddr struct{ peer string }

func (streamAddr) Network() string  { return "fabric" }
func (a streamAddr) String() string { return "fabric:" + a.peer }

// byteRelay copies between the proxy's stream s and the runtime's connection
// rc until either ends.
func byteRelay(s *fabric.Stream, rc net.Conn) {
	up := make(chan struct{})
	go func() {
		defer close(up)
		bp := relayBufs.Get().(*[]byte)
		defer relayBufs.Put(bp)
		io.CopyBuffer(struct{ io.Writer }{rc}, s, *bp) // the proxy's requests
		// The proxy closed its end (it retired the connection, or the
		// client left): close the runtime's, which stops its work.
		rc.Close()
	}()
	bp := relayBufs.Get().(*[]byte)
	defer relayBufs.Put(bp)
	_, err := io.CopyBuffer(s, struct{ io.Reader }{rc}, *bp) // the runtime's answers
	select {
	case <-up: // the proxy ended it
		s.Close()
		return
	default:
	}
	if err != nil {
		// The runtime's connection broke: cut the stream, so that the
		// proxy sees an answer end early as an error, never as complete.
		s.Close()
		rc.Close()
		<-up
		return
	}
	// The runtime closed the connection after a complete answer.
	s.CloseWrite()
	t := time.NewTimer(relayLinger)
	defer t.Stop()
	select {
	case <-up:
	case <-t.C:
	}
	s.Close()
	rc.Close()
	<-up
}
