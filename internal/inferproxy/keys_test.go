package inferproxy

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cosmicac/cosmicac/internal/appnode"
	"github.com/cosmicac/cosmicac/internal/config"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/inferproxy/keyapi"
	"github.com/cosmicac/cosmicac/internal/store"
)

// memKeys is an in-memory key store (Keys) for tests inside a synctest
// bubble, where the SQLite store's goroutines do not belong.
type memKeys struct {
	mu   sync.Mutex
	keys map[string]store.APIKey // by ID
}

func (m *memKeys) APIKeyByHash(_ context.Context, hash []byte) (store.APIKey, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, k := range m.keys {
		if string(k.Hash) == string(hash) || len(k.PreviousHash) > 0 && string(k.PreviousHash) == string(hash) {
			return k, nil
		}
	}
	return store.APIKey{}, cosmic.ErrNotFound
}

func (m *memKeys) put(k store.APIKey) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.keys == nil {
		m.keys = map[string]store.APIKey{}
	}
	m.keys[k.ID] = k
}

func (m *memKeys) delete(id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.keys, id)
}

// newKey makes a key of team-a and its secret, with change applied, and
// stores it in m.
func (m *memKeys) newKey(t *testing.T, change func(*store.APIKey)) (store.APIKey, string) {
	t.Helper()
	k, secret, err := appnode.NewAPIKey("k", "team-a", "ann", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if change != nil {
		change(&k)
	}
	m.put(k)
	return k, secret
}

// keyProxy is a proxy without a fabric, enough for everything before a
// request is forwarded (keys, the model list, 404s).
func keyProxy(cfg Config, keys Keys) *Proxy {
	p, err := New(cfg, Deps{Catalog: StaticCatalog{
		{Name: "qwen", JobID: "job-q", Team: "team-a", RequireAuth: true, Runtime: cosmic.RuntimeVLLM, ModelID: "Qwen/Qwen3-8B"},
		{Name: "llama", JobID: "job-l", Team: "team-a", RequireAuth: true, Runtime: cosmic.RuntimeVLLM, ModelID: "meta/llama"},
	}, Keys: keys})
	if err != nil {
		panic(err) // the deps above are complete
	}
	return p
}

// mustNew is New, the test failing on its error.
func mustNew(tb testing.TB, cfg Config, d Deps) *Proxy {
	tb.Helper()
	p, err := New(cfg, d)
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// status sends one request with secret and returns the answer's status
// and error code.
func status(p *Proxy, method, path, body, secret string) (int, string) {
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	r.Header.Set("Authorization", "Bearer "+secret)
	w := httptest.NewRecorder()
	p.Handler().ServeHTTP(w, r)
	var e struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	_ = json.Unmarshal(w.Body.Bytes(), &e)
	return w.Code, e.Error.Code
}

func listStatus(p *Proxy, secret string) int {
	code, _ := status(p, http.MethodGet, Prefix+"/models", "", secret)
	return code
}

// refusedWithin polls, in the bubble's fake time, until a request with
// secret is answered 401, and returns how long that took.
func refusedWithin(t *testing.T, p *Proxy, secret string, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for listStatus(p, secret) != http.StatusUnauthorized {
		if time.Since(start) > limit {
			t.Fatalf("the key still works %v later", time.Since(start))
		}
		time.Sleep(50 * time.Millisecond)
	}
	return time.Since(start)
}

// TestRevokedKeyRefusedWithinASecond: with the default KeyTTL, a key
// deleted from the store is refused within 1 s (fake time).
func TestRevokedKeyRefusedWithinASecond(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		keys := &memKeys{}
		p := keyProxy(Config{}, keys)
		k, secret := keys.newKey(t, nil)
		if got := listStatus(p, secret); got != http.StatusOK {
			t.Fatalf("a new key: %d, want 200", got)
		}
		time.Sleep(500 * time.Millisecond) // the cached answer is half-way to its end
		if got := listStatus(p, secret); got != http.StatusOK {
			t.Fatalf("the key later: %d, want 200", got)
		}
		keys.delete(k.ID)
		refusedWithin(t, p, secret, time.Second)
	})
}

// TestExpiredKeyRefusedAtOnce: a key's expiry is checked at each use, not
// when the cache is filled: with a cache of an hour, the key stops at its
// expiresAt.
func TestExpiredKeyRefusedAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		keys := &memKeys{}
		p := keyProxy(Config{KeyTTL: config.Duration(time.Hour)}, keys)
		exp := time.Now().Add(3 * time.Second)
		_, secret := keys.newKey(t, func(k *store.APIKey) { k.ExpiresAt = exp })
		if got := listStatus(p, secret); got != http.StatusOK {
			t.Fatalf("before expiry: %d, want 200", got)
		}
		time.Sleep(time.Until(exp) - time.Millisecond)
		if got := listStatus(p, secret); got != http.StatusOK {
			t.Fatalf("1 ms before expiry: %d, want 200", got)
		}
		time.Sleep(time.Millisecond)
		if got, code := status(p, http.MethodGet, Prefix+"/models", "", secret); got != http.StatusUnauthorized || code != "invalid_api_key" {
			t.Fatalf("at expiry: %d %s, want 401 invalid_api_key", got, code)
		}
	})
}

// TestRotatedSecretGrace: after a rotation both secrets work; the old one
// stops at the end of its grace (checked at use, whatever the cache), and
// a second rotation drops it within KeyTTL.
func TestRotatedSecretGrace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		keys := &memKeys{}
		p := keyProxy(Config{KeyTTL: config.Duration(time.Hour)}, keys)
		k, old := keys.newKey(t, nil)
		if got := listStatus(p, old); got != http.StatusOK {
			t.Fatalf("old secret: %d", got)
		}
		// Rotate: the store moves the hash to the previous one.
		fresh, _ := keyapi.NewSecret()
		grace := time.Now().Add(10 * time.Second)
		k.PreviousHash, k.PreviousExpiresAt, k.Hash, k.RotatedAt = k.Hash, grace, keyapi.HashKey(fresh), time.Now()
		keys.put(k)
		p.keys.mu.Lock()
		clear(p.keys.m) // the hour-long cache would hide the rotation; the grace is what this test is about
		p.keys.mu.Unlock()
		for name, s := range map[string]string{"old": old, "new": fresh} {
			if got := listStatus(p, s); got != http.StatusOK {
				t.Fatalf("%s secret during the grace: %d, want 200", name, got)
			}
		}
		time.Sleep(time.Until(grace))
		if got := listStatus(p, old); got != http.StatusUnauthorized {
			t.Fatalf("old secret after the grace: %d, want 401", got)
		}
		if got := listStatus(p, fresh); got != http.StatusOK {
			t.Fatalf("new secret after the grace: %d, want 200", got)
		}
	})
}

// TestRotatedSecretEndsWithinASecond: a rotation without grace (or a second
// rotation) ends the old secret within the default KeyTTL.
func TestRotatedSecretEndsWithinASecond(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		keys := &memKeys{}
		p := keyProxy(Config{}, keys)
		k, old := keys.newKey(t, nil)
		if got := listStatus(p, old); got != http.StatusOK {
			t.Fatalf("old secret: %d", got)
		}
		fresh, _ := keyapi.NewSecret()
		k.PreviousHash, k.PreviousExpiresAt, k.Hash = k.Hash, time.Now(), keyapi.HashKey(fresh)
		keys.put(k)
		refusedWithin(t, p, old, time.Second)
		if got := listStatus(p, fresh); got != http.StatusOK {
			t.Fatalf("new secret: %d, want 200", got)
		}
	})
}

// TestKeyLimitedToModels: a key made for some models lists only those, and
// is answered 404 model_not_found (as for a model that does not exist) for
// the others, before anything is forwarded.
func TestKeyLimitedToModels(t *testing.T) {
	keys := &memKeys{}
	p := keyProxy(Config{}, keys)
	_, limited := keys.newKey(t, func(k *store.APIKey) { k.Models = []string{"qwen"} })
	_, all := keys.newKey(t, nil)

	list := func(secret string) []string {
		r := httptest.NewRequest(http.MethodGet, Prefix+"/models", nil)
		r.Header.Set("Authorization", "Bearer "+secret)
		w := httptest.NewRecorder()
		p.Handler().ServeHTTP(w, r)
		var out struct {
			Data []modelObject `json:"data"`
		}
		if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil || w.Code != 200 {
			t.Fatalf("list: %d %s", w.Code, w.Body)
		}
		var names []string
		for _, m := range out.Data {
			names = append(names, m.ID)
		}
		slices.Sort(names)
		return names
	}
	if got := list(limited); !slices.Equal(got, []string{"qwen"}) {
		t.Errorf("limited key lists %v, want [qwen]", got)
	}
	if got := list(all); !slices.Equal(got, []string{"llama", "qwen"}) {
		t.Errorf("unlimited key lists %v, want [llama qwen]", got)
	}
	for _, tt := range []struct{ method, path, body string }{
		{http.MethodPost, Prefix + "/chat/completions", `{"model":"llama","messages":[]}`},
		{http.MethodPost, Prefix + "/completions", `{"model":"llama","prompt":"x"}`},
		{http.MethodGet, Prefix + "/models/llama", ""},
	} {
		got, code := status(p, tt.method, tt.path, tt.body, limited)
		wantGot, wantCode := status(p, tt.method, tt.path, strings.ReplaceAll(tt.body, "llama", "no-such-model"), limited)
		if tt.method == http.MethodGet {
			wantGot, wantCode = status(p, tt.method, Prefix+"/models/no-such-model", "", limited)
		}
		if got != http.StatusNotFound || code != "model_not_found" || got != wantGot || code != wantCode {
			t.Errorf("%s %s with a key for qwen only: %d %s; want 404 model_not_found, as for an unknown model (%d %s)",
				tt.method, tt.path, got, code, wantGot, wantCode)
		}
	}
	if got, _ := status(p, http.MethodGet, Prefix+"/models/qwen", "", limited); got != http.StatusOK {
		t.Errorf("GET models/qwen with a key for qwen: %d, want 200", got)
	}
}
