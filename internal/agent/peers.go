package agent

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cosmicac/cosmicac/internal/agent/agentapi"
	"github.com/cosmicac/cosmicac/internal/backoff"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/joblog"
	"github.com/cosmicac/cosmicac/internal/trust"
)

// What both agents do with the peers of their bootstrap: admit them, keep
// connected to those with addresses (a dial-only agent is reached over the
// connections it opened), and push their status to the workers.

// NewNode starts the fabric node of an agent of role (trust.InstanceAgent
// or trust.InferenceAgent): it admits the keys of peers only, each as the
// class of key its bootstrap role names, and lets each call what
// internal/trust's Graph gives that class on role; it knows the addresses
// of the peers that have some, and listens on listen when it is set (else
// it is dial-only).
func NewNode(role trust.Role, id *fabric.Identity, listen string, peers []Peer, log *slog.Logger) (*fabric.Node, error) {
	ring := trust.NewKeyring()
	for _, p := range peers {
		r, ok := peerRoles[p.Role]
		if !ok {
			return nil, fmt.Errorf("agent: peer %s has role %q", p.Key.Short(), p.Role)
		}
		var err error
		if r == trust.Worker {
			// The rack's worker, bound to no rack the agent needs to know.
			ring.BindRack("", p.Key)
		} else {
			err = ring.Add(r, p.Key)
		}
		if err != nil {
			return nil, fmt.Errorf("agent: %w", err)
		}
	}
	n, err := fabric.New(fabric.Config{Component: string(role), Identity: id, Listen: listen, Policy: trust.NewPolicy(role, ring), Logger: log})
	if err != nil {
		return nil, err
	}
	for _, p := range peers {
		n.AddAddrs(p.Key, p.Addrs...)
	}
	return n, nil
}

// PeerKeys sorts the keys of peers: dial are those of the peers with
// addresses (for KeepConnected), dirs those of the directory peers (where
// an agent announces itself).
func PeerKeys(peers []Peer) (dial, dirs []fabric.PublicKey) {
	for _, p := range peers {
		if len(p.Addrs) > 0 {
			dial = append(dial, p.Key)
		}
		if p.Role == agentapi.RoleDirectory {
			dirs = append(dirs, p.Key)
		}
	}
	return dial, dirs
}

// ConnectHooks are what KeepConnected calls as it reaches peers; a nil
// func is not called.
type ConnectHooks struct {
	// Dialled is called at once each time a dial reaches a peer, from the
	// dialling goroutine (so it must be safe for concurrent use).
	Dialled func()
	// Reached is called after each round that reached a peer (one it
	// dialled, or one connected already) or had none to dial.
	Reached func()
	// Missed is called after each round that left a peer unconnected.
	Missed func()
}

// KeepConnected dials every peer of peers that is not connected, at once and
// then every ReconnectInterval, until ctx ends: the platform reaches a
// dial-only agent over these connections. After a round that left a peer
// unconnected it tries again sooner, from 200 ms doubling up to
// ReconnectInterval (a VM's network comes up, a new key is admitted, a
// moment after the agent starts).
func KeepConnected(ctx context.Context, n *fabric.Node, peers []fabric.PublicKey, log *slog.Logger, hooks ConnectHooks) {
	retry := backoff.Backoff{Min: min(200*time.Millisecond, ReconnectInterval), Max: ReconnectInterval}
	t := time.NewTimer(ReconnectInterval)
	defer t.Stop()
	for {
		var wg sync.WaitGroup
		var reached, missed atomic.Bool // written by the dialling goroutines
		reached.Store(len(peers) == 0)
		for _, k := range peers {
			if n.Connected(k) {
				reached.Store(true)
				continue
			}
			wg.Go(func() {
				cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				if err := n.Call(cctx, k, fabric.MethodPing, nil, nil); err != nil {
					log.Debug("peer unreachable", "peer", k.Short(), "err", err)
					missed.Store(true)
					return
				}
				reached.Store(true)
				if hooks.Dialled != nil {
					hooks.Dialled()
				}
			})
		}
		wg.Wait()
		if reached.Load() && hooks.Reached != nil {
			hooks.Reached()
		}
		if missed.Load() && hooks.Missed != nil {
			hooks.Missed()
		}
		next := ReconnectInterval
		if missed.Load() {
			next = retry.Next()
		} else {
			retry.Reset()
		}
		t.Reset(next)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// NotifyWorkers sends the event method with params to every worker peer
// (agentapi.RoleWorker), each in a goroutine of its own and within 5 s. Events are
// at most once: a failure is only logged.
func NotifyWorkers(n *fabric.Node, peers []Peer, method string, params any, log *slog.Logger) {
	for _, p := range peers {
		if p.Role != agentapi.RoleWorker {
			continue
		}
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := n.Notify(ctx, p.Key, method, params); err != nil {
				log.Debug("report to worker failed", "worker", p.Key.Short(), "err", err)
			}
		}()
	}
}

// KeepReporting calls report every d until ctx ends: an agent pushes its
// status to its workers on every change and every d.
func KeepReporting(ctx context.Context, d time.Duration, report func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			report()
		}
	}
}

// MonitorForwarder is the forwarder of an agent's records to the monitor
// its bootstrap names (nil: none named), sending from the agent's node
// (node, nil until the agent runs). The agent runs it while it runs.
func MonitorForwarder(peers []Peer, node func() *fabric.Node) *joblog.Forwarder {
	for _, p := range peers {
		if p.Role == agentapi.RoleMonitor {
			return joblog.NewForwarder(joblog.NodeFunc(node), p.Key, 0)
		}
	}
	return nil
}
