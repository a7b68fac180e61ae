package storetest

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/store"
)

// testSignInLimits: a key's burst is taken, then one attempt per interval;
// a refused attempt takes nothing and says how long to wait; keys are
// independent; the buckets survive a reopen; concurrent attempts never
// take more than the burst.
func testSignInLimits(t *testing.T, open func(t *testing.T) store.Store) {
	ctx := context.Background()
	s, ok := open(t).(store.SignInLimits)
	if !ok {
		t.Fatal("the store does not implement store.SignInLimits")
	}
	const every, burst = time.Minute, 3
	take := func(s store.SignInLimits, key string, now time.Time, wantOK bool, wantWait time.Duration) {
		t.Helper()
		ok, wait, err := s.TakeSignInAttempt(ctx, key, now, every, burst)
		if err != nil || ok != wantOK || wait != wantWait {
			t.Fatalf("TakeSignInAttempt(%q, %v) = %v, %v, %v; want %v, %v", key, now.Sub(base), ok, wait, err, wantOK, wantWait)
		}
	}
	for range burst {
		take(s, "u:ana", base, true, 0)
	}
	take(s, "u:ana", base, false, every)
	take(s, "u:ana", base.Add(20*time.Second), false, 40*time.Second) // the refusals took nothing
	take(s, "u:bob", base, true, 0)
	take(s, "u:ana", base.Add(every), true, 0)
	take(s, "u:ana", base.Add(every), false, every)
	// An idle key is full again.
	take(s, "u:bob", base.Add(time.Hour), true, 0)
	take(s, "u:bob", base.Add(time.Hour), true, 0)

	s.(store.Store).Close()
	s = open(t).(store.SignInLimits)
	take(s, "u:ana", base.Add(every), false, every)

	// Concurrent attempts on one key: exactly the burst is allowed.
	now := base.Add(24 * time.Hour)
	var allowed atomic.Int32
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok, _, err := s.TakeSignInAttempt(ctx, "u:eve", now, every, burst)
			if err != nil {
				t.Errorf("TakeSignInAttempt(concurrent) = %v", err)
			}
			if ok {
				allowed.Add(1)
			}
		}()
	}
	wg.Wait()
	if got := allowed.Load(); got != burst {
		t.Errorf("%d concurrent attempts: %d allowed; want %d", 8, got, burst)
	}
	// Many keys prune without losing a live one.
	for i := range 600 {
		if _, _, err := s.TakeSignInAttempt(ctx, "a:"+time.Duration(i).String(), now.Add(2*time.Hour), every, burst); err != nil {
			t.Fatalf("TakeSignInAttempt(many) = %v", err)
		}
	}
	take(s, "u:eve", now.Add(2*time.Hour), true, 0)
}
