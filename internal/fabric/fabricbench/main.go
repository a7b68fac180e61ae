// Command fabricbench measures the fabric next to plain TCP, in one run, and
// prints p50/p99 round trips, throughput and connection setup times.
//
// On one machine (loopback), with servers started in-process:
//
//	go run ./internal/fabric/fabricbench -n 10000
//
// Across a network, start a server on one host and point a client at it:
//
//	fabricbench -serve 0.0.0.0:7421 -key-file srv.key -allow CLIENTKEY   # prints KEY@ADDR
//	fabricbench -peer KEY@HOST:7421 -key-file cli.key -n 10000
//
// The server serves the fabric on UDP and TCP port P and a plain TCP echo (no
// TLS, no multiplexing) on TCP port P+1, which the client uses as baseline.
// The client prints its key on start so it can be put on the server's -allow.
package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"math"
	"net"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/cosmicac/cosmicac/internal/fabric"
)

const (
	payloadSize  = 1 << 10 // round trips carry 1 KiB each way
	chunkSize    = 1 << 20 // throughput is measured in acknowledged 1 MiB chunks
	methodEcho   = "bench.echo"
	methodSink   = "bench.sink"
	modeEcho     = 'e'
	modeSink     = 's'
	maxPlainSize = 16 << 20
)

var params = json.RawMessage(`"` + strings.Repeat("a", payloadSize-2) + `"`)

func main() {
	var (
		n        = flag.Int("n", 10000, "round trips per measurement")
		mib      = flag.Int("mib", 256, "MiB sent per throughput measurement")
		setups   = flag.Int("setup", 200, "connection setups per measurement")
		conc     = flag.Int("c", 8, "concurrent callers in the parallel measurement")
		serve    = flag.String("serve", "", "serve on `HOST:PORT` (fabric on PORT, plain TCP on PORT+1) until interrupted")
		peer     = flag.String("peer", "", "measure against a remote server `KEY@HOST:PORT`")
		keyFile  = flag.String("key-file", "", "identity key `FILE` (created if missing; default: a fresh key)")
		allow    = flag.String("allow", "", "with -serve: comma-separated client `KEYS` to admit")
		allowAny = flag.Bool("allow-any", false, "with -serve: admit every key")
	)
	flag.Parse()
	id, err := identity(*keyFile)
	if err != nil {
		fail(err)
	}
	switch {
	case *serve != "":
		err = runServer(id, *serve, *allow, *allowAny)
	case *peer != "":
		key, addrs, perr := fabric.ParsePeer(*peer)
		if perr != nil || len(addrs) != 1 {
			fail(fmt.Errorf("-peer wants KEY@HOST:PORT: %v", perr))
		}
		fmt.Printf("client key %s\n", id.PublicKey())
		var plain string
		if plain, err = plainAddrOf(addrs[0]); err == nil {
			err = measure(os.Stdout, id, key, addrs[0], plain, opts{n: *n, mib: *mib, setups: *setups, conc: *conc})
		}
	default:
		err = runLoopback(id, opts{n: *n, mib: *mib, setups: *setups, conc: *conc})
	}
	if err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "fabricbench:", err)
	os.Exit(1)
}

type opts struct{ n, mib, setups, conc int }

func identity(path string) (*fabric.Identity, error) {
	if path == "" {
		return fabric.GenerateIdentity()
	}
	id, err := fabric.ReadIdentityFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		if id, err = fabric.GenerateIdentity(); err == nil {
			err = fabric.WriteIdentityFile(path, id)
		}
	}
	return id, err
}

func plainAddrOf(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return "", err
	}
	return net.JoinHostPort(host, strconv.Itoa(p+1)), nil
}

// ---- servers

type server struct {
	node  *fabric.Node
	plain net.Listener
	wg    sync.WaitGroup
}

// startServer serves the fabric on listen and the plain TCP baseline on
// plainListen, or on the fabric's port + 1 when plainListen is "".
func startServer(id *fabric.Identity, listen, plainListen string, policy fabric.Policy) (*server, error) {
	node, err := fabric.New(fabric.Config{Component: "fabricbench", Identity: id, Listen: listen, Policy: policy})
	if err != nil {
		return nil, err
	}
	node.Handle(methodEcho, func(_ context.Context, r *fabric.Request) (any, error) { return r.Params, nil })
	node.HandleStream(methodSink, func(_ context.Context, r *fabric.StreamRequest) error {
		s, err := r.Accept(nil)
		if err != nil {
			return err
		}
		if err := sink(s); !errors.Is(err, io.EOF) {
			return err
		}
		return nil
	})
	if plainListen == "" {
		plainListen, _ = plainAddrOf(node.Addr())
	}
	ln, err := net.Listen("tcp", plainListen)
	if err != nil {
		node.Close()
		return nil, fmt.Errorf("plain TCP baseline: %w", err)
	}
	s := &server{node: node, plain: ln}
	s.wg.Add(1)
	go s.acceptPlain()
	return s, nil
}

func (s *server) close() {
	s.plain.Close()
	s.node.Close()
	s.wg.Wait()
}

func (s *server) acceptPlain() {
	defer s.wg.Done()
	for {
		c, err := s.plain.Accept()
		if err != nil {
			return
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer c.Close()
			var mode [1]byte
			if _, err := io.ReadFull(c, mode[:]); err != nil {
				return
			}
			switch mode[0] {
			case modeEcho:
				echo(c)
			case modeSink:
				sink(c)
			}
		}()
	}
}

// echo answers length-prefixed frames with the same frame.
func echo(c net.Conn) {
	buf := make([]byte, 4+payloadSize)
	for {
		if _, err := io.ReadFull(c, buf[:4]); err != nil {
			return
		}
		n := binary.BigEndian.Uint32(buf)
		if n > maxPlainSize {
			return
		}
		if int(n)+4 > len(buf) {
			buf = append(buf[:4], make([]byte, n)...)
		}
		if _, err := io.ReadFull(c, buf[4:4+n]); err != nil {
			return
		}
		if _, err := c.Write(buf[:4+n]); err != nil {
			return
		}
	}
}

// sink reads 1 MiB chunks and acknowledges each with one byte.
func sink(rw io.ReadWriter) error {
	buf := make([]byte, chunkSize)
	for {
		if _, err := io.ReadFull(rw, buf); err != nil {
			return err
		}
		if _, err := rw.Write([]byte{1}); err != nil {
			return err
		}
	}
}

func runServer(id *fabric.Identity, listen, allow string, allowAny bool) error {
	policy := fabric.NewAllowList()
	policy.SetAllowAny(allowAny)
	for _, k := range strings.Split(allow, ",") {
		if k = strings.TrimSpace(k); k == "" {
			continue
		}
		key, err := fabric.ParsePublicKey(k)
		if err != nil {
			return fmt.Errorf("-allow: %w", err)
		}
		policy.Allow(key)
	}
	if !allowAny && allow == "" {
		return errors.New("-serve needs -allow KEYS or -allow-any")
	}
	s, err := startServer(id, listen, "", policy)
	if err != nil {
		return err
	}
	defer s.close()
	fmt.Printf("serving %s@%s (plain TCP baseline on %s); interrupt to stop\n", id.PublicKey(), s.node.Addr(), s.plain.Addr())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	<-ctx.Done()
	return nil
}

func runLoopback(cliID *fabric.Identity, o opts) error {
	srvID, err := fabric.GenerateIdentity()
	if err != nil {
		return err
	}
	s, err := startServer(srvID, "127.0.0.1:0", "127.0.0.1:0", fabric.NewAllowList(cliID.PublicKey()))
	if err != nil {
		return err
	}
	defer s.close()
	return measure(os.Stdout, cliID, srvID.PublicKey(), s.node.Addr(), s.plain.Addr().String(), o)
}

// ---- measurements

type contender struct {
	name string
	tr   string // fabric transport, or "" for plain TCP
}

var contenders = []contender{{"plain-tcp", ""}, {"fabric-quic", fabric.TransportQUIC}, {"fabric-tcp", fabric.TransportTCP}}

func measure(w io.Writer, id *fabric.Identity, srv fabric.PublicKey, addr, plainAddr string, o opts) error {
	ctx := context.Background()
	fmt.Fprintf(w, "server %s@%s, plain TCP %s\n\n", srv, addr, plainAddr)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(w, "1 KiB round trips: %d sequential, then %d from %d concurrent callers; %d MiB in 1 MiB chunks; %d connection setups (dial, handshake, first round trip)\n\n", o.n, o.n, o.conc, o.mib, o.setups)
	fmt.Fprintln(tw, "\tRTT mean\tRTT p50\tRTT p99\tp50 / plain\tparallel calls/s\tMB/s\tsetup p50\tsetup p99\t")
	var plainP50 time.Duration
	for _, c := range contenders {
		r, err := runContender(ctx, c, id, srv, addr, plainAddr, o)
		if err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
		p50 := percentile(r.rtt, 0.5)
		if c.tr == "" {
			plainP50 = p50
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%.2fx\t%.0f\t%.0f\t%s\t%s\t\n", c.name,
			us(mean(r.rtt)), us(p50), us(percentile(r.rtt, 0.99)), float64(p50)/float64(plainP50),
			r.callsPerSec, r.mbPerSec, us(percentile(r.setup, 0.5)), us(percentile(r.setup, 0.99)))
	}
	return tw.Flush()
}

type result struct {
	rtt, setup  []time.Duration
	callsPerSec float64
	mbPerSec    float64
}

// caller is one contender's connection under test.
type caller interface {
	roundTrip() error
	send(chunk []byte) error // one chunk, waiting for its acknowledgement
	close()
}

func runContender(ctx context.Context, c contender, id *fabric.Identity, srv fabric.PublicKey, addr, plainAddr string, o opts) (*result, error) {
	connect := func() (caller, error) {
		if c.tr == "" {
			return dialPlain(plainAddr)
		}
		return dialFabric(ctx, id, srv, addr, c.tr)
	}
	r := &result{}
	cl, err := connect()
	if err != nil {
		return nil, err
	}
	defer cl.close()
	for range min(o.n/10, 1000) { // warm up
		if err := cl.roundTrip(); err != nil {
			return nil, err
		}
	}
	r.rtt = make([]time.Duration, 0, o.n)
	for range o.n {
		t0 := time.Now()
		if err := cl.roundTrip(); err != nil {
			return nil, err
		}
		r.rtt = append(r.rtt, time.Since(t0))
	}

	// Parallel: the fabric multiplexes every caller over its one
	// connection; plain TCP gets a connection per caller.
	var (
		left    atomic.Int64
		wg      sync.WaitGroup
		errOnce sync.Once
		perr    error
	)
	left.Store(int64(o.n))
	callers := []caller{cl}
	if c.tr == "" {
		for range o.conc - 1 {
			pc, err := connect()
			if err != nil {
				return nil, err
			}
			defer pc.close()
			callers = append(callers, pc)
		}
	}
	t0 := time.Now()
	for i := range o.conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cc := callers[i%len(callers)]
			for left.Add(-1) >= 0 {
				if err := cc.roundTrip(); err != nil {
					errOnce.Do(func() { perr = err })
					return
				}
			}
		}()
	}
	wg.Wait()
	if perr != nil {
		return nil, perr
	}
	r.callsPerSec = float64(o.n) / time.Since(t0).Seconds()

	chunk := make([]byte, chunkSize)
	for i := range chunk {
		chunk[i] = byte(i)
	}
	t0 = time.Now()
	for range o.mib {
		if err := cl.send(chunk); err != nil {
			return nil, err
		}
	}
	r.mbPerSec = float64(o.mib*chunkSize) / 1e6 / time.Since(t0).Seconds()

	r.setup = make([]time.Duration, 0, o.setups)
	for range o.setups {
		t0 := time.Now()
		sc, err := connect()
		if err == nil {
			err = sc.roundTrip()
		}
		if err != nil {
			return nil, fmt.Errorf("setup: %w", err)
		}
		r.setup = append(r.setup, time.Since(t0))
		sc.close()
	}
	return r, nil
}

type plainCaller struct {
	echo, sink net.Conn
	addr       string
	req, resp  []byte
}

func dialPlain(addr string) (*plainCaller, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	if _, err := c.Write([]byte{modeEcho}); err != nil {
		c.Close()
		return nil, err
	}
	p := &plainCaller{echo: c, addr: addr, req: make([]byte, 4+payloadSize), resp: make([]byte, 4+payloadSize)}
	binary.BigEndian.PutUint32(p.req, payloadSize)
	copy(p.req[4:], params)
	return p, nil
}

func (p *plainCaller) roundTrip() error {
	if _, err := p.echo.Write(p.req); err != nil {
		return err
	}
	_, err := io.ReadFull(p.echo, p.resp)
	return err
}

func (p *plainCaller) send(chunk []byte) error {
	if p.sink == nil {
		c, err := net.Dial("tcp", p.addr)
		if err != nil {
			return err
		}
		if _, err := c.Write([]byte{modeSink}); err != nil {
			c.Close()
			return err
		}
		p.sink = c
	}
	return sendChunk(p.sink, chunk)
}

func sendChunk(rw io.ReadWriter, chunk []byte) error {
	if _, err := rw.Write(chunk); err != nil {
		return err
	}
	var ack [1]byte
	_, err := io.ReadFull(rw, ack[:])
	return err
}

func (p *plainCaller) close() {
	p.echo.Close()
	if p.sink != nil {
		p.sink.Close()
	}
}

type fabricCaller struct {
	ctx    context.Context
	node   *fabric.Node
	srv    fabric.PublicKey
	stream *fabric.Stream
}

// dialFabric makes a new dial-only node that reaches srv with one transport
// only. The connection itself is made by the first call.
func dialFabric(ctx context.Context, id *fabric.Identity, srv fabric.PublicKey, addr, tr string) (*fabricCaller, error) {
	node, err := fabric.New(fabric.Config{Component: "fabricbench", Identity: id, Transports: []string{tr}, Policy: fabric.NewAllowList(srv)})
	if err != nil {
		return nil, err
	}
	node.AddAddrs(srv, addr)
	return &fabricCaller{ctx: ctx, node: node, srv: srv}, nil
}

func (f *fabricCaller) roundTrip() error {
	res, err := f.node.CallRaw(f.ctx, f.srv, methodEcho, params)
	if err == nil && len(res) != payloadSize {
		err = fmt.Errorf("echo returned %d bytes, want %d", len(res), payloadSize)
	}
	return err
}

func (f *fabricCaller) send(chunk []byte) error {
	if f.stream == nil {
		s, err := f.node.OpenStream(f.ctx, f.srv, methodSink, nil, nil)
		if err != nil {
			return err
		}
		f.stream = s
	}
	return sendChunk(f.stream, chunk)
}

func (f *fabricCaller) close() {
	if f.stream != nil {
		f.stream.Close()
	}
	f.node.Close()
}

// ---- statistics

func percentile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

func mean(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	var sum time.Duration
	for _, x := range d {
		sum += x
	}
	return sum / time.Duration(len(d))
}

func us(d time.Duration) string { return fmt.Sprintf("%.1fµs", float64(d)/float64(time.Microsecond)) }
