package inferproxy

import (
	"bytes"
	"context"
	"sync"
	"time"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/store"
)

// MethodAPIKeyByHash is the app-node's fabric call (read-only, and only
// for the keys ServeAPIKeys admits) that finds an inference API key by the
// hash of its secret: how a standalone proxy-inference checks keys without
// opening the accounts database.
const MethodAPIKeyByHash = "inference.apiKeyByHash"

// APIKeyByHashParams asks for the key whose secret hashes to Hash (sha256,
// 32 bytes; base64 in JSON).
type APIKeyByHashParams struct {
	Hash []byte `json:"hash"`
}

// APIKeyByHashReply is the key, without its hashes; Found false when no
// key has that hash (an unknown or revoked key). An answer, not an error,
// so that a peer without the method (not_found) is never taken for "no
// such key". Previous says the hash is the key's previous secret, which
// works until PreviousExpiresAt; the proxy checks the times at each use.
type APIKeyByHashReply struct {
	Found             bool      `json:"found"`
	ID                string    `json:"id,omitempty"`
	Name              string    `json:"name,omitempty"`
	Team              string    `json:"team,omitempty"`
	CreatedBy         string    `json:"createdBy,omitempty"`
	Prefix            string    `json:"prefix,omitempty"`
	CreatedAt         time.Time `json:"createdAt,omitzero"`
	Models            []string  `json:"models,omitempty"`
	ExpiresAt         time.Time `json:"expiresAt,omitzero"`
	Previous          bool      `json:"previous,omitempty"`
	PreviousExpiresAt time.Time `json:"previousExpiresAt,omitzero"`
}

// ServeAPIKeys registers MethodAPIKeyByHash on r, answering from keys (the
// app-node's store). The app-node's trust policy lets only proxy-inference
// (and operators) call it. A proxy asks only for keys in use, so an answer
// records the key's use (lastUsedAt, once a minute) when keys can.
func ServeAPIKeys(r fabric.Registrar, keys Keys) {
	fabric.HandleFunc(r, MethodAPIKeyByHash, func(ctx context.Context, _ fabric.PublicKey, q APIKeyByHashParams) (APIKeyByHashReply, error) {
		if len(q.Hash) != 32 {
			return APIKeyByHashReply{}, fabric.Errorf(fabric.CodeBadRequest, "hash: want 32 bytes (sha256), got %d", len(q.Hash))
		}
		k, err := keys.APIKeyByHash(ctx, q.Hash)
		switch {
		case isNotFound(err):
			return APIKeyByHashReply{}, nil
		case err != nil:
			return APIKeyByHashReply{}, err
		}
		if t, ok := keys.(keyToucher); ok && time.Since(k.LastUsedAt) >= store.TouchEvery {
			_ = t.TouchAPIKey(ctx, k.ID, time.Now()) // best effort: the answer matters more
		}
		return APIKeyByHashReply{Found: true, ID: k.ID, Name: k.Name, Team: k.Team, CreatedBy: k.CreatedBy,
			Prefix: k.Prefix, CreatedAt: k.CreatedAt, Models: k.Models, ExpiresAt: k.ExpiresAt,
			Previous: !bytes.Equal(q.Hash, k.Hash), PreviousExpiresAt: k.PreviousExpiresAt}, nil
	})
}

// FabricKeys implements Keys over the fabric: it asks the app-node
// (MethodAPIKeyByHash). Answers, found or not, are kept for a short TTL,
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
	r   APIKeyByHashReply
	exp time.Time
}

type keyCall struct {
	done chan struct{}
	r    APIKeyByHashReply
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
		c.err = f.node.Call(cctx, f.appNode, MethodAPIKeyByHash, APIKeyByHashParams{Hash: hash}, &c.r)
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

func keyOf(r APIKeyByHashReply, hash []byte) (store.APIKey, error) {
	if !r.Found {
		return store.APIKey{}, cosmic.ErrNotFound
	}
	k := store.APIKey{ID: r.ID, Name: r.Name, Team: r.Team, CreatedBy: r.CreatedBy, Prefix: r.Prefix,
		Hash: hash, CreatedAt: r.CreatedAt, Models: r.Models, ExpiresAt: r.ExpiresAt}
	if r.Previous {
		// Only the hash asked for is known: it is the previous secret.
		k.Hash, k.PreviousHash, k.PreviousExpiresAt = nil, hash, r.PreviousExpiresAt
	}
	return k, nil
}
