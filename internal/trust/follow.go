package trust

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/cosmicac/cosmicac/internal/backoff"
	"github.com/cosmicac/cosmicac/internal/cosmic"
)

// Peers is the bound part of the graph as the ork holds it: every rack's
// worker key and every placed replica with its agents' keys. It is the
// answer of the ork's watchPeers.
type Peers struct {
	// Epoch names the ork process; Version counts its changes. A follower
	// with another epoch takes the next answer whatever its version.
	Epoch      string      `json:"epoch"`
	Version    uint64      `json:"version"`
	Racks      []RackPeer  `json:"racks"`
	Placements []Placement `json:"placements"`
}

// RackPeer is a rack and its worker's key.
type RackPeer struct {
	Rack      string `json:"rack"`
	WorkerKey string `json:"workerKey"`
}

// Placement is a replica that holds GPUs on a rack, and the keys its
// worker issued to its agents (by VMI index; none until the worker
// reports them).
type Placement struct {
	Job       string         `json:"job"`
	Team      string         `json:"team"`
	Type      cosmic.JobType `json:"type"`
	Replica   int            `json:"replica"`
	Rack      string         `json:"rack"`
	AgentKeys []string       `json:"agentKeys,omitempty"`
}

// WatchPeersParams asks for Peers newer than (Epoch, Since), waiting up to
// WaitMillis for a change (0: answer at once).
type WatchPeersParams struct {
	Epoch      string `json:"epoch,omitempty"`
	Since      uint64 `json:"since,omitempty"`
	WaitMillis int    `json:"waitMillis,omitempty"`
}

// MaxWatchWait bounds how long the ork holds a watchPeers call.
const MaxWatchWait = 30 * time.Second

// PeerSource answers watchPeers; orkapi.Client is one.
type PeerSource interface {
	WatchPeers(ctx context.Context, p WatchPeersParams) (Peers, error)
}

// Follow keeps the keyring's bound keys what the ork lists until ctx ends:
// it long-polls src and applies every answer, so a key bound or unbound on
// the ork is admitted or revoked here within one round trip. Failures are
// logged once and retried from 250 ms doubling up to 5 s; the last answer
// stays in force meanwhile.
func (k *Keyring) Follow(ctx context.Context, src PeerSource, log *slog.Logger) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	k.mu.Lock()
	k.src = src
	k.mu.Unlock()
	failing := false
	retry := backoff.Backoff{Min: 250 * time.Millisecond, Max: 5 * time.Second}
	for ctx.Err() == nil {
		k.mu.RLock()
		p := WatchPeersParams{Epoch: k.epoch, Since: k.version, WaitMillis: int(MaxWatchWait / time.Millisecond)}
		k.mu.RUnlock()
		if p.Epoch == "" {
			p.WaitMillis = 0
		}
		cctx, cancel := context.WithTimeout(ctx, MaxWatchWait+10*time.Second)
		peers, err := src.WatchPeers(cctx, p)
		cancel()
		switch {
		case err != nil && ctx.Err() == nil:
			if !failing {
				log.Warn("the ork's bound keys could not be read; keeping the last ones", "err", err)
				failing = true
			}
			retry.Wait(ctx)
			continue
		case err != nil:
			return
		case failing:
			log.Info("the ork's bound keys are read again")
			failing = false
		}
		retry.Reset()
		k.apply(peers)
	}
}

// apply takes an answer unless an older one (a Sync's and the long poll's
// can cross).
func (k *Keyring) apply(p Peers) {
	k.mu.RLock()
	stale := p.Epoch == k.epoch && p.Version < k.version
	k.mu.RUnlock()
	if !stale {
		k.Apply(p)
	}
}

// Sync reads the ork's list now, when the keyring follows one. A handler
// whose caller seems out of its scope calls it before refusing: the ork may
// have bound the key a moment ago, and the long poll's answer be on its
// way. Concurrent calls share reads: each returns once a read that started
// after it was called has been applied.
func (k *Keyring) Sync(ctx context.Context) error {
	k.mu.RLock()
	src := k.src
	k.mu.RUnlock()
	if src == nil {
		return errors.New("trust: the keyring follows no ork")
	}
	ticket := k.syncAsked.Add(1)
	k.syncMu.Lock()
	defer k.syncMu.Unlock()
	if k.syncDone >= ticket {
		return k.syncErr
	}
	covers := k.syncAsked.Load()
	peers, err := src.WatchPeers(ctx, WatchPeersParams{})
	if err == nil {
		k.apply(peers)
	}
	k.syncDone, k.syncErr = covers, err
	return err
}
