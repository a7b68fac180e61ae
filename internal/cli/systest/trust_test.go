package systest

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/apiv1"
	"github.com/cosmicac/cosmicac/internal/client"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/trust"
	"github.com/cosmicac/cosmicac/internal/trust/trusttest"
)

// TestTrustGraphAsProcesses runs internal/trust's access matrix, the model
// hijack and the directory flood (trusttest) against the platform started
// as separate processes, each given only the keys its declaration admits
// (--ROLE-key, the peers it dials, --operator): wrk-ork, wrk-monitor,
// wrk-directory, the app-node, proxy-inference and a simulated rack.
func TestTrustGraphAsProcesses(t *testing.T) {
	base := t.TempDir()
	dirs := map[trust.Role]string{}
	ids := map[trust.Role]*fabric.Identity{}
	for _, r := range []trust.Role{trust.Ork, trust.AppNode, trust.Monitor, trust.Directory, trust.Proxy, trust.Worker, trust.Operator} {
		dirs[r] = filepath.Join(base, string(r))
		id, err := fabric.LoadOrCreateIdentity(dirs[r])
		if err != nil {
			t.Fatal(err)
		}
		ids[r] = id
	}
	key := func(r trust.Role) string { return ids[r].PublicKey().String() }
	common := func(r trust.Role, args ...string) []string {
		return append([]string{string(r), "--data-dir", dirs[r], "--listen", "127.0.0.1:0", "--operator", key(trust.Operator)}, args...)
	}
	ork := component(t, []string{"fabric"}, common(trust.Ork, "--app-node-key", key(trust.AppNode), "--monitor-key", key(trust.Monitor),
		"--directory-key", key(trust.Directory), "--proxy-inference-key", key(trust.Proxy), "--heartbeat", "50ms")...)["fabric"]
	apiAddr := freePort(t)
	mon := component(t, []string{"fabric", "monitor"}, common(trust.Monitor, "--ork", ork, "--http-listen", "127.0.0.1:0",
		"--app-node-url", "http://"+apiAddr)...)["fabric"]
	dir := component(t, []string{"fabric"}, common(trust.Directory, "--ork", ork, "--app-node-key", key(trust.AppNode),
		"--proxy-inference-key", key(trust.Proxy))...)["fabric"]
	appOut := component(t, []string{"fabric", "api"}, common(trust.AppNode, "--ork", ork, "--directory", dir, "--api-listen", apiAddr,
		"--proxy-inference-key", key(trust.Proxy))...)
	proxOut := component(t, []string{"fabric", "inference"}, common(trust.Proxy, "--ork", ork, "--directory", dir, "--app-node", appOut["fabric"],
		"--http-listen", "127.0.0.1:0")...)
	simArgs := append([]string{"wrk-server-sim"}, common(trust.Worker, "--ork", ork, "--monitor", mon, "--step", "5ms", "--rack", "sim1", "--location", "eu")[1:]...)
	sim := component(t, []string{"fabric"}, simArgs...)["fabric"]

	tok, err := os.ReadFile(filepath.Join(dirs[trust.AppNode], "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	c := client.New(strings.TrimSuffix(appOut["api"], "/api/v1"), strings.TrimSpace(string(tok)), client.WithPollInterval(10*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	peer := func(s string) trusttest.Peer {
		k, addrs, err := fabric.ParsePeer(s)
		if err != nil {
			t.Fatal(err)
		}
		return trusttest.Peer{Key: k, Addrs: addrs}
	}
	if _, err := c.RegisterRack(ctx, apiv1.RegisterRack{ID: "sim1", Location: "eu", GPUModel: "GH100_H100_SXM5_80GB",
		WorkerKey: key(trust.Worker), WorkerAddrs: peer(sim).Addrs}); err != nil {
		t.Fatal(err)
	}
	d := trusttest.Deployment{
		API: c,
		Servers: map[trust.Role]trusttest.Peer{trust.Ork: peer(ork), trust.AppNode: peer(appOut["fabric"]), trust.Monitor: peer(mon),
			trust.Directory: peer(dir), trust.Proxy: peer(proxOut["fabric"]), trust.Worker: peer(sim)},
		WorkerRack: "sim1", WorkerLocation: "eu",
		Identities: ids,
	}
	f := trusttest.Setup(ctx, t, d)
	t.Run("matrix", func(t *testing.T) {
		cells := f.Matrix(ctx, t)
		t.Logf("%d cells", len(cells))
	})
	t.Run("hijack", func(t *testing.T) { f.Hijack(ctx, t, proxOut["inference"]) })
	t.Run("flood", func(t *testing.T) {
		const n = 20000
		if refused := f.Flood(ctx, t, n); refused != n {
			t.Fatalf("%d of %d flooding announcements refused", refused, n)
		}
	})
	t.Run("revoke", func(t *testing.T) { t.Logf("the killed job's agent was cut off %v after the kill", f.Revoke(ctx, t)) })
}
