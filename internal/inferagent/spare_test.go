package inferagent

import (
	"context"
	"io"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/waittest"
)

// TestSpareConnection: take answers the connection refill dialed ahead
// when one is ready, else dials; a spare the runtime closed is not
// answered; a spare left unused is closed within spareFor; close closes
// the spare, and refill keeps none after it.
func TestSpareConnection(t *testing.T) {
	addr := filepath.Join(t.TempDir(), "rt.sock")
	ln, err := net.Listen("unix", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	conns := make(chan net.Conn, 16) // the runtime's ends, in the order dialed
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns <- c
		}
	}()
	next := func(what string) net.Conn {
		t.Helper()
		select {
		case c := <-conns:
			t.Cleanup(func() { c.Close() })
			return c
		case <-time.After(30 * time.Second):
			t.Fatalf("no connection dialed: %s", what)
			return nil
		}
	}
	var s spare
	kept := func() net.Conn {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.c
	}
	// sends checks that what is written on c arrives at the runtime's end.
	sends := func(c, end net.Conn, what string) {
		t.Helper()
		if _, err := c.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		end.SetReadDeadline(time.Now().Add(30 * time.Second))
		var b [1]byte
		if _, err := end.Read(b[:]); err != nil || b[0] != 'x' {
			t.Fatalf("%s: its end read %q, %v", what, b, err)
		}
	}
	ctx := context.Background()
	first, err := s.take(ctx, addr) // none ready: dialed now
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	sends(first, next("the first"), "the first connection")
	s.refill(addr) // as an exchange does once its answer is whole
	spareEnd := next("the spare")
	waittest.Until(t, func() bool { return kept() != nil }, "the spare kept")
	second, err := s.take(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	sends(second, spareEnd, "the second take (the spare)")
	s.refill(addr)
	// The next spare, closed by the runtime before it is taken, is not
	// answered: take dials a new one.
	next("the next spare").Close()
	waittest.Until(t, func() bool { c := kept(); return c != nil && !open(c) }, "the spare seen closed")
	third, err := s.take(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer third.Close()
	sends(third, next("a new one for the third take"), "the third take")
	s.refill(addr)
	// The spare dialed after it, left unused, is closed within spareFor.
	unused := next("the spare after the third")
	unused.SetReadDeadline(time.Now().Add(30 * time.Second))
	var b [1]byte
	if _, err := unused.Read(b[:]); err != io.EOF {
		t.Fatalf("the unused spare's end read %v, want EOF (closed within spareFor)", err)
	}
	if kept() != nil {
		t.Fatal("an expired spare is still kept")
	}
	// close keeps none: a take after it dials, and refill dials no spare.
	s.close()
	fourth, err := s.take(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	fourth.Close()
	next("the fourth")
	s.refill(addr)
	s.fills.Wait()
	if kept() != nil || s.dialing {
		t.Fatal("a spare kept after close")
	}
}
