package fabric

import (
	"context"
	"net"
	"slices"
	"testing"
	"time"
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
