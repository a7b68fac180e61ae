package cosmictest

import (
	"path/filepath"
	"runtime"
	"testing"

	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/trust"
	"github.com/cosmicac/cosmicac/internal/trust/trusttest"
)

// deployment is the platform of e as the access matrix sees it: its
// components' nodes and the keys in its data directory.
func deployment(t *testing.T, e *Env) trusttest.Deployment {
	t.Helper()
	p := e.P
	peer := func(n *fabric.Node) trusttest.Peer {
		return trusttest.Peer{Key: n.PublicKey(), Addrs: []string{n.Addr()}}
	}
	load := func(name string) *fabric.Identity {
		id, err := fabric.LoadOrCreateIdentity(filepath.Join(e.DataDir, name))
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	return trusttest.Deployment{
		API: e.Client,
		Servers: map[trust.Role]trusttest.Peer{
			trust.Ork: peer(p.OrkNode), trust.AppNode: peer(p.AppNode), trust.Monitor: peer(p.MonitorNode),
			trust.Directory: peer(p.DirectoryNode), trust.Proxy: peer(p.ProxyNode), trust.Worker: peer(p.Sim.Node()),
		},
		WorkerRack: e.Config.Sim.Rack, WorkerLocation: e.Config.Sim.Location,
		Identities: map[trust.Role]*fabric.Identity{
			trust.Ork: load("wrk-ork"), trust.AppNode: load("app-node"), trust.Monitor: load("wrk-monitor"),
			trust.Directory: load("wrk-directory"), trust.Proxy: load("proxy-inference"),
			trust.Operator: load("operator"),
		},
		RackAgent: func(jobID string) (*fabric.Identity, bool) { return p.AgentIdentity(jobID, 0) },
	}
}

// TestTrustGraph runs, on `cosmicac up`, what internal/trust declares:
//   - matrix: every fabric method of every component, called with the key
//     of every class of caller, is allowed exactly where the declaration
//     allows it, agents and workers confined to their own job or rack, and
//     each component serves exactly the methods declared for it;
//   - hijack: another job's agent announcing as an inference job's head
//     replica is refused, and none of that job's requests reaches it;
//   - flood: 20,000 announcements of 4 KB on distinct topics from an
//     agent's key are refused; the directory holds none of them;
//   - revoke: a killed job's agent is cut off from the directory and the
//     app-node at once, and its key refused.
func TestTrustGraph(t *testing.T) {
	e := NewEnv(t)
	f := trusttest.Setup(e.Ctx, t, deployment(t, e))
	p := e.P
	t.Run("matrix", func(t *testing.T) {
		for role, n := range map[trust.Role]*fabric.Node{trust.Ork: p.OrkNode, trust.AppNode: p.AppNode, trust.Monitor: p.MonitorNode,
			trust.Directory: p.DirectoryNode, trust.Proxy: p.ProxyNode, trust.Worker: p.Sim.Node()} {
			trusttest.CheckServed(t, role, n.Methods())
		}
		for role, ms := range f.AgentMethods() {
			trusttest.CheckServed(t, role, ms)
		}
		cells := f.Matrix(e.Ctx, t)
		allowed := 0
		for _, c := range cells {
			if c.Got {
				allowed++
			}
		}
		t.Logf("%d cells, %d allowed", len(cells), allowed)
	})
	t.Run("hijack", func(t *testing.T) { f.Hijack(e.Ctx, t, p.URL+"/inference/v1") })
	t.Run("flood", func(t *testing.T) {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		held := p.Directory.Len()
		const n = 20000
		if refused := f.Flood(e.Ctx, t, n); refused != n {
			t.Fatalf("%d of %d flooding announcements refused", refused, n)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		if got := p.Directory.Len(); got > held {
			t.Fatalf("the directory holds %d announcements after the flood, %d before", got, held)
		}
		t.Logf("heap in use %d KiB before the flood, %d KiB after; the directory holds %d announcements",
			before.HeapInuse>>10, after.HeapInuse>>10, p.Directory.Len())
	})
	t.Run("revoke", func(t *testing.T) { t.Logf("the killed job's agent was cut off %v after the kill", f.Revoke(e.Ctx, t)) })
}
