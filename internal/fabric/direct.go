package fabric

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"time"
)

// Direct streams.
//
// A multiplexed connection (QUIC, or yamux over TCP+TLS) hands every read
// and write between goroutines: the connection's send and receive loops
// stand between a stream and its socket. For a stream that carries a hot
// byte pipe (proxied inference: HTTP/1.1 with server-sent events) those
// hand-offs are most of the cost of a hop. A direct stream is a TCP+TLS 1.3
// connection of its own (ALPN alpnDirect) that carries exactly one stream and
// no multiplexer: a Write is one TLS record and one send on the socket, a
// Read one receive, in the caller's goroutine. The handshake proves and pins
// both keys and checks the server's policy exactly as for any other
// connection, and the stream's method is served by the same handler as an
// OpenStream one (HandleStream), with the same access checks.

// TransportTCPDirect names a direct stream's connection in logs.
const TransportTCPDirect = "tcp-direct"

// directLinger bounds how long the serving side of a finished direct stream
// waits for the opener to close its end before it closes the connection
// (closing with unread data would reset what the opener has not read yet).
const directLinger = 5 * time.Second

var errDirect = errors.New("fabric: a direct connection carries one stream")

// directConn is one direct stream's connection. It is both the stream and,
// for the node's bookkeeping (Close, Revoke), the connection.
type directConn struct {
	tc  *tls.Conn
	raw net.Conn

	once    sync.Once
	closed  chan struct{}
	onClose func()
}

func newDirectConn(tc *tls.Conn, raw net.Conn) *directConn {
	return &directConn{tc: tc, raw: raw, closed: make(chan struct{})}
}

func (d *directConn) Read(p []byte) (int, error)         { return d.tc.Read(p) }
func (d *directConn) Write(p []byte) (int, error)        { return d.tc.Write(p) }
func (d *directConn) SetReadDeadline(t time.Time) error  { return d.tc.SetReadDeadline(t) }
func (d *directConn) SetWriteDeadline(t time.Time) error { return d.tc.SetWriteDeadline(t) }

// closeWrite sends TLS close_notify (the peer reads end-of-stream) and a
// TCP FIN.
func (d *directConn) closeWrite() error {
	err := d.tc.CloseWrite()
	if cw, ok := d.raw.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
	return err
}

// abort resets the connection: the peer's reads and writes fail (a cut, not
// an end), and so do pending local ones.
func (d *directConn) abort() {
	if tc, ok := d.raw.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	d.close()
}

// shutdown sends close_notify and FIN after the data, then discards what
// the peer still sends until it closes (at most directLinger) before
// closing: closing with unread data would reset the connection and could
// lose the data's tail.
func (d *directConn) shutdown() {
	d.closeWrite()
	go func() {
		d.SetReadDeadline(time.Now().Add(directLinger))
		io.Copy(io.Discard, d)
		d.close()
	}()
}

// watchCaller: the direct opener only opens streams; a call sent on a direct
// connection is served to completion.
func (d *directConn) watchCaller(context.CancelFunc)                  {}
func (d *directConn) unwatchCaller() bool                             { return false }
func (d *directConn) callParent(conn context.Context) context.Context { return conn }

func (d *directConn) close() error {
	var err error
	d.once.Do(func() {
		err = d.raw.Close()
		close(d.closed)
		if d.onClose != nil {
			d.onClose()
		}
	})
	return err
}

func (d *directConn) closeUnserved()                                  { d.close() }
func (d *directConn) openStream(context.Context) (rawStream, error)   { return nil, errDirect }
func (d *directConn) acceptStream(context.Context) (rawStream, error) { return nil, errDirect }
func (d *directConn) done() <-chan struct{}                           { return d.closed }
func (d *directConn) remoteAddr() net.Addr                            { return d.raw.RemoteAddr() }
func (d *directConn) transport() string                               { return TransportTCPDirect }

// track adds a direct connection to the node's connections (so that Close
// and Revoke end it) without making it serve calls; it is forgotten when it
// closes. It reports false, having closed it, once the node is closed.
func (n *Node) track(key PublicKey, d *directConn) (*peerConn, bool) {
	pc := &peerConn{c: d, key: key, ctx: closeCtx(n.ctx, d.closed)}
	d.onClose = func() {
		n.mu.Lock()
		delete(n.all, pc)
		n.mu.Unlock()
	}
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		d.close()
		return nil, false
	}
	n.all[pc] = struct{}{}
	n.mu.Unlock()
	return pc, true
}

// serveDirect serves the one stream of a direct connection (accepted, or
// parked with the peer), waiting up to firstWait for it to be opened, then
// closes the connection once the opener has closed its end (or after
// directLinger).
func (n *Node) serveDirect(key PublicKey, tc *tls.Conn, raw net.Conn, firstWait time.Duration) {
	d := newDirectConn(tc, raw)
	pc, ok := n.track(key, d)
	if !ok {
		return
	}
	defer d.close()
	n.serveStreamWait(pc, d, firstWait)
	select {
	case <-d.closed:
		return
	default:
	}
	d.SetReadDeadline(time.Now().Add(directLinger))
	io.Copy(io.Discard, d)
}

// OpenDirectStream is OpenStream on a TCP+TLS connection of its own, with
// no multiplexer between the stream and its socket: for long-lived, busy
// byte pipes (a pool of them carries proxied inference requests). Closing
// the stream closes the connection. It needs an address of the peer and the
// TCP transport; without them, or when the peer cannot be dialled directly
// (it serves no TCP, or predates direct streams), it falls back to
// OpenStream, which may use a connection the peer opened. A peer that
// refuses our key is not tried again.
func (n *Node) OpenDirectStream(ctx context.Context, key PublicKey, method string, params, reply any) (*Stream, error) {
	if key == n.id.pub {
		return nil, Errorf(CodeBadRequest, "a node cannot call itself over the fabric")
	}
	p, err := encodeParams(params)
	if err != nil {
		return nil, err
	}
	n.mu.Lock()
	addrs, closed := slices.Clone(n.book[key]), n.closed
	n.mu.Unlock()
	if closed {
		return nil, Errorf(CodeUnavailable, "node closed")
	}
	if !slices.Contains(n.cfg.Transports, TransportTCP) {
		return n.OpenStream(ctx, key, method, p, reply)
	}
	if len(addrs) == 0 {
		// The peer only dials out: use a connection it parked with us.
		for {
			d := n.takeParked(ctx, key)
			if d == nil {
				return n.OpenStream(ctx, key, method, p, reply)
			}
			st, err := n.openOn(ctx, d, key, method, p)
			if err == nil {
				st.transport = TransportTCPDirect
				if err := st.decodeReply(reply); err != nil {
					return nil, err
				}
				return st, nil
			}
			d.close()
			var fe *Error
			if errors.As(err, &fe) || ctx.Err() != nil {
				return nil, n.wrapCallErr(ctx, key, method, err)
			}
			// The parked connection had died; try the next.
		}
	}
	d, err := n.dialDirect(ctx, key, addrs)
	if err != nil {
		if ErrorCode(err) == CodeRefused || ctx.Err() != nil {
			return nil, err
		}
		n.log.Debug("direct stream: dial failed; using a multiplexed connection", "peer", key.Short(), "err", err)
		return n.OpenStream(ctx, key, method, p, reply)
	}
	if _, ok := n.track(key, d); !ok {
		return nil, Errorf(CodeUnavailable, "node closed")
	}
	st, err := n.openOn(ctx, d, key, method, p)
	if err != nil {
		d.close()
		return nil, n.wrapCallErr(ctx, key, method, err)
	}
	st.transport = TransportTCPDirect
	if err := st.decodeReply(reply); err != nil {
		return nil, err
	}
	return st, nil
}

// dialDirect dials a direct connection to key at the first of addrs that
// answers.
func (n *Node) dialDirect(ctx context.Context, key PublicKey, addrs []string) (*directConn, error) {
	return n.dialDirectProto(ctx, key, addrs, alpnDirect)
}

func (n *Node) dialDirectProto(ctx context.Context, key PublicKey, addrs []string, proto string) (*directConn, error) {
	ctx, cancel := context.WithTimeout(ctx, n.cfg.DialTimeout)
	defer cancel()
	var errs []error
	for _, a := range addrs {
		tc, raw, err := n.handshakeTCP(ctx, key, a, proto)
		if err == nil {
			return newDirectConn(tc, raw), nil
		}
		switch {
		case errors.Is(err, ErrRefused):
			return nil, localError(CodeRefused, fmt.Errorf("peer %s at %s refused our key %s: %w", key.Short(), a, n.id.pub.Short(), ErrRefused))
		case errors.Is(err, ErrKeyMismatch):
			errs = append(errs, err)
		default:
			errs = append(errs, fmt.Errorf("%s: %w", a, err))
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, localError(CodeUnavailable, fmt.Errorf("dial peer %s directly: %w", key.Short(), errors.Join(errs...)))
}

// Parked connections.
//
// A peer that only dials out (an agent in a VM with no inbound port) cannot
// be dialled directly. Instead, the node that wants direct streams to it
// asks it (MethodPark) to dial a few direct connections in; they wait,
// parked, until OpenDirectStream takes one and opens its stream on it,
// served by the parking peer as if it had accepted the connection. Parks
// are only taken from a peer that was asked for them, at most maxParked per
// peer; one not used within parkTTL is closed, and the parking side gives
// up on one that carried no stream within parkIdle.

// MethodPark asks a peer to park direct connections with the caller. Every
// node answers it; it needs full access.
const MethodPark = "fabric.park"

// ParkParams are MethodPark's params.
type ParkParams struct {
	Count int `json:"count"`
}

// ParkReply is MethodPark's answer: how many connections were parked.
type ParkReply struct {
	Parked int `json:"parked"`
}

const (
	parkBatch = 4                // connections asked for at a time, at least
	parkLow   = 2                // ask for more when fewer are left, at least
	maxParked = 32               // parked connections kept per peer
	parkTTL   = 60 * time.Second // a parked connection unused longer is closed
	parkIdle  = 90 * time.Second // the parking side's wait for a stream
	parkWait  = 250 * time.Millisecond
	// parkBackoff: after a peer failed to park, streams to it are
	// multiplexed for this long without asking again.
	parkBackoff = time.Minute
)

type parkedConn struct {
	d  *directConn
	at time.Time
}

// parkPool holds the connections one peer parked with this node.
type parkPool struct {
	conns     []parkedConn // newest last
	asking    bool
	askedAt   time.Time
	failUntil time.Time
	wake      chan struct{} // closed when a connection arrives or an ask ends
	// takes are when connections were taken in the last second, and
	// waiters the streams waiting for one now: the demand the pool is
	// kept for. A runtime that closes its connection after each answer
	// (llama-server's streams do) makes every request a new stream, so
	// at 16 concurrent requests four parked connections at a time would
	// keep 12 of them waiting.
	takes   []time.Time
	waiters int
}

// demand is how many connections were taken in the last second plus those
// waited for now. Callers hold n.mu.
func (pp *parkPool) demand(now time.Time) int {
	i := 0
	for i < len(pp.takes) && now.Sub(pp.takes[i]) > time.Second {
		i++
	}
	pp.takes = pp.takes[i:]
	return len(pp.takes) + pp.waiters
}

func (pp *parkPool) signal() {
	close(pp.wake)
	pp.wake = make(chan struct{})
}

// pool returns key's park pool. Callers hold n.mu.
func (n *Node) pool(key PublicKey) *parkPool {
	pp := n.parked[key]
	if pp == nil {
		pp = &parkPool{wake: make(chan struct{})}
		n.parked[key] = pp
	}
	return pp
}

// takeParked returns a connection key parked with us, asking for more when
// few are left and waiting up to parkWait when none is; nil when none came
// (or key cannot park: it has no connection to us).
func (n *Node) takeParked(ctx context.Context, key PublicKey) *directConn {
	deadline := time.Now().Add(parkWait)
	var stale []*directConn
	counted := false
	defer func() {
		for _, d := range stale {
			d.close()
		}
	}()
	for {
		now := time.Now()
		n.mu.Lock()
		if n.closed {
			n.mu.Unlock()
			return nil
		}
		pp := n.pool(key)
		var d *directConn
		for len(pp.conns) > 0 && d == nil {
			i := len(pp.conns) - 1
			c := pp.conns[i]
			pp.conns = pp.conns[:i]
			if now.Sub(c.at) < parkTTL {
				d = c.d
			} else {
				stale = append(stale, c.d)
			}
		}
		if d != nil && len(pp.takes) < 2*maxParked {
			pp.takes = append(pp.takes, now)
		}
		// Kept for the demand: refilled when fewer than half of the last
		// second's takes are left, with as many as it took (at least
		// parkBatch, at most maxParked parked).
		demand := pp.demand(now)
		canAsk := !pp.asking && now.After(pp.failUntil) && n.liveConn(key) != nil
		if canAsk && len(pp.conns) < max(parkLow, demand/2) && !n.closed {
			count := min(maxParked-len(pp.conns), max(parkBatch, demand))
			pp.asking, pp.askedAt = true, now
			n.wg.Add(1) // under n.mu, the node not closed: Close waits for it
			go func() {
				defer n.wg.Done()
				n.askPark(key, count)
			}()
		}
		wake, waiting := pp.wake, pp.asking
		if d == nil && waiting && now.Before(deadline) && !counted {
			counted = true // one waiter however many times it wakes
			pp.waiters++
			defer func() {
				n.mu.Lock()
				pp.waiters--
				n.mu.Unlock()
			}()
		}
		n.mu.Unlock()
		if d != nil {
			return d
		}
		if !waiting || !now.Before(deadline) {
			return nil
		}
		t := time.NewTimer(time.Until(deadline))
		select {
		case <-wake:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
		if ctx.Err() != nil {
			return nil
		}
	}
}

// askPark asks key to park count connections with us.
func (n *Node) askPark(key PublicKey, count int) {
	ctx, cancel := context.WithTimeout(n.ctx, n.cfg.DialTimeout)
	defer cancel()
	var r ParkReply
	err := n.Call(ctx, key, MethodPark, ParkParams{Count: count}, &r)
	n.mu.Lock()
	defer n.mu.Unlock()
	pp := n.pool(key)
	pp.asking = false
	if err != nil || r.Parked == 0 {
		pp.failUntil = time.Now().Add(parkBackoff)
		n.log.Debug("peer parked no direct connections", "peer", key.Short(), "err", err)
	}
	pp.signal()
}

// acceptParked keeps a connection key parked with us, if we asked key for
// some.
func (n *Node) acceptParked(key PublicKey, tc *tls.Conn, raw net.Conn) {
	d := newDirectConn(tc, raw)
	if _, ok := n.track(key, d); !ok {
		return
	}
	n.mu.Lock()
	pp := n.parked[key]
	if pp == nil || !pp.asking && time.Since(pp.askedAt) > n.cfg.DialTimeout || len(pp.conns) >= maxParked {
		n.mu.Unlock()
		d.close() // not asked for, or enough
		return
	}
	pp.conns = append(pp.conns, parkedConn{d: d, at: time.Now()})
	pp.signal()
	n.mu.Unlock()
}

// handlePark dials Count direct connections to the caller and parks them
// there; each serves the one stream the caller opens on it.
func (n *Node) handlePark(ctx context.Context, req *Request) (any, error) {
	var p ParkParams
	if err := req.Decode(&p); err != nil {
		return nil, err
	}
	if p.Count < 1 || p.Count > maxParked {
		return nil, Errorf(CodeBadRequest, "count must be 1..%d", maxParked)
	}
	if !slices.Contains(n.cfg.Transports, TransportTCP) {
		return nil, Errorf(CodeUnavailable, "this node does not use TCP")
	}
	n.mu.Lock()
	addrs := slices.Clone(n.book[req.Peer])
	n.mu.Unlock()
	if len(addrs) == 0 {
		return nil, Errorf(CodeUnavailable, "no address known for %s", req.Peer.Short())
	}
	var r ParkReply
	for range p.Count {
		d, err := n.dialDirectProto(ctx, req.Peer, addrs, alpnPark)
		if err != nil {
			if r.Parked == 0 {
				return nil, err
			}
			break
		}
		r.Parked++
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			n.serveDirect(req.Peer, d.tc, d.raw, parkIdle)
		}()
	}
	return r, nil
}
