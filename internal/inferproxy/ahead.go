package inferproxy

import (
	"context"
	"sync"
	"time"
)

// The proxy's caches (the model list, API keys, each job's replicas) keep
// an answer for their TTL (1 s by default): what changes elsewhere (a
// revoked key, a model made private, a replica gone) takes effect within
// it. A request that found its answer expired used to wait for the read
// (a call to the ork, the app-node or the directories), and so did every
// request behind it: at a few concurrent streams, about one round of
// requests a second paid a fabric round trip before its first token. Now
// a request that finds an answer past aheadAt of its TTL starts a read in
// the background and goes on with the answer it has, which is still
// within its TTL; under steady traffic no request waits for a read, and
// no answer served is older than before. A request that finds an answer
// expired (traffic paused for a TTL) waits, as before.

// aheadAt is the share of a TTL after which a cached answer is read again
// in the background.
const aheadAt = 0.75

// aheadTimeout bounds a read in the background.
const aheadTimeout = 5 * time.Second

// dueAhead says whether an answer read at `at` is due for a read ahead
// now: past aheadAt of ttl, not yet expired.
func dueAhead(at, now time.Time, ttl time.Duration) bool {
	if at.IsZero() {
		return false
	}
	age := now.Sub(at)
	return age >= time.Duration(float64(ttl)*aheadAt) && age < ttl
}

// background runs the reads ahead; close ends them and waits for them, so
// that none outlives the proxy.
type background struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	closed bool
}

func newBackground() *background {
	ctx, cancel := context.WithCancel(context.Background())
	return &background{ctx: ctx, cancel: cancel}
}

// Go runs f in the background, its context ending after aheadTimeout or
// at close; once the proxy is closed (or without a background) f is not
// run.
func (b *background) Go(f func(ctx context.Context)) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	b.wg.Go(func() {
		ctx, cancel := context.WithTimeout(b.ctx, aheadTimeout)
		defer cancel()
		f(ctx)
	})
}

// onClose calls f when close is called (at once if it was); stop
// unregisters it.
func (b *background) onClose(f func()) (stop func() bool) {
	if b == nil {
		return func() bool { return false }
	}
	return context.AfterFunc(b.ctx, f)
}

// close ends the reads running and waits for them; later ones never run.
func (b *background) close() {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	b.cancel()
	b.wg.Wait()
}
