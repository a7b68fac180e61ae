// Package backoff is the exponential backoff of every loop in CosmicAC that
// retries: a wait that starts at Min, doubles after each failure up to
// Max, and starts over after a success; and Sleep, a wait that ends early
// when its context does. Standard library only.
//
// Any package may import backoff (internal/fabric, which imports no
// CosmicAC package, keeps its own two loops).
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Backoff is one loop's backoff. Set Min and Max (Max ≥ Min > 0); the zero
// Backoff waits nothing.
type Backoff struct {
	Min, Max time.Duration
	// Jitter waits a random time between half the step and the step, so
	// that many clients that failed together do not retry together.
	Jitter bool

	next time.Duration
}

// Next returns the wait before the next attempt, and doubles the one after
// (up to Max).
func (b *Backoff) Next() time.Duration {
	if b.next < b.Min {
		b.next = b.Min
	}
	d := b.next
	b.next = min(2*b.next, b.Max)
	if b.Jitter && d > 1 {
		d = d/2 + rand.N(d/2+1)
	}
	return d
}

// Peek is the step Next will wait (before jitter), without taking it.
func (b *Backoff) Peek() time.Duration { return max(b.next, b.Min) }

// Reset starts the waits over from Min (after a success).
func (b *Backoff) Reset() { b.next = b.Min }

// Wait sleeps Next() or until ctx ends, and reports whether ctx is still
// live.
func (b *Backoff) Wait(ctx context.Context) bool { return Sleep(ctx, b.Next()) }

// Sleep waits d, or until ctx ends; it reports whether ctx is still live.
func Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
