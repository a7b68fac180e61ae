package hop

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// rawServer answers each request on a connection with answer(i, req), the
// i-th request of the connection; after it, close ends the connection.
// Each connection it ends is sent on closed.
type rawServer struct {
	ln     net.Listener
	conns  atomic.Int32
	closed chan net.Conn
	answer func(i int, req *http.Request, body []byte) (resp string, close bool)
}

func newRawServer(t *testing.T, answer func(i int, req *http.Request, body []byte) (string, bool)) *rawServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &rawServer{ln: ln, answer: answer, closed: make(chan net.Conn, 1000)}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go s.serve(c)
		}
	}()
	return s
}

func (s *rawServer) serve(c net.Conn) {
	s.conns.Add(1)
	defer func() {
		c.Close()
		s.closed <- c
	}()
	br := bufio.NewReader(c)
	for i := 0; ; i++ {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		body, _ := io.ReadAll(req.Body)
		resp, closeAfter := s.answer(i, req, body)
		if _, err := io.WriteString(c, resp); err != nil || closeAfter {
			return
		}
	}
}

// waitClosed waits until the server has closed a connection (its FIN is
// sent).
func (s *rawServer) waitClosed(t *testing.T) {
	t.Helper()
	select {
	case <-s.closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the server did not close the connection")
	}
}

func ok(body string) string {
	return fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
}

func tcpPool(maxIdle int, idleFor time.Duration) (*Pool, *atomic.Int32) {
	var dials atomic.Int32
	d := net.Dialer{}
	return NewPool(func(ctx context.Context, addr string) (net.Conn, error) {
		dials.Add(1)
		return d.DialContext(ctx, "tcp", addr)
	}, maxIdle, idleFor), &dials
}

func get(t *testing.T, p *Pool, addr string, body string) (*Response, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequestWithContext(context.Background(), "POST", "http://"+addr+"/x", rd)
	resp, err := p.Do(req, addr)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	resp.Finish(true)
	return resp, string(b)
}

func TestConnectionsAreReused(t *testing.T) {
	s := newRawServer(t, func(i int, _ *http.Request, body []byte) (string, bool) {
		return ok(fmt.Sprintf("%d:%s", i, body)), false
	})
	p, dials := tcpPool(4, time.Minute)
	addr := s.ln.Addr().String()
	for i := range 10 {
		if _, b := get(t, p, addr, "hi"); b != fmt.Sprintf("%d:hi", i) {
			t.Fatalf("request %d answered %q", i, b)
		}
	}
	if dials.Load() != 1 || s.conns.Load() != 1 {
		t.Fatalf("10 sequential requests used %d dials (%d server connections), want 1", dials.Load(), s.conns.Load())
	}
}

// TestStaleConnectionReplayed: the server closed the pooled connection
// while it was idle (a keep-alive timeout); the request goes again, with
// its body, on a fresh connection.
func TestStaleConnectionReplayed(t *testing.T) {
	s := newRawServer(t, func(i int, _ *http.Request, body []byte) (string, bool) {
		return ok("echo:" + string(body)), true // closes after each answer, without saying so
	})
	p, dials := tcpPool(4, time.Minute)
	addr := s.ln.Addr().String()
	get(t, p, addr, "one")
	s.waitClosed(t)
	if _, b := get(t, p, addr, "two"); b != "echo:two" {
		t.Fatalf("replayed request answered %q", b)
	}
	if dials.Load() != 2 {
		t.Fatalf("%d dials, want 2 (the replay on a fresh connection)", dials.Load())
	}

	// A body that cannot be read again is not replayed.
	get(t, p, addr, "three")
	s.waitClosed(t)
	req, _ := http.NewRequest("POST", "http://"+addr+"/x", io.NopCloser(strings.NewReader("four")))
	req.ContentLength = 4
	if _, err := p.Do(req, addr); err == nil {
		t.Fatal("a request with a one-shot body was replayed")
	}
}

func TestCloseAndFinishFalseDropConnection(t *testing.T) {
	s := newRawServer(t, func(i int, req *http.Request, _ []byte) (string, bool) {
		if req.URL.Path == "/close" {
			return "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok", true
		}
		return ok("ok"), false
	})
	p, dials := tcpPool(4, time.Minute)
	addr := s.ln.Addr().String()
	req, _ := http.NewRequest("GET", "http://"+addr+"/close", nil)
	resp, err := p.Do(req, addr)
	if err != nil {
		t.Fatal(err)
	}
	io.ReadAll(resp.Body)
	resp.Finish(true)
	get(t, p, addr, "")
	if dials.Load() != 2 {
		t.Fatalf("after Connection: close, %d dials, want 2", dials.Load())
	}
	req, _ = http.NewRequest("GET", "http://"+addr+"/", nil)
	resp, err = p.Do(req, addr)
	if err != nil {
		t.Fatal(err)
	}
	resp.Finish(false) // body not read: the connection cannot be reused
	get(t, p, addr, "")
	if dials.Load() != 3 {
		t.Fatalf("after Finish(false), %d dials, want 3", dials.Load())
	}
}

// TestIdleConnectionsExpire: a connection idle for less than idleFor is
// reused, one idle for idleFor is not. In a synctest bubble, over
// net.Pipe, so that the idle times are exact.
func TestIdleConnectionsExpire(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const idleFor = 20 * time.Millisecond
		s := &rawServer{closed: make(chan net.Conn, 10), answer: func(int, *http.Request, []byte) (string, bool) { return ok("ok"), false }}
		var dials atomic.Int32
		p := NewPool(func(context.Context, string) (net.Conn, error) {
			dials.Add(1)
			c, sc := net.Pipe()
			go s.serve(sc)
			return c, nil
		}, 4, idleFor)
		defer p.CloseIdle()
		get(t, p, "sim", "")
		time.Sleep(idleFor - time.Nanosecond) // fake time
		get(t, p, "sim", "")
		if dials.Load() != 1 {
			t.Fatalf("%d dials, want 1 (the connection idle for less than idleFor reused)", dials.Load())
		}
		time.Sleep(idleFor)
		get(t, p, "sim", "")
		if dials.Load() != 2 {
			t.Fatalf("%d dials, want 2 (the connection idle for idleFor expired)", dials.Load())
		}
	})
}

func TestInformationalAnswersSkipped(t *testing.T) {
	s := newRawServer(t, func(int, *http.Request, []byte) (string, bool) {
		return "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n" + ok("final"), false
	})
	p, _ := tcpPool(4, time.Minute)
	resp, b := get(t, p, s.ln.Addr().String(), "x")
	if resp.StatusCode != 200 || b != "final" {
		t.Fatalf("answer %d %q, want 200 final", resp.StatusCode, b)
	}
}

// TestHeadIsBounded: an answer whose head never ends (a header line of
// more than MaxHead bytes) fails the request instead of growing the
// proxy's memory; the connection is not reused.
func TestHeadIsBounded(t *testing.T) {
	s := newRawServer(t, func(int, *http.Request, []byte) (string, bool) {
		return "HTTP/1.1 200 OK\r\nX-Long: " + strings.Repeat("a", 2*MaxHead) + "\r\n\r\n", true
	})
	p, _ := tcpPool(4, time.Minute)
	req, _ := http.NewRequest("GET", "http://x/", nil)
	if resp, err := p.Do(req, s.ln.Addr().String()); err == nil || !strings.Contains(err.Error(), "MaxHead") {
		if resp != nil {
			resp.Finish(false)
		}
		t.Fatalf("a head of 2 MiB: %v, want the head's bound", err)
	}
	// A head within the bound and a body beyond it are read whole.
	s2 := newRawServer(t, func(int, *http.Request, []byte) (string, bool) {
		return ok(strings.Repeat("b", 2*MaxHead)), false
	})
	if resp, b := get(t, p, s2.ln.Addr().String(), "x"); resp.StatusCode != 200 || len(b) != 2*MaxHead {
		t.Fatalf("a 2 MiB body: %d, %d bytes", resp.StatusCode, len(b))
	}
}

// TestCancelClosesConnection: a request whose context ends while it waits
// for its answer returns at once, and its connection is closed (the server
// sees it go: its work is cancelled).
func TestCancelClosesConnection(t *testing.T) {
	asked, gone := make(chan struct{}), make(chan struct{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		http.ReadRequest(bufio.NewReader(c))
		close(asked)
		c.Read(make([]byte, 1)) // never answers; returns when the client closes
		close(gone)
		c.Close()
	}()
	p, _ := tcpPool(4, time.Minute)
	addr := ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+addr+"/", nil)
	errc := make(chan error, 1)
	go func() {
		_, err := p.Do(req, addr)
		errc <- err
	}()
	select { // the request waits for its answer
	case <-asked:
	case <-time.After(10 * time.Second):
		t.Fatal("the server did not get the request")
	}
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Do did not return after cancel")
	}
	select {
	case <-gone:
	case <-time.After(10 * time.Second):
		t.Fatal("the server did not see the connection close")
	}
}

func TestConcurrentRequests(t *testing.T) {
	s := newRawServer(t, func(i int, _ *http.Request, body []byte) (string, bool) { return ok(string(body)), false })
	p, dials := tcpPool(8, time.Minute)
	addr := s.ln.Addr().String()
	var wg sync.WaitGroup
	var bad atomic.Int32
	for g := range 8 {
		wg.Go(func() {
			for i := range 50 {
				msg := fmt.Sprintf("%d-%d", g, i)
				req, _ := http.NewRequest("POST", "http://"+addr+"/", bytes.NewReader([]byte(msg)))
				resp, err := p.Do(req, addr)
				if err != nil {
					bad.Add(1)
					return
				}
				b, err := io.ReadAll(resp.Body)
				resp.Finish(err == nil)
				if string(b) != msg {
					bad.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if bad.Load() > 0 {
		t.Fatalf("%d requests failed or got another's answer", bad.Load())
	}
	if dials.Load() > 8 {
		t.Fatalf("%d dials for 8 concurrent clients", dials.Load())
	}
}

func TestCopyHeaders(t *testing.T) {
	for _, tc := range []struct {
		name string
		src  http.Header
		want http.Header
	}{
		{"hop-by-hop and named", http.Header{
			"Connection":        {"keep-alive, X-Private"},
			"X-Private":         {"secret"},
			"Keep-Alive":        {"timeout=5"},
			"Transfer-Encoding": {"chunked"},
			"Content-Type":      {"text/event-stream"},
			"X-Request-Id":      {"abc"},
		}, http.Header{"Content-Type": {"text/event-stream"}, "X-Request-Id": {"abc"}}},
		{"every hop-by-hop header", http.Header{
			"Connection": {"close"}, "Keep-Alive": {"1"}, "Proxy-Connection": {"1"}, "Te": {"trailers"},
			"Trailer": {"X-T"}, "Transfer-Encoding": {"chunked"}, "Upgrade": {"h2c"},
			"Proxy-Authorization": {"Basic x"}, "Proxy-Authenticate": {"Basic"}, "Expect": {"100-continue"},
			"Accept": {"*/*"},
		}, http.Header{"Accept": {"*/*"}}},
		{"every Connection line counts, in any case, with spaces", http.Header{
			"Connection": {"close", "  x-one ,X-TWO,,", "x-three"},
			"X-One":      {"1"}, "X-Two": {"2"}, "X-Three": {"3"}, "X-Four": {"4"},
		}, http.Header{"X-Four": {"4"}}},
		{"a non-ASCII token names nothing", http.Header{
			"Connection": {"\u212aeep-Alive-Not, X-\u212aey"},
			"X-Key":      {"kept"},
		}, http.Header{"X-Key": {"kept"}}},
		{"no Connection", http.Header{"Authorization": {"Bearer k"}, "Accept": {"a", "b"}},
			http.Header{"Authorization": {"Bearer k"}, "Accept": {"a", "b"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst := http.Header{}
			CopyHeaders(dst, tc.src)
			if !reflect.DeepEqual(dst, tc.want) {
				t.Fatalf("copied %v, want %v", dst, tc.want)
			}
		})
	}
}

// copyHeadersDel is CopyHeaders as it was: copy everything, then delete
// the hop-by-hop headers and those the first Connection line names. The
// benchmark runs it beside CopyHeaders.
func copyHeadersDel(dst, src http.Header) {
	for k, vs := range src {
		dst[k] = vs
	}
	if c := src.Get("Connection"); c != "" {
		for _, h := range strings.Split(c, ",") {
			dst.Del(strings.TrimSpace(h))
		}
	}
	for _, h := range []string{"Connection", "Keep-Alive", "Proxy-Connection", "Te", "Trailer", "Transfer-Encoding",
		"Upgrade", "Proxy-Authorization", "Proxy-Authenticate", "Expect"} {
		dst.Del(h)
	}
}

// BenchmarkCopyHeaders copies the headers the official OpenAI Python SDK
// sends with a chat request (openai-python's _base_client.py and its
// X-Stainless-* platform headers), as the inference proxy does once each
// way per request, with CopyHeaders and, in the same run, the way it did
// before.
//
//	go test -run '^$' -bench BenchmarkCopyHeaders ./internal/hop/
func BenchmarkCopyHeaders(b *testing.B) {
	src := http.Header{
		"Host": {"gw"}, "Accept-Encoding": {"gzip, deflate"}, "Connection": {"keep-alive"},
		"Accept": {"application/json"}, "Content-Type": {"application/json"}, "User-Agent": {"OpenAI/Python 1.109.1"},
		"X-Stainless-Lang": {"python"}, "X-Stainless-Package-Version": {"1.109.1"}, "X-Stainless-Os": {"Linux"},
		"X-Stainless-Arch": {"x64"}, "X-Stainless-Runtime": {"CPython"}, "X-Stainless-Runtime-Version": {"3.11.2"},
		"Authorization": {"Bearer cak_x"}, "X-Stainless-Async": {"false"}, "X-Stainless-Retry-Count": {"0"},
		"X-Stainless-Read-Timeout": {"600"}, "Content-Length": {"96"},
	}
	for _, impl := range []struct {
		name string
		copy func(dst, src http.Header)
	}{{"one-pass", CopyHeaders}, {"copy-then-delete", copyHeadersDel}} {
		b.Run(impl.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				dst := make(http.Header, len(src))
				impl.copy(dst, src)
			}
		})
	}
}
