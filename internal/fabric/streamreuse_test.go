package fabric

import (
	"context"
	"errors"
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
