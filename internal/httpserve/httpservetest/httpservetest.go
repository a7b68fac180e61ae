// Package httpservetest probes a server's HTTP limits (httpserve.Limits) as
// a client that holds on would: SlowBody sends a body one byte at a time,
// Idle leaves a keep-alive connection idle. Each fails the test unless the
// server closes the connection within the limit configured plus Slack.
//
// Importers: tests only.
package httpservetest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Slack is what the probes allow beyond the limit a test configures: the
// server's timers fire late on a loaded machine, and it may linger before
// the close (net/http waits up to 500 ms for the client to see its
// answer). The probes check a deadline, not a speed.
const Slack = 5 * time.Second

// ByteEvery is how often SlowBody sends a byte of its body.
const ByteEvery = 200 * time.Millisecond

// SlowBody sends method path with header (Host and Content-Length are
// added) and then its 1000-byte body one byte every ByteEvery, and fails t
// unless the server closes the connection within limit+Slack of the
// headers. It returns the status the server answered before closing, 0
// when it closed without one.
func SlowBody(t testing.TB, addr, method, path string, header http.Header, limit time.Duration) int {
	t.Helper()
	const n = 1000
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	defer conn.Close()
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n", method, path, addr, n)
	header.Write(&b)
	b.WriteString("\r\n")
	start := time.Now()
	if _, err := io.WriteString(conn, b.String()); err != nil {
		t.Fatalf("send the headers: %v", err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(ByteEvery)
		defer tick.Stop()
		for range n {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			if _, err := conn.Write([]byte("x")); err != nil {
				return // the server closed the connection
			}
		}
	})
	defer func() { close(stop); wg.Wait() }()
	conn.SetReadDeadline(start.Add(limit + Slack))
	got, err := io.ReadAll(conn)
	if isTimeout(err) {
		t.Errorf("%s %s with a body sent a byte every %v: the connection was still open %v after the headers (body limit %v + slack %v); read %q",
			method, path, ByteEvery, time.Since(start).Round(time.Millisecond), limit, Slack, got)
		return 0
	}
	// Closed (EOF, or a reset: the client was still sending).
	return status(got)
}

// Idle sends GET path with header on a new connection, reads the answer,
// and fails t unless the server then closes the idle keep-alive connection
// within limit+Slack.
func Idle(t testing.TB, addr, path string, header http.Header, limit time.Duration) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	defer conn.Close()
	var b strings.Builder
	fmt.Fprintf(&b, "GET %s HTTP/1.1\r\nHost: %s\r\n", path, addr)
	header.Write(&b)
	b.WriteString("\r\n")
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(conn, b.String()); err != nil {
		t.Fatalf("send GET %s: %v", path, err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.Close {
		t.Fatalf("GET %s: %s with Connection: close: no keep-alive connection to idle", path, resp.Status)
	}
	start := time.Now()
	conn.SetReadDeadline(start.Add(limit + Slack))
	_, err = br.ReadByte()
	switch {
	case err == nil:
		t.Errorf("GET %s: the server wrote on an idle connection", path)
	case isTimeout(err):
		t.Errorf("GET %s: the idle keep-alive connection was still open after %v (idle limit %v + slack %v)",
			path, time.Since(start).Round(time.Millisecond), limit, Slack)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// status reads the status code of the answer in b (0: none).
func status(b []byte) int {
	line, _, _ := strings.Cut(string(b), "\r\n")
	f := strings.Fields(line)
	if len(f) < 2 || !strings.HasPrefix(f[0], "HTTP/") {
		return 0
	}
	code, _ := strconv.Atoi(f[1])
	return code
}
