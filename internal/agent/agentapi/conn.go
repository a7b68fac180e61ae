package agentapi

import (
	"context"
	"net"
	"sync"
	"time"

	"github.com/cosmicac/cosmicac/internal/fabric"
)

// StreamConn is a fabric stream as a net.Conn, so that the proxy can speak
// HTTP/1.1 over it (the agent relays it to the runtime byte for byte): the
// proxy dials with DialStream and keeps such connections alive between
// requests.
type StreamConn struct {
	*fabric.Stream
	local, remote net.Addr
	once          sync.Once
}

// NewStreamConn wraps s. local is this side's key.
func NewStreamConn(s *fabric.Stream, local fabric.PublicKey) *StreamConn {
	return &StreamConn{Stream: s, local: Addr(local), remote: Addr(s.Peer())}
}

// Close ends the stream gracefully (fabric.Stream.Shutdown): what was
// written is still delivered; the agent reads end-of-stream and closes the
// runtime's connection, which stops any work for it.
func (c *StreamConn) Close() error {
	c.once.Do(c.Stream.Shutdown)
	return nil
}

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

// DialStream opens a MethodInferenceHTTP stream to the agent with key and returns
// it as a net.Conn. It is a direct stream (a TCP+TLS connection of its own,
// fabric.OpenDirectStream: one the agent parked with us, or dialled when its
// address is known), so that a proxied request and each of its events cross
// no multiplexer.
func DialInference(ctx context.Context, n *fabric.Node, key fabric.PublicKey) (*StreamConn, error) {
	s, err := n.OpenDirectStream(ctx, key, MethodInferenceHTTP, nil, nil)
	if err != nil {
		return nil, err
	}
	return NewStreamConn(s, n.PublicKey()), nil
}
