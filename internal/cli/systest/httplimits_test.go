package systest

import (
	"bufio"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/httpserve/httpservetest"
	"github.com/cosmicac/cosmicac/internal/inferproxy"
)

// limitsFile writes a --config file that gives the component's HTTP
// servers 1 s limits (and more, from extra), and returns its path and the
// limit.
func limitsFile(t *testing.T, extra string) (string, time.Duration) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "limits.yaml")
	if err := os.WriteFile(path, []byte("http:\n  body: 1s\n  write: 1s\n  idle: 1s\n"+extra), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, time.Second
}

// TestMonitorHTTPLimits runs wrk-monitor as a process with 1 s HTTP limits
// (its http section): its HTTP address and its metrics listener cut a body
// sent a byte every 200 ms and close idle keep-alive connections within the
// limit (plus slack), a log follow that lasts three times as long is not
// cut, and its metrics are on --metrics-listen only.
func TestMonitorHTTPLimits(t *testing.T) {
	// The app-node, as the monitor asks it: every viewer may see every job.
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "{}") }))
	defer app.Close()
	cfgPath, limit := limitsFile(t, "monitor:\n  heartbeat: 200ms\n")
	metricsAddr := freePort(t)
	// No ork answers: the monitor keeps no producer, which a viewer does
	// not notice.
	nowhere, _ := fabric.GenerateIdentity()
	mon := component(t, []string{"monitor"}, "wrk-monitor", "--config", cfgPath, "--data-dir", t.TempDir(),
		"--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0", "--app-node-url", app.URL, "--metrics-listen", metricsAddr,
		"--ork", nowhere.PublicKey().String()+"@127.0.0.1:1")
	base := strings.TrimSuffix(mon["monitor"], "/monitor/v1")
	addr := strings.TrimPrefix(base, "http://")
	logs := "/monitor/v1/jobs/" + cosmic.NewJobID() + "/logs"
	auth := http.Header{"Authorization": {"Bearer viewer"}}

	httpservetest.SlowBody(t, addr, "POST", logs, auth, limit)
	httpservetest.Idle(t, addr, "/monitor/v1/nope", nil, limit)
	httpservetest.SlowBody(t, metricsAddr, "POST", "/metrics", nil, limit)
	httpservetest.Idle(t, metricsAddr, "/metrics", nil, limit)
	if code, body := get(t, "http://"+metricsAddr+"/metrics"); code != 200 || !strings.Contains(body, "cosmicac_monitor_records_received_total") {
		t.Errorf("--metrics-listen /metrics: %d, want the monitor's metrics:\n%s", code, body)
	}
	if code, body := get(t, base+"/monitor/metrics"); code != http.StatusNotFound || !strings.Contains(body, `"not_found"`) {
		t.Errorf("--http-listen /monitor/metrics: %d %s, want a JSON 404", code, body)
	}

	// A follow of a job without records: heartbeats every 200 ms.
	const long = 3 * time.Second
	req, _ := http.NewRequest("GET", base+logs+"?follow=true", nil)
	req.Header = auth.Clone()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("follow: %s", resp.Status)
	}
	start := time.Now()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if time.Since(start) > long {
			return
		}
	}
	t.Errorf("the log follow ended after %v (limits %v): %v", time.Since(start).Round(time.Millisecond), limit, sc.Err())
}

// TestProxyInferenceHTTPLimits runs proxy-inference as a process with 1 s
// HTTP limits (the peers it names need not answer for this): its HTTP
// address and its metrics listener cut a body sent a byte every 200 ms (a
// chat request is answered 408) and close idle keep-alive connections
// within the limit (plus slack). Streamed completions through the same
// handler outliving the limits: internal/cosmictest's TestHTTPLimits.
func TestProxyInferenceHTTPLimits(t *testing.T) {
	peer := func() string {
		id, err := fabric.GenerateIdentity()
		if err != nil {
			t.Fatal(err)
		}
		return id.PublicKey().String() + "@127.0.0.1:1"
	}
	cfgPath, limit := limitsFile(t, "")
	metricsAddr := freePort(t)
	prox := component(t, []string{"inference"}, "proxy-inference", "--config", cfgPath, "--data-dir", t.TempDir(),
		"--listen", "127.0.0.1:0", "--ork", peer(), "--directory", peer(), "--app-node", peer(),
		"--http-listen", "127.0.0.1:0", "--metrics-listen", metricsAddr)
	addr := strings.TrimSuffix(strings.TrimPrefix(prox["inference"], "http://"), inferproxy.Prefix)

	if code := httpservetest.SlowBody(t, addr, "POST", inferproxy.Prefix+"/chat/completions", nil, limit); code != http.StatusRequestTimeout {
		t.Errorf("a chat request sent a byte every %v: answered %d, want 408", httpservetest.ByteEvery, code)
	}
	httpservetest.Idle(t, addr, inferproxy.Prefix+"/nope", nil, limit)
	httpservetest.SlowBody(t, metricsAddr, "POST", "/metrics", nil, limit)
	httpservetest.Idle(t, metricsAddr, "/metrics", nil, limit)
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
