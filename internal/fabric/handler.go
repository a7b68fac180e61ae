package fabric

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
)

// Request is an incoming call or event.
type Request struct {
	// Peer is the caller's key, proven in the handshake.
	Peer PublicKey
	// Access is what the caller's key is granted.
	Access Access
	Method string
	// Params are valid until the handler returns: the stream's next
	// request is read into the same buffer (Decode copies what it keeps).
	Params json.RawMessage
}

// Decode unmarshals the params into v, as a bad_request Error on failure.
func (r *Request) Decode(v any) error {
	if len(r.Params) == 0 {
		return nil
	}
	if err := json.Unmarshal(r.Params, v); err != nil {
		return Errorf(CodeBadRequest, "decode %s params: %v", r.Method, err)
	}
	return nil
}

// Handler answers a call (or handles an event, whose result is dropped). A
// returned *Error reaches the caller as is; other errors become "internal".
type Handler func(ctx context.Context, req *Request) (any, error)

// StreamHandler serves an opened stream. It must call req.Accept to take the
// stream; returning an error before that answers the opener with the error.
type StreamHandler func(ctx context.Context, req *StreamRequest) error

// HandleOption changes how a method is registered.
type HandleOption func(*route)

// ReadOnly marks a method as callable by keys with read-only access.
func ReadOnly() HandleOption { return func(r *route) { r.readOnly = true } }

type route struct {
	call     Handler
	stream   StreamHandler
	readOnly bool
}

// Mux routes method names to handlers. Node embeds one; it is safe to register
// methods while serving.
type Mux struct {
	mu     sync.RWMutex
	routes map[string]*route
}

// Handle registers h for calls and events to method.
func (m *Mux) Handle(method string, h Handler, opts ...HandleOption) {
	m.add(method, &route{call: h}, opts)
}

// HandleStream registers h for streams opened with method.
func (m *Mux) HandleStream(method string, h StreamHandler, opts ...HandleOption) {
	m.add(method, &route{stream: h}, opts)
}

func (m *Mux) add(method string, r *route, opts []HandleOption) {
	if len(method) == 0 || len(method) > maxMethodLen {
		panic(fmt.Sprintf("fabric: bad method name %q", method))
	}
	for _, o := range opts {
		o(r)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.routes == nil {
		m.routes = make(map[string]*route)
	}
	if _, dup := m.routes[method]; dup {
		panic(fmt.Sprintf("fabric: method %q registered twice", method))
	}
	m.routes[method] = r
}

func (m *Mux) lookup(method string) *route {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.routes[method]
}

// Methods lists the registered method names.
func (m *Mux) Methods() []string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make([]string, 0, len(m.routes))
	for k := range m.routes {
		out = append(out, k)
	}
	return out
}

// Registrar is what typed handlers register on: a *Node or a *Mux.
type Registrar interface {
	Handle(method string, h Handler, opts ...HandleOption)
}

// HandleFunc registers a typed handler: params are decoded into Req, and the
// Resp is encoded as the result.
func HandleFunc[Req, Resp any](r Registrar, method string, f func(ctx context.Context, peer PublicKey, req Req) (Resp, error), opts ...HandleOption) {
	r.Handle(method, func(ctx context.Context, rq *Request) (any, error) {
		var in Req
		if err := rq.Decode(&in); err != nil {
			return nil, err
		}
		return f(ctx, rq.Peer, in)
	}, opts...)
}
