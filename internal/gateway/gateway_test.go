package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"github.com/cosmicac/cosmicac/internal/waittest"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The tests run Caddy, which keeps one config per process: none is
// parallel.

// component is an httptest upstream that answers which component it is,
// the path it was asked and the X-Forwarded-For it was given; /events
// streams two server-sent events, the second once secondEvent is closed;
// an Upgrade: echo request is switched and echoes bytes; /upload counts
// its body as it reads it, closing started after the first read.
type component struct {
	name        string
	secondEvent chan struct{}
	started     chan struct{}
	srv         *httptest.Server
}

func newComponent(t *testing.T, name string) *component {
	c := &component{name: name, secondEvent: make(chan struct{}), started: make(chan struct{})}
	c.srv = httptest.NewServer(http.HandlerFunc(c.serve))
	t.Cleanup(c.srv.Close)
	return c
}

func (c *component) serve(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Header.Get("Upgrade") == "echo":
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		fmt.Fprint(conn, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
		io.Copy(conn, brw)
	case strings.HasSuffix(r.URL.Path, "/events"):
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: one\n\n")
		http.NewResponseController(w).Flush()
		select {
		case <-c.secondEvent:
		case <-r.Context().Done():
			return
		}
		fmt.Fprint(w, "data: two\n\n")
	case strings.HasSuffix(r.URL.Path, "/upload"):
		buf := make([]byte, 1<<20)
		var n int64
		sum := crc32.NewIEEE()
		once := sync.OnceFunc(func() { close(c.started) })
		for {
			m, err := r.Body.Read(buf)
			n += int64(m)
			sum.Write(buf[:m])
			if m > 0 {
				once()
			}
			if err == io.EOF {
				break
			}
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
		}
		fmt.Fprintf(w, "%d %08x", n, sum.Sum32())
	default:
		fmt.Fprintf(w, "%s %s %s", c.name, r.URL.Path, r.Header.Get("X-Forwarded-For"))
	}
}

// upstreams are the four components a gateway routes to.
type upstreams struct{ appNode, inference, monitor, ui *component }

func newUpstreams(t *testing.T) upstreams {
	return upstreams{newComponent(t, "app-node"), newComponent(t, "inference"), newComponent(t, "monitor"), newComponent(t, "ui")}
}

// freeAddr is a loopback address free a moment ago (Caddy listens
// itself): a port below the ephemeral range (Linux: 32768 on), which the
// kernel gives to no :0 listener or outgoing connection meanwhile.
func freeAddr(t *testing.T) string {
	t.Helper()
	for range 100 {
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(20000+rand.IntN(12000)))
		if ln, err := net.Listen("tcp", addr); err == nil {
			ln.Close()
			return addr
		}
	}
	t.Fatal("no free port")
	return ""
}

// syncBuffer is a bytes.Buffer safe for Caddy's loggers and the test.
type syncBuffer = waittest.Buffer

// startGateway runs a gateway in front of u and returns its base URL and
// its logs.
func startGateway(t *testing.T, u upstreams) (string, *syncBuffer) {
	t.Helper()
	cfg := Config{Listen: freeAddr(t), AppNode: u.appNode.srv.URL, Inference: u.inference.srv.URL,
		Monitor: u.monitor.srv.URL, UI: u.ui.srv.URL, Storage: t.TempDir()}
	logs := &syncBuffer{}
	g, err := Start(cfg, logs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := g.Close(); err != nil {
			t.Error(err)
		}
	})
	return "http://" + g.Addr(), logs
}

// testContext bounds a test that would otherwise hang on a gateway that
// buffers: it fails, it does not measure.
func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// routes are the gateway's routes: each path and the component that
// answers it.
var routes = []struct{ path, want string }{
	{"/api/v1/jobs", "app-node"},
	{"/api", "app-node"},
	{"/inference/v1/models", "inference"},
	{"/inference", "inference"},
	{"/monitor/v1/jobs/j1/logs", "monitor"},
	{"/", "ui"},
	{"/jobs/j1", "ui"},
	{"/apiary", "ui"},
	{"/monitoring", "ui"},
}

// checkRoutes asks base for each route's path and checks the component
// that answers, and that it was told the client's address.
func checkRoutes(t *testing.T, base string) {
	t.Helper()
	for _, r := range routes {
		resp, err := http.Get(base + r.path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if want := r.want + " " + r.path + " 127.0.0.1"; resp.StatusCode != http.StatusOK || string(b) != want {
			t.Errorf("GET %s: %d %q, want 200 %q", r.path, resp.StatusCode, b, want)
		}
	}
}

func TestEachRouteReachesItsComponent(t *testing.T) {
	base, logs := startGateway(t, newUpstreams(t))
	checkRoutes(t, base)
	req, _ := http.NewRequest(http.MethodGet, base+"/api/v1/whoami", nil)
	req.Header.Set("Authorization", "Bearer cas_secret_token")
	req.Header.Set("Cookie", "cosmicac_session=cas_secret_session")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if strings.Contains(logs.String(), "cas_secret") {
		t.Errorf("a credential reached the access log:\n%s", logs)
	}
	// The access log: a JSON line per request, with its URI.
	var found bool
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var rec struct {
			Logger  string `json:"logger"`
			Request struct {
				URI string `json:"uri"`
			} `json:"request"`
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Errorf("log line is not JSON: %q", line)
			continue
		}
		if rec.Logger == accessLogger && rec.Request.URI == "/api/v1/jobs" {
			found = true
		}
	}
	if !found {
		t.Errorf("no access log of GET /api/v1/jobs in:\n%s", logs)
	}
}

// TestServerSentEventsAreNotBuffered: the first event reaches the client
// while the upstream waits to write the second (it writes it only once the
// client has read the first).
func TestServerSentEventsAreNotBuffered(t *testing.T) {
	u := newUpstreams(t)
	base, _ := startGateway(t, u)
	for _, c := range []*component{u.inference, u.monitor} {
		req, _ := http.NewRequestWithContext(testContext(t), http.MethodGet, base+"/"+c.name+"/v1/events", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(resp.Body)
		readEvent := func() string {
			line, err := br.ReadString('\n')
			if err != nil {
				t.Fatalf("%s: read event: %v", c.name, err)
			}
			br.ReadString('\n') // the blank line that ends it
			return line
		}
		if got := readEvent(); got != "data: one\n" {
			t.Fatalf("%s: first event %q", c.name, got)
		}
		close(c.secondEvent)
		if got := readEvent(); got != "data: two\n" {
			t.Fatalf("%s: second event %q", c.name, got)
		}
		resp.Body.Close()
	}
}

// TestUpgradeThroughGateway: an Upgrade request (as a WebSocket terminal
// makes) is switched through the gateway, and each line written comes
// back before the next is sent.
func TestUpgradeThroughGateway(t *testing.T) {
	base, _ := startGateway(t, newUpstreams(t))
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(2 * time.Minute)) // fails a hang; measures nothing
	fmt.Fprint(conn, "GET /api/v1/jobs/j1/terminal HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("Upgrade") != "echo" {
		t.Fatalf("upgrade: %s %v", resp.Status, resp.Header)
	}
	for _, line := range []string{"ls -l\n", "echo hello\n", "exit\n"} {
		if _, err := io.WriteString(conn, line); err != nil {
			t.Fatal(err)
		}
		got, err := br.ReadString('\n')
		if err != nil || got != line {
			t.Fatalf("echo of %q: %q, %v", line, got, err)
		}
	}
}

// gatedBody generates size bytes, and once it has produced gate of them
// waits for open to close: an upload the upstream must start reading
// before the client has sent it all.
type gatedBody struct {
	ctx              context.Context
	block            []byte
	sent, gate, size int64
	open             <-chan struct{}
}

func (g *gatedBody) Read(p []byte) (int, error) {
	if g.sent >= g.size {
		return 0, io.EOF
	}
	if g.sent >= g.gate {
		select {
		case <-g.open:
		case <-g.ctx.Done():
			return 0, g.ctx.Err()
		}
	}
	p = p[:min(int64(len(p)), g.size-g.sent, int64(len(g.block)))]
	n := copy(p, g.block[g.sent%int64(len(g.block)):])
	g.sent += int64(n)
	return n, nil
}

// TestLargeUploadStreams: a 100 MB upload reaches the upstream whole, and
// the upstream reads it before the client has sent it (the client holds
// back the last 84 MB until the upstream has begun).
func TestLargeUploadStreams(t *testing.T) {
	u := newUpstreams(t)
	base, _ := startGateway(t, u)
	ctx := testContext(t)
	block := make([]byte, 1<<20)
	for i := range block {
		block[i] = byte(rand.N(256))
	}
	const size = 100 << 20
	body := &gatedBody{ctx: ctx, block: block, gate: 16 << 20, size: size, open: u.inference.started}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/inference/v1/audio/upload", body)
	req.ContentLength = size
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, _ := io.ReadAll(resp.Body)
	sum := crc32.NewIEEE()
	for range size / len(block) {
		sum.Write(block)
	}
	if want := fmt.Sprintf("%d %08x", size, sum.Sum32()); resp.StatusCode != http.StatusOK || string(got) != want {
		t.Errorf("upload: %d %q, want 200 %q", resp.StatusCode, got, want)
	}
}

// TestSeveralAppNodesTakenInTurn: with two app-node URLs the gateway
// sends /api requests to each in turn; when one stops, every request goes
// to the other and none fails.
func TestSeveralAppNodesTakenInTurn(t *testing.T) {
	u := newUpstreams(t)
	second := newComponent(t, "app-node-2")
	cfg := Config{Listen: freeAddr(t), AppNode: u.appNode.srv.URL + ", " + second.srv.URL, Inference: u.inference.srv.URL,
		Monitor: u.monitor.srv.URL, UI: u.ui.srv.URL, Storage: t.TempDir()}
	g, err := Start(cfg, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	get := func() string {
		t.Helper()
		resp, err := http.Get("http://" + g.Addr() + "/api/v1/jobs")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /api/v1/jobs: %d %s", resp.StatusCode, b)
		}
		name, _, _ := strings.Cut(string(b), " ")
		return name
	}
	var got []string
	for range 6 {
		got = append(got, get())
	}
	for i := 1; i < len(got); i++ {
		if got[i] == got[i-1] {
			t.Fatalf("answers %v: want the two app-nodes in turn", got)
		}
	}
	second.srv.Close()
	for range 4 {
		if name := get(); name != "app-node" {
			t.Fatalf("with app-node-2 stopped, %s answered", name)
		}
	}
}
