package systest

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cosmicac/cosmicac/internal/cli"
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

// TestGatewayRefusesABadUpstream: an upstream that is not scheme://host:port
// is a usage error, named, before anything listens.
func TestGatewayRefusesABadUpstream(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--app-node", "127.0.0.1:8081"}, `appNode: "127.0.0.1:8081": want http:// or https://`},
		{[]string{"--inference", "http://127.0.0.1:8083/inference"}, "inference:"},
		{[]string{"--listen", "8080"}, "listen"},
	} {
		code, _, errs := runCLI(t, nil, append([]string{"gateway"}, tc.args...)...)
		if code != cli.ExitUsage || !strings.Contains(errs, tc.want) {
			t.Errorf("gateway %v: exit %d (%s), want %d and %q", tc.args, code, errs, cli.ExitUsage, tc.want)
		}
	}
}
