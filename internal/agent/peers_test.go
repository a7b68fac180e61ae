package agent

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/agent/agentapi"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/trust"
	"github.com/cosmicac/cosmicac/internal/waittest"
)

// KeepConnected tells the instance agent's hook (Reached) after every round
// that reached a peer, or had none to dial, and the inference agent's
// (Dialled) only when a dial reached one.
func TestKeepConnectedHooks(t *testing.T) {
	old := ReconnectInterval
	ReconnectInterval = 20 * time.Millisecond
	t.Cleanup(func() { ReconnectInterval = old })
	agentID := mustID(t)
	platform, err := fabric.New(fabric.Config{Component: "app-node", Identity: mustID(t), Listen: "127.0.0.1:0",
		Policy: fabric.NewAllowList(agentID.PublicKey())})
	if err != nil {
		t.Fatal(err)
	}
	defer platform.Close()
	gone := mustID(t).PublicKey() // never reachable
	peers := []Peer{{Role: agentapi.RoleAppNode, Key: platform.PublicKey(), Addrs: []string{platform.Addr()}},
		{Role: agentapi.RoleDirectory, Key: gone}, {Role: agentapi.RoleWorker, Key: gone, Addrs: []string{"127.0.0.1:1"}}}
	n, err := NewNode(trust.InstanceAgent, agentID, "", peers, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	dial, dirs := PeerKeys(peers)
	if len(dial) != 2 || dial[0] != platform.PublicKey() || len(dirs) != 1 || dirs[0] != gone {
		t.Fatalf("dial %v, dirs %v", dial, dirs)
	}

	run := func(peers []fabric.PublicKey) (dialled, reached, missed *atomic.Int32, stop func()) {
		dialled, reached, missed = new(atomic.Int32), new(atomic.Int32), new(atomic.Int32)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			KeepConnected(ctx, n, peers, slog.New(slog.DiscardHandler), ConnectHooks{Dialled: func() { dialled.Add(1) },
				Reached: func() { reached.Add(1) }, Missed: func() { missed.Add(1) }})
		}()
		return dialled, reached, missed, func() { cancel(); <-done }
	}

	// None to dial: every round counts as reached.
	dialled, reached, missed, stop := run(nil)
	waittest.Until(t, func() bool { return reached.Load() >= 2 }, "two rounds with none to dial")
	stop()
	if dialled.Load() != 0 || missed.Load() != 0 {
		t.Fatalf("none to dial: dialled %d, missed %d", dialled.Load(), missed.Load())
	}

	// The platform is dialled once, then found connected round after round.
	dialled, reached, missed, stop = run(dial[:1])
	waittest.Until(t, func() bool { return reached.Load() >= 3 }, "three rounds that reached the platform")
	stop()
	if dialled.Load() != 1 || missed.Load() != 0 || !n.Connected(platform.PublicKey()) {
		t.Fatalf("dialled %d, missed %d, connected %v", dialled.Load(), missed.Load(), n.Connected(platform.PublicKey()))
	}

	// An unreachable peer alone: rounds go by and reach nothing.
	dialled, reached, missed, stop = run(dial[1:])
	waittest.Until(t, func() bool { return missed.Load() >= 2 }, "two rounds that missed the peer")
	stop()
	if dialled.Load() != 0 || reached.Load() != 0 {
		t.Fatalf("unreachable peer: dialled %d, reached %d", dialled.Load(), reached.Load())
	}
}
