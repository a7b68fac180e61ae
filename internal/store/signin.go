package store

import (
	"context"
	"time"
)

// SignInLimits keeps the app-node's sign-in rate limits in the database, so
// that every app-node on it counts the same attempts: a user's attempts do
// not multiply by the number of app-nodes behind the gateway.
//
// Each key (a user name or a client address, as the app-node chooses) has
// a token bucket of burst attempts that refills one every every. It is kept
// as one time per key (GCRA, the generic cell rate algorithm): the
// "theoretical arrival time" at which the bucket is full again. An attempt
// at now moves it to max(tat, now)+every and is allowed when that is at
// most now+burst*every.
type SignInLimits interface {
	// TakeSignInAttempt takes one attempt of key at now. It is allowed, or
	// refused with how long to wait for the next; a refused attempt takes
	// nothing. Keys whose bucket is full again are pruned now and then.
	TakeSignInAttempt(ctx context.Context, key string, now time.Time, every time.Duration, burst int) (ok bool, wait time.Duration, err error)
}

// SignInAttempt is the GCRA step of SignInLimits on a key's stored tat (0
// for none), for implementations that compute it in Go: the new tat to
// store when allowed, else the wait.
func SignInAttempt(tat, now int64, every time.Duration, burst int) (newTAT int64, ok bool, wait time.Duration) {
	next := max(tat, now) + int64(every)
	if over := next - now - int64(burst)*int64(every); over > 0 {
		return tat, false, time.Duration(over)
	}
	return next, true, 0
}
