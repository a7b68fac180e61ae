package fabric

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"sync"
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
	// closeUnserved closes a connection this node never served (a dial
	// race's loser), telling the peer so: the calls it sent on it were
	// never read, and may go again on another connection (notProcessed).
	closeUnserved()
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
	// callParent is the context a call (not a stream) served on the stream
	// derives from, given the connection's (which ends with the connection
	// and the node).
	callParent(conn context.Context) context.Context
	// watchCaller arranges for cancel to run if the caller gives up (aborts
	// the stream) while its call is being served; unwatchCaller ends the
	// watch and reports whether the caller gave up. No frame may be read
	// between the two. They cost no allocation per call.
	watchCaller(cancel context.CancelFunc)
	unwatchCaller() (gone bool)
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
func (q quicConn) closeUnserved()                       { q.c.CloseWithError(codeUnserved, "lost the dial race") }
func (q quicConn) done() <-chan struct{}                { return q.c.Context().Done() }
func (q quicConn) remoteAddr() net.Addr                 { return q.c.RemoteAddr() }
func (q quicConn) transport() string                    { return TransportQUIC }
func (s quicStream) closeWrite() error                  { return s.s.Close() }
func (s quicStream) Read(p []byte) (int, error)         { return s.s.Read(p) }
func (s quicStream) Write(p []byte) (int, error)        { return s.s.Write(p) }
func (s quicStream) SetReadDeadline(t time.Time) error  { return s.s.SetReadDeadline(t) }
func (s quicStream) SetWriteDeadline(t time.Time) error { return s.s.SetWriteDeadline(t) }

type quicStream struct{ s *quic.Stream }

// codeUnserved is the QUIC application error code that closes a
// connection its dialler never served (closeUnserved).
const codeUnserved quic.ApplicationErrorCode = 2

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

// callParent: the context of the stream's sending half ends when the peer
// stops reading (the STOP_SENDING of its abort) or the connection ends
// (which the node's Close and Revoke do), so a call's context derived from
// it needs no watch of its own: no goroutine, no packet, no registration.
func (s quicStream) callParent(context.Context) context.Context { return s.s.Context() }
func (s quicStream) watchCaller(context.CancelFunc)             {}
func (s quicStream) unwatchCaller() bool                        { return s.s.Context().Err() != nil }

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
	return newYamuxStream(s), nil
}

func (y yamuxConn) acceptStream(ctx context.Context) (rawStream, error) {
	s, err := y.s.AcceptStreamWithContext(ctx)
	if err != nil {
		return nil, err
	}
	return newYamuxStream(s), nil
}

func (y yamuxConn) close() error          { return y.s.Close() }
func (y yamuxConn) closeUnserved()        { y.s.Close() }
func (y yamuxConn) done() <-chan struct{} { return y.s.CloseChan() }
func (y yamuxConn) remoteAddr() net.Addr  { return y.under.RemoteAddr() }
func (y yamuxConn) transport() string     { return TransportTCP }

type yamuxStream struct {
	s *yamux.Stream
	w *yamuxWatch // made on the first served call
}

func newYamuxStream(s *yamux.Stream) *yamuxStream { return &yamuxStream{s: s} }

func (s *yamuxStream) Read(p []byte) (int, error)         { return s.s.Read(p) }
func (s *yamuxStream) Write(p []byte) (int, error)        { return s.s.Write(p) }
func (s *yamuxStream) closeWrite() error                  { return s.s.Close() }
func (s *yamuxStream) SetReadDeadline(t time.Time) error  { return s.s.SetReadDeadline(t) }
func (s *yamuxStream) SetWriteDeadline(t time.Time) error { return s.s.SetWriteDeadline(t) }

func (s *yamuxStream) callParent(conn context.Context) context.Context { return conn }

// watchAfter is how long a call served on a yamux stream runs before a
// goroutine starts watching for the caller giving up. Most calls answer
// sooner, so they cost no goroutine; a cancelled call's handler learns of
// it at most this late.
const watchAfter = time.Millisecond

// yamuxWatch watches a yamux stream's caller during long calls: a caller
// sends nothing while it waits for its answer, so anything read meanwhile
// (its abort arrives as end-of-stream, yamux having no reset) means it gave
// up. Once a call has run watchAfter, a timer (one per stream, reset for
// each call) starts the read; unwatchCaller interrupts it with a past read
// deadline.
type yamuxWatch struct {
	s    *yamux.Stream
	t    *time.Timer
	done chan bool // the watching read's verdict: the caller gave up

	mu       sync.Mutex
	cancel   context.CancelFunc // the call being watched; nil between calls
	watching bool               // a read is watching it
}

// watch runs on the timer's goroutine once a call has run watchAfter.
func (w *yamuxWatch) watch() {
	w.mu.Lock()
	cancel := w.cancel
	if cancel == nil || w.watching { // the call ended first
		w.mu.Unlock()
		return
	}
	w.watching = true
	w.mu.Unlock()
	var b [1]byte
	n, err := w.s.Read(b[:])
	gone := n > 0 || !isTimeout(err)
	if gone {
		cancel()
	}
	w.done <- gone
}

func (s *yamuxStream) watchCaller(cancel context.CancelFunc) {
	w := s.w
	if w == nil {
		w = &yamuxWatch{s: s.s, done: make(chan bool, 1)}
		w.t = time.AfterFunc(time.Hour, w.watch)
		w.t.Stop()
		s.w = w
	}
	w.mu.Lock()
	w.cancel, w.watching = cancel, false
	w.mu.Unlock()
	w.t.Reset(watchAfter)
}

func (s *yamuxStream) unwatchCaller() bool {
	w := s.w
	w.t.Stop()
	w.mu.Lock()
	watching := w.watching
	w.cancel, w.watching = nil, false
	w.mu.Unlock()
	if !watching {
		return false
	}
	s.s.SetReadDeadline(time.Unix(1, 0))
	gone := <-w.done
	s.s.SetReadDeadline(time.Time{})
	return gone
}

// shutdown half-closes; yamux delivers what was written first.
func (s *yamuxStream) shutdown() { s.s.Close() }

// abort half-closes (yamux has no reset) and unblocks local readers and
// writers; the peer sees end-of-stream.
func (s *yamuxStream) abort() {
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
	// A peer that answers nothing for quicIdleTimeout is gone, on either
	// transport: a ping every third of it, and its answer (as any frame's
	// write) awaited for the rest. The kernel acknowledges TCP for a
	// process that hangs, so without this a frozen peer held the fallback
	// for 45 s (15 s to the ping, 30 s for its answer).
	c.KeepAliveInterval = quicIdleTimeout / 3
	c.ConnectionWriteTimeout = quicIdleTimeout - c.KeepAliveInterval
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
	var ae *quic.ApplicationError
	var inf inFlight
	// A yamux session already shut down refuses the stream, or the write
	// on a connection already gone: nothing was sent. One that shuts down
	// once the request is on its way (inFlight) may have delivered it.
	shutdown := errors.Is(err, yamux.ErrSessionShutdown) && !errors.As(err, &inf)
	return errors.As(err, &sr) || shutdown ||
		errors.As(err, &ae) && ae.Remote && ae.ErrorCode == codeUnserved
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
