package trust

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/cosmicac/cosmicac/internal/backoff"
	"github.com/cosmicac/cosmicac/internal/ork/orkapi"
)

// PeerSource answers watchPeers; orkapi.Client is one.
type PeerSource interface {
	WatchPeers(ctx context.Context, p orkapi.WatchPeersParams) (orkapi.Peers, error)
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
		p := orkapi.WatchPeersParams{Epoch: k.epoch, Since: k.version, WaitMillis: int(orkapi.MaxWatchWait / time.Millisecond)}
		k.mu.RUnlock()
		if p.Epoch == "" {
			p.WaitMillis = 0
		}
		cctx, cancel := context.WithTimeout(ctx, orkapi.MaxWatchWait+10*time.Second)
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
func (k *Keyring) apply(p orkapi.Peers) {
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
	peers, err := src.WatchPeers(ctx, orkapi.WatchPeersParams{})
	if err == nil {
		k.apply(peers)
	}
	k.syncDone, k.syncErr = covers, err
	return err
}
