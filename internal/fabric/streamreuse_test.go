package fabric

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/waittest"
)

// TestCallStreamsReused: sequential calls share one stream; a cancelled
// call's stream is not reused and the next call works; a stream idle past
// idleStreamTTL is retired and replaced.
func TestCallStreamsReused(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			srv, cli := pair(t, withTransports(tr))
			var calls atomic.Int32
			srv.Handle("echo", func(_ context.Context, r *Request) (any, error) {
				calls.Add(1)
				return r.Params, nil
			})
			release, started, stopped := make(chan struct{}), make(chan struct{}, 1), make(chan error, 1)
			srv.Handle("block", func(ctx context.Context, _ *Request) (any, error) {
				started <- struct{}{}
				select {
				case <-ctx.Done():
					stopped <- ctx.Err()
				case <-release:
				}
				return nil, ctx.Err()
			})
			ctx := ctxT(t)
			key := srv.PublicKey()
			echo := func() {
				t.Helper()
				var got string
				if err := cli.Call(ctx, key, "echo", "hi", &got); err != nil || got != "hi" {
					t.Fatalf("echo = %q, %v", got, err)
				}
			}
			echo()
			idle := cli.idleStreams(key)
			if len(idle) != 1 {
				t.Fatalf("%d idle streams after a call, want 1", len(idle))
			}
			first := idle[0].s
			for range 20 {
				echo()
			}
			if idle := cli.idleStreams(key); len(idle) != 1 || idle[0].s != first {
				t.Fatalf("sequential calls did not reuse the stream: %d idle", len(idle))
			}
			// A structured error leaves the stream usable.
			if err := cli.Call(ctx, key, "nope", nil, nil); ErrorCode(err) != CodeNotFound {
				t.Fatalf("err = %v, want not_found", err)
			}
			if idle := cli.idleStreams(key); len(idle) != 1 || idle[0].s != first {
				t.Fatal("an error answer retired the stream")
			}

			// A cancelled call on a reused stream cancels the handler and
			// aborts the stream; the next call gets another.
			cctx, cancel := context.WithCancel(ctx)
			go func() { <-started; cancel() }()
			err := cli.Call(cctx, key, "block", nil, nil)
			if ErrorCode(err) != CodeCanceled || !errors.Is(err, context.Canceled) {
				t.Fatalf("err = %v, want canceled", err)
			}
			select {
			case err := <-stopped:
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("handler saw %v, want canceled", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("server handler was not cancelled")
			}
			if len(cli.idleStreams(key)) != 0 {
				t.Fatal("the aborted stream went back to the pool")
			}
			echo()
			idle = cli.idleStreams(key)
			if len(idle) != 1 || idle[0].s == first {
				t.Fatal("the call after a cancelled one did not open a new stream")
			}

			// A stale stream is retired, not reused.
			second := idle[0].s
			cli.ageIdleStreams(key, idleStreamTTL)
			echo()
			if idle := cli.idleStreams(key); len(idle) != 1 || idle[0].s == second {
				t.Fatal("a stale idle stream was reused")
			}
			close(release)
			if n := calls.Load(); n != 23 {
				t.Fatalf("handler ran %d times, want 23", n)
			}
		})
	}
}

// TestIdleStreamsBounded: a burst of concurrent calls keeps at most
// maxIdleStreams streams afterwards.
func TestIdleStreamsBounded(t *testing.T) {
	srv, cli := pair(t)
	gate := make(chan struct{})
	var waiting atomic.Int32
	srv.Handle("wait", func(ctx context.Context, _ *Request) (any, error) {
		waiting.Add(1)
		<-gate
		return nil, nil
	})
	ctx := ctxT(t)
	const n = maxIdleStreams + 20
	errc := make(chan error, n)
	for range n {
		go func() { errc <- cli.Call(ctx, srv.PublicKey(), "wait", nil, nil) }()
	}
	// Every call holds a stream of its own until the gate opens.
	waittest.Until(t, func() bool { return waiting.Load() == n }, "all %d calls in the handler", n)
	close(gate)
	for range n {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	if got := len(cli.idleStreams(srv.PublicKey())); got == 0 || got > maxIdleStreams {
		t.Fatalf("%d idle streams, want 1..%d", got, maxIdleStreams)
	}
}

func withRequestWait(d time.Duration) nodeOpt { return func(c *Config) { c.requestWait = d } }

// TestServedStreamState: a served call stream reuses its frame buffers
// (each call still gets its own params), watches the caller of a call that
// runs past watchAfter without cutting it, and waits for the next request
// as long as requestWait, reset for each.
func TestServedStreamState(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			const wait = time.Second
			srv, cli := pair(t, withTransports(tr), withRequestWait(wait))
			srv.Handle("echo", func(_ context.Context, r *Request) (any, error) { return r.Params, nil })
			srv.Handle("slow", func(ctx context.Context, r *Request) (any, error) {
				select {
				case <-time.After(10 * watchAfter):
				case <-ctx.Done():
				}
				return nil, ctx.Err()
			})
			ctx := ctxT(t)
			key := srv.PublicKey()
			echo := func(n int) {
				t.Helper()
				want := strings.Repeat(string(rune('a'+n%26)), n)
				var got string
				if err := cli.Call(ctx, key, "echo", want, &got); err != nil || got != want {
					t.Fatalf("echo of %d bytes = %d bytes, %v", n, len(got), err)
				}
			}
			// Longer, shorter and longer params than the kept buffers.
			for _, n := range []int{3000, 5, 2000, 70 << 10, 10, 4000} {
				echo(n)
			}
			first := cli.idleStreams(key)[0].s
			// A call longer than watchAfter starts the watch; ending it
			// must not read as the caller giving up.
			for range 3 {
				if err := cli.Call(ctx, key, "slow", nil, nil); err != nil {
					t.Fatalf("slow call: %v", err)
				}
				echo(100)
			}
			// Calls spaced under the wait, for longer than it in all,
			// keep the stream.
			for range 4 {
				time.Sleep(wait / 3)
				echo(10)
			}
			if idle := cli.idleStreams(key); len(idle) != 1 || idle[0].s != first {
				t.Fatalf("the stream was not reused: %d idle", len(idle))
			}
			// Idle past the wait, the server cuts it.
			first.SetReadDeadline(time.Now().Add(10 * time.Second))
			var b [1]byte
			if _, err := first.Read(b[:]); err == nil || isTimeout(err) {
				t.Fatalf("read of an idle stream = %v, want it cut by the server", err)
			}
		})
	}
}

// TestStreamContextOutlivesCloseWrite: a stream handler that has closed
// its sending half reads on under a live context (on QUIC, the stream's own
// context ends with its sending half; only calls derive from it).
func TestStreamContextOutlivesCloseWrite(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			srv, cli := pair(t, withTransports(tr))
			type result struct {
				read string
				err  error
			}
			got := make(chan result, 1)
			srv.HandleStream("half", func(ctx context.Context, r *StreamRequest) error {
				s, err := r.Accept(nil)
				if err != nil {
					return err
				}
				s.Write([]byte("x"))
				s.CloseWrite()
				b, _ := io.ReadAll(s)
				got <- result{string(b), ctx.Err()}
				return nil
			})
			s, err := cli.OpenStream(ctxT(t), srv.PublicKey(), "half", nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if b, err := io.ReadAll(s); err != nil || string(b) != "x" {
				t.Fatalf("read %q, %v; want x", b, err)
			}
			s.Write([]byte("hello"))
			s.CloseWrite()
			select {
			case r := <-got:
				if r.read != "hello" || r.err != nil {
					t.Fatalf("handler read %q with its context ended by %v; want hello, live", r.read, r.err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the handler did not finish")
			}
		})
	}
}
