package fabric

import (
	"context"
	"sync/atomic"
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
			srv, agent, loser := racedDial(t, c.winner, c.loser)
			HandleFunc(agent, "whoami", func(context.Context, PublicKey, struct{}) (string, error) { return "agent", nil })
			ctx := ctxT(t)
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

// racedDial sets up a dial race's end: a dial-only agent connected to a
// server over winner (which it serves), then a second connection over
// loser, dialled after the winner and so registered after it at the
// server, which the agent does not serve, as dialAddr leaves a loser.
func racedDial(t *testing.T, winner, loser string) (srv, agent *Node, lost *peerConn) {
	t.Helper()
	allow := NewAllowList()
	srv = newNode(t, "server", withPolicy(allow))
	agent = newNode(t, "agent", withListen(""), withTransports(winner), withPolicy(NewAllowList(srv.PublicKey())))
	allow.Allow(agent.PublicKey())
	agent.AddAddrs(srv.PublicKey(), srv.Addr())
	ctx := ctxT(t)
	if err := agent.Call(ctx, srv.PublicKey(), MethodPing, nil, nil); err != nil {
		t.Fatal(err)
	}
	dial := agent.dialTCP
	if loser == TransportQUIC {
		dial = agent.dialQUIC
	}
	lost, err := dial(ctx, srv.PublicKey(), srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	waittest.Until(t, func() bool { return connsFrom(srv, agent.PublicKey()) == 2 }, "the server holding both connections")
	return srv, agent, lost
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

// A call the dialled side sends on a dial race's QUIC loser in the moment
// before the dialler closes it goes again on the winner: the dialler never
// serves a loser and says so in its close (codeUnserved), so the call did
// not run there, and it runs once. A TCP loser is not covered: yamux
// v0.1.2 ends the pending stream with EOF whatever the reason, so its
// call fails as one cut mid-way would (docs/design/0001-fabric.md).
func TestCallOnTheLosingDialGoesToTheWinner(t *testing.T) {
	for _, c := range []struct{ name, winner, loser string }{
		{"quic lost", TransportTCP, TransportQUIC},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv, agent, loser := racedDial(t, c.winner, c.loser)
			var served atomic.Int32
			HandleFunc(agent, "whoami", func(context.Context, PublicKey, struct{}) (string, error) {
				served.Add(1)
				return "agent", nil
			})
			ctx := ctxT(t)

			type answer struct {
				who string
				err error
			}
			done := make(chan answer, 1)
			go func() {
				var a answer
				a.err = srv.Call(ctx, agent.PublicKey(), "whoami", nil, &a.who)
				done <- a
			}()
			// The call arrives on the loser (the server's newest), which
			// the agent does not serve; then the agent closes it, as
			// dialAddr closes a race's loser.
			if _, err := loser.c.acceptStream(ctx); err != nil {
				t.Fatalf("the call did not reach the loser: %v", err)
			}
			loser.c.closeUnserved()
			a := <-done
			if a.err != nil || a.who != "agent" {
				t.Fatalf("the call: %q, %v; want it answered on the winner", a.who, a.err)
			}
			if n := served.Load(); n != 1 {
				t.Fatalf("served %d times, want 1", n)
			}
		})
	}
}
