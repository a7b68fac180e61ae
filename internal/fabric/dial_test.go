package fabric

import (
	"context"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/waittest"
)

// frozenAddr is an address whose UDP port and TCP backlog take packets and
// connects but where nothing ever answers, as a frozen process's: a free
// port taken for both (another test may hold the TCP one of a free UDP
// port: the next free port is tried).
func frozenAddr(t *testing.T) string {
	t.Helper()
	var errs []error
	for range 20 {
		udp, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		tcp, err := net.Listen("tcp", udp.LocalAddr().String()) // never accepted: the kernel completes the connects
		if err != nil {
			udp.Close()
			errs = append(errs, err)
			continue
		}
		t.Cleanup(func() { udp.Close(); tcp.Close() })
		return udp.LocalAddr().String()
	}
	t.Fatalf("no port free for both UDP and TCP in 20 tries: %v", errs)
	return ""
}

// TestDialMovesPastAnAddressThatNeverAnswers: a peer's first address is a
// host that never answers (its UDP port and TCP backlog take packets and
// connections, as a frozen process's do, but nothing speaks); the dial
// gives it one DialTimeout and reaches the peer at its second address,
// where before the whole budget went on the first and the call failed.
// That address goes first in the book, so the next dial starts there.
func TestDialMovesPastAnAddressThatNeverAnswers(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			frozen := frozenAddr(t)

			short := func(c *Config) { c.DialTimeout = 500 * time.Millisecond; c.Transports = []string{tr} }
			srv, cli := pair(t, short)
			HandleFunc(srv, "dialtest.ping", func(context.Context, PublicKey, struct{}) (string, error) { return "pong", nil })
			cli.mu.Lock()
			cli.book[srv.PublicKey()] = []string{frozen, srv.Addr()}
			cli.mu.Unlock()

			var out string
			if err := cli.Call(ctxT(t), srv.PublicKey(), "dialtest.ping", struct{}{}, &out); err != nil || out != "pong" {
				t.Fatalf("a call past an address that never answers: %q, %v", out, err)
			}
			cli.mu.Lock()
			book := slices.Clone(cli.book[srv.PublicKey()])
			cli.mu.Unlock()
			if !slices.Equal(book, []string{srv.Addr(), frozen}) {
				t.Errorf("the book after the dial: %v; want the address that answered first", book)
			}
		})
	}
}

// TestDialReachesAFollowerThatTakesOver (issue 42): a peer's first address
// is a leader that froze (it never answers) and its second a follower that
// does not listen yet (refused). While the frozen address holds the dial,
// the refused one is dialled again every addrDelay, so the call goes
// through as soon as the follower listens, long before the frozen address's
// DialTimeout ends; dialled once only, the call failed at that timeout.
func TestDialReachesAFollowerThatTakesOver(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			frozen := frozenAddr(t)
			follower := freeAddr(t)
			id := mustIdentity(t)
			allow := NewAllowList()
			cli := newNode(t, "client", withPolicy(NewAllowList(id.PublicKey())), func(c *Config) {
				c.DialTimeout = time.Minute // the frozen address would hold a dial that long
				c.Transports = []string{tr}
			})
			allow.Allow(cli.PublicKey())
			cli.mu.Lock()
			cli.book[id.PublicKey()] = []string{frozen, follower}
			cli.mu.Unlock()

			takeover := time.AfterFunc(3*addrDelay/2, func() {
				srv, err := New(Config{Component: "follower", Identity: id, Listen: follower, Policy: allow, Transports: []string{tr}})
				if err != nil {
					t.Error(err)
					return
				}
				t.Cleanup(func() { srv.Close() })
				HandleFunc(srv, "dialtest.ping", func(context.Context, PublicKey, struct{}) (string, error) { return "pong", nil })
			})
			defer takeover.Stop()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var out string
			if err := cli.Call(ctx, id.PublicKey(), "dialtest.ping", struct{}{}, &out); err != nil || out != "pong" {
				t.Fatalf("a call while the first address is frozen and the second begins to listen: %q, %v", out, err)
			}
			cli.mu.Lock()
			book := slices.Clone(cli.book[id.PublicKey()])
			cli.mu.Unlock()
			if !slices.Equal(book, []string{follower, frozen}) {
				t.Errorf("the book after the dial: %v; want the follower first", book)
			}
		})
	}
}

// freeAddr is an address where nothing listens, on UDP or TCP (a port
// free for both when it was taken).
func freeAddr(t *testing.T) string {
	t.Helper()
	for range 20 {
		udp, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		tcp, err := net.Listen("tcp", udp.LocalAddr().String())
		udp.Close()
		if err == nil {
			tcp.Close()
			return udp.LocalAddr().String()
		}
	}
	t.Fatal("no port free for both UDP and TCP in 20 tries")
	return ""
}

// TestUnsureAfterTheRequestWasSent: a call whose connection is lost while
// the peer handles it fails unavailable and Unsure (the peer may have done
// it), unless the peer's answer, canceled, came first; a call that never
// reached a peer fails and is not Unsure.
func TestUnsureAfterTheRequestWasSent(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			srv, cli := pair(t, withTransports(tr))
			got := make(chan struct{}, 1)
			HandleFunc(srv, "unsure.write", func(ctx context.Context, _ PublicKey, _ struct{}) (string, error) {
				got <- struct{}{}
				<-ctx.Done()
				return "", ctx.Err()
			})
			errc := make(chan error, 1)
			go func() { errc <- cli.Call(ctxT(t), srv.PublicKey(), "unsure.write", struct{}{}, nil) }()
			<-got
			srv.Close()
			err := <-errc
			// Either the connection ended first (unsure), or the closing
			// peer's handler saw its context end and said so (its answer).
			unsure := ErrorCode(err) == CodeUnavailable && Unsure(err) && !Remote(err)
			answered := ErrorCode(err) == CodeCanceled && Remote(err)
			if !unsure && !answered {
				t.Errorf("a call cut off while its handler ran: %v (code %q, unsure %v, remote %v); want unavailable and unsure, or the peer's canceled", err, ErrorCode(err), Unsure(err), Remote(err))
			}
			// The peer's canceled answer can come before its connection's
			// end reaches the caller; a call written onto that connection
			// meanwhile is rightly unsure (the caller cannot know the peer
			// never read it). Once the caller has seen the end, a call must
			// dial, and a refused dial never reached a peer.
			waittest.Until(t, func() bool { return cli.PeersConnected() == 0 }, "the caller seeing the closed peer's connection end")
			err = cli.Call(ctxT(t), srv.PublicKey(), "unsure.write", struct{}{}, nil)
			if err == nil || Unsure(err) {
				t.Errorf("a call to a closed peer: %v (unsure %v); want a failure that is not unsure", err, Unsure(err))
			}
		})
	}
}

// TestPeersConnected counts the peers with a live connection, on both
// sides, and forgets one whose connection ended.
func TestPeersConnected(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			srv, cli := pair(t, withTransports(tr))
			HandleFunc(srv, "peers.ping", func(context.Context, PublicKey, struct{}) (string, error) { return "pong", nil })
			if n := cli.PeersConnected(); n != 0 {
				t.Fatalf("before any call: %d peers connected; want 0", n)
			}
			if err := cli.Call(ctxT(t), srv.PublicKey(), "peers.ping", struct{}{}, nil); err != nil {
				t.Fatal(err)
			}
			if n := cli.PeersConnected(); n != 1 {
				t.Errorf("the caller after a call: %d peers connected; want 1", n)
			}
			if n := srv.PeersConnected(); n != 1 {
				t.Errorf("the callee after a call: %d peers connected; want 1", n)
			}
			cli.Close()
			waittest.Until(t, func() bool { return srv.PeersConnected() == 0 }, "the callee forgetting the closed caller")
		})
	}
}

// TestStartingAnswersUnavailable: a node made Starting answers every call
// unavailable (not "no method", which says something else) until Open.
func TestStartingAnswersUnavailable(t *testing.T) {
	srv, cli := pair(t, func(c *Config) { c.Starting = true })
	HandleFunc(srv, "starting.ping", func(context.Context, PublicKey, struct{}) (string, error) { return "pong", nil })
	for _, method := range []string{"starting.ping", "starting.unknown"} {
		err := cli.Call(ctxT(t), srv.PublicKey(), method, struct{}{}, nil)
		if ErrorCode(err) != CodeUnavailable || Unsure(err) || !Remote(err) {
			t.Errorf("%s before Open: %v (unsure %v, remote %v); want unavailable, the peer's answer, not unsure", method, err, Unsure(err), Remote(err))
		}
	}
	srv.Open()
	var out string
	if err := cli.Call(ctxT(t), srv.PublicKey(), "starting.ping", struct{}{}, &out); err != nil || out != "pong" {
		t.Fatalf("after Open: %q, %v", out, err)
	}
}
