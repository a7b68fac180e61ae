package inferproxy

import (
	"testing"
	"time"
)

// TestTokensPerMinute: a key's budget starts full; a request is admitted
// while it is above 0 and its answer's tokens are taken after, so the
// budget may go below 0; the key then waits until it has refilled past 0
// (at tpm/60 a second), told how long; the headers' remaining and reset
// follow; another key's budget is its own.
func TestTokensPerMinute(t *testing.T) {
	l := &limiter{keys: map[string]*keyLimit{}}
	now := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	const tpm = 600 // 10 a second
	ok, _, left := l.checkTokens("a", tpm, now)
	if !ok || left.limit != 600 || left.remaining != 600 || left.reset != 0 {
		t.Fatalf("a fresh key: %v %+v", ok, left)
	}
	l.spendTokens("a", tpm, 500, now)
	if ok, _, left = l.checkTokens("a", tpm, now); !ok || left.remaining != 100 || left.reset != 50*time.Second {
		t.Fatalf("after 500 tokens: %v %+v", ok, left)
	}
	l.spendTokens("a", tpm, 300, now) // an answer longer than what was left
	ok, retry, left := l.checkTokens("a", tpm, now)
	if ok || left.remaining != 0 || retry != 20100*time.Millisecond {
		t.Fatalf("at -200: %v, retry %v, %+v; want refused for 20.1 s", ok, retry, left)
	}
	if ok, _, _ := l.checkTokens("b", tpm, now); !ok {
		t.Fatal("another key was refused")
	}
	if ok, _, _ := l.checkTokens("a", tpm, now.Add(20*time.Second)); ok {
		t.Fatal("admitted at 0 tokens")
	}
	if ok, _, left := l.checkTokens("a", tpm, now.Add(21*time.Second)); !ok || left.remaining != 10 {
		t.Fatalf("21 s later: %v %+v; want 10 left", ok, left)
	}
	if _, _, left := l.checkTokens("a", tpm, now.Add(time.Hour)); left.remaining != 600 {
		t.Fatalf("an hour later: %+v; want the budget full, not more", left)
	}
}
