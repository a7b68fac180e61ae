package gateway

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
)

// TestDeployCaddyfile: deploy/Caddyfile, adapted by the embedded Caddy's
// Caddyfile adapter with the components' addresses in its environment,
// routes as the gateway does, flushing every stream, with the gateway's
// timeouts.
func TestDeployCaddyfile(t *testing.T) {
	src, err := os.ReadFile("../../deploy/Caddyfile")
	if err != nil {
		t.Fatal(err)
	}
	u := newUpstreams(t)
	addr := freeAddr(t)
	t.Setenv("COSMICAC_SITE", "http://"+addr)
	t.Setenv("COSMICAC_APP_NODE", u.appNode.srv.URL)
	t.Setenv("COSMICAC_INFERENCE", u.inference.srv.URL)
	t.Setenv("COSMICAC_MONITOR", u.monitor.srv.URL)
	t.Setenv("COSMICAC_UI", u.ui.srv.URL)
	adapter := caddyfile.Adapter{ServerType: httpcaddyfile.ServerType{}}
	out, warnings, err := adapter.Adapt(src, map[string]any{"filename": "deploy/Caddyfile"})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range warnings {
		t.Errorf("adapt: warning: %s", w)
	}
	for _, want := range []string{`"flush_interval":-1`, `"read_header_timeout":10000000000`, `"idle_timeout":30000000000`, `"max_header_bytes":65536`} {
		n := strings.Count(string(out), want)
		if strings.HasPrefix(want, `"flush`) && n != 4 || n == 0 {
			t.Errorf("adapted config has %d of %s:\n%s", n, want, out)
		}
	}

	// Run it (without the admin endpoint, as the gateway runs) and route.
	var cfg map[string]any
	if err := json.Unmarshal(out, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["admin"] = map[string]any{"disabled": true, "config": map[string]any{"persist": false}}
	cfg["storage"] = map[string]any{"module": "file_system", "root": t.TempDir()}
	b, _ := json.Marshal(cfg)
	if !running.TryLock() {
		t.Fatal("a gateway is running")
	}
	defer running.Unlock()
	if err := caddy.Load(b, true); err != nil {
		t.Fatal(err)
	}
	defer caddy.Stop()
	checkRoutes(t, "http://"+addr)
}
