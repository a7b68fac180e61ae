package fabric

import (
	"context"
	"testing"

	"github.com/cosmicac/cosmicac/internal/waittest"
)

// A dial races QUIC against TCP (dialAddr) and closes the loser as soon as
// the winner is in; the dialled side has accepted and registered both by
// then. Whichever of them it registered last, the loser ending must leave
// the winner serving: a dial-only peer (an agent) is reached over it, and
// it sees no reason to dial again while its connection is up.
func TestLosingDialLeavesTheWinnerServing(t *testing.T) {
	for _, c := range []struct{ name, winner, loser string }{
		{"quic won, tcp lost", TransportQUIC, TransportTCP},
		{"tcp won, quic lost", TransportTCP, TransportQUIC},
	} {
		t.Run(c.name, func(t *testing.T) {
			allow := NewAllowList()
			srv := newNode(t, "server", withPolicy(allow))
			agent := newNode(t, "agent", withListen(""), withTransports(c.winner), withPolicy(NewAllowList(srv.PublicKey())))
			allow.Allow(agent.PublicKey())
			agent.AddAddrs(srv.PublicKey(), srv.Addr())
			HandleFunc(agent, "whoami", func(context.Context, PublicKey, struct{}) (string, error) { return "agent", nil })
			ctx := ctxT(t)
			if err := agent.Call(ctx, srv.PublicKey(), MethodPing, nil, nil); err != nil {
				t.Fatal(err)
			}
			// The race's loser, dialled after the winner (so registered
			// after it), closed by the dialler.
			dial := agent.dialTCP
			if c.loser == TransportQUIC {
				dial = agent.dialQUIC
			}
			loser, err := dial(ctx, srv.PublicKey(), srv.Addr())
			if err != nil {
				t.Fatal(err)
			}
			waittest.Until(t, func() bool { return connsFrom(srv, agent.PublicKey()) == 2 }, "the server holding both connections")
			loser.c.close()
			waittest.Until(t, func() bool { return connsFrom(srv, agent.PublicKey()) == 1 }, "the server dropping the loser")

			if !srv.Connected(agent.PublicKey()) {
				t.Fatal("the server lost the agent's live connection")
			}
			var who string
			if err := srv.Call(ctx, agent.PublicKey(), "whoami", nil, &who); err != nil || who != "agent" {
				t.Fatalf("calling the agent back: %q, %v", who, err)
			}
			if !agent.Connected(srv.PublicKey()) {
				t.Fatal("the agent's connection did not carry the call")
			}
			// The agent dialled and served its one connection: it holds it
			// once.
			if k := registered(agent, srv.PublicKey()); k != 1 {
				t.Fatalf("the agent holds %d connections to the server, want 1", k)
			}
		})
	}
}

// connsFrom counts the connections n holds from key.
func connsFrom(n *Node, key PublicKey) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	k := 0
	for pc := range n.all {
		if pc.key == key {
			k++
		}
	}
	return k
}

// registered counts the connections to key that serve n's calls.
func registered(n *Node, key PublicKey) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.conns[key])
}
