package fabric

import (
	"context"
	"crypto/hkdf"
	"crypto/sha256"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/yamux"
	"github.com/quic-go/quic-go"
)

// Config configures a Node.
type Config struct {
	// Component names the component in ping replies ("wrk-ork", "cli", ...).
	Component string
	// Identity is the node's key pair. Required.
	Identity *Identity
	// Listen is the address to serve on, e.g. "0.0.0.0:7420" or
	// "127.0.0.1:0". QUIC listens on its UDP port and the TCP fallback on the
	// same TCP port. Empty: the node only dials out (peers it dialled can
	// still call it over those connections).
	Listen string
	// Policy decides which keys are admitted. Nil admits nobody.
	Policy Policy
	// Transports lists the transports to dial with, in order of preference.
	// Default: QUIC, then TCP.
	Transports []string
	// FallbackDelay is how long a QUIC dial may go unanswered before a TCP
	// dial is raced against it. Default 300ms.
	FallbackDelay time.Duration
	// DialTimeout bounds one dial attempt, handshake included. Default 10s.
	DialTimeout time.Duration
	// MaxMessage bounds a call's request and response. Default 16 MiB.
	MaxMessage int
	// Logger receives connection-level events. Default: discard.
	Logger *slog.Logger
	// Starting makes the node answer every request with CodeUnavailable
	// ("starting; try again": not processed) until Open: for a process
	// that listens, and dials with the node, before its handlers can
	// serve (a new leading ork loads its state first). Without it a call
	// that came early would find no method: not_found, which says
	// something else.
	Starting bool

	// requestWait is how long a served call stream waits for its next
	// request. Default requestReadTimeout; tests shorten it.
	requestWait time.Duration
}

func (c *Config) setDefaults() {
	if len(c.Transports) == 0 {
		c.Transports = []string{TransportQUIC, TransportTCP}
	}
	if c.FallbackDelay == 0 {
		c.FallbackDelay = 300 * time.Millisecond
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = 10 * time.Second
	}
	if c.requestWait == 0 {
		c.requestWait = requestReadTimeout
	}
	if c.MaxMessage == 0 {
		c.MaxMessage = DefaultMaxMessage
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Policy == nil {
		c.Policy = &AllowList{}
	}
	if c.Component == "" {
		c.Component = "unnamed"
	}
}

// Node is one peer of the fabric: it serves the methods registered on it and
// calls other peers by key.
type Node struct {
	Mux

	cfg     Config
	id      *Identity
	cert    tls.Certificate
	log     *slog.Logger
	started time.Time

	udp  *net.UDPConn
	qtr  *quic.Transport
	qln  *quic.Listener
	tln  net.Listener
	addr string

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu sync.Mutex
	// conns holds the multiplexed connections serving calls, by key,
	// newest last (see liveConn).
	conns   map[PublicKey][]*peerConn
	all     map[*peerConn]struct{}
	dialing map[PublicKey]*dialCall
	book    map[PublicKey][]string
	parked  map[PublicKey]*parkPool
	closed  bool

	authz Authorizer // the policy, when it decides each request

	starting atomic.Bool // Config.Starting, until Open
}

// Open ends Config.Starting: the node serves its methods from now on.
func (n *Node) Open() { n.starting.Store(false) }

// peerConn is one live connection and the key proven on it.
type peerConn struct {
	c   muxConn
	key PublicKey
	ctx context.Context // done when the connection is

	idleMu sync.Mutex
	idle   []callStream // call streams waiting for the next call, newest last
}

type dialCall struct {
	done chan struct{}
	pc   *peerConn
	err  error
}

// New makes a node and, if cfg.Listen is set, starts serving. Close stops it.
func New(cfg Config) (*Node, error) {
	cfg.setDefaults()
	if cfg.Identity == nil {
		return nil, errors.New("fabric: config has no identity")
	}
	for _, t := range cfg.Transports {
		if t != TransportQUIC && t != TransportTCP {
			return nil, fmt.Errorf("fabric: unknown transport %q (want %q or %q)", t, TransportQUIC, TransportTCP)
		}
	}
	cert, err := certificate(cfg.Identity)
	if err != nil {
		return nil, err
	}
	n := &Node{
		cfg:     cfg,
		id:      cfg.Identity,
		cert:    cert,
		log:     cfg.Logger.With("component", cfg.Component),
		started: time.Now(),
		conns:   make(map[PublicKey][]*peerConn),
		all:     make(map[*peerConn]struct{}),
		dialing: make(map[PublicKey]*dialCall),
		book:    make(map[PublicKey][]string),
		parked:  make(map[PublicKey]*parkPool),
	}
	n.authz, _ = cfg.Policy.(Authorizer)
	n.starting.Store(cfg.Starting)
	n.ctx, n.cancel = context.WithCancel(context.Background())
	n.Handle(MethodPing, n.ping, ReadOnly())
	n.Handle(MethodPark, n.handlePark)
	if err := n.listen(cfg.Listen); err != nil {
		n.cancel()
		return nil, err
	}
	return n, nil
}

// PublicKey is the node's key.
func (n *Node) PublicKey() PublicKey { return n.id.pub }

// Addr is the host:port the node serves on (UDP for QUIC, TCP for the
// fallback), or "" for a dial-only node.
func (n *Node) Addr() string { return n.addr }

// statelessResetKey derives the QUIC stateless reset key from the identity,
// so a restarted process with the same identity resets its predecessor's
// connections at once instead of letting peers wait for an idle timeout.
func statelessResetKey(id *Identity) (*quic.StatelessResetKey, error) {
	b, err := hkdf.Key(sha256.New, id.Seed(), nil, "cosmicac fabric stateless reset", 32)
	if err != nil {
		return nil, err
	}
	var k quic.StatelessResetKey
	copy(k[:], b)
	return &k, nil
}

// quicIdleTimeout is how long a QUIC connection may go without a packet
// from its peer before it is closed.
const quicIdleTimeout = 6 * time.Second

func (n *Node) quicConfig() *quic.Config {
	return &quic.Config{
		HandshakeIdleTimeout: n.cfg.DialTimeout,
		// A peer that vanished without closing (killed, its host gone)
		// is noticed within the idle timeout: keep-alives every
		// KeepAlivePeriod keep a live connection busy. Short, so that a
		// peer given several addresses (the orks, of which only the
		// leader listens) moves to the next soon after the leader dies.
		MaxIdleTimeout:        quicIdleTimeout,
		KeepAlivePeriod:       quicIdleTimeout / 3,
		MaxIncomingStreams:    1 << 14,
		MaxIncomingUniStreams: 16,
	}
}

func (n *Node) listen(addr string) error {
	// A dial-only node still needs a UDP socket for QUIC. It is bound to
	// every address: one bound to loopback can only reach loopback (the
	// kernel refuses to send from 127.0.0.1 to another host).
	udpAddr := ":0"
	if addr != "" {
		udpAddr = addr
	}
	var err error
	// QUIC and TCP share a port number. With port 0, the kernel's UDP choice
	// may be taken on TCP: retry a few times.
	for attempt := 0; attempt < 16; attempt++ {
		if err = n.bind(udpAddr, addr != ""); err == nil {
			break
		}
		_, port, _ := net.SplitHostPort(udpAddr)
		if port != "0" {
			break
		}
	}
	if err != nil {
		return err
	}
	if n.tln != nil {
		n.wg.Add(2)
		go n.acceptQUIC()
		go n.acceptTCP()
	}
	return nil
}

func (n *Node) bind(addr string, serve bool) error {
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return fmt.Errorf("fabric: listen address %q: %w", addr, err)
	}
	udp, err := net.ListenUDP("udp", ua)
	if err != nil {
		return fmt.Errorf("fabric: listen udp %s: %w", addr, err)
	}
	rk, err := statelessResetKey(n.id)
	if err != nil {
		udp.Close()
		return err
	}
	tr := &quic.Transport{Conn: udpConn{udp}, StatelessResetKey: rk}
	if !serve {
		n.udp, n.qtr = udp, tr
		return nil
	}
	port := udp.LocalAddr().(*net.UDPAddr).Port
	host, _, _ := net.SplitHostPort(addr)
	tln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		tr.Close()
		udp.Close()
		return fmt.Errorf("fabric: listen tcp on port %d: %w", port, err)
	}
	qln, err := tr.Listen(serverTLS(n.cert, n.cfg.Policy, alpn), n.quicConfig())
	if err != nil {
		tln.Close()
		tr.Close()
		udp.Close()
		return fmt.Errorf("fabric: listen quic: %w", err)
	}
	n.udp, n.qtr, n.qln, n.tln = udp, tr, qln, tln
	n.addr = net.JoinHostPort(host, strconv.Itoa(port))
	return nil
}

// Close stops serving, closes every connection and waits for the node's
// goroutines.
func (n *Node) Close() error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	conns := make([]*peerConn, 0, len(n.all))
	for pc := range n.all {
		conns = append(conns, pc)
	}
	n.mu.Unlock()
	n.cancel()
	if n.qln != nil {
		n.qln.Close()
	}
	if n.tln != nil {
		n.tln.Close()
	}
	for _, pc := range conns {
		pc.c.close()
	}
	n.wg.Wait()
	if n.qtr != nil {
		n.qtr.Close()
	}
	if n.udp != nil {
		n.udp.Close()
	}
	return nil
}

// ---- accepting

func (n *Node) acceptQUIC() {
	defer n.wg.Done()
	for {
		c, err := n.qln.Accept(n.ctx)
		if err != nil {
			return
		}
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			key, err := keyFromState(c.ConnectionState().TLS)
			if err != nil {
				c.CloseWithError(1, "")
				return
			}
			// The welcome tells the dialler that the handshake passed our
			// policy (TLS 1.3 clients finish before the server checks them).
			ws, err := c.OpenUniStream()
			if err == nil {
				_, err = ws.Write([]byte{byte(n.cfg.Policy.Access(key))})
				ws.Close()
			}
			if err != nil {
				c.CloseWithError(1, "")
				return
			}
			n.serve(&peerConn{c: quicConn{c}, key: key, ctx: c.Context()})
		}()
	}
}

func (n *Node) acceptTCP() {
	defer n.wg.Done()
	for {
		raw, err := n.tln.Accept()
		if err != nil {
			return
		}
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			tc := tls.Server(raw, serverTLS(n.cert, n.cfg.Policy, alpn, alpnDirect, alpnPark))
			raw.SetDeadline(time.Now().Add(n.cfg.DialTimeout))
			if err := tc.HandshakeContext(n.ctx); err != nil {
				n.log.Debug("tcp handshake failed", "remote", raw.RemoteAddr().String(), "err", err)
				raw.Close()
				return
			}
			key, err := keyFromState(tc.ConnectionState())
			if err == nil {
				_, err = tc.Write([]byte{byte(n.cfg.Policy.Access(key))})
			}
			if err != nil {
				raw.Close()
				return
			}
			raw.SetDeadline(time.Time{})
			switch tc.ConnectionState().NegotiatedProtocol {
			case alpnDirect:
				n.serveDirect(key, tc, raw, requestReadTimeout)
				return
			case alpnPark:
				n.acceptParked(key, tc, raw)
				return
			}
			sess, err := yamux.Server(&coalescer{Conn: tc}, yamuxConfig())
			if err != nil {
				raw.Close()
				return
			}
			n.serve(&peerConn{c: yamuxConn{s: sess, under: raw}, key: key, ctx: closeCtx(n.ctx, sess.CloseChan())})
		}()
	}
}

// closeCtx returns a context done when parent is or when ch closes.
func closeCtx(parent context.Context, ch <-chan struct{}) context.Context {
	ctx, cancel := context.WithCancel(parent)
	go func() {
		select {
		case <-ch:
		case <-ctx.Done():
		}
		cancel()
	}()
	return ctx
}

// serve registers pc in the pool and answers the streams the peer opens on
// it until the connection ends. Runs on a goroutine counted in n.wg.
func (n *Node) serve(pc *peerConn) {
	if !n.register(pc) {
		pc.c.close()
		return
	}
	defer n.unregister(pc)
	n.log.Debug("peer connected", "peer", pc.key.Short(), "transport", pc.c.transport(), "remote", pc.c.remoteAddr().String())
	for {
		s, err := pc.c.acceptStream(pc.ctx)
		if err != nil {
			return
		}
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			n.serveStream(pc, s)
		}()
	}
}

func (n *Node) register(pc *peerConn) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return false
	}
	if _, ok := n.all[pc]; !ok { // a dialled one is registered twice: by the dial, then by serve
		n.conns[pc.key] = append(n.conns[pc.key], pc)
		n.all[pc] = struct{}{}
	}
	return true
}

func (n *Node) unregister(pc *peerConn) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.forget(pc)
	delete(n.all, pc)
	pc.c.close()
}

// liveConn returns the newest live connection to key, or nil. Callers hold
// n.mu.
//
// The newest serves new calls (a peer that restarted has dialled a new
// one), but every live one is kept, not only the newest: when it ends, the
// next newest takes over. A peer may hold several at once: a dial races
// QUIC against TCP and closes the loser once the winner is in, after both
// reached us, in either order. Had the loser ended as the only one kept,
// a dial-only peer (an agent in a VM) would be unreachable over the
// winner, and it would not dial again while the winner is up.
func (n *Node) liveConn(key PublicKey) *peerConn {
	cs := n.conns[key]
	for i := len(cs) - 1; i >= 0; i-- {
		if cs[i].ctx.Err() == nil {
			return cs[i]
		}
	}
	return nil
}

// forget takes pc out of the connections serving calls. Callers hold n.mu.
func (n *Node) forget(pc *peerConn) {
	cs := n.conns[pc.key]
	i := slices.Index(cs, pc)
	if i < 0 {
		return
	}
	cs = slices.Delete(cs, i, i+1)
	if len(cs) == 0 {
		delete(n.conns, pc.key)
		return
	}
	n.conns[pc.key] = cs
}

// goTracked runs f on a goroutine that Close waits for, unless the node is
// closed (then f does not run and it reports false).
func (n *Node) goTracked(f func()) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return false
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		f()
	}()
	return true
}

// Revoke closes every connection to key. Take the key off the policy first,
// or it may connect again.
func (n *Node) Revoke(key PublicKey) {
	n.mu.Lock()
	var victims []*peerConn
	for pc := range n.all {
		if pc.key == key {
			victims = append(victims, pc)
		}
	}
	n.mu.Unlock()
	for _, pc := range victims {
		pc.c.close()
	}
}

// requestReadTimeout bounds how long an opened stream may take to send its
// request frame, and how long a stream that has answered a call is kept
// waiting for the next one.
const requestReadTimeout = 30 * time.Second

// serveStream answers the requests the peer sends on s. A call stream is
// reused: after answering, the server waits for the caller's next call on it
// (see idleStreamTTL); events and streams end it.
func (n *Node) serveStream(pc *peerConn, s rawStream) {
	n.serveStreamWait(pc, s, n.cfg.requestWait)
}

// serveStreamWait is serveStream waiting up to firstWait for the first
// request.
func (n *Node) serveStreamWait(pc *peerConn, s rawStream, firstWait time.Duration) {
	// The wait for a request is bounded by a timer of the stream's, reset
	// for each wait, that cuts the read with a past deadline: a read
	// deadline set for each wait would cost QUIC and yamux a timer of their
	// own per call.
	idle := time.AfterFunc(firstWait, func() { s.SetReadDeadline(time.Unix(1, 0)) })
	defer idle.Stop()
	var st servedStream
	for first := true; ; first = false {
		if !first {
			idle.Reset(n.cfg.requestWait)
		}
		body, err := readFrame(s, n.cfg.MaxMessage, st.req)
		if !idle.Stop() && err == nil {
			err = os.ErrDeadlineExceeded // it came as the wait ended
		}
		if err != nil {
			if err == io.EOF && !first {
				s.closeWrite() // the caller retired the stream
			} else {
				s.abort()
			}
			return
		}
		if cap(body) <= maxKeptBuffer {
			st.req = body[:0]
		}
		if !n.serveRequest(pc, s, body, &st) {
			return
		}
	}
}

// servedStream is what a served stream keeps between its calls: the frame
// buffers, reused, and its write deadline.
type servedStream struct {
	req, resp []byte // the last request and response frames
	// writeBy is the write deadline set on the stream (zero: none). A reply
	// re-arms it only when less than half of requestReadTimeout is left, so
	// that most replies set none (yamux allocates for each).
	writeBy time.Time
}

// serveRequest serves one request frame and reports whether s carries on.
// The request's params are in st.req, reused for the next request: a
// handler must not keep them after it returns.
func (n *Node) serveRequest(pc *peerConn, s rawStream, body []byte, st *servedStream) bool {
	req, err := decodeRequest(body)
	if err != nil {
		return n.reply(s, st, nil, Errorf(CodeBadRequest, "%v", err))
	}
	access := n.cfg.Policy.Access(pc.key)
	rt := n.lookup(req.method)
	var refusal *Error
	switch {
	case access == AccessNone:
		refusal = Errorf(CodeForbidden, "key %s is not admitted", pc.key.Short())
	case n.starting.Load():
		refusal = Errorf(CodeUnavailable, "%s is starting; try again", n.cfg.Component)
	case rt == nil:
		refusal = Errorf(CodeNotFound, "no method %q", req.method)
	case access == AccessReadOnly && !rt.readOnly:
		refusal = Errorf(CodeForbidden, "method %q needs full access; key %s is read-only", req.method, pc.key.Short())
	case req.kind == kindStream && rt.stream == nil:
		refusal = Errorf(CodeBadRequest, "method %q is not a stream", req.method)
	case req.kind != kindStream && rt.call == nil:
		refusal = Errorf(CodeBadRequest, "method %q is a stream; open it with OpenStream", req.method)
	}
	var grant any
	if refusal == nil && n.authz != nil {
		var err error
		if grant, err = n.authz.Authorize(pc.key, req.method); err != nil {
			if refusal = asWireError(err); refusal.Code == CodeInternal {
				refusal = Errorf(CodeForbidden, "%v", err)
			}
		}
	}
	if refusal != nil {
		switch req.kind {
		case kindEvent:
			s.abort()
			return false
		case kindStream:
			n.reply(s, st, nil, refusal)
			s.closeWrite()
			return false
		}
		return n.reply(s, st, nil, refusal)
	}

	parent := pc.ctx
	if req.kind == kindCall {
		// Not for streams: on QUIC the stream's context also ends when its
		// handler closes its sending half, and it may read on.
		parent = s.callParent(pc.ctx)
	}
	// ctx ends when the handler returns (as net/http's does), when the
	// caller gives up, and at the request's timeout. A call's parent on
	// QUIC is its stream's context, which already ends when the caller
	// gives up and once the answer is sent: without a timeout it needs no
	// context of its own (two allocations a call less).
	ctx, cancel := parent, context.CancelFunc(func() {})
	switch {
	case req.timeout > 0:
		ctx, cancel = context.WithTimeout(parent, req.timeout)
	case parent == pc.ctx:
		ctx, cancel = context.WithCancel(parent)
	}
	defer cancel()
	if grant != nil {
		ctx = WithGrant(ctx, grant)
	}
	switch req.kind {
	case kindCall:
		s.watchCaller(cancel)
		res, err := rt.call(ctx, &Request{Peer: pc.key, Access: access, Method: req.method, Params: req.params})
		if s.unwatchCaller() {
			s.abort() // the caller gave up: nobody reads an answer
			return false
		}
		if err != nil {
			return n.reply(s, st, nil, asWireError(err))
		}
		return n.reply(s, st, res, nil)
	case kindEvent:
		s.abort()
		if _, err := rt.call(ctx, &Request{Peer: pc.key, Access: access, Method: req.method, Params: req.params}); err != nil {
			n.log.Warn("event handler failed", "method", req.method, "peer", pc.key.Short(), "err", err)
		}
	case kindStream:
		if !st.writeBy.IsZero() {
			s.SetWriteDeadline(time.Time{}) // the stream's own writes are unbounded
		}
		sr := &StreamRequest{Peer: pc.key, Access: access, Method: req.method, Params: req.params, s: s, transport: pc.c.transport()}
		err := rt.stream(ctx, sr)
		if !sr.accepted {
			if err == nil {
				err = Errorf(CodeInternal, "stream handler for %q returned without accepting", req.method)
			}
			n.reply(s, st, nil, asWireError(err))
			s.closeWrite()
			return false
		}
		if err != nil {
			s.abort()
			return false
		}
		s.closeWrite()
	}
	return false
}

// reply writes one response frame, encoded in st.resp (grown as needed),
// and reports whether it went out; the stream stays open for the next
// request.
func (n *Node) reply(s rawStream, st *servedStream, res any, e *Error) bool {
	var (
		payload []byte
		status  = statusOK
		err     error
	)
	if e == nil && res != nil {
		if raw, ok := res.(json.RawMessage); ok {
			payload = raw
		} else if payload, err = json.Marshal(res); err != nil {
			e = Errorf(CodeInternal, "encode result: %v", err)
		}
	}
	if e != nil {
		status = statusError
		payload, _ = json.Marshal(e)
	}
	if len(payload) > n.cfg.MaxMessage {
		status = statusError
		payload, _ = json.Marshal(Errorf(CodeInternal, "result of %d bytes exceeds the %d-byte message limit", len(payload), n.cfg.MaxMessage))
	}
	st.resp = appendResponse(st.resp[:0], status, payload)
	// A reply that does not go out within [requestReadTimeout/2,
	// requestReadTimeout] (the peer stopped reading) aborts the stream.
	if now := time.Now(); st.writeBy.Sub(now) < requestReadTimeout/2 {
		st.writeBy = now.Add(requestReadTimeout)
		s.SetWriteDeadline(st.writeBy)
	}
	_, err = s.Write(st.resp)
	if cap(st.resp) > maxKeptBuffer {
		st.resp = nil
	}
	if err != nil {
		s.abort()
		return false
	}
	return true
}

// maxKeptBuffer bounds the frame buffers kept for reuse between calls.
const maxKeptBuffer = 64 << 10
