package ork

// A leader cut off from every peer but not from the database keeps its
// lease: nothing else would end its term. It yields instead, once, when
// it reached peers in its term and then reaches none for a while: a
// follower that reaches them leads, and one that is cut off as well never
// reached a peer in its own term, so it does not yield back (no flap).

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cosmicac/cosmicac/internal/fabric"
)

// ErrIsolated is why a leader yields its lease: it reached a peer in its
// term, then none for Config.IsolationTimeout.
var ErrIsolated = errors.New("ork isolated from its peers")

// reachesPeer reports whether the leader reaches any peer now: a live
// fabric connection (an app-node's, a worker's, any component's) or a rack
// whose worker answered its last heartbeat.
func (o *Ork) reachesPeer(n *fabric.Node) bool {
	if n.PeersConnected() > 0 {
		return true
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, r := range o.racks {
		if r.reachable {
			return true
		}
	}
	return false
}

// watchIsolation asks reaches every tenth of limit (at most every second)
// and returns an error wrapping ErrIsolated once reaches, having said yes
// in this term, has said no for limit; nil when ctx ends. isolated is 1
// while it says no after a yes.
func watchIsolation(ctx context.Context, reaches func() bool, limit time.Duration, isolated prometheus.Gauge, log *slog.Logger) error {
	tick := time.NewTicker(min(limit/10, time.Second))
	defer tick.Stop()
	defer isolated.Set(0)
	var (
		reached bool
		since   time.Time
	)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		now := time.Now()
		switch {
		case reaches():
			if !since.IsZero() {
				log.Info("reaches its peers again", "after", now.Sub(since).Round(time.Millisecond))
				isolated.Set(0)
			}
			reached, since = true, time.Time{}
		case !reached:
			// Never reached a peer in this term: yielding could only
			// hand the lease to a follower no better off, and back.
		case since.IsZero():
			since = now
			isolated.Set(1)
			log.Error("reaches no peer: no fabric connection, no rack's worker answering; the database still renews the lease, so no follower can lead",
				"yields_after", limit)
		case now.Sub(since) >= limit:
			return fmt.Errorf("reached no peer for %s after reaching some in this term; yielding the lease to a follower that may: %w", limit, ErrIsolated)
		}
	}
}
