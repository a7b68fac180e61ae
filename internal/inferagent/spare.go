package inferagent

import (
	"context"
	"errors"
	"net"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A spare connection to the runtime, for llama.cpp's exchanges.
//
// llama-server closes its connection after every streamed answer, so each
// exchange needs a new one, and dialing it (a unix socket's connect, or
// TCP's handshake) lay on every request's way to the first token (about a
// tenth of a millisecond on the machines of docs/benchmarks.md, "Inference
// on a real engine"). The agent keeps one connection dialed ahead: an
// exchange takes it, and dials the next once its answer is whole (refill),
// not while the runtime works on it: the runtime's accepting a connection
// (a thread woken, one handed the connection) would take CPU from the
// request on a machine it shares. A spare unused for spareFor is closed:
// llama-server's HTTP library (cpp-httplib's keep-alive wait, 5 s by
// default) closes a connection that sends nothing, and each open one holds
// one of its HTTP threads meanwhile. At most one is kept, so spares never
// take up the threads a runtime serves its requests with (llama-server
// has at least parallel+2). A spare the runtime closed meanwhile (it
// restarted) is found closed by a peek before use and dialed anew.

// spareFor is how long a spare connection is kept unused.
const spareFor = time.Second

// spare holds the one connection dialed ahead.
type spare struct {
	mu      sync.Mutex
	c       net.Conn
	addr    string // what c is connected to
	dialing bool
	closed  bool
	fills   sync.WaitGroup
}

// take answers a connection to the runtime at addr: the spare if it is
// connected there and still open, else a new one.
func (s *spare) take(ctx context.Context, addr string) (net.Conn, error) {
	s.mu.Lock()
	c, at := s.c, s.addr
	s.c = nil
	s.mu.Unlock()
	if c != nil {
		if at == addr && open(c) {
			return c, nil
		}
		c.Close()
	}
	return dialRuntime(ctx, addr)
}

// refill starts dialing a spare to addr unless one is kept or on its way.
func (s *spare) refill(addr string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dialing || s.closed || s.c != nil {
		return
	}
	s.dialing = true
	s.fills.Add(1)
	go s.fill(addr)
}

// fill dials a spare to addr and keeps it for spareFor.
func (s *spare) fill(addr string) {
	defer s.fills.Done()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	c, err := dialRuntime(ctx, addr)
	cancel()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dialing = false
	if err != nil {
		return
	}
	if s.closed || s.c != nil {
		c.Close()
		return
	}
	s.c, s.addr = c, addr
	time.AfterFunc(spareFor, func() {
		s.mu.Lock()
		unused := s.c == c
		if unused {
			s.c = nil
		}
		s.mu.Unlock()
		if unused {
			c.Close()
		}
	})
}

// close closes the spare and keeps no more; it waits for a dial under way.
func (s *spare) close() {
	s.mu.Lock()
	s.closed = true
	c := s.c
	s.c = nil
	s.mu.Unlock()
	if c != nil {
		c.Close()
	}
	s.fills.Wait()
}

// open reports whether c, which has sent nothing yet, is still open and
// has nothing to read: a peek that does not wait finds no data (EAGAIN).
// A runtime that closed it gives end-of-file or a reset; one that sent
// something unasked (an error answer) has spoilt it too.
func open(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	alive := false
	var b [1]byte
	err = rc.Read(func(fd uintptr) bool {
		_, _, err := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		alive = errors.Is(err, unix.EAGAIN)
		return true
	})
	return err == nil && alive
}
