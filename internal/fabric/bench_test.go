package fabric

// Benchmarks of the fabric next to plain loopback TCP, measured in the same
// run. Run them with
//
//	go test -run '^$' -bench . -benchtime 2s ./internal/fabric
//
// Round-trip benchmarks time every operation and report its p50 and p99
// (p50-ns, p99-ns) beside the mean (ns/op). "plain-tcp" is a length-prefixed
// echo over a bare net.Conn: no TLS, no multiplexing, no JSON.

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"encoding/json"
	"io"
	"math"
	"net"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

const benchPayload = 1 << 10 // one request/response round trip carries 1 KiB each way

// benchParams is a 1 KiB JSON value (a string).
var benchParams = json.RawMessage(`"` + strings.Repeat("a", benchPayload-2) + `"`)

// recordLatencies reports p50 and p99 of the durations.
func recordLatencies(b *testing.B, d []time.Duration) {
	if len(d) == 0 {
		return
	}
	slices.Sort(d)
	b.ReportMetric(float64(percentile(d, 0.50)), "p50-ns")
	b.ReportMetric(float64(percentile(d, 0.99)), "p99-ns")
}

func percentile(sorted []time.Duration, q float64) time.Duration {
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// ---- plain TCP

// plainEchoServer answers length-prefixed frames with the same frame.
func plainEchoServer(tb testing.TB) string { return echoServer(tb, nil) }

// echoServer is plainEchoServer with each accepted connection wrapped
// (in TLS, for the plain-tls baseline) when wrap is set.
func echoServer(tb testing.TB, wrap func(net.Conn) net.Conn) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	var wg sync.WaitGroup
	tb.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
			if wrap != nil {
				c = wrap(c)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				buf := make([]byte, 4+benchPayload)
				for {
					body, err := readFrame(c, 16<<20, buf[4:])
					if err != nil {
						return
					}
					out := buf[:4+len(body)]
					binary.BigEndian.PutUint32(out, uint32(len(body)))
					if _, err := c.Write(out); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// plainSinkServer reads 1 MiB at a time and acknowledges each with one byte.
func plainSinkServer(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	var wg sync.WaitGroup
	tb.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		sink(c)
	}()
	return ln.Addr().String()
}

// sink reads chunks of 1 MiB and writes one byte after each until EOF.
func sink(rw io.ReadWriter) error {
	buf := make([]byte, 1<<20)
	for {
		if _, err := io.ReadFull(rw, buf); err != nil {
			return err
		}
		if _, err := rw.Write([]byte{1}); err != nil {
			return err
		}
	}
}

// plainRoundTrip sends one frame and reads the echo.
func plainRoundTrip(c net.Conn, req, resp []byte) error {
	if _, err := c.Write(req); err != nil {
		return err
	}
	_, err := io.ReadFull(c, resp)
	return err
}

func plainRequest() []byte {
	req := make([]byte, 4+benchPayload)
	binary.BigEndian.PutUint32(req, benchPayload)
	copy(req[4:], benchParams)
	return req
}

// ---- fabric

// benchPair is a server with an "echo" method (answering the request's
// params) and a "sink" stream, and a client that has dialled it with tr.
func benchPair(b *testing.B, tr string) (srv, cli *Node) {
	b.Helper()
	srv, cli = pair(b, withTransports(tr))
	srv.Handle("echo", func(_ context.Context, r *Request) (any, error) { return r.Params, nil })
	srv.HandleStream("sink", func(_ context.Context, r *StreamRequest) error {
		s, err := r.Accept(nil)
		if err != nil {
			return err
		}
		if err := sink(s); err != io.EOF {
			return err
		}
		return nil
	})
	var pr PingReply
	if err := cli.Call(context.Background(), srv.PublicKey(), MethodPing, nil, &pr); err != nil {
		b.Fatal(err)
	}
	if pr.Transport != tr {
		b.Fatalf("connected over %q, want %q", pr.Transport, tr)
	}
	return srv, cli
}

// BenchmarkRoundTrip1KiB is one call answered with its 1 KiB, on each
// transport, next to three baselines in the same run: plain-tcp; plain-tls,
// the same echo inside TLS 1.3 with the fabric's certificates and AES-GCM
// (what the TCP fallback costs before yamux); and chan-pingpong, a round
// trip between two goroutines, each locked to an OS thread, over
// unbuffered channels: two wake-ups of a sleeping thread and nothing else,
// the unit that quic-go's and yamux's goroutine hand-offs are paid in (docs/benchmarks.md,
// "Fabric").
func BenchmarkRoundTrip1KiB(b *testing.B) {
	plain := func(b *testing.B, c net.Conn) {
		req, resp := plainRequest(), make([]byte, 4+benchPayload)
		lat := make([]time.Duration, 0, b.N)
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			t0 := time.Now()
			if err := plainRoundTrip(c, req, resp); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(t0))
		}
		b.StopTimer()
		recordLatencies(b, lat)
	}
	b.Run("plain-tcp", func(b *testing.B) {
		c, err := net.Dial("tcp", plainEchoServer(b))
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		plain(b, c)
	})
	b.Run("plain-tls", func(b *testing.B) {
		certs := make([]tls.Certificate, 2)
		keys := make([]PublicKey, 2)
		for i := range certs {
			id, err := GenerateIdentity()
			if err != nil {
				b.Fatal(err)
			}
			if certs[i], err = certificate(id); err != nil {
				b.Fatal(err)
			}
			keys[i] = id.PublicKey()
		}
		anyone := PolicyFunc(func(PublicKey) Access { return AccessFull })
		addr := echoServer(b, func(c net.Conn) net.Conn { return tls.Server(c, serverTLS(certs[0], anyone, "bench")) })
		c, err := tls.Dial("tcp", addr, clientTLS(certs[1], keys[0], "bench"))
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		plain(b, c)
	})
	b.Run("chan-pingpong", func(b *testing.B) {
		ping, pong := make(chan []byte), make(chan []byte)
		// Each end on an OS thread of its own: a hand-off wakes the other
		// thread (a futex wake, on a VM an interrupt to the other vCPU),
		// as a hand-off between the fabric's goroutines does whenever the
		// woken one is not run on the waker's own P.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		go func() {
			runtime.LockOSThread()
			for m := range ping {
				pong <- m
			}
		}()
		defer close(ping)
		msg := make([]byte, benchPayload)
		lat := make([]time.Duration, 0, b.N)
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			t0 := time.Now()
			ping <- msg
			<-pong
			lat = append(lat, time.Since(t0))
		}
		b.StopTimer()
		recordLatencies(b, lat)
	})
	for _, tr := range transports {
		b.Run("fabric-"+tr, func(b *testing.B) {
			srv, cli := benchPair(b, tr)
			ctx := context.Background()
			lat := make([]time.Duration, 0, b.N)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				t0 := time.Now()
				res, err := cli.CallRaw(ctx, srv.PublicKey(), "echo", benchParams)
				if err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t0))
				if len(res) != benchPayload {
					b.Fatalf("echo returned %d bytes", len(res))
				}
			}
			b.StopTimer()
			recordLatencies(b, lat)
		})
	}
}

// BenchmarkRoundTrip1KiBParallel runs calls from many goroutines at once:
// the fabric multiplexes them over one pooled connection, plain TCP gets one
// connection per goroutine.
func BenchmarkRoundTrip1KiBParallel(b *testing.B) {
	const parallelism = 4 // goroutines per GOMAXPROCS
	b.Run("plain-tcp", func(b *testing.B) {
		addr := plainEchoServer(b)
		b.SetParallelism(parallelism)
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				b.Error(err)
				return
			}
			defer c.Close()
			req, resp := plainRequest(), make([]byte, 4+benchPayload)
			for pb.Next() {
				if err := plainRoundTrip(c, req, resp); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	for _, tr := range transports {
		b.Run("fabric-"+tr, func(b *testing.B) {
			srv, cli := benchPair(b, tr)
			b.SetParallelism(parallelism)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				for pb.Next() {
					if _, err := cli.CallRaw(ctx, srv.PublicKey(), "echo", benchParams); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

func BenchmarkThroughput1MiB(b *testing.B) {
	chunk := make([]byte, 1<<20)
	for i := range chunk {
		chunk[i] = byte(i)
	}
	b.Run("plain-tcp", func(b *testing.B) {
		c, err := net.Dial("tcp", plainSinkServer(b))
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		var ack [1]byte
		b.SetBytes(int64(len(chunk)))
		b.ResetTimer()
		for range b.N {
			if _, err := c.Write(chunk); err != nil {
				b.Fatal(err)
			}
			if _, err := io.ReadFull(c, ack[:]); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, tr := range transports {
		b.Run("fabric-"+tr, func(b *testing.B) {
			srv, cli := benchPair(b, tr)
			s, err := cli.OpenStream(context.Background(), srv.PublicKey(), "sink", nil, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			var ack [1]byte
			b.SetBytes(int64(len(chunk)))
			b.ResetTimer()
			for range b.N {
				if _, err := s.Write(chunk); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(s, ack[:]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkConnSetup times what a new peer pays before its first answer:
// for the fabric, making a node (its certificate included), dialling,
// the mutually authenticated handshake with the welcome byte, and a first
// ping; for plain TCP, connect and a first 1 KiB echo. Each op closes what
// it opened.
func BenchmarkConnSetup(b *testing.B) {
	b.Run("plain-tcp", func(b *testing.B) {
		addr := plainEchoServer(b)
		req, resp := plainRequest(), make([]byte, 4+benchPayload)
		lat := make([]time.Duration, 0, b.N)
		b.ResetTimer()
		for range b.N {
			t0 := time.Now()
			c, err := net.Dial("tcp", addr)
			if err != nil {
				b.Fatal(err)
			}
			if err := plainRoundTrip(c, req, resp); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(t0))
			c.Close()
		}
		b.StopTimer()
		recordLatencies(b, lat)
	})
	for _, tr := range transports {
		b.Run("fabric-"+tr, func(b *testing.B) {
			anyone := NewAllowList()
			anyone.SetAllowAny(true)
			srv := newNode(b, "server", withPolicy(anyone))
			ids := make([]*Identity, b.N)
			for i := range ids {
				ids[i] = mustIdentity(b)
			}
			ctx := context.Background()
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := range b.N {
				t0 := time.Now()
				cli, err := New(Config{Component: "client", Identity: ids[i], Transports: []string{tr}, Policy: NewAllowList(srv.PublicKey())})
				if err != nil {
					b.Fatal(err)
				}
				cli.AddAddrs(srv.PublicKey(), srv.Addr())
				if err := cli.Call(ctx, srv.PublicKey(), MethodPing, nil, nil); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t0))
				cli.Close()
			}
			b.StopTimer()
			recordLatencies(b, lat)
		})
	}
}

// recordConn records the writes made to it.
type recordConn struct {
	net.Conn
	writes [][]byte
}

func (r *recordConn) Write(p []byte) (int, error) {
	r.writes = append(r.writes, slices.Clone(p))
	return len(p), nil
}

// TestCoalescer: a small yamux data frame goes out in one write (one TLS
// record, one TCP segment); other frames and large bodies pass unchanged.
func TestCoalescer(t *testing.T) {
	rec := &recordConn{}
	c := &coalescer{Conn: rec}
	hdr := func(typ byte, length uint32) []byte {
		h := make([]byte, yamuxHeaderSize)
		h[1] = typ
		binary.BigEndian.PutUint32(h[4:], 7) // stream ID
		binary.BigEndian.PutUint32(h[8:], length)
		return h
	}
	body := []byte(strings.Repeat("x", 1024))
	big := make([]byte, maxCoalesce+1)
	for _, w := range [][]byte{
		hdr(0, 1024), body, // data: joined
		hdr(1, 0),                     // window update: alone
		hdr(0, 0),                     // data FIN without body: alone
		hdr(0, uint32(len(big))), big, // large body: apart
	} {
		if n, err := c.Write(w); n != len(w) || err != nil {
			t.Fatalf("Write = %d, %v", n, err)
		}
	}
	want := []int{yamuxHeaderSize + 1024, yamuxHeaderSize, yamuxHeaderSize, yamuxHeaderSize, len(big)}
	if len(rec.writes) != len(want) {
		t.Fatalf("%d writes, want %d", len(rec.writes), len(want))
	}
	for i, w := range rec.writes {
		if len(w) != want[i] {
			t.Errorf("write %d: %d bytes, want %d", i, len(w), want[i])
		}
	}
	if !bytes.Equal(rec.writes[0][yamuxHeaderSize:], body) || !bytes.Equal(rec.writes[0][:yamuxHeaderSize], hdr(0, 1024)) {
		t.Error("joined write is not header then body")
	}
}
