package fabric

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/yamux"
)

// ParsePeer parses "KEY" or "KEY@HOST:PORT[,HOST:PORT...]".
func ParsePeer(s string) (PublicKey, []string, error) {
	keyPart, addrPart, hasAddr := strings.Cut(strings.TrimSpace(s), "@")
	key, err := ParsePublicKey(keyPart)
	if err != nil {
		return key, nil, err
	}
	if !hasAddr {
		return key, nil, nil
	}
	var addrs []string
	for _, a := range strings.Split(addrPart, ",") {
		host, port, err := net.SplitHostPort(a)
		if err != nil || host == "" || port == "" {
			return key, nil, fmt.Errorf("peer address %q: want HOST:PORT", a)
		}
		addrs = append(addrs, a)
	}
	return key, addrs, nil
}

// AddAddrs records addresses where key may be reached. Newer addresses are
// tried first.
func (n *Node) AddAddrs(key PublicKey, addrs ...string) {
	if len(addrs) == 0 {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	old := n.book[key]
	merged := make([]string, 0, len(old)+len(addrs))
	merged = append(merged, addrs...)
	for _, a := range old {
		if !slices.Contains(merged, a) {
			merged = append(merged, a)
		}
	}
	if len(merged) > 8 {
		merged = merged[:8]
	}
	n.book[key] = merged
}

// preferAddr puts a first among key's addresses.
func (n *Node) preferAddr(key PublicKey, a string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	book := n.book[key]
	if i := slices.Index(book, a); i > 0 {
		n.book[key] = slices.Concat([]string{a}, book[:i], book[i+1:])
	}
}

// Connected reports whether a live connection to key exists.
func (n *Node) Connected(key PublicKey) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.liveConn(key) != nil
}

// PeersConnected returns how many peers have a live connection with this
// node, whichever side dialled.
func (n *Node) PeersConnected() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	c := 0
	for key := range n.conns {
		if n.liveConn(key) != nil {
			c++
		}
	}
	return c
}

// conn returns a live connection to key, dialling if needed. fresh reports
// that it was dialled for this request.
func (n *Node) conn(ctx context.Context, key PublicKey) (pc *peerConn, fresh bool, err error) {
	if key == n.id.pub {
		return nil, false, Errorf(CodeBadRequest, "a node cannot call itself over the fabric")
	}
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil, false, Errorf(CodeUnavailable, "node closed")
	}
	if pc := n.liveConn(key); pc != nil {
		n.mu.Unlock()
		return pc, false, nil
	}
	d := n.dialing[key]
	if d == nil {
		addrs := slices.Clone(n.book[key])
		if len(addrs) == 0 {
			n.mu.Unlock()
			return nil, false, Errorf(CodeUnavailable, "no address known for peer %s and no connection from it", key.Short())
		}
		d = &dialCall{done: make(chan struct{})}
		n.dialing[key] = d
		n.wg.Add(1) // under n.mu, the node not closed: Close waits for it
		go func() {
			defer n.wg.Done()
			n.runDial(d, key, addrs)
		}()
	}
	n.mu.Unlock()
	select {
	case <-d.done:
		return d.pc, true, d.err
	case <-ctx.Done():
		return nil, false, ctxError(ctx)
	}
}

// runDial dials key on behalf of every waiter; it is not tied to any one
// caller's context so that one caller giving up does not fail the others.
// Each address has a DialTimeout of its own (dialAddrs).
func (n *Node) runDial(d *dialCall, key PublicKey, addrs []string) {
	ctx, cancel := context.WithTimeout(n.ctx, n.cfg.DialTimeout*time.Duration(len(addrs)))
	defer cancel()
	d.pc, d.err = n.dialAddrs(ctx, key, addrs)
	n.mu.Lock()
	delete(n.dialing, key)
	n.mu.Unlock()
	close(d.done)
}

// addrDelay is how long the dial of one of a peer's addresses runs alone
// before the next address is dialled beside it (Happy Eyeballs' connection
// attempt delay, RFC 8305 section 5, which suggests 250 ms; longer here,
// where a handshake on a loaded host takes longer), and how often an
// address that refused is dialled again while another is still pending.
const addrDelay = time.Second

// dialAddrs dials key at its addresses, staggered: the first at once, each
// next one addrDelay later or as soon as the one before failed, each within
// a DialTimeout of its own, and the first to connect wins. A host that
// never answers (down, frozen, cut off) so holds up nothing, and while one
// does, an address that refused (no node listens there: an ork that does
// not lead) is dialled again every addrDelay, so that a follower that takes
// over is reached as soon as it listens. The address that answered goes
// first in the book, so that the next dial starts there (several orks of
// one key: the one that leads).
func (n *Node) dialAddrs(ctx context.Context, key PublicKey, addrs []string) (*peerConn, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		i   int
		pc  *peerConn
		err error
	}
	results := make(chan result)
	pending := 0
	start := func(i int) {
		pending++
		go func() {
			actx, acancel := context.WithTimeout(ctx, n.cfg.DialTimeout)
			pc, err := n.dialAddr(actx, key, addrs[i])
			acancel() // the connection outlives its dial's context
			results <- result{i, pc, err}
		}()
	}
	errs := make([]error, len(addrs))
	var again []int // addresses that refused, to dial again
	next := 1
	start(0)
	timer := time.NewTimer(addrDelay)
	defer timer.Stop()
	for pending > 0 {
		select {
		case <-timer.C:
			switch {
			case next < len(addrs):
				start(next)
				next++
			case len(again) > 0:
				start(again[0])
				again = again[1:]
			}
			timer.Reset(addrDelay)
		case r := <-results:
			pending--
			if r.err == nil {
				// The others are cancelled; one that connected meanwhile is
				// closed (it is registered: the peer may hold it too).
				go func(left int) {
					for ; left > 0; left-- {
						if l := <-results; l.err == nil {
							n.unregister(l.pc)
						}
					}
				}(pending)
				if r.i > 0 {
					n.preferAddr(key, addrs[r.i])
				}
				return r.pc, nil
			}
			switch {
			case errors.Is(r.err, ErrRefused):
				return nil, localError(CodeRefused, fmt.Errorf("peer %s at %s refused our key %s: %w", key.Short(), addrs[r.i], n.id.pub.Short(), ErrRefused))
			case errors.Is(r.err, ErrKeyMismatch):
				errs[r.i] = r.err // another address may hold the right key
			default:
				errs[r.i] = fmt.Errorf("%s: %w", addrs[r.i], r.err)
				if errors.Is(r.err, syscall.ECONNREFUSED) && ctx.Err() == nil {
					again = append(again, r.i)
				}
			}
			if next < len(addrs) && ctx.Err() == nil {
				start(next)
				next++
				timer.Reset(addrDelay)
			}
		}
	}
	var all []error
	mismatches := 0
	for _, e := range errs {
		if e != nil {
			all = append(all, e)
			if errors.Is(e, ErrKeyMismatch) {
				mismatches++
			}
		}
	}
	err := errors.Join(all...)
	if len(all) == 1 && mismatches == 1 {
		return nil, localError(CodeRefused, err)
	}
	return nil, localError(CodeUnavailable, fmt.Errorf("dial peer %s: %w", key.Short(), err))
}

type dialResult struct {
	pc  *peerConn
	err error
}

// dialAddr races the configured transports at one address, Happy-Eyeballs
// style: the first starts at once, each next one after FallbackDelay or as
// soon as the previous fails.
func (n *Node) dialAddr(ctx context.Context, key PublicKey, addr string) (*peerConn, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	results := make(chan dialResult, len(n.cfg.Transports))
	pending := 0
	start := func(t string) {
		pending++
		if !n.goTracked(func() {
			var r dialResult
			if t == TransportQUIC {
				r.pc, r.err = n.dialQUIC(ctx, key, addr)
			} else {
				r.pc, r.err = n.dialTCP(ctx, key, addr)
			}
			results <- r
		}) {
			results <- dialResult{err: errors.New("node closed")}
		}
	}
	next := 0
	start(n.cfg.Transports[next])
	next++
	timer := time.NewTimer(n.cfg.FallbackDelay)
	defer timer.Stop()
	var errs []error
	for pending > 0 {
		select {
		case <-timer.C:
			if next < len(n.cfg.Transports) {
				start(n.cfg.Transports[next])
				next++
				timer.Reset(n.cfg.FallbackDelay)
			}
		case r := <-results:
			pending--
			if r.err == nil {
				// Close the losers as they come in (their dialling goroutines
				// are tracked, so they come: this goroutine need not be).
				go func(left int) {
					for ; left > 0; left-- {
						if l := <-results; l.err == nil {
							l.pc.c.closeUnserved() // never served: the peer may send its calls again
						}
					}
				}(pending)
				if !n.register(r.pc) || !n.goTracked(func() { n.serve(r.pc) }) {
					r.pc.c.close()
					return nil, errors.New("node closed")
				}
				return r.pc, nil
			}
			errs = append(errs, r.err)
			if errors.Is(r.err, ErrRefused) || errors.Is(r.err, ErrKeyMismatch) {
				return nil, r.err // definitive: the peer answered
			}
			if errors.Is(r.err, syscall.ECONNREFUSED) {
				// Nodes serve both transports on one port: a host that
				// refuses TCP there has no node, and QUIC would only
				// wait for its handshake timeout.
				return nil, errors.Join(errs...)
			}
			if next < len(n.cfg.Transports) {
				start(n.cfg.Transports[next])
				next++
			}
		}
	}
	return nil, errors.Join(errs...)
}

func (n *Node) dialQUIC(ctx context.Context, key PublicKey, addr string) (*peerConn, error) {
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return nil, err
	}
	c, err := n.qtr.Dial(ctx, ua, clientTLS(n.cert, key, alpn), n.quicConfig())
	if err != nil {
		return nil, classifyDialErr(err)
	}
	ws, err := c.AcceptUniStream(ctx)
	var b [1]byte
	if err == nil {
		_, err = io.ReadFull(ws, b[:])
	}
	if err != nil {
		c.CloseWithError(0, "")
		return nil, classifyDialErr(err)
	}
	return &peerConn{c: quicConn{c}, key: key, ctx: c.Context()}, nil
}

func (n *Node) dialTCP(ctx context.Context, key PublicKey, addr string) (*peerConn, error) {
	tc, raw, err := n.handshakeTCP(ctx, key, addr, alpn)
	if err != nil {
		return nil, err
	}
	sess, err := yamux.Client(&coalescer{Conn: tc}, yamuxConfig())
	if err != nil {
		raw.Close()
		return nil, err
	}
	return &peerConn{c: yamuxConn{s: sess, under: raw}, key: key, ctx: closeCtx(n.ctx, sess.CloseChan())}, nil
}

// handshakeTCP dials key at addr over TCP, completes the TLS handshake
// speaking proto, and reads the server's welcome (a refusal arrives as an
// alert instead).
func (n *Node) handshakeTCP(ctx context.Context, key PublicKey, addr, proto string) (*tls.Conn, net.Conn, error) {
	var d net.Dialer
	raw, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		raw.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { raw.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	tc := tls.Client(raw, clientTLS(n.cert, key, proto))
	err = tc.HandshakeContext(ctx)
	var b [1]byte
	if err == nil {
		_, err = io.ReadFull(tc, b[:])
	}
	if err == nil && tc.ConnectionState().NegotiatedProtocol != proto {
		err = fmt.Errorf("peer does not speak %s", proto)
	}
	if err != nil {
		raw.Close()
		return nil, nil, classifyDialErr(err)
	}
	if !stop() {
		raw.Close()
		return nil, nil, ctx.Err()
	}
	raw.SetDeadline(time.Time{})
	return tc, raw, nil
}

func classifyDialErr(err error) error {
	switch {
	case errors.Is(err, ErrKeyMismatch):
		return err
	case strings.Contains(err.Error(), ErrKeyMismatch.Error()):
		// quic-go reports our own verification failure as a local
		// transport error carrying the message.
		return fmt.Errorf("%w (%v)", ErrKeyMismatch, err)
	case isRemoteRefusal(err):
		return fmt.Errorf("%w (%v)", ErrRefused, err)
	}
	return err
}

func ctxError(ctx context.Context) *Error {
	err := context.Cause(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		return localError(CodeDeadlineExceeded, err)
	}
	return localError(CodeCanceled, err)
}

// ---- calls

// Call invokes method on the peer holding key with params (JSON-encoded; nil
// for none) and decodes the result into result (nil to drop it). Errors are
// *Error values; use ErrorCode to read their code. A call whose connection
// turns out to be dead before the peer could have processed it (the peer
// restarted) is retried once on a new connection.
func (n *Node) Call(ctx context.Context, key PublicKey, method string, params, result any) error {
	p, err := encodeParams(params)
	if err != nil {
		return err
	}
	raw, err := n.CallRaw(ctx, key, method, p)
	if err != nil {
		return err
	}
	if result != nil && len(raw) > 0 {
		if err := json.Unmarshal(raw, result); err != nil {
			return Errorf(CodeInternal, "decode %s result: %v", method, err)
		}
	}
	return nil
}

func encodeParams(params any) (json.RawMessage, error) {
	switch p := params.(type) {
	case nil:
		return nil, nil
	case json.RawMessage:
		return p, nil
	default:
		b, err := json.Marshal(p)
		if err != nil {
			return nil, Errorf(CodeBadRequest, "encode params: %v", err)
		}
		return b, nil
	}
}

// CallRaw is Call with JSON already encoded.
func (n *Node) CallRaw(ctx context.Context, key PublicKey, method string, params json.RawMessage) (json.RawMessage, error) {
	if err := ctx.Err(); err != nil {
		return nil, ctxError(ctx)
	}
	for attempt := 0; ; attempt++ {
		pc, fresh, err := n.conn(ctx, key)
		if err != nil {
			return nil, err
		}
		res, err := n.callOn(ctx, pc, kindCall, method, params)
		if err != nil && !fresh && attempt == 0 && notProcessed(err) {
			n.drop(pc)
			continue
		}
		return res, n.wrapCallErr(ctx, key, method, err)
	}
}

// inFlight is a call's failure after its request was handed to the
// stream of a live connection: the peer may have read it.
type inFlight struct{ error }

func (e inFlight) Unwrap() error { return e.error }

// Notify sends a fire-and-forget event: it returns once the event is handed
// to the connection, without waiting for the peer to handle it.
func (n *Node) Notify(ctx context.Context, key PublicKey, method string, params any) error {
	p, err := encodeParams(params)
	if err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		pc, fresh, err := n.conn(ctx, key)
		if err != nil {
			return err
		}
		_, err = n.callOn(ctx, pc, kindEvent, method, p)
		if err != nil && !fresh && attempt == 0 && notProcessed(err) {
			n.drop(pc)
			continue
		}
		return n.wrapCallErr(ctx, key, method, err)
	}
}

func (n *Node) drop(pc *peerConn) {
	n.mu.Lock()
	n.forget(pc)
	n.mu.Unlock()
	pc.c.close()
}

func (n *Node) wrapCallErr(ctx context.Context, key PublicKey, method string, err error) error {
	if err == nil {
		return nil
	}
	var fe *Error
	if errors.As(err, &fe) {
		return err
	}
	if ctx.Err() != nil {
		return ctxError(ctx)
	}
	e := localError(CodeUnavailable, fmt.Errorf("%s on peer %s: %w", method, key.Short(), err))
	var inf inFlight
	e.unsure = errors.As(err, &inf) && !notProcessed(err)
	return e
}

func timeoutOf(ctx context.Context) time.Duration {
	dl, ok := ctx.Deadline()
	if !ok {
		return 0
	}
	d := time.Until(dl)
	if d < time.Microsecond {
		d = time.Microsecond
	}
	return d
}

// callOn runs one call or event on pc.
func (n *Node) callOn(ctx context.Context, pc *peerConn, k kind, method string, params json.RawMessage) (json.RawMessage, error) {
	if k == kindEvent {
		s, err := pc.c.openStream(ctx)
		if err != nil {
			return nil, err
		}
		stop := context.AfterFunc(ctx, s.abort)
		defer stop()
		if _, err := s.Write(appendRequest(nil, request{kind: k, method: method, params: params})); err != nil {
			s.abort()
			return nil, err
		}
		return nil, s.closeWrite()
	}
	cs, err := pc.takeStream(ctx)
	if err != nil {
		return nil, err
	}
	cs.buf = appendRequest(cs.buf[:0], request{kind: k, timeout: timeoutOf(ctx), method: method, params: params})
	// A context that can end aborts the stream when it does; one that
	// cannot (context.Background) needs no watch.
	stop := noWatch
	if ctx.Done() != nil {
		stop = context.AfterFunc(ctx, cs.s.abort)
	}
	// A connection already gone before the write sends nothing; one that
	// goes during it may have sent the request (yamux reports its end to
	// a write whose frame the session had already written).
	gone := pc.ctx.Err() != nil
	_, err = cs.s.Write(cs.buf)
	var body []byte
	if err == nil {
		body, err = readFrame(cs.s, n.cfg.MaxMessage, nil)
	}
	aborted := !stop()
	var (
		res  json.RawMessage
		rerr *Error
	)
	if err == nil {
		res, rerr, err = decodeResponse(body)
	}
	if err != nil {
		cs.s.abort()
		if gone {
			return nil, err
		}
		return nil, inFlight{err} // a write that failed may have sent a part, or all
	}
	if !aborted {
		pc.putStream(cs)
	}
	if rerr != nil {
		return nil, rerr
	}
	return res, nil
}

// noWatch is the stop of a context that cannot end.
func noWatch() bool { return true }

// Call streams are reused: a call takes an idle stream of the connection
// (or opens one), and puts it back once its answer is read. A stream is one
// QUIC or yamux stream, so a reused one costs no stream set-up, no
// end-of-stream and no stream credit: only the request and the answer cross
// the network. A call that is cancelled or fails aborts its stream instead.
const (
	// idleStreamTTL: a stream idle longer is retired rather than reused. It
	// is well under requestReadTimeout, after which the server gives up on
	// an idle stream.
	idleStreamTTL = requestReadTimeout / 3
	// maxIdleStreams bounds the idle call streams kept per connection.
	maxIdleStreams = 64
)

// callStream is a call stream and the buffer its last request was encoded in.
type callStream struct {
	s   rawStream
	buf []byte
	at  time.Time // when it went idle
}

// takeStream returns the newest idle call stream, or a new one.
func (pc *peerConn) takeStream(ctx context.Context) (callStream, error) {
	var (
		cs    callStream
		ok    bool
		stale []callStream
	)
	pc.idleMu.Lock()
	if i := len(pc.idle) - 1; i >= 0 {
		if time.Since(pc.idle[i].at) < idleStreamTTL {
			cs, ok = pc.idle[i], true
			pc.idle[i] = callStream{}
			pc.idle = pc.idle[:i]
		} else {
			// The newest is stale, so all are.
			stale = slices.Clone(pc.idle)
			clear(pc.idle)
			pc.idle = pc.idle[:0]
		}
	}
	pc.idleMu.Unlock()
	for _, o := range stale {
		o.s.abort()
	}
	if ok {
		return cs, nil
	}
	s, err := pc.c.openStream(ctx)
	if err != nil {
		return callStream{}, err
	}
	return callStream{s: s}, nil
}

// putStream makes cs available to the next call, or retires it.
func (pc *peerConn) putStream(cs callStream) {
	if cap(cs.buf) > maxKeptBuffer {
		cs.buf = nil
	}
	cs.at = time.Now()
	var retire []callStream
	pc.idleMu.Lock()
	if len(pc.idle) > 0 && cs.at.Sub(pc.idle[0].at) >= idleStreamTTL {
		retire = append(retire, pc.idle[0]) // the oldest has gone stale
		pc.idle = slices.Delete(pc.idle, 0, 1)
	}
	if len(pc.idle) < maxIdleStreams && pc.ctx.Err() == nil {
		pc.idle = append(pc.idle, cs)
	} else {
		retire = append(retire, cs)
	}
	pc.idleMu.Unlock()
	for _, o := range retire {
		o.s.abort()
	}
}

// OpenStream opens a bidirectional stream to method on the peer holding key.
// The peer's reply on accepting is decoded into reply (nil to drop it). ctx
// bounds the opening only; close the stream to end it.
func (n *Node) OpenStream(ctx context.Context, key PublicKey, method string, params, reply any) (*Stream, error) {
	p, err := encodeParams(params)
	if err != nil {
		return nil, err
	}
	for attempt := 0; ; attempt++ {
		pc, fresh, err := n.conn(ctx, key)
		if err != nil {
			return nil, err
		}
		var st *Stream
		s, err := pc.c.openStream(ctx)
		if err == nil {
			st, err = n.openOn(ctx, s, pc.key, method, p)
		}
		if err == nil {
			st.transport = pc.c.transport()
		}
		if err != nil && !fresh && attempt == 0 && notProcessed(err) {
			n.drop(pc)
			continue
		}
		if err != nil {
			return nil, n.wrapCallErr(ctx, key, method, err)
		}
		if err := st.decodeReply(reply); err != nil {
			return nil, err
		}
		return st, nil
	}
}

// decodeReply decodes the accepting server's reply into v (nil to drop it);
// on failure it closes s.
func (s *Stream) decodeReply(v any) error {
	if v == nil || len(s.reply) == 0 {
		return nil
	}
	if err := json.Unmarshal(s.reply, v); err != nil {
		s.Close()
		return Errorf(CodeInternal, "decode %s reply: %v", s.method, err)
	}
	return nil
}

// openOn sends a stream request on s, a new stream to key, and reads the
// answer.
func (n *Node) openOn(ctx context.Context, s rawStream, key PublicKey, method string, params json.RawMessage) (*Stream, error) {
	stop := context.AfterFunc(ctx, s.abort)
	buf := appendRequest(nil, request{kind: kindStream, method: method, params: params})
	if _, err := s.Write(buf); err != nil {
		stop()
		s.abort()
		return nil, err
	}
	body, err := readFrame(s, n.cfg.MaxMessage, nil)
	if !stop() {
		s.abort()
		return nil, ctxError(ctx)
	}
	if err != nil {
		s.abort()
		return nil, err
	}
	res, rerr, err := decodeResponse(body)
	if err != nil || rerr != nil {
		s.abort()
		if rerr != nil {
			return nil, rerr
		}
		return nil, err
	}
	return &Stream{s: s, peer: key, method: method, reply: res}, nil
}

// ---- ping

// MethodPing is answered by every node.
const MethodPing = "ping"

// PingReply is the answer to ping.
type PingReply struct {
	Component     string  `json:"component"`
	Version       string  `json:"version"`
	PublicKey     string  `json:"publicKey"`
	UptimeSeconds float64 `json:"uptimeSeconds"`
	Addr          string  `json:"addr,omitempty"`
	// Transport is the transport the ping arrived on.
	Transport string `json:"transport,omitempty"`
	// Access is what the caller's key is granted here.
	Access string `json:"access"`
}

func (n *Node) ping(ctx context.Context, req *Request) (any, error) {
	r := PingReply{
		Component:     n.cfg.Component,
		Version:       versionString(),
		PublicKey:     n.id.pub.String(),
		UptimeSeconds: time.Since(n.started).Seconds(),
		Addr:          n.addr,
		Access:        req.Access.String(),
	}
	n.mu.Lock()
	if pc := n.liveConn(req.Peer); pc != nil {
		r.Transport = pc.c.transport()
	}
	n.mu.Unlock()
	return r, nil
}
