// Package waittest waits in tests for a condition to hold, instead of
// sleeping for a time and hoping it does. The condition is polled, first
// at once and then at a growing interval (1 ms up to 50 ms; up to a
// six-hundredth of the bound, at most half a second, for a bound of
// minutes such as a VM's boot), so a fast condition costs a millisecond
// and a slow one little CPU; the deadline is only a bound on failure and
// never part of what a test asserts.
//
// Use it where nothing better is at hand: a channel, an event the code
// under test emits, or testing/synctest make a test exact, and are
// preferred.
package waittest

import (
	"fmt"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/backoff"
)

// Timeout is the bound Until and NoError use: generous, since it is only
// reached when the test fails (or the machine is very slow, as a -race run
// of 3 parallel copies can be).
const Timeout = 20 * time.Second

// Until polls cond until it returns true, and fails t (naming what it
// waited for, by format and args) if it has not within Timeout.
func Until(t testing.TB, cond func() bool, format string, args ...any) {
	t.Helper()
	if !poll(Timeout, func() (bool, error) { return cond(), nil }) {
		t.Fatalf("timed out after %v waiting for %s", Timeout, fmt.Sprintf(format, args...))
	}
}

// NoError polls f until it returns nil, and fails t with f's last error
// if it has not within Timeout.
func NoError(t testing.TB, f func() error, format string, args ...any) {
	t.Helper()
	var last error
	if !poll(Timeout, func() (bool, error) { last = f(); return last == nil, last }) {
		t.Fatalf("timed out after %v waiting for %s: %v", Timeout, fmt.Sprintf(format, args...), last)
	}
}

// NoErrorWithin is NoError with a bound of its own, for a condition a
// test knows to take long (a takeover under load).
func NoErrorWithin(t testing.TB, d time.Duration, f func() error, format string, args ...any) {
	t.Helper()
	var last error
	if !poll(d, func() (bool, error) { last = f(); return last == nil, last }) {
		t.Fatalf("timed out after %v waiting for %s: %v", d, fmt.Sprintf(format, args...), last)
	}
}

// Within is Until with a bound of its own, for a condition that must hold
// soon or not at all (it does not shorten the wait when it holds).
func Within(t testing.TB, d time.Duration, cond func() bool, format string, args ...any) {
	t.Helper()
	if !poll(d, func() (bool, error) { return cond(), nil }) {
		t.Fatalf("timed out after %v waiting for %s", d, fmt.Sprintf(format, args...))
	}
}

// Poll polls cond until it returns true (true) or d has passed (false),
// for a caller that reports the failure itself (with the last thing it
// saw).
func Poll(d time.Duration, cond func() bool) bool {
	return poll(d, func() (bool, error) { return cond(), nil })
}

// maxInterval is the longest wait between two polls within d: 50 ms, or a
// six-hundredth of d up to half a second. A condition that comes true is
// seen within 0.2% of the bound; a wait of minutes for a VM's boot does not
// ask twenty times a second.
func maxInterval(d time.Duration) time.Duration {
	return min(max(50*time.Millisecond, d/600), 500*time.Millisecond)
}

func poll(d time.Duration, cond func() (bool, error)) bool {
	deadline := time.Now().Add(d)
	b := backoff.Backoff{Min: time.Millisecond, Max: maxInterval(d)}
	for {
		if ok, _ := cond(); ok {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(b.Next())
	}
}
