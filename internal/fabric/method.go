package fabric

import "context"

// Method is a call's descriptor, declared once in its server's contract
// package (orkapi, keyapi, proxyapi, …): its name, with the types of its
// params and result, so that the handler (Handle) and the client (Call)
// cannot disagree on either. internal/trust's Graph names it for the
// policies; the trust tests check every registered method is declared.
type Method[P, R any] struct{ Name string }

// Caller makes calls: a *Node, or what stands for one (a node that comes
// and goes, a test's recorder).
type Caller interface {
	Call(ctx context.Context, key PublicKey, method string, params, result any) error
}

var _ Caller = (*Node)(nil)

// Call calls the method on peer through n.
func (m Method[P, R]) Call(ctx context.Context, n Caller, peer PublicKey, p P) (R, error) {
	var r R
	err := n.Call(ctx, peer, m.Name, p, &r)
	return r, err
}

// Handle registers f as the method's handler on r.
func (m Method[P, R]) Handle(r Registrar, f func(ctx context.Context, peer PublicKey, p P) (R, error), opts ...HandleOption) {
	HandleFunc(r, m.Name, f, opts...)
}
