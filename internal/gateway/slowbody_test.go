package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/config"
	"github.com/cosmicac/cosmicac/internal/httpserve"
	"github.com/cosmicac/cosmicac/internal/httpserve/httpservetest"
)

// slowLimits are the component's limits in the slow-body tests: small, so
// that they run in seconds.
var slowLimits = httpserve.Limits{Body: config.Duration(2 * time.Second), Upload: config.Duration(4 * time.Second)}

// limitedComponent serves, with httpserve's limits l, the routes the
// slow-body tests take through the gateway: /api/read reads the body and
// answers 408 when it does not arrive in time (as the API does),
// /api/unread refuses without reading it (as the API refuses a request
// without a credential), /inference/upload is mounted with
// httpserve.Upload, /api/relay reads its body without a deadline (as the
// job HTTP relay does) and answers its length, and /api/stream reads its
// body and then streams events every 500 ms for 3 s.
func limitedComponent(t *testing.T, l httpserve.Limits) string {
	t.Helper()
	readOr408 := func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			http.Error(w, err.Error(), http.StatusRequestTimeout)
		}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/read", readOr408)
	mux.HandleFunc("POST /api/unread", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no credential", http.StatusUnauthorized)
	})
	mux.Handle("POST /inference/upload", httpserve.Upload(http.HandlerFunc(readOr408)))
	mux.HandleFunc("POST /api/relay", func(w http.ResponseWriter, r *http.Request) {
		_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		fmt.Fprint(w, len(b))
	})
	mux.HandleFunc("POST /api/stream", func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			http.Error(w, err.Error(), http.StatusRequestTimeout)
			return
		}
		sw := httpserve.Stream(w)
		sw.Header().Set("Content-Type", "text/event-stream")
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for i := range 7 {
			if i > 0 {
				<-tick.C
			}
			fmt.Fprintf(sw, "data: %d\n\n", i)
			http.NewResponseController(sw).Flush()
		}
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := httpserve.New(mux, l, nil)
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	return "http://" + ln.Addr().String()
}

// TestSlowBodyIsCutAsTheComponentCutsIt: a client that sends its body a
// byte every 200 ms through the gateway is cut when the component behind
// it cuts it (its body or upload limit), not a minute later (Caddy read
// on what was left of the body, under its own 60 s read idle timeout, and
// then kept the connection for another request), and gets the
// component's answer; a body the component reads without a deadline (the
// job HTTP relay) and a streamed answer to a request with a body outlive
// the limits, and a connection whose body was read whole is kept alive.
func TestSlowBodyIsCutAsTheComponentCutsIt(t *testing.T) {
	up := limitedComponent(t, slowLimits)
	cfg := Config{Listen: freeAddr(t), AppNode: up, Inference: up, Monitor: up, UI: up, Storage: t.TempDir(), HTTP: slowLimits}
	g, err := Start(cfg, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	addr := g.Addr()

	for _, tc := range []struct {
		path  string
		limit time.Duration
		want  int
	}{
		{"/api/read", slowLimits.Body.D(), http.StatusRequestTimeout},
		{"/api/unread", slowLimits.Body.D(), http.StatusUnauthorized},
		{"/inference/upload", slowLimits.Upload.D(), http.StatusRequestTimeout},
	} {
		t.Run("cut "+tc.path, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			// Fails unless the connection closes within the limit plus
			// httpservetest.Slack.
			code := httpservetest.SlowBody(t, addr, "POST", tc.path, nil, tc.limit)
			if d := time.Since(start); d < tc.limit {
				t.Errorf("cut after %v, before the component's limit %v", d, tc.limit)
			}
			if code != tc.want {
				t.Errorf("answered %d, want the component's %d", code, tc.want)
			}
		})
	}

	t.Run("relay outlives the limits", func(t *testing.T) {
		t.Parallel()
		// 20 bytes a byte every 200 ms: twice the body limit.
		const n = 20
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(time.Minute)) // fails a hang; measures nothing
		fmt.Fprintf(conn, "POST /api/relay HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", n)
		for range n {
			time.Sleep(httpservetest.ByteEvery)
			if _, err := io.WriteString(conn, "x"); err != nil {
				t.Fatalf("the gateway cut the body: %v", err)
			}
		}
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || string(b) != fmt.Sprint(n) {
			t.Errorf("relay: %d %q, want 200 %q", resp.StatusCode, b, fmt.Sprint(n))
		}
	})

	t.Run("stream outlives the limits", func(t *testing.T) {
		t.Parallel()
		client := &http.Client{Transport: &http.Transport{}}
		defer client.CloseIdleConnections()
		var reused []bool
		for range 2 {
			trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { reused = append(reused, i.Reused) }}
			req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(testContext(t), trace), http.MethodPost,
				"http://"+addr+"/api/stream", strings.NewReader(`{"stream":true}`))
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if want := "data: 0\n\ndata: 1\n\ndata: 2\n\ndata: 3\n\ndata: 4\n\ndata: 5\n\ndata: 6\n\n"; err != nil || string(b) != want {
				t.Fatalf("stream: %v %q, want %q", err, b, want)
			}
		}
		if len(reused) != 2 || !reused[1] {
			t.Errorf("connections reused %v: want the second request on the first's connection", reused)
		}
	})
}
