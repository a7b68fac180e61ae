package inferproxy

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/appnode"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/inferproxy/keyapi"
	"github.com/cosmicac/cosmicac/internal/ork/orkapi"
	"github.com/cosmicac/cosmicac/internal/store"
	"github.com/cosmicac/cosmicac/internal/trust"
)

type countingKeys struct {
	calls atomic.Int64
	mu    sync.Mutex
	keys  map[string]store.APIKey
}

func (c *countingKeys) APIKeyByHash(_ context.Context, hash []byte) (store.APIKey, error) {
	c.calls.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	if k, ok := c.keys[string(hash)]; ok {
		return k, nil
	}
	return store.APIKey{}, cosmic.ErrNotFound
}

// TestFabricKeys: the app-node's apiKeyByHash answers the proxy's key (and
// refuses an agent's, which the app-node admits for shells); FabricKeys
// finds keys, says not found for others, and caches both briefly.
func TestFabricKeys(t *testing.T) {
	ctx := context.Background()
	k, secret, err := appnode.NewAPIKey("ci", "team-a", "alice", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ks := &countingKeys{keys: map[string]store.APIKey{string(k.Hash): k}}
	ring := trust.NewKeyring()
	app := newNode(t, "app-node", "127.0.0.1:0", trust.NewPolicy(trust.AppNode, ring))
	proxy := newNode(t, "proxy-inference", "127.0.0.1:0", fabric.NewAllowList(app.PublicKey()))
	rogue := newNode(t, "agent", "127.0.0.1:0", fabric.NewAllowList(app.PublicKey()))
	if err := ring.Add(trust.Proxy, proxy.PublicKey()); err != nil {
		t.Fatal(err)
	}
	ring.BindAgents(orkapi.Placement{Job: "j", Type: cosmic.TypeGPUContainer, Rack: "r"}, []fabric.PublicKey{rogue.PublicKey()})
	appnode.ServeKeyLookup(app, ks)
	proxy.AddAddrs(app.PublicKey(), app.Addr())
	rogue.AddAddrs(app.PublicKey(), app.Addr())

	fk := NewFabricKeys(proxy, app.PublicKey(), 200*time.Millisecond)
	now := time.Now()
	fk.now = func() time.Time { return now }
	got, err := fk.APIKeyByHash(ctx, keyapi.HashKey(secret))
	if err != nil || got.ID != k.ID || got.Team != "team-a" || !got.CreatedAt.Equal(k.CreatedAt) {
		t.Fatalf("lookup: %+v %v", got, err)
	}
	if _, err := fk.APIKeyByHash(ctx, keyapi.HashKey(keyapi.KeyPrefix+"wrong")); !isNotFound(err) {
		t.Fatalf("unknown key: %v, want not found", err)
	}
	now = now.Add(200*time.Millisecond - time.Nanosecond) // the TTL's last instant
	for range 10 {
		fk.APIKeyByHash(ctx, keyapi.HashKey(secret))
		fk.APIKeyByHash(ctx, keyapi.HashKey(keyapi.KeyPrefix+"wrong"))
	}
	if n := ks.calls.Load(); n != 2 {
		t.Fatalf("%d store reads, want 2 (cached)", n)
	}
	now = now.Add(time.Nanosecond)
	fk.APIKeyByHash(ctx, keyapi.HashKey(secret))
	if n := ks.calls.Load(); n != 3 {
		t.Fatalf("%d store reads after the TTL, want 3", n)
	}

	err = rogue.Call(ctx, app.PublicKey(), keyapi.ByHash.Name, keyapi.ByHashParams{Hash: keyapi.HashKey(secret)}, &keyapi.ByHashReply{})
	if fabric.ErrorCode(err) != fabric.CodeForbidden {
		t.Fatalf("an agent: %v, want forbidden", err)
	}
}

// The proxy's errors take OpenAI's types from their status: one mapping.
func TestOpenAIErrorTypes(t *testing.T) {
	for status, want := range map[int]string{400: "invalid_request_error", 401: "invalid_request_error", 404: "invalid_request_error",
		413: "invalid_request_error", 429: "requests", 500: "server_error", 502: "server_error", 503: "server_error"} {
		if got := openAIType(status); got != want {
			t.Errorf("%d: %q, want %q", status, got, want)
		}
	}
}

// TestFabricKeysLimits: the reply carries a key's models, expiry and, for a
// rotated key's previous secret, that it is the previous one and its end,
// so that the proxy checks them as it does from the store.
func TestFabricKeysLimits(t *testing.T) {
	ctx := context.Background()
	now := time.Now().UTC()
	k, cur, err := appnode.NewAPIKey("ci", "team-a", "alice", now)
	if err != nil {
		t.Fatal(err)
	}
	old, _ := keyapi.NewSecret()
	k.Models, k.ExpiresAt = []string{"qwen"}, now.Add(time.Hour)
	k.PreviousHash, k.PreviousExpiresAt = keyapi.HashKey(old), now.Add(time.Minute)
	ks := &countingKeys{keys: map[string]store.APIKey{string(k.Hash): k, string(k.PreviousHash): k}}
	ring := trust.NewKeyring()
	app := newNode(t, "app-node", "127.0.0.1:0", trust.NewPolicy(trust.AppNode, ring))
	proxy := newNode(t, "proxy-inference", "127.0.0.1:0", fabric.NewAllowList(app.PublicKey()))
	if err := ring.Add(trust.Proxy, proxy.PublicKey()); err != nil {
		t.Fatal(err)
	}
	appnode.ServeKeyLookup(app, ks)
	proxy.AddAddrs(app.PublicKey(), app.Addr())
	fk := NewFabricKeys(proxy, app.PublicKey(), 0)
	for _, tt := range []struct {
		name, secret   string
		at             time.Time
		valid          bool
		previousEndsAt time.Time
	}{
		{"current", cur, now.Add(30 * time.Minute), true, time.Time{}},
		{"current, expired", cur, now.Add(time.Hour), false, time.Time{}},
		{"previous, in grace", old, now.Add(30 * time.Second), true, k.PreviousExpiresAt},
		{"previous, after grace", old, now.Add(time.Minute), false, k.PreviousExpiresAt},
	} {
		got, err := fk.APIKeyByHash(ctx, keyapi.HashKey(tt.secret))
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if v := got.ValidFor(keyapi.HashKey(tt.secret), tt.at); v != tt.valid {
			t.Errorf("%s: ValidFor = %v, want %v (key %+v)", tt.name, v, tt.valid, got)
		}
		if !got.Allows("qwen") || got.Allows("llama") || !got.ExpiresAt.Equal(k.ExpiresAt) || !got.PreviousExpiresAt.Equal(tt.previousEndsAt) {
			t.Errorf("%s: models %v, expires %v, previous until %v", tt.name, got.Models, got.ExpiresAt, got.PreviousExpiresAt)
		}
	}
}
