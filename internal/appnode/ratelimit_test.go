package appnode

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// TestOneClientCannotLockOutAUser: a client that guesses one user's
// password without pause is refused after its own few attempts, and the
// user, from another address, still signs in; only several addresses
// guessing together reach the user name's own limit, and even then no
// faster than it allows.
func TestOneClientCannotLockOutAUser(t *testing.T) {
	ctx := context.Background()
	l := newLoginLimiter()
	now := time.Unix(1e9, 0)
	refused := 0
	for i := range 600 { // ten minutes, one guess a second
		ok, _, err := l.allow(ctx, "alice", "198.18.0.66:4000", now.Add(time.Duration(i)*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			refused++
		}
		if i%60 == 59 {
			if ok, wait, _ := l.allow(ctx, "alice", "198.18.0.7:5000", now.Add(time.Duration(i)*time.Second)); !ok {
				t.Fatalf("after %d s of one client's guessing, alice from her own address is refused for %v", i+1, wait)
			}
		}
	}
	if allowed := 600 - refused; allowed > 5+600/12+1 {
		t.Errorf("one client made %d guesses at one name in ten minutes, want at most %d", allowed, 5+600/12+1)
	}
	// Many addresses together: the name's own limit holds them all.
	l, allowed := newLoginLimiter(), 0
	for i := range 600 {
		if ok, _, _ := l.allow(ctx, "bob", fmt.Sprintf("198.18.%d.%d:1", i/250, i%250), now.Add(time.Duration(i)*100*time.Millisecond)); ok {
			allowed++
		}
	}
	if max := loginPerUserBurst + int(60*time.Second/loginPerUserEvery) + 1; allowed > max {
		t.Errorf("600 addresses in a minute made %d guesses at one name, want at most %d", allowed, max)
	}
}
