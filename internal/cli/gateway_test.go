package cli

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
)

// TestGatewayCommand runs `cosmicac gateway` as a process with its
// upstreams from a config file, one overridden by a flag, and routes a
// request to each.
func TestGatewayCommand(t *testing.T) {
	upstream := func(name string) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "%s %s", name, r.URL.Path)
		}))
		t.Cleanup(srv.Close)
		return srv.URL
	}
	app, inf, mon, flagMon := upstream("app-node"), upstream("inference"), upstream("monitor"), upstream("monitor-flag")
	cfgPath := filepath.Join(t.TempDir(), "gateway.yaml")
	body := fmt.Sprintf("appNode: %s\ninference: %s\nmonitor: %s\nstorage: %s\nhttp:\n  idle: 20s\n", app, inf, mon, t.TempDir())
	if err := os.WriteFile(cfgPath, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	v := component(t, []string{"gateway"}, "gateway", "--config", cfgPath, "--listen", freePort(t), "--monitor", flagMon)
	for path, want := range map[string]string{
		"/api/v1/jobs":         "app-node /api/v1/jobs",
		"/inference/v1/models": "inference /inference/v1/models",
		"/monitor/v1/x":        "monitor-flag /monitor/v1/x",
		"/":                    "app-node /",
	} {
		resp, err := http.Get(v["gateway"] + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != want {
			t.Errorf("GET %s: %d %q, want %q", path, resp.StatusCode, b, want)
		}
	}
}
