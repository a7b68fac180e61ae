package trust

import (
	"context"
	"fmt"
	"time"

	"github.com/cosmicac/cosmicac/internal/datasync/dataapi"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/joblog"
)

// Policy is a component's fabric policy, made from Graph and a keyring: it
// admits in the handshake the keys whose role the component admits, and
// lets each call only the methods Graph gives its role (operators: all).
// The handler's context carries the caller's Principal (CallerOf). It
// implements fabric.Authorizer.
type Policy struct {
	server Role
	ring   *Keyring
	admit  map[Role]bool
	calls  map[string]map[Role]bool
	noOps  map[string]bool // methods operators may not call either
	// rack, on a worker's policy: agents are admitted only if bound to it.
	rack string
}

var _ fabric.Authorizer = (*Policy)(nil)

// PolicyOption changes a Policy.
type PolicyOption func(*Policy)

// OnRack makes a worker's policy admit only the agents bound to rack (a
// keyring the worker fills itself holds only those anyway).
func OnRack(rack string) PolicyOption { return func(p *Policy) { p.rack = rack } }

// NewPolicy returns the policy of server over ring. It panics if server is
// not declared in Graph (a programming error).
func NewPolicy(server Role, ring *Keyring, opts ...PolicyOption) *Policy {
	s, ok := ServerOf(server)
	if !ok {
		panic(fmt.Sprintf("trust: no server %q in the graph", server))
	}
	p := &Policy{server: server, ring: ring, admit: map[Role]bool{}, calls: map[string]map[Role]bool{}, noOps: map[string]bool{}}
	for _, r := range AdmittedBy(server) {
		p.admit[r] = true
	}
	for _, m := range s.Methods {
		set := map[Role]bool{}
		for _, c := range m.Callers {
			set[c] = true
		}
		p.calls[m.Name] = set
		if m.NoOperators {
			p.noOps[m.Name] = true
		}
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

// Server is the role whose policy this is.
func (p *Policy) Server() Role { return p.server }

// Keyring is the policy's keyring.
func (p *Policy) Keyring() *Keyring { return p.ring }

func (p *Policy) principal(k fabric.PublicKey) (*Principal, bool) {
	pr := p.ring.lookup(k)
	if pr == nil || !p.admit[pr.Role] {
		return nil, false
	}
	if p.rack != "" && pr.Role.IsAgent() && pr.Rack != p.rack {
		return nil, false
	}
	return pr, true
}

// Access implements fabric.Policy: full for the keys admitted (what they
// may call is Authorize's to say), none for the others.
func (p *Policy) Access(k fabric.PublicKey) fabric.Access {
	if _, ok := p.principal(k); ok {
		return fabric.AccessFull
	}
	return fabric.AccessNone
}

// Authorize implements fabric.Authorizer. The grant is the caller's
// *Principal (CallerOf reads it).
func (p *Policy) Authorize(k fabric.PublicKey, method string) (any, error) {
	pr, ok := p.principal(k)
	if !ok {
		return nil, fabric.Errorf(fabric.CodeForbidden, "key %s is not admitted by %s", k.Short(), p.server)
	}
	if pr.Stopping && !StoppingMethods[method] {
		return nil, fabric.Errorf(fabric.CodeForbidden, "%s is stopping (its replica was stopped; its VM powers off): it may only push its volumes, not call %s on %s", pr, method, p.server)
	}
	if method == MethodPing || p.calls[method][pr.Role] || pr.Role == Operator && !p.noOps[method] {
		return pr, nil
	}
	return nil, fabric.Errorf(fabric.CodeForbidden, "%s may not call %s on %s", pr, method, p.server)
}

// StoppingMethods are what the agent of a stopped replica may still call
// while its VM powers off (Principal.Stopping): sign its volumes' requests
// to push them back, and write the job's log records saying so.
var StoppingMethods = map[string]bool{
	MethodPing:           true,
	dataapi.Presign.Name: true,
	joblog.Append.Name:   true,
}

// AgentDirectory is the configuration of the agents' directory: announces
// confined by MayAnnounce, and a TTL of at most two minutes (the agents
// announce with 15 and 30 s). Wire its Drop to the keyring's OnRevoke, so
// that a revoked agent's announcements go with it.
func AgentDirectory() fabric.DirectoryConfig {
	return fabric.DirectoryConfig{MayAnnounce: MayAnnounce, Limits: fabric.DirectoryLimits{MaxTTL: 2 * time.Minute}}
}

// ServeAgentDirectory is wrk-directory, the one assembly of it for `cosmicac
// up` and `cosmicac wrk-directory` alike: the agents' directory
// (AgentDirectory) served on n, its announcements of a key ring revokes
// dropped with the key.
func ServeAgentDirectory(n *fabric.Node, ring *Keyring) *fabric.Directory {
	dir := fabric.NewDirectoryWith(AgentDirectory())
	dir.Register(n)
	ring.OnRevoke(dir.Drop)
	return dir
}

// MayAnnounce is the agents' directory's fabric.DirectoryConfig.MayAnnounce:
// an agent announces only under its own job's topic (AgentTopic);
// operators anywhere. The directory's policy lets no one else announce.
func MayAnnounce(ctx context.Context, _ fabric.PublicKey, topic string) error {
	p, ok := CallerOf(ctx)
	switch {
	case !ok || p.Role == Operator:
		return nil
	case p.Role.IsAgent() && topic == AgentTopic(p.Role, p.Job):
		return nil
	case p.Role.IsAgent():
		return fabric.Errorf(fabric.CodeForbidden, "%s may announce only under %s", p, AgentTopic(p.Role, p.Job))
	}
	return fabric.Errorf(fabric.CodeForbidden, "%s may not announce", p)
}
