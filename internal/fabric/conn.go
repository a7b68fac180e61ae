package fabric

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"time"

	"github.com/hashicorp/yamux"
	"github.com/quic-go/quic-go"
)

// Transport names, as reported in PingReply and logs.
const (
	TransportQUIC = "quic"
	TransportTCP  = "tcp"
)

// muxConn is one authenticated, multiplexed connection to a peer.
type muxConn interface {
	openStream(ctx context.Context) (rawStream, error)
	acceptStream(ctx context.Context) (rawStream, error)
	close() error
	done() <-chan struct{}
	remoteAddr() net.Addr
	transport() string
}

// rawStream is one bidirectional stream of a muxConn.
type rawStream interface {
	io.Reader
	io.Writer
	// closeWrite sends end-of-stream; reading goes on.
	closeWrite() error
	// abort stops both directions at once; pending reads and writes fail.
	abort()
	// shutdown ends the stream gracefully: what was written is delivered,
	// then end-of-stream; what the peer sends from now on is discarded.
	shutdown()
	SetReadDeadline(time.Time) error
	SetWriteDeadline(time.Time) error
	// watchCaller arranges for cancel to run if the caller gives up (aborts
	// the stream) while its call is being served; stop ends the watch and
	// reports whether the caller gave up. No frame may be read between the
	// two.
	watchCaller(cancel context.CancelFunc) (stop func() (gone bool))
}

// ---- QUIC

type quicConn struct{ c *quic.Conn }

func (q quicConn) openStream(ctx context.Context) (rawStream, error) {
	s, err := q.c.OpenStreamSync(ctx)
	if err != nil {
		return nil, err
	}
	return quicStream{s}, nil
}

func (q quicConn) acceptStream(ctx context.Context) (rawStream, error) {
	s, err := q.c.AcceptStream(ctx)
	if err != nil {
		return nil, err
	}
	return quicStream{s}, nil
}

func (q quicConn) close() error                         { return q.c.CloseWithError(0, "closed") }
func (q quicConn) done() <-chan struct{}                { return q.c.Context().Done() }
func (q quicConn) remoteAddr() net.Addr                 { return q.c.RemoteAddr() }
func (q quicConn) transport() string                    { return TransportQUIC }
func (s quicStream) closeWrite() error                  { return s.s.Close() }
func (s quicStream) Read(p []byte) (int, error)         { return s.s.Read(p) }
func (s quicStream) Write(p []byte) (int, error)        { return s.s.Write(p) }
func (s quicStream) SetReadDeadline(t time.Time) error  { return s.s.SetReadDeadline(t) }
func (s quicStream) SetWriteDeadline(t time.Time) error { return s.s.SetWriteDeadline(t) }

type quicStream struct{ s *quic.Stream }

// streamAborted is the QUIC application error code of an aborted stream.
const streamAborted quic.StreamErrorCode = 1

// abort resets our half (RESET_STREAM) and asks the peer to stop sending
// (STOP_SENDING).
func (s quicStream) abort() {
	s.s.CancelWrite(streamAborted)
	s.s.CancelRead(streamAborted)
}

// shutdown sends FIN after the data (delivered reliably, unlike after
// CancelWrite) and STOP_SENDING.
func (s quicStream) shutdown() {
	s.s.Close()
	s.s.CancelRead(streamAborted)
}

// watchCaller: the context of the stream's sending half ends when the peer
// stops reading (the STOP_SENDING of its abort) or the connection ends; it
// costs no goroutine and no packet.
func (s quicStream) watchCaller(cancel context.CancelFunc) func() bool {
	ctx := s.s.Context()
	stop := context.AfterFunc(ctx, cancel)
	return func() bool {
		stop()
		return ctx.Err() != nil
	}
}

// ---- TCP + TLS + yamux

type yamuxConn struct {
	s     *yamux.Session
	under net.Conn
}

func (y yamuxConn) openStream(ctx context.Context) (rawStream, error) {
	// yamux opens streams without a round trip; only a full backlog blocks.
	s, err := y.s.OpenStream()
	if err != nil {
		return nil, err
	}
	return yamuxStream{s}, nil
}

func (y yamuxConn) acceptStream(ctx context.Context) (rawStream, error) {
	s, err := y.s.AcceptStreamWithContext(ctx)
	if err != nil {
		return nil, err
	}
	return yamuxStream{s}, nil
}

func (y yamuxConn) close() error          { return y.s.Close() }
func (y yamuxConn) done() <-chan struct{} { return y.s.CloseChan() }
func (y yamuxConn) remoteAddr() net.Addr  { return y.under.RemoteAddr() }
func (y yamuxConn) transport() string     { return TransportTCP }

type yamuxStream struct{ s *yamux.Stream }

func (s yamuxStream) Read(p []byte) (int, error)         { return s.s.Read(p) }
func (s yamuxStream) Write(p []byte) (int, error)        { return s.s.Write(p) }
func (s yamuxStream) closeWrite() error                  { return s.s.Close() }
func (s yamuxStream) SetReadDeadline(t time.Time) error  { return s.s.SetReadDeadline(t) }
func (s yamuxStream) SetWriteDeadline(t time.Time) error { return s.s.SetWriteDeadline(t) }

// watchCaller: a caller sends nothing while it waits for its answer, so
// anything read meanwhile (its abort arrives as end-of-stream, yamux having
// no reset) means it gave up. A goroutine reads until stop interrupts it with
// a past read deadline.
func (s yamuxStream) watchCaller(cancel context.CancelFunc) func() bool {
	done := make(chan bool, 1)
	go func() {
		var b [1]byte
		n, err := s.s.Read(b[:])
		gone := n > 0 || !isTimeout(err)
		if gone {
			cancel()
		}
		done <- gone
	}()
	return func() bool {
		s.s.SetReadDeadline(time.Unix(1, 0))
		gone := <-done
		s.s.SetReadDeadline(time.Time{})
		return gone
	}
}

// shutdown half-closes; yamux delivers what was written first.
func (s yamuxStream) shutdown() { s.s.Close() }

// abort half-closes (yamux has no reset) and unblocks local readers and
// writers; the peer sees end-of-stream.
func (s yamuxStream) abort() {
	s.s.Close()
	past := time.Unix(1, 0)
	s.s.SetDeadline(past)
}

// coalescer sits between a yamux session and its TLS connection and joins
// each data frame's 12-byte header with the body yamux writes right after it.
// Over TLS on a TCP_NODELAY socket every Write is a record and a segment, so
// without it each data frame costs two. Only yamux's send loop writes, one
// frame at a time, so a held header is always followed by its body.
type coalescer struct {
	net.Conn
	hdr []byte // a data frame header waiting for its body
	buf []byte
}

const (
	yamuxHeaderSize = 12
	maxCoalesce     = 16 << 10 // one TLS record
)

func (c *coalescer) Write(p []byte) (int, error) {
	if len(c.hdr) > 0 {
		c.buf = append(append(c.buf[:0], c.hdr...), p...)
		c.hdr = c.hdr[:0]
		if _, err := c.Conn.Write(c.buf); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	// version 0, type 0 (data), then flags, stream ID and body length. Large
	// bodies fill records of their own: only small ones are worth a copy.
	if len(p) == yamuxHeaderSize && p[0] == 0 && p[1] == 0 {
		if n := binary.BigEndian.Uint32(p[8:]); n == 0 || n > maxCoalesce {
			return c.Conn.Write(p)
		}
		c.hdr = append(c.hdr[:0], p...)
		return len(p), nil
	}
	return c.Conn.Write(p)
}

func yamuxConfig() *yamux.Config {
	c := yamux.DefaultConfig()
	c.AcceptBacklog = 4096
	c.KeepAliveInterval = 15 * time.Second
	c.ConnectionWriteTimeout = 30 * time.Second
	c.MaxStreamWindowSize = 4 << 20
	c.StreamOpenTimeout = 30 * time.Second
	c.LogOutput = io.Discard
	return c
}

// ---- error classification

// notProcessed reports whether err proves the peer never processed what we
// sent on the connection: a QUIC stateless reset comes from a peer process
// that has no state for the connection (it restarted), and a yamux session
// already shut down before the stream was opened carried nothing.
func notProcessed(err error) bool {
	var sr *quic.StatelessResetError
	return errors.As(err, &sr) || errors.Is(err, yamux.ErrSessionShutdown)
}

// isRemoteRefusal reports whether a handshake-time error is the peer's TLS
// alert refusing our certificate.
func isRemoteRefusal(err error) bool {
	var te *quic.TransportError
	if errors.As(err, &te) && te.Remote && te.ErrorCode.IsCryptoError() {
		return true
	}
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "remote error"
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}
