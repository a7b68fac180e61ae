package inferproxy

import (
	"context"
	"sync"
	"time"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/inferproxy/keyapi"
	"github.com/cosmicac/cosmicac/internal/inferproxy/usageapi"
	"github.com/cosmicac/cosmicac/internal/store"
)

// FabricKeys implements Keys over the fabric: it asks the app-node
// (keyapi.ByHash). Answers, found or not, are kept for a short TTL,
// and concurrent lookups of one hash share one call.
type FabricKeys struct {
	node    *fabric.Node
	appNode fabric.PublicKey
	ttl     time.Duration
	now     func() time.Time // time.Now; a test's clock

	mu       sync.Mutex
	m        map[string]fabricKeyEntry
	inflight map[string]*keyCall
}

type fabricKeyEntry struct {
	r   keyapi.ByHashReply
	exp time.Time
}

type keyCall struct {
	done chan struct{}
	r    keyapi.ByHashReply
	err  error
}

// NewFabricKeys asks appNode through node; ttl ≤ 0 takes 0.5 s (with the
// proxy's own cache, Config.KeyTTL, a revoked key stops within their sum).
func NewFabricKeys(node *fabric.Node, appNode fabric.PublicKey, ttl time.Duration) *FabricKeys {
	if ttl <= 0 {
		ttl = 500 * time.Millisecond
	}
	return &FabricKeys{node: node, appNode: appNode, ttl: ttl, now: time.Now, m: map[string]fabricKeyEntry{}, inflight: map[string]*keyCall{}}
}

var _ Keys = (*FabricKeys)(nil)

// APIKeyByHash implements Keys: the key, or cosmic.ErrNotFound.
func (f *FabricKeys) APIKeyByHash(ctx context.Context, hash []byte) (store.APIKey, error) {
	hk := string(hash)
	f.mu.Lock()
	if e, ok := f.m[hk]; ok && f.now().Before(e.exp) {
		f.mu.Unlock()
		return keyOf(e.r, hash)
	}
	c := f.inflight[hk]
	if c == nil {
		c = &keyCall{done: make(chan struct{})}
		f.inflight[hk] = c
		f.mu.Unlock()
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		c.r, c.err = keyapi.ByHash.Call(cctx, f.node, f.appNode, keyapi.ByHashParams{Hash: hash})
		cancel()
		f.mu.Lock()
		delete(f.inflight, hk)
		if c.err == nil {
			if len(f.m) > 100000 {
				clear(f.m)
			}
			f.m[hk] = fabricKeyEntry{r: c.r, exp: f.now().Add(f.ttl)}
		}
		f.mu.Unlock()
		close(c.done)
	} else {
		f.mu.Unlock()
		select {
		case <-c.done:
		case <-ctx.Done():
			return store.APIKey{}, ctx.Err()
		}
	}
	if c.err != nil {
		return store.APIKey{}, c.err
	}
	return keyOf(c.r, hash)
}

func keyOf(r keyapi.ByHashReply, hash []byte) (store.APIKey, error) {
	if !r.Found {
		return store.APIKey{}, cosmic.ErrNotFound
	}
	k := store.APIKey{ID: r.ID, Name: r.Name, Team: r.Team, CreatedBy: r.CreatedBy, Prefix: r.Prefix,
		Hash: hash, CreatedAt: r.CreatedAt, Models: r.Models, ExpiresAt: r.ExpiresAt, TokensPerMinute: r.TokensPerMinute}
	if r.Previous {
		// Only the hash asked for is known: it is the previous secret.
		k.Hash, k.PreviousHash, k.PreviousExpiresAt = nil, hash, r.PreviousExpiresAt
	}
	return k, nil
}

// FabricUsage implements UsageSink over the fabric: it delivers each
// batch to the app-node (usageapi.Record), which records it in its store.
type FabricUsage struct {
	Node    *fabric.Node
	AppNode fabric.PublicKey
}

var _ UsageSink = FabricUsage{}

// RecordUsage implements UsageSink.
func (f FabricUsage) RecordUsage(ctx context.Context, batch string, rows []store.UsageRow) error {
	wire := make([]usageapi.Row, len(rows))
	for i, r := range rows {
		wire[i] = usageapi.Row{Minute: r.Start, Team: r.Team, KeyID: r.KeyID, JobID: r.JobID, Model: r.Model,
			Requests: r.Requests, PromptTokens: r.PromptTokens, CompletionTokens: r.CompletionTokens}
	}
	_, err := usageapi.Record.Call(ctx, f.Node, f.AppNode, usageapi.RecordParams{Batch: batch, Rows: wire})
	return err
}
