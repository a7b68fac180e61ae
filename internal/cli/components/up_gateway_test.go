package components

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/cosmicac/cosmicac/internal/apiv1"
	"github.com/cosmicac/cosmicac/internal/cli"
	"github.com/cosmicac/cosmicac/internal/waittest"
	"github.com/cosmicac/cosmicac/internal/webui"
)

// TestUpServesThroughTheGateway: `cosmicac up` answers through the
// embedded Caddy on --listen: the web interface at every page path, the
// API under /api, an access log line per request in the data directory's
// gateway.log, and the browser's terminal, a WebSocket, through Caddy to a
// shell of a running job.
func TestUpServesThroughTheGateway(t *testing.T) {
	base, dataDir, tok, ctx := upThroughGateway(t)
	auth := http.Header{"Authorization": {"Bearer " + tok}, "Content-Type": {"application/json"}}
	call := func(method, path, body string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header = auth.Clone()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b)
	}

	for _, p := range []string{"/", "/jobs", "/team/keys"} {
		resp, body := call("GET", p, "")
		if resp.StatusCode != 200 || resp.Header.Get("Content-Security-Policy") != webui.CSP || !strings.Contains(body, "/app.js") {
			t.Errorf("GET %s: %d CSP %q: %.100s", p, resp.StatusCode, resp.Header.Get("Content-Security-Policy"), body)
		}
		if !strings.Contains(resp.Header.Get("Via"), "Caddy") {
			t.Errorf("GET %s did not pass the gateway: Via %q", p, resp.Header.Get("Via"))
		}
	}
	if resp, body := call("GET", "/api/v1/nope", ""); resp.StatusCode != 404 || !strings.Contains(body, `"code":"not_found"`) {
		t.Errorf("an unknown API path is the API's JSON 404, not the page: %d %s", resp.StatusCode, body)
	}
	resp, body := call("POST", "/api/v1/jobs", `{"type":"gpu-container","name":"t","location":"us","image":"ubuntu:24.04","resources":{"gpu":1}}`)
	if resp.StatusCode != 201 {
		t.Fatalf("create: %d %s", resp.StatusCode, body)
	}
	var job struct{ ID string }
	json.Unmarshal([]byte(body), &job) //nolint:errcheck // checked by the next call
	waittest.Within(t, time.Minute, func() bool {
		_, body := call("GET", "/api/v1/jobs/"+job.ID, "")
		return strings.Contains(body, `"state":"running"`)
	}, "job %s to run", job.ID)

	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	u := "ws" + strings.TrimPrefix(base, "http") + apiv1.Prefix + "/jobs/" + job.ID + "/terminal"
	c, _, err := websocket.Dial(wctx, u, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": auth["Authorization"]}})
	if err != nil {
		t.Fatalf("terminal through the gateway: %v", err)
	}
	defer c.CloseNow()
	if err := c.Write(wctx, websocket.MessageBinary, []byte("echo hi-$((6*7)); exit 3\n")); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for {
		typ, b, err := c.Read(wctx)
		if err != nil {
			t.Fatalf("read: %v after %q", err, out.String())
		}
		if typ == websocket.MessageText {
			if !strings.Contains(out.String(), "hi-42") || string(b) != `{"type":"exit","code":3}` {
				t.Errorf("the shell wrote %q then %s; want hi-42 then exit code 3", out.String(), b)
			}
			break
		}
		out.Write(b)
	}

	c.Close(websocket.StatusNormalClosure, "")
	// Caddy writes an upgraded request's line when the connection ends
	// (its 101 carries no Via: the log is what shows it passed).
	var log []byte
	waittest.Until(t, func() bool {
		if log, err = os.ReadFile(filepath.Join(dataDir, gatewayLog)); err != nil {
			t.Fatal(err)
		}
		return strings.Contains(string(log), "/terminal")
	}, "the terminal's line in %s", gatewayLog)
	if !strings.Contains(string(log), `"uri":"/api/v1/jobs/`+job.ID+`/terminal"`) || strings.Contains(string(log), tok) {
		t.Errorf("gateway.log lacks the terminal's request or shows the token:\n%s", log)
	}
}

// upThroughGateway runs `cosmicac up` (the embedded Caddy in front) until
// the test ends, and answers its URL, data directory, admin token, and a
// context that ends with it.
func upThroughGateway(t *testing.T) (base, dataDir, token string, ctx context.Context) {
	t.Helper()
	home := t.TempDir()
	dataDir = t.TempDir()
	t.Setenv("HOME", home) // the job's login shell reads no config of the user's
	env := map[string]string{"HOME": home, "XDG_CONFIG_HOME": filepath.Join(home, ".config")}
	var stdout, stderr lockedBuffer
	a := &cli.App{Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr, Getenv: func(k string) string { return env[k] }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- a.Run(ctx, []string{"up", "--data-dir", dataDir, "--listen", "127.0.0.1:0", "--metrics-listen", "", "--sim-step", "5ms"})
	}()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("up after Ctrl-C: exit %d: %s", code, stderr.String())
		}
	})
	web := regexp.MustCompile(`(?m)^\s*web\s+(http://\S+)/\s`)
	func() {
		defer func() {
			if t.Failed() {
				t.Logf("stdout: %s\nstderr: %s", stdout.String(), stderr.String())
			}
		}()
		waittest.Within(t, time.Minute, func() bool { return web.MatchString(stdout.String()) }, "the banner")
	}()
	tok, err := os.ReadFile(filepath.Join(dataDir, "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	return web.FindStringSubmatch(stdout.String())[1], dataDir, strings.TrimSpace(string(tok)), ctx
}

// fromAddr is an HTTP client whose connections come from the loopback
// address ip (127.0.0.2, ...): another client, as the gateway sees it.
func fromAddr(ip string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	return &http.Client{Transport: &http.Transport{DialContext: d.DialContext}, Timeout: 30 * time.Second}
}

// TestUpGatewayCountsEachClient: behind `up`'s own Caddy every client used
// to have the gateway's address, so one client's wrong passwords used up
// the sign-in attempts of every other client (and the anonymous inference
// limit was one bucket for all). The components now believe the embedded
// gateway's X-Forwarded-For: a client that hammers the sign-in is limited
// as itself, another client signs in, and the audit log records each
// client's own address. A client's own X-Forwarded-For is not believed.
func TestUpGatewayCountsEachClient(t *testing.T) {
	base, _, tok, _ := upThroughGateway(t)
	post := func(c *http.Client, path, body string, hdr http.Header) int {
		t.Helper()
		req, _ := http.NewRequest("POST", base+path, strings.NewReader(body))
		for k, v := range hdr {
			req.Header[k] = v
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	admin := http.Header{"Authorization": {"Bearer " + tok}}
	if code := post(http.DefaultClient, "/api/v1/users", `{"name":"bob","password":"correct horse battery"}`, admin); code != 201 {
		t.Fatalf("create bob: %d", code)
	}
	attacker, user := fromAddr("127.0.0.2"), fromAddr("127.0.0.3")
	// The client's burst is 20; it refills one every few seconds, so on a
	// slow machine a few more get through before the 429: hammer until it
	// comes, a bounded number of times.
	var codes []int
	for i := 0; i < 100 && (len(codes) == 0 || codes[len(codes)-1] != http.StatusTooManyRequests); i++ {
		// Another name each time: only the client's own limit stops it,
		// and it claims to forward for someone else.
		codes = append(codes, post(attacker, "/api/v1/login", fmt.Sprintf(`{"user":"u%d","password":"x"}`, i),
			http.Header{"X-Forwarded-For": {fmt.Sprintf("198.18.0.%d", i%250+1)}}))
	}
	if codes[len(codes)-1] != http.StatusTooManyRequests || len(codes) <= 20 {
		t.Fatalf("sign-ins from one client: %v, want 20 admitted (401), then a 429", codes)
	}
	if code := post(user, "/api/v1/login", `{"user":"bob","password":"correct horse battery"}`, nil); code != 201 {
		t.Errorf("another client's sign-in after the flood: %d, want 201", code)
	}
	req, _ := http.NewRequest("GET", base+"/api/v1/audit?team=*&limit=200", nil)
	req.Header = admin.Clone()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), `"127.0.0.3"`) || strings.Contains(string(b), `"198.18.0.`) {
		t.Errorf("the audit log does not record the client's own address: %s", b)
	}
}
