package appnode

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/cosmicac/cosmicac/internal/store"
)

// Sign-in attempts are rate limited per client address, per user name from
// one client address, and per user name (docs/security.md): an address may
// try loginPerAddrBurst times, then once every loginPerAddrEvery; one
// address a user name loginPerUserAddrBurst times, then once every
// loginPerUserAddrEvery; all addresses together a user name
// loginPerUserBurst times, then once every loginPerUserEvery. One client
// alone (which refills a name's attempts slower than the name's own limit
// does) can therefore never lock a user out; it takes several addresses
// guessing at once, and they guess no faster than the name's limit. Wrong
// and right passwords count alike, so the limit says nothing about which
// names exist.
const (
	loginPerUserAddrBurst = 5
	loginPerUserAddrEvery = 12 * time.Second // 5 a minute
	loginPerUserBurst     = 20
	loginPerUserEvery     = 6 * time.Second // 10 a minute
	loginPerAddrBurst     = 20
	loginPerAddrEvery     = 3 * time.Second // 20 a minute
	// maxLimiters bounds each table: beyond it, limiters that are full
	// again (idle long enough) are dropped; if none is, every new key
	// shares one overflow limiter, so a flood of names cannot grow memory.
	maxLimiters = 10000
)

// limiterTable holds a token bucket per key.
type limiterTable struct {
	mu       sync.Mutex
	every    time.Duration
	burst    int
	m        map[string]*rate.Limiter
	overflow *rate.Limiter
}

func newLimiterTable(every time.Duration, burst int) *limiterTable {
	return &limiterTable{every: every, burst: burst, m: map[string]*rate.Limiter{}, overflow: rate.NewLimiter(rate.Every(every), burst)}
}

// reserve takes one attempt for key at now, or says how long to wait.
func (t *limiterTable) reserve(key string, now time.Time) (ok bool, wait time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	l, found := t.m[key]
	if !found {
		if len(t.m) >= maxLimiters {
			for k, old := range t.m {
				if old.TokensAt(now) >= float64(t.burst) {
					delete(t.m, k)
				}
			}
		}
		if len(t.m) >= maxLimiters {
			l = t.overflow
		} else {
			l = rate.NewLimiter(rate.Every(t.every), t.burst)
			t.m[key] = l
		}
	}
	r := l.ReserveN(now, 1)
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return false, d
	}
	return true, 0
}

// loginLimiter limits sign-in attempts: in the database when the store
// keeps them (store.SignInLimits: every app-node on it counts the same
// attempts), else in this process.
type loginLimiter struct {
	users, userAddrs, addrs *limiterTable
	shared                  store.SignInLimits // nil: the tables above
}

func newLoginLimiter() *loginLimiter {
	return &loginLimiter{users: newLimiterTable(loginPerUserEvery, loginPerUserBurst),
		userAddrs: newLimiterTable(loginPerUserAddrEvery, loginPerUserAddrBurst),
		addrs:     newLimiterTable(loginPerAddrEvery, loginPerAddrBurst)}
}

// allow takes an attempt of user from remote (host:port) at now.
func (l *loginLimiter) allow(ctx context.Context, user, remote string, now time.Time) (bool, time.Duration, error) {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	userAddr := user + "\x00" + host
	if l.shared != nil {
		// Keys are hashed: a name of any bytes and length is one short row.
		if ok, wait, err := l.shared.TakeSignInAttempt(ctx, signInKey("addr", host), now, loginPerAddrEvery, loginPerAddrBurst); err != nil || !ok {
			return false, wait, err
		}
		if ok, wait, err := l.shared.TakeSignInAttempt(ctx, signInKey("useraddr", userAddr), now, loginPerUserAddrEvery, loginPerUserAddrBurst); err != nil || !ok {
			return false, wait, err
		}
		return l.shared.TakeSignInAttempt(ctx, signInKey("user", user), now, loginPerUserEvery, loginPerUserBurst)
	}
	if ok, wait := l.addrs.reserve(host, now); !ok {
		return false, wait, nil
	}
	if ok, wait := l.userAddrs.reserve(userAddr, now); !ok {
		return false, wait, nil
	}
	ok, wait := l.users.reserve(user, now)
	return ok, wait, nil
}

// signInKey is the key of a shared sign-in limit: kind and the sha256 of
// the name.
func signInKey(kind, name string) string {
	h := sha256.Sum256([]byte(name))
	return kind + ":" + hex.EncodeToString(h[:])
}

// SignInLimit is one of the sign-in limits: attempts counted per Per, a
// burst of Burst, then one every Every (docs/security.md's limits table).
type SignInLimit struct {
	Per   string
	Burst int
	Every time.Duration
}

// SignInLimits are the limits signIn takes an attempt from, in order.
func SignInLimits() []SignInLimit {
	return []SignInLimit{
		{"client address", loginPerAddrBurst, loginPerAddrEvery},
		{"user name from one client address", loginPerUserAddrBurst, loginPerUserAddrEvery},
		{"user name", loginPerUserBurst, loginPerUserEvery},
	}
}
