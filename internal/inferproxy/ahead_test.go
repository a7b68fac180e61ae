package inferproxy

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cosmicac/cosmicac/internal/store"
)

// slowKeys is memKeys taking 100 ms (the bubble's time) to answer, as a
// key store across the fabric takes a round trip, counting its reads.
type slowKeys struct {
	memKeys
	reads atomic.Int64
}

func (s *slowKeys) APIKeyByHash(ctx context.Context, hash []byte) (store.APIKey, error) {
	s.reads.Add(1)
	time.Sleep(100 * time.Millisecond)
	return s.memKeys.APIKeyByHash(ctx, hash)
}

// TestKeyReadAhead: a request that finds its key past three quarters of
// the TTL goes on with it at once, while the key is read again in the
// background; the request after the TTL finds the new read and waits for
// nothing. A revoked key is still refused within the TTL.
func TestKeyReadAhead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		keys := &slowKeys{}
		p := keyProxy(Config{}, keys)
		defer p.Close()
		k, secret := keys.newKey(t, nil)
		timed := func() (int, time.Duration) {
			start := time.Now()
			code := listStatus(p, secret)
			return code, time.Since(start)
		}
		if code, took := timed(); code != http.StatusOK || took != 100*time.Millisecond {
			t.Fatalf("the first request: %d after %v, want 200 after the read's 100ms", code, took)
		}
		time.Sleep(700 * time.Millisecond) // 800 ms after the read began
		if code, took := timed(); code != http.StatusOK || took != 0 {
			t.Fatalf("past three quarters of the TTL: %d after %v, want 200 at once", code, took)
		}
		time.Sleep(150 * time.Millisecond)
		if n := keys.reads.Load(); n != 2 {
			t.Fatalf("%d reads, want 2: the first and the one ahead", n)
		}
		time.Sleep(300 * time.Millisecond) // past the first read's TTL, within the second's
		if code, took := timed(); code != http.StatusOK || took != 0 {
			t.Fatalf("after the first read's TTL: %d after %v, want 200 at once (the read ahead)", code, took)
		}
		if n := keys.reads.Load(); n != 2 {
			t.Fatalf("%d reads, want still 2", n)
		}
		keys.delete(k.ID)
		refusedWithin(t, p, secret, time.Second)
	})
}

// slowCatalog answers a StaticCatalog's list after 100 ms, counting its
// reads.
type slowCatalog struct {
	StaticCatalog
	reads atomic.Int64
}

func (s *slowCatalog) Models(ctx context.Context) ([]Model, error) {
	s.reads.Add(1)
	time.Sleep(100 * time.Millisecond)
	return s.StaticCatalog.Models(ctx)
}

// TestCatalogReadAhead: the model list likewise, and a request that finds
// it expired (traffic paused for longer than the TTL) waits for a read, as
// before.
func TestCatalogReadAhead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cat := &slowCatalog{StaticCatalog: StaticCatalog{{Name: "qwen", JobID: "job-q", Team: "team-a"}}}
		bg := newBackground()
		defer bg.close()
		c := &cachedCatalog{c: cat, ttl: time.Second, bg: bg}
		timed := func() time.Duration {
			start := time.Now()
			if ms, err := c.Models(t.Context()); err != nil || len(ms) != 1 {
				t.Fatalf("models %v, %v", ms, err)
			}
			return time.Since(start)
		}
		if took := timed(); took != 100*time.Millisecond {
			t.Fatalf("the first read took %v, want 100ms", took)
		}
		time.Sleep(700 * time.Millisecond)
		if took := timed(); took != 0 {
			t.Fatalf("past three quarters of the TTL: %v, want at once", took)
		}
		time.Sleep(500 * time.Millisecond)
		if took := timed(); took != 0 || cat.reads.Load() != 2 {
			t.Fatalf("after the first read's TTL: %v, %d reads; want at once, 2 reads", took, cat.reads.Load())
		}
		time.Sleep(2 * time.Second)
		if took := timed(); took != 100*time.Millisecond || cat.reads.Load() != 3 {
			t.Fatalf("after a pause past the TTL: %v, %d reads; want a wait for the third read", took, cat.reads.Load())
		}
	})
}
