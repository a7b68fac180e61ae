package fabric

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/waittest"
)

func mustIdentity(t testing.TB) *Identity {
	t.Helper()
	id, err := GenerateIdentity()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

type nodeOpt func(*Config)

func withTransports(ts ...string) nodeOpt { return func(c *Config) { c.Transports = ts } }
func withPolicy(p Policy) nodeOpt         { return func(c *Config) { c.Policy = p } }
func withListen(a string) nodeOpt         { return func(c *Config) { c.Listen = a } }
func withIdentity(id *Identity) nodeOpt   { return func(c *Config) { c.Identity = id } }

func newNode(t testing.TB, component string, opts ...nodeOpt) *Node {
	t.Helper()
	cfg := Config{Component: component, Identity: mustIdentity(t), Listen: "127.0.0.1:0", DialTimeout: 5 * time.Second}
	for _, o := range opts {
		o(&cfg)
	}
	n, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

// pair makes a server admitting a client, with the client knowing the
// server's address.
func pair(t testing.TB, opts ...nodeOpt) (srv, cli *Node) {
	t.Helper()
	allow := NewAllowList()
	srv = newNode(t, "server", append([]nodeOpt{withPolicy(allow)}, opts...)...)
	cli = newNode(t, "client", append([]nodeOpt{withPolicy(NewAllowList(srv.PublicKey()))}, opts...)...)
	allow.Allow(cli.PublicKey())
	cli.AddAddrs(srv.PublicKey(), srv.Addr())
	return srv, cli
}

var transports = []string{TransportQUIC, TransportTCP}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestCallSeesCallerKey(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			srv, cli := pair(t, withTransports(tr))
			type echo struct {
				Text   string `json:"text"`
				Caller string `json:"caller"`
			}
			HandleFunc(srv, "echo", func(ctx context.Context, peer PublicKey, in echo) (echo, error) {
				return echo{Text: in.Text, Caller: peer.String()}, nil
			})
			var out echo
			if err := cli.Call(ctxT(t), srv.PublicKey(), "echo", echo{Text: "hi"}, &out); err != nil {
				t.Fatal(err)
			}
			if out.Text != "hi" || out.Caller != cli.PublicKey().String() {
				t.Fatalf("got %+v, want text hi from %s", out, cli.PublicKey())
			}
			var pr PingReply
			if err := cli.Call(ctxT(t), srv.PublicKey(), MethodPing, nil, &pr); err != nil {
				t.Fatal(err)
			}
			if pr.Component != "server" || pr.PublicKey != srv.PublicKey().String() || pr.Transport != tr || pr.Access != "full" {
				t.Fatalf("ping = %+v", pr)
			}
		})
	}
}

func TestUnlistedKeyRefusedInHandshake(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			var called atomic.Bool
			srv := newNode(t, "server", withTransports(tr)) // empty allow-list: nobody
			srv.Handle("secret", func(context.Context, *Request) (any, error) {
				called.Store(true)
				return "secret", nil
			})
			cli := newNode(t, "client", withTransports(tr), withPolicy(NewAllowList(srv.PublicKey())))
			cli.AddAddrs(srv.PublicKey(), srv.Addr())
			err := cli.Call(ctxT(t), srv.PublicKey(), "secret", nil, nil)
			if !errors.Is(err, ErrRefused) || ErrorCode(err) != CodeRefused {
				t.Fatalf("err = %v (code %q), want refusal", err, ErrorCode(err))
			}
			if called.Load() {
				t.Fatal("handler ran for a refused key")
			}
			if srv.Connected(cli.PublicKey()) {
				t.Fatal("server kept a connection from a refused key")
			}
		})
	}
}

func TestAllowAnyMustBeExplicit(t *testing.T) {
	al := NewAllowList()
	if al.Access(mustIdentity(t).PublicKey()) != AccessNone {
		t.Fatal("empty allow-list admitted a key")
	}
	al.SetAllowAny(true)
	srv := newNode(t, "server", withPolicy(al))
	cli := newNode(t, "client")
	cli.AddAddrs(srv.PublicKey(), srv.Addr())
	if err := cli.Call(ctxT(t), srv.PublicKey(), MethodPing, nil, nil); err != nil {
		t.Fatal(err)
	}
}

func TestPinnedKeyMismatchRefused(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			b := newNode(t, "holder-of-b", withTransports(tr), withPolicy(func() *AllowList { a := NewAllowList(); a.SetAllowAny(true); return a }()))
			cli := newNode(t, "client", withTransports(tr))
			a := mustIdentity(t).PublicKey()
			cli.AddAddrs(a, b.Addr()) // the address of B, dialled as A
			err := cli.Call(ctxT(t), a, MethodPing, nil, nil)
			if !errors.Is(err, ErrKeyMismatch) {
				t.Fatalf("err = %v, want key mismatch", err)
			}
			if cli.Connected(b.PublicKey()) || cli.Connected(a) {
				t.Fatal("client kept the connection to the wrong key")
			}
		})
	}
}

func TestReadOnlyAccess(t *testing.T) {
	allow := NewAllowList()
	srv := newNode(t, "server", withPolicy(allow))
	srv.Handle("get", func(context.Context, *Request) (any, error) { return 1, nil }, ReadOnly())
	srv.Handle("set", func(context.Context, *Request) (any, error) { return 2, nil })
	cli := newNode(t, "client")
	allow.AllowReadOnly(cli.PublicKey())
	cli.AddAddrs(srv.PublicKey(), srv.Addr())
	ctx := ctxT(t)
	if err := cli.Call(ctx, srv.PublicKey(), "get", nil, nil); err != nil {
		t.Fatalf("read-only method: %v", err)
	}
	if err := cli.Call(ctx, srv.PublicKey(), "set", nil, nil); ErrorCode(err) != CodeForbidden {
		t.Fatalf("full method with read-only key: err = %v, want forbidden", err)
	}
	if err := cli.Call(ctx, srv.PublicKey(), "nope", nil, nil); ErrorCode(err) != CodeNotFound {
		t.Fatalf("unknown method: err = %v, want not_found", err)
	}
}

func TestStructuredErrors(t *testing.T) {
	srv, cli := pair(t)
	srv.Handle("place", func(context.Context, *Request) (any, error) {
		return nil, Errorf("exceeds_node_gpus", "9 GPUs asked, nodes hold 8").WithDetails(map[string]int{"max": 8})
	})
	srv.Handle("crash", func(context.Context, *Request) (any, error) { return nil, errors.New("boom") })
	HandleFunc(srv, "typed", func(_ context.Context, _ PublicKey, in struct{ N int }) (int, error) { return in.N, nil })
	ctx := ctxT(t)
	err := cli.Call(ctx, srv.PublicKey(), "place", nil, nil)
	var fe *Error
	if !errors.As(err, &fe) || fe.Code != "exceeds_node_gpus" || fe.Message != "9 GPUs asked, nodes hold 8" || string(fe.Details) != `{"max":8}` {
		t.Fatalf("err = %#v", err)
	}
	if err := cli.Call(ctx, srv.PublicKey(), "crash", nil, nil); ErrorCode(err) != CodeInternal {
		t.Fatalf("err = %v, want internal", err)
	}
	if err := cli.Call(ctx, srv.PublicKey(), "typed", []int{1}, nil); ErrorCode(err) != CodeBadRequest {
		t.Fatalf("err = %v, want bad_request", err)
	}
}

func TestCancelStopsCall(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			srv, cli := pair(t, withTransports(tr))
			started, stopped := make(chan struct{}), make(chan error, 1)
			srv.Handle("block", func(ctx context.Context, _ *Request) (any, error) {
				close(started)
				<-ctx.Done()
				stopped <- ctx.Err()
				return nil, ctx.Err()
			})
			ctx, cancel := context.WithCancel(ctxT(t))
			errc := make(chan error, 1)
			go func() { errc <- cli.Call(ctx, srv.PublicKey(), "block", nil, nil) }()
			select {
			case <-started:
			case err := <-errc:
				t.Fatalf("call ended before the handler started: %v", err)
			}
			cancel()
			if err := <-errc; ErrorCode(err) != CodeCanceled || !errors.Is(err, context.Canceled) {
				t.Fatalf("err = %v, want canceled", err)
			}
			select {
			case <-stopped: // the server's handler saw the cancellation
			case <-time.After(10 * time.Second):
				t.Fatal("server handler was not cancelled")
			}
		})
	}
}

// A call handler's context ends once the handler returned, on every
// transport, as net/http's does: a goroutine the handler started on it
// stops (on QUIC the context is the stream's, which ends once the answer
// is sent).
func TestHandlerContextEndsAfterReturn(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			srv, cli := pair(t, withTransports(tr))
			ended := make(chan struct{})
			srv.Handle("spawn", func(ctx context.Context, _ *Request) (any, error) {
				go func() { <-ctx.Done(); close(ended) }()
				return "ok", nil
			})
			if err := cli.Call(ctxT(t), srv.PublicKey(), "spawn", nil, nil); err != nil {
				t.Fatal(err)
			}
			select {
			case <-ended:
			case <-time.After(10 * time.Second):
				t.Fatal("the handler's context did not end after it returned")
			}
		})
	}
}

func TestDeadlineReachesServer(t *testing.T) {
	srv, cli := pair(t)
	got := make(chan time.Duration, 1)
	srv.Handle("deadline", func(ctx context.Context, _ *Request) (any, error) {
		dl, ok := ctx.Deadline()
		if !ok {
			got <- -1
		} else {
			got <- time.Until(dl)
		}
		<-ctx.Done()
		return nil, ctx.Err()
	})
	ctx, cancel := context.WithTimeout(ctxT(t), 300*time.Millisecond)
	defer cancel()
	err := cli.Call(ctx, srv.PublicKey(), "deadline", nil, nil)
	if ErrorCode(err) != CodeDeadlineExceeded {
		t.Fatalf("err = %v, want deadline_exceeded", err)
	}
	if d := <-got; d <= 0 || d > 300*time.Millisecond {
		t.Fatalf("server saw remaining time %v, want (0, 300ms]", d)
	}
}

func TestPoolSurvivesPeerRestart(t *testing.T) {
	for _, tr := range transports {
		for _, how := range []string{"graceful", "crash"} {
			t.Run(tr+"/"+how, func(t *testing.T) {
				id := mustIdentity(t)
				allow := NewAllowList()
				srv := newNode(t, "server", withIdentity(id), withPolicy(allow), withTransports(tr))
				addr := srv.Addr()
				cli := newNode(t, "client", withTransports(tr))
				allow.Allow(cli.PublicKey())
				cli.AddAddrs(id.PublicKey(), addr)
				ctx := ctxT(t)
				if err := cli.Call(ctx, id.PublicKey(), MethodPing, nil, nil); err != nil {
					t.Fatal(err)
				}
				if how == "crash" {
					srv.crash()
				} else {
					srv.Close()
				}
				if how == "graceful" || tr == TransportTCP {
					// The client learns of the close (CONNECTION_CLOSE, or
					// the kernel's FIN) and drops the connection.
					waittest.Until(t, func() bool { return !cli.Connected(id.PublicKey()) }, "the client to see the connection gone")
				}
				// For a QUIC crash the client still holds the old
				// connection: the new process answers its first packet
				// with a stateless reset (same identity, same reset key)
				// and the call is retried on a new connection.
				newNode(t, "server", withIdentity(id), withPolicy(allow), withTransports(tr), withListen(addr))
				var pr PingReply
				if err := cli.Call(ctx, id.PublicKey(), MethodPing, nil, &pr); err != nil {
					t.Fatalf("call after restart: %v", err)
				}
				if pr.UptimeSeconds > 5 {
					t.Fatalf("answered by the old process? uptime %v", pr.UptimeSeconds)
				}
			})
		}
	}
}

func TestEvents(t *testing.T) {
	srv, cli := pair(t)
	got := make(chan string, 10)
	HandleFunc(srv, "logs.append", func(_ context.Context, _ PublicKey, line string) (struct{}, error) {
		got <- line
		return struct{}{}, nil
	})
	for _, l := range []string{"a", "b"} {
		if err := cli.Notify(ctxT(t), srv.PublicKey(), "logs.append", l); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]bool{}
	for range 2 {
		select {
		case l := <-got:
			seen[l] = true
		case <-time.After(10 * time.Second):
			t.Fatal("event not delivered")
		}
	}
	if !seen["a"] || !seen["b"] {
		t.Fatalf("seen %v", seen)
	}
}

func TestStreams(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			srv, cli := pair(t, withTransports(tr))
			srv.HandleStream("upper", func(ctx context.Context, req *StreamRequest) error {
				var p struct{ Prefix string }
				if err := req.Decode(&p); err != nil {
					return err
				}
				if p.Prefix == "bad" {
					return Errorf(CodeBadRequest, "bad prefix")
				}
				s, err := req.Accept(map[string]string{"hello": p.Prefix})
				if err != nil {
					return err
				}
				s.Write([]byte(p.Prefix))
				_, err = io.Copy(s, upper{s})
				return err
			})
			ctx := ctxT(t)
			var reply map[string]string
			s, err := cli.OpenStream(ctx, srv.PublicKey(), "upper", map[string]string{"Prefix": ">"}, &reply)
			if err != nil {
				t.Fatal(err)
			}
			if reply["hello"] != ">" {
				t.Fatalf("reply %v", reply)
			}
			payload := make([]byte, 1<<20)
			for i := range payload {
				payload[i] = 'a' + byte(i%26)
			}
			go func() {
				s.Write(payload)
				s.CloseWrite()
			}()
			got, err := io.ReadAll(s)
			if err != nil {
				t.Fatal(err)
			}
			want := append([]byte(">"), bytes.ToUpper(payload)...)
			if !bytes.Equal(got, want) {
				t.Fatalf("got %d bytes, want %d", len(got), len(want))
			}
			s.Close()
			if _, err := cli.OpenStream(ctx, srv.PublicKey(), "upper", map[string]string{"Prefix": "bad"}, nil); ErrorCode(err) != CodeBadRequest {
				t.Fatalf("rejected stream: err = %v", err)
			}
			if _, err := cli.OpenStream(ctx, srv.PublicKey(), MethodPing, nil, nil); ErrorCode(err) != CodeBadRequest {
				t.Fatalf("call method as stream: err = %v", err)
			}
		})
	}
}

type upper struct{ r io.Reader }

func (u upper) Read(p []byte) (int, error) {
	n, err := u.r.Read(p)
	copy(p[:n], bytes.ToUpper(p[:n]))
	return n, err
}

// TestReverseCall: a peer with no listener (behind NAT) dials out; the server
// then calls it back over that connection.
func TestReverseCall(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			allow := NewAllowList()
			srv := newNode(t, "server", withPolicy(allow), withTransports(tr))
			agent := newNode(t, "agent", withListen(""), withTransports(tr), withPolicy(NewAllowList(srv.PublicKey())))
			if agent.Addr() != "" {
				t.Fatalf("dial-only node has address %q", agent.Addr())
			}
			allow.Allow(agent.PublicKey())
			agent.AddAddrs(srv.PublicKey(), srv.Addr())
			HandleFunc(agent, "whoami", func(context.Context, PublicKey, struct{}) (string, error) { return "agent", nil })
			ctx := ctxT(t)
			if err := agent.Call(ctx, srv.PublicKey(), MethodPing, nil, nil); err != nil {
				t.Fatal(err)
			}
			var who string
			if err := srv.Call(ctx, agent.PublicKey(), "whoami", nil, &who); err != nil || who != "agent" {
				t.Fatalf("reverse call: %q, %v", who, err)
			}
		})
	}
}

// TestReverseCallChecksPolicy: the dialled side's policy applies to calls
// coming back over the connection.
func TestReverseCallChecksPolicy(t *testing.T) {
	srv, cli := pair(t)
	cliPolicy := cli.cfg.Policy.(*AllowList)
	cliPolicy.Remove(srv.PublicKey())
	HandleFunc(cli, "whoami", func(context.Context, PublicKey, struct{}) (string, error) { return "cli", nil })
	ctx := ctxT(t)
	if err := cli.Call(ctx, srv.PublicKey(), MethodPing, nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := srv.Call(ctx, cli.PublicKey(), "whoami", nil, nil); ErrorCode(err) != CodeForbidden {
		t.Fatalf("err = %v, want forbidden", err)
	}
}

// TestTCPFallbackWhenUDPDropped puts the server behind an address whose UDP
// port swallows every datagram and whose TCP port forwards to the server.
func TestTCPFallbackWhenUDPDropped(t *testing.T) {
	allow := NewAllowList()
	srv := newNode(t, "server", withPolicy(allow))
	// A UDP port that swallows every datagram, and the same port number on
	// TCP forwarding to the server.
	var (
		hole net.PacketConn
		fwd  net.Listener
	)
	for hole == nil {
		h, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := h.LocalAddr().(*net.UDPAddr).Port
		if fwd, err = net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port))); err != nil {
			h.Close() // that number is taken on TCP; draw another
			continue
		}
		hole = h
	}
	defer hole.Close()
	defer fwd.Close()
	go func() { // drop everything
		b := make([]byte, 2048)
		for {
			if _, _, err := hole.ReadFrom(b); err != nil {
				return
			}
		}
	}()
	go func() {
		for {
			c, err := fwd.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				u, err := net.Dial("tcp", srv.Addr())
				if err != nil {
					return
				}
				defer u.Close()
				go io.Copy(u, c)
				io.Copy(c, u)
			}()
		}
	}()
	cli := newNode(t, "client", func(c *Config) { c.FallbackDelay = 100 * time.Millisecond })
	allow.Allow(cli.PublicKey())
	cli.AddAddrs(srv.PublicKey(), hole.LocalAddr().String())
	var pr PingReply
	if err := cli.Call(ctxT(t), srv.PublicKey(), MethodPing, nil, &pr); err != nil {
		t.Fatal(err)
	}
	if pr.Transport != TransportTCP {
		t.Fatalf("transport = %q, want tcp", pr.Transport)
	}
}

func TestConcurrentCalls(t *testing.T) {
	srv, cli := pair(t)
	HandleFunc(srv, "sq", func(_ context.Context, _ PublicKey, x int) (int, error) { return x * x, nil })
	var wg sync.WaitGroup
	errs := make(chan error, 200)
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var y int
			if err := cli.Call(ctxT(t), srv.PublicKey(), "sq", i, &y); err != nil {
				errs <- err
			} else if y != i*i {
				errs <- errors.New("wrong answer")
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func TestNoAddressKnown(t *testing.T) {
	cli := newNode(t, "client")
	err := cli.Call(ctxT(t), mustIdentity(t).PublicKey(), MethodPing, nil, nil)
	if ErrorCode(err) != CodeUnavailable {
		t.Fatalf("err = %v, want unavailable", err)
	}
}

func TestUnreachablePeerIsUnavailable(t *testing.T) {
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := l.Addr().String()
	l.Close() // nothing listens here now
	cli := newNode(t, "client", func(c *Config) { c.DialTimeout = 2 * time.Second; c.FallbackDelay = 50 * time.Millisecond })
	k := mustIdentity(t).PublicKey()
	cli.AddAddrs(k, addr)
	if err := cli.Call(ctxT(t), k, MethodPing, nil, nil); ErrorCode(err) != CodeUnavailable {
		t.Fatalf("err = %v, want unavailable", err)
	}
}

func TestIdentityFile(t *testing.T) {
	dir := t.TempDir()
	a, err := LoadOrCreateIdentity(dir)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(dir, IdentityFile))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode = %v, %v; want 0600", st.Mode().Perm(), err)
	}
	b, err := LoadOrCreateIdentity(dir)
	if err != nil || a.PublicKey() != b.PublicKey() {
		t.Fatalf("reload gave %v (%v), want %v", b.PublicKey(), err, a.PublicKey())
	}
	os.Chmod(filepath.Join(dir, IdentityFile), 0o644)
	if _, err := LoadOrCreateIdentity(dir); err == nil {
		t.Fatal("loaded a world-readable key file")
	}
	if err := WriteIdentityFile(filepath.Join(dir, IdentityFile), a); err == nil {
		t.Fatal("overwrote an existing key file")
	}
}

func TestParsePeer(t *testing.T) {
	k := mustIdentity(t).PublicKey()
	for _, tc := range []struct {
		in    string
		addrs int
		ok    bool
	}{
		{k.String(), 0, true},
		{k.String() + "@127.0.0.1:7420", 1, true},
		{k.String() + "@[::1]:1,10.0.0.1:2", 2, true},
		{k.String() + "@nohost", 0, false},
		{k.String()[:10], 0, false},
		{"zz" + k.String()[2:], 0, false},
	} {
		got, addrs, err := ParsePeer(tc.in)
		if (err == nil) != tc.ok || (tc.ok && (got != k || len(addrs) != tc.addrs)) {
			t.Errorf("ParsePeer(%q) = %v, %v, %v", tc.in, got, addrs, err)
		}
	}
}

func TestWireRoundTrip(t *testing.T) {
	r := request{kind: kindStream, timeout: 1500 * time.Millisecond, method: "jobs.get", params: []byte(`{"id":"x"}`)}
	buf := appendRequest(nil, r)
	body, err := readFrame(bytes.NewReader(buf), 1<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeRequest(body)
	if err != nil || got.kind != r.kind || got.timeout != r.timeout || got.method != r.method || string(got.params) != string(r.params) {
		t.Fatalf("got %+v, %v", got, err)
	}
	if _, err := readFrame(bytes.NewReader(buf), 4, nil); !errors.Is(err, errFrameTooLarge) {
		t.Fatalf("oversized frame: %v", err)
	}
}

func TestMessageLimit(t *testing.T) {
	srv, cli := pair(t, func(c *Config) { c.MaxMessage = 1024 })
	HandleFunc(srv, "big", func(context.Context, PublicKey, struct{}) (string, error) { return string(make([]byte, 4096)), nil })
	HandleFunc(srv, "echo", func(_ context.Context, _ PublicKey, s string) (string, error) { return s, nil })
	ctx := ctxT(t)
	if err := cli.Call(ctx, srv.PublicKey(), "big", nil, nil); ErrorCode(err) != CodeInternal {
		t.Fatalf("oversized result: err = %v", err)
	}
	big := make([]byte, 2048)
	rand.Read(big)
	if err := cli.Call(ctx, srv.PublicKey(), "echo", big, nil); err == nil {
		t.Fatal("oversized request accepted")
	}
	// The connection still works for well-sized calls.
	if err := cli.Call(ctx, srv.PublicKey(), "echo", "ok", nil); err != nil {
		t.Fatal(err)
	}
}
