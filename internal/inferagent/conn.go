package inferagent

import (
	"context"
	"net"
	"sync"
	"time"

	"github.com/cosmicac/cosmicac/internal/fabric"
)

// StreamConn is a fabric stream as a net.Conn, so that net/http can speak
// HTTP/1.1 over it: the proxy's http.Transport dials with DialStream and
// keeps such connections alive between requests; the agent's http.Server
// serves them through a Listener.
type StreamConn struct {
	*fabric.Stream
	local, remote net.Addr
	once          sync.Once
	done          chan struct{}
}

// NewStreamConn wraps s. local is this side's key.
func NewStreamConn(s *fabric.Stream, local fabric.PublicKey) *StreamConn {
	return &StreamConn{Stream: s, local: Addr(local), remote: Addr(s.Peer()), done: make(chan struct{})}
}

// Close ends the stream gracefully (fabric.Stream.Shutdown): net/http
// closes a connection after writing its last answer, which must still be
// delivered; the peer reads end-of-stream, which cancels its request.
func (c *StreamConn) Close() error {
	c.once.Do(func() {
		c.Stream.Shutdown()
		close(c.done)
	})
	return nil
}

// Done is closed once Close has been called.
func (c *StreamConn) Done() <-chan struct{} { return c.done }

func (c *StreamConn) LocalAddr() net.Addr  { return c.local }
func (c *StreamConn) RemoteAddr() net.Addr { return c.remote }

// SetDeadline sets both deadlines.
func (c *StreamConn) SetDeadline(t time.Time) error {
	c.Stream.SetReadDeadline(t)
	return c.Stream.SetWriteDeadline(t)
}

// Addr is a fabric key as a net.Addr.
type Addr fabric.PublicKey

func (a Addr) Network() string { return "fabric" }
func (a Addr) String() string  { return fabric.PublicKey(a).String() }

// DialStream opens a MethodHTTP stream to the agent with key and returns
// it as a net.Conn. It is a direct stream (a TCP+TLS connection of its own,
// fabric.OpenDirectStream) when the agent's address is known, so that a
// proxied request and each of its events cross no multiplexer.
func DialStream(ctx context.Context, n *fabric.Node, key fabric.PublicKey) (*StreamConn, error) {
	s, err := n.OpenDirectStream(ctx, key, MethodHTTP, nil, nil)
	if err != nil {
		return nil, err
	}
	return NewStreamConn(s, n.PublicKey()), nil
}

// Listener hands the streams a stream handler accepted to an http.Server.
type Listener struct {
	addr   net.Addr
	conns  chan net.Conn
	once   sync.Once
	closed chan struct{}
}

// NewListener makes a listener named by the local key.
func NewListener(local fabric.PublicKey) *Listener {
	return &Listener{addr: Addr(local), conns: make(chan net.Conn), closed: make(chan struct{})}
}

// Accept implements net.Listener.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

// Close implements net.Listener.
func (l *Listener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

// Addr implements net.Listener.
func (l *Listener) Addr() net.Addr { return l.addr }

// Serve hands c to Accept and waits until it is closed (or the listener
// is, or ctx ends). A stream handler calls it and returns when it does.
func (l *Listener) Serve(ctx context.Context, c *StreamConn) {
	select {
	case l.conns <- c:
	case <-l.closed:
		c.Close()
		return
	case <-ctx.Done():
		c.Close()
		return
	}
	select {
	case <-c.Done():
	case <-ctx.Done():
		c.Close()
	}
}
