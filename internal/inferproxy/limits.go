package inferproxy

import (
	"math"
	"sync"
	"time"
)

// limiter holds per-key limits: requests in flight, and requests per
// minute (a token bucket of RPM tokens refilled at RPM/60 per second).
type limiter struct {
	maxConcurrent int
	rpm           int

	mu   sync.Mutex
	keys map[string]*keyLimit
}

type keyLimit struct {
	inFlight int
	tokens   float64
	at       time.Time
	// budget is what is left of the key's tokens per minute at budgetAt
	// (model tokens, not the request bucket's): it may go below 0, as an
	// answer is counted after it was admitted.
	budget   float64
	budgetAt time.Time
}

// rateLeft is what is left of a key's requests per minute after a request
// (OpenAI's x-ratelimit-*-requests headers): the limit, the requests it may
// still send at once, and how long until it may send the whole limit again.
type rateLeft struct {
	limit, remaining int
	reset            time.Duration
}

// acquire admits one request of key, or says how long to wait. release
// must be called when an admitted request ends. left is set where a
// requests-per-minute limit holds.
func (l *limiter) acquire(key string, now time.Time) (ok bool, retryAfter time.Duration, reason string, left *rateLeft) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := l.keys[key]
	if k == nil {
		if len(l.keys) > 100000 {
			for id, kl := range l.keys {
				if kl.inFlight == 0 {
					delete(l.keys, id)
				}
			}
		}
		k = &keyLimit{tokens: float64(l.rpm), at: now}
		l.keys[key] = k
	}
	if l.rpm > 0 {
		rate := float64(l.rpm) / 60 // tokens per second
		k.tokens = math.Min(float64(l.rpm), k.tokens+now.Sub(k.at).Seconds()*rate)
		k.at = now
		left = &rateLeft{limit: l.rpm}
		defer func() {
			left.remaining = int(k.tokens)
			left.reset = time.Duration((float64(l.rpm) - k.tokens) / rate * float64(time.Second)).Round(time.Millisecond)
		}()
	}
	if l.maxConcurrent > 0 && k.inFlight >= l.maxConcurrent {
		return false, time.Second, "concurrent", left
	}
	if l.rpm > 0 {
		rate := float64(l.rpm) / 60
		if k.tokens < 1 {
			wait := time.Duration((1 - k.tokens) / rate * float64(time.Second))
			return false, wait, "rpm", left
		}
		k.tokens--
	}
	k.inFlight++
	return true, 0, "", left
}

// entryLocked is key's limits, made at its first request.
func (l *limiter) entryLocked(key string, now time.Time) *keyLimit {
	k := l.keys[key]
	if k == nil {
		k = &keyLimit{tokens: float64(l.rpm), at: now}
		l.keys[key] = k
	}
	return k
}

// refillLocked brings k's token budget of tpm a minute to now.
func (k *keyLimit) refillLocked(tpm int64, now time.Time) {
	if k.budgetAt.IsZero() {
		k.budget, k.budgetAt = float64(tpm), now
		return
	}
	k.budget = math.Min(float64(tpm), k.budget+now.Sub(k.budgetAt).Seconds()*float64(tpm)/60)
	k.budgetAt = now
}

// checkTokens says whether a key capped at tpm tokens a minute may send
// a request now (its budget is above 0), or how long until it may; left
// is what is left (OpenAI's x-ratelimit-*-tokens headers).
func (l *limiter) checkTokens(key string, tpm int64, now time.Time) (ok bool, retryAfter time.Duration, left rateLeft) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := l.entryLocked(key, now)
	k.refillLocked(tpm, now)
	rate := float64(tpm) / 60
	left = rateLeft{limit: int(min(tpm, math.MaxInt32)), remaining: int(math.Max(k.budget, 0)),
		reset: time.Duration((float64(tpm) - k.budget) / rate * float64(time.Second)).Round(time.Millisecond)}
	if k.budget > 0 {
		return true, 0, left
	}
	return false, time.Duration((1 - k.budget) / rate * float64(time.Second)), left
}

// spendTokens takes n tokens (an answer's prompt and completion) from a
// key's budget of tpm a minute.
func (l *limiter) spendTokens(key string, tpm, n int64, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := l.entryLocked(key, now)
	k.refillLocked(tpm, now)
	k.budget -= float64(n)
}

func (l *limiter) release(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if k := l.keys[key]; k != nil && k.inFlight > 0 {
		k.inFlight--
	}
}
