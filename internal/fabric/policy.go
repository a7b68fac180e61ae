package fabric

import (
	"context"
	"sync"
)

// Access is what a policy grants a key.
type Access int

const (
	// AccessNone refuses the key in the handshake.
	AccessNone Access = iota
	// AccessReadOnly admits the key to methods registered with ReadOnly.
	AccessReadOnly
	// AccessFull admits the key to every method.
	AccessFull
)

func (a Access) String() string {
	switch a {
	case AccessReadOnly:
		return "read-only"
	case AccessFull:
		return "full"
	default:
		return "none"
	}
}

// Policy decides, during the handshake, which keys a node admits. It is
// consulted for every new connection, inbound or outbound, so changes apply
// to new connections; Node.Revoke closes existing ones.
type Policy interface {
	Access(PublicKey) Access
}

// Authorizer is a Policy that also decides every request. When a node's
// policy implements it, the node calls Authorize before each call, event
// and stream of an admitted key, after the read-only check: a non-nil error
// refuses the request (a *Error reaches the caller as it is; anything else
// is forbidden), and the grant it returns reaches the handler in its
// context (GrantFrom). internal/trust builds the platform's.
type Authorizer interface {
	Policy
	Authorize(key PublicKey, method string) (grant any, err error)
}

type grantKey struct{}

// GrantFrom returns the grant the node's Authorizer gave the request that
// ctx belongs to (nil without one).
func GrantFrom(ctx context.Context) any { return ctx.Value(grantKey{}) }

// WithGrant returns ctx carrying grant, as the node hands it to a handler
// (for handlers called outside a node, in tests).
func WithGrant(ctx context.Context, grant any) context.Context {
	return context.WithValue(ctx, grantKey{}, grant)
}

// AllowList is a Policy backed by two sets of keys. The zero value admits
// nobody; set AllowAny explicitly to admit every key.
type AllowList struct {
	mu       sync.RWMutex
	full     map[PublicKey]struct{}
	readOnly map[PublicKey]struct{}
	allowAny bool
}

// NewAllowList returns a list admitting keys with full access.
func NewAllowList(keys ...PublicKey) *AllowList {
	a := &AllowList{}
	a.Allow(keys...)
	return a
}

// Allow grants full access to keys.
func (a *AllowList) Allow(keys ...PublicKey) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.full == nil {
		a.full = make(map[PublicKey]struct{})
	}
	for _, k := range keys {
		a.full[k] = struct{}{}
	}
}

// AllowReadOnly grants read-only access to keys.
func (a *AllowList) AllowReadOnly(keys ...PublicKey) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.readOnly == nil {
		a.readOnly = make(map[PublicKey]struct{})
	}
	for _, k := range keys {
		a.readOnly[k] = struct{}{}
	}
}

// Remove takes keys off both lists.
func (a *AllowList) Remove(keys ...PublicKey) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, k := range keys {
		delete(a.full, k)
		delete(a.readOnly, k)
	}
}

// SetAllowAny admits every key with full access when on. It exists for
// development set-ups and must be asked for explicitly.
func (a *AllowList) SetAllowAny(on bool) {
	a.mu.Lock()
	a.allowAny = on
	a.mu.Unlock()
}

// Access implements Policy.
func (a *AllowList) Access(k PublicKey) Access {
	a.mu.RLock()
	defer a.mu.RUnlock()
	if _, ok := a.full[k]; ok || a.allowAny {
		return AccessFull
	}
	if _, ok := a.readOnly[k]; ok {
		return AccessReadOnly
	}
	return AccessNone
}

// PolicyFunc adapts a function to Policy.
type PolicyFunc func(PublicKey) Access

// Access implements Policy.
func (f PolicyFunc) Access(k PublicKey) Access { return f(k) }
