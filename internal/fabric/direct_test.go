package fabric

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
	"time"
)

// echoDirect registers "echo": it accepts with the transport it was
// opened on and echoes until end-of-stream; "cut" answers a few bytes and
// aborts.
func echoDirect(srv *Node) {
	srv.HandleStream("echo", func(ctx context.Context, req *StreamRequest) error {
		s, err := req.Accept(map[string]string{"transport": req.transport})
		if err != nil {
			return err
		}
		_, err = io.Copy(s, s)
		return err
	})
	srv.HandleStream("cut", func(ctx context.Context, req *StreamRequest) error {
		s, err := req.Accept(nil)
		if err != nil {
			return err
		}
		s.Write([]byte("partial"))
		return errors.New("broken mid-way")
	})
	srv.HandleStream("hold", func(ctx context.Context, req *StreamRequest) error {
		if _, err := req.Accept(nil); err != nil {
			return err
		}
		<-ctx.Done()
		return ctx.Err()
	})
}

func TestDirectStream(t *testing.T) {
	srv, cli := pair(t)
	echoDirect(srv)
	ctx := ctxT(t)
	var reply map[string]string
	s, err := cli.OpenDirectStream(ctx, srv.PublicKey(), "echo", nil, &reply)
	if err != nil {
		t.Fatal(err)
	}
	if s.Transport() != TransportTCPDirect || reply["transport"] != TransportTCPDirect {
		t.Fatalf("transport: opener %q, server %q; want %q on both", s.Transport(), reply["transport"], TransportTCPDirect)
	}
	if cli.Connected(srv.PublicKey()) {
		t.Fatal("a direct stream registered a multiplexed connection")
	}
	payload := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	go func() {
		s.Write(payload)
		s.CloseWrite()
	}()
	got, err := io.ReadAll(s)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, payload) {
		t.Fatalf("echoed %d bytes, want %d identical", len(got), len(payload))
	}
	s.Close()

	// Each direct stream is a connection of its own; many at once.
	const n = 20
	errs := make(chan error, n)
	for i := range n {
		go func() {
			s, err := cli.OpenDirectStream(ctx, srv.PublicKey(), "echo", nil, nil)
			if err != nil {
				errs <- err
				return
			}
			defer s.Close()
			msg := []byte{byte(i), 'x', 'y'}
			s.Write(msg)
			s.CloseWrite()
			b, err := io.ReadAll(s)
			if err == nil && !bytes.Equal(b, msg) {
				err = errors.New("wrong echo")
			}
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}

	// Handler errors before accepting arrive structured.
	if _, err := cli.OpenDirectStream(ctx, srv.PublicKey(), "nope", nil, nil); ErrorCode(err) != CodeNotFound {
		t.Fatalf("unknown method: %v, want not_found", err)
	}
}

// TestDirectStreamAbortIsACut: a handler that fails after accepting resets
// the connection; the opener reads an error, not a clean end.
func TestDirectStreamAbortIsACut(t *testing.T) {
	srv, cli := pair(t)
	echoDirect(srv)
	s, err := cli.OpenDirectStream(ctxT(t), srv.PublicKey(), "cut", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	b, err := io.ReadAll(s)
	if err == nil {
		t.Fatalf("read %q and a clean end; want an error after the cut", b)
	}
}

func TestDirectStreamPolicy(t *testing.T) {
	srv, cli := pair(t)
	echoDirect(srv)
	ctx := ctxT(t)
	srv.cfg.Policy.(*AllowList).Remove(cli.PublicKey())
	if _, err := cli.OpenDirectStream(ctx, srv.PublicKey(), "echo", nil, nil); ErrorCode(err) != CodeRefused {
		t.Fatalf("refused key: %v, want refused", err)
	}
	if cli.Connected(srv.PublicKey()) {
		t.Fatal("a refused direct stream fell back to a multiplexed connection")
	}

	// Read-only access reaches read-only streams only.
	srv.cfg.Policy.(*AllowList).AllowReadOnly(cli.PublicKey())
	if _, err := cli.OpenDirectStream(ctx, srv.PublicKey(), "echo", nil, nil); ErrorCode(err) != CodeForbidden {
		t.Fatalf("read-only key on a full-access stream: %v, want forbidden", err)
	}

	// A key that is not the dialled one's is refused.
	other := newNode(t, "other", withPolicy(NewAllowList(cli.PublicKey())))
	cli.AddAddrs(other.PublicKey(), srv.Addr())
	if _, err := cli.OpenDirectStream(ctx, other.PublicKey(), "echo", nil, nil); err == nil {
		t.Fatal("a direct stream reached a peer holding another key")
	}
}

// TestDirectStreamRevokeAndClose: Revoke and Close end direct streams on
// the serving side; the handler's context ends with them.
func TestDirectStreamRevokeAndClose(t *testing.T) {
	srv, cli := pair(t)
	echoDirect(srv)
	ctx := ctxT(t)
	for _, end := range []string{"revoke", "close"} {
		s, err := cli.OpenDirectStream(ctx, srv.PublicKey(), "hold", nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		read := make(chan error, 1)
		go func() {
			_, err := io.ReadAll(s)
			read <- err
		}()
		if end == "revoke" {
			srv.Revoke(cli.PublicKey())
		} else {
			srv.Close()
		}
		select {
		case <-read:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the opener's read did not end", end)
		}
		s.Close()
	}
}

// dialOnly makes a server and an agent that only dials out (as an agent in
// a VM does) and has connected to the server.
func dialOnly(t *testing.T, agentOpts ...nodeOpt) (srv, agent *Node) {
	t.Helper()
	allow := NewAllowList()
	srv = newNode(t, "server", withPolicy(allow))
	agent = newNode(t, "agent", append([]nodeOpt{withListen(""), withPolicy(NewAllowList(srv.PublicKey()))}, agentOpts...)...)
	echoDirect(agent)
	allow.Allow(agent.PublicKey())
	agent.AddAddrs(srv.PublicKey(), srv.Addr())
	if err := agent.Call(ctxT(t), srv.PublicKey(), MethodPing, nil, nil); err != nil {
		t.Fatal(err)
	}
	return srv, agent
}

func echoOnce(t *testing.T, s *Stream, msg string) {
	t.Helper()
	if _, err := s.Write([]byte(msg)); err != nil {
		t.Fatal(err)
	}
	s.CloseWrite()
	b, err := io.ReadAll(s)
	if err != nil || string(b) != msg {
		t.Fatalf("echo: %q, %v; want %q", b, err, msg)
	}
}

// TestParkedDirectStreams: a peer with no address (it dialled us) parks
// direct connections when asked, and direct streams to it use them.
func TestParkedDirectStreams(t *testing.T) {
	srv, agent := dialOnly(t)
	ctx := ctxT(t)
	for i := range 3 * parkBatch { // more than one batch: the pool refills
		s, err := srv.OpenDirectStream(ctx, agent.PublicKey(), "echo", nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if s.Transport() != TransportTCPDirect {
			t.Fatalf("stream %d: transport %q, want %q", i, s.Transport(), TransportTCPDirect)
		}
		echoOnce(t, s, "parked")
		s.Close()
	}

	// A peer that was not asked cannot park.
	srv2, agent2 := dialOnly(t)
	d, err := agent2.dialDirectProto(ctx, srv2.PublicKey(), []string{srv2.Addr()}, alpnPark)
	if err != nil {
		t.Fatal(err)
	}
	defer d.close()
	d.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.Copy(io.Discard, d); isTimeout(err) {
		t.Fatal("the unasked park was not closed")
	}
	srv2.mu.Lock()
	pp := srv2.parked[agent2.PublicKey()]
	srv2.mu.Unlock()
	if pp != nil && len(pp.conns) > 0 {
		t.Fatalf("%d unasked connections parked", len(pp.conns))
	}
}

// TestDirectStreamFallsBack: a peer that cannot park (it admits us
// read-only, or does not use TCP) or has no connection to us, and a node
// without TCP, get multiplexed streams.
func TestDirectStreamFallsBack(t *testing.T) {
	ctx := ctxT(t)
	srv, agent := dialOnly(t, withTransports(TransportQUIC))
	for range 2 { // the second does not ask again
		s, err := srv.OpenDirectStream(ctx, agent.PublicKey(), "echo", nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if s.Transport() != TransportQUIC {
			t.Fatalf("transport %q from a QUIC-only peer", s.Transport())
		}
		echoOnce(t, s, "muxed")
		s.Close()
	}
	srv.mu.Lock()
	pp := srv.parked[agent.PublicKey()]
	srv.mu.Unlock()
	if pp == nil || !pp.failUntil.After(time.Now()) {
		t.Fatal("a failed park is not remembered")
	}

	srv2, cli := pair(t, withTransports(TransportQUIC))
	echoDirect(srv2)
	s2, err := cli.OpenDirectStream(ctx, srv2.PublicKey(), "echo", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if s2.Transport() != TransportQUIC {
		t.Fatalf("transport %q with QUIC only", s2.Transport())
	}

	lone := newNode(t, "lone")
	if _, err := lone.OpenDirectStream(ctx, mustIdentity(t).PublicKey(), "echo", nil, nil); ErrorCode(err) != CodeUnavailable {
		t.Fatalf("a peer with no address and no connection: %v, want unavailable", err)
	}
}

// TestShutdownDeliversEverything: a server that writes its answer and shuts
// the stream down (as net/http closes a connection after its last answer)
// loses none of it, on every transport, even though the opener is still
// sending.
func TestShutdownDeliversEverything(t *testing.T) {
	payload := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	for _, tr := range []string{TransportQUIC, TransportTCP, TransportTCPDirect} {
		t.Run(tr, func(t *testing.T) {
			opts := []nodeOpt{withTransports(TransportQUIC, TransportTCP)}
			if tr != TransportTCPDirect {
				opts = []nodeOpt{withTransports(tr)}
			}
			srv, cli := pair(t, opts...)
			srv.HandleStream("answer", func(ctx context.Context, req *StreamRequest) error {
				s, err := req.Accept(nil)
				if err != nil {
					return err
				}
				s.Write(payload)
				s.Shutdown()
				return nil
			})
			ctx := ctxT(t)
			open := cli.OpenStream
			if tr == TransportTCPDirect {
				open = cli.OpenDirectStream
			}
			s, err := open(ctx, srv.PublicKey(), "answer", nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if s.Transport() != tr {
				t.Fatalf("transport %q, want %q", s.Transport(), tr)
			}
			go s.Write(bytes.Repeat([]byte("x"), 64<<10)) // unread by the server
			got, err := io.ReadAll(s)
			if err != nil || !bytes.Equal(got, payload) {
				t.Fatalf("read %d bytes (%v), want all %d", len(got), err, len(payload))
			}
		})
	}
}

// TestParkDemand: the park pool is kept for the connections taken in the
// last second plus the streams waiting now; older takes no longer count.
func TestParkDemand(t *testing.T) {
	now := time.Unix(1000, 0)
	pp := &parkPool{wake: make(chan struct{})}
	for i := range 16 {
		pp.takes = append(pp.takes, now.Add(-2*time.Second+time.Duration(i)*200*time.Millisecond))
	}
	pp.waiters = 3
	// Takes at -2.0 … +1.0 s in steps of 0.2 s: those within a second
	// of now are at -1.0 … +1.0 (11 of them).
	if got := pp.demand(now); got != 11+3 {
		t.Fatalf("demand %d, want 14", got)
	}
	if len(pp.takes) != 11 {
		t.Fatalf("%d takes kept, want the 11 of the last second", len(pp.takes))
	}
	pp.waiters = 0
	if got := pp.demand(now.Add(time.Hour)); got != 0 || len(pp.takes) != 0 {
		t.Fatalf("an hour later: demand %d, %d takes kept", got, len(pp.takes))
	}
}
