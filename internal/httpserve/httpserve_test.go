package httpserve_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/cosmicac/cosmicac/internal/config"
	"github.com/cosmicac/cosmicac/internal/httpserve"
	"github.com/cosmicac/cosmicac/internal/httpserve/httpservetest"
	"github.com/cosmicac/cosmicac/internal/waittest"
)

// serve serves h with New's server of l on a loopback port until the test
// ends, and returns its address.
func serve(t *testing.T, h http.Handler, l httpserve.Limits) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := httpserve.New(h, l, nil)
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	return ln.Addr().String()
}

// small are limits far below what the tests' clients take.
var small = httpserve.Limits{Body: config.Duration(time.Second), Write: config.Duration(time.Second), Idle: config.Duration(time.Second)}

func TestSlowBodyIsCut(t *testing.T) {
	t.Parallel()
	readErr := make(chan error, 1)
	mux := http.NewServeMux()
	mux.HandleFunc("/read", func(w http.ResponseWriter, r *http.Request) {
		_, err := io.ReadAll(r.Body)
		readErr <- err
		if err != nil {
			http.Error(w, err.Error(), http.StatusRequestTimeout)
		}
	})
	// The server reads what the handler left of the body before it
	// answers: within the same limit.
	mux.HandleFunc("/unread", func(w http.ResponseWriter, r *http.Request) {})
	addr := serve(t, mux, small)

	if code := httpservetest.SlowBody(t, addr, "POST", "/read", nil, small.Body.D()); code != http.StatusRequestTimeout {
		t.Errorf("a handler that reads the body answered %d, want 408", code)
	}
	if err := <-readErr; !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("the handler's read: %v, want the deadline's error", err)
	}
	httpservetest.SlowBody(t, addr, "POST", "/unread", nil, small.Body.D())
}

func TestIdleConnectionIsClosed(t *testing.T) {
	t.Parallel()
	addr := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }), small)
	httpservetest.Idle(t, addr, "/", nil, small.Idle.D())
}

// TestLongAnswersOutliveTheLimits: answers that take three times every
// limit to write, or to begin, reach the client whole, and their
// handlers' contexts stay alive: with and without a request body, streamed
// or written at the end.
func TestLongAnswersOutliveTheLimits(t *testing.T) {
	t.Parallel()
	const long = 3 * time.Second
	stream := func(ctxErr chan<- error) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			readBody(r)
			sw := httpserve.Stream(w)
			sw.Header().Set("Content-Type", "text/event-stream")
			for end := time.Now().Add(long); time.Now().Before(end); {
				fmt.Fprintf(sw, "data: tick\n\n")
				sw.(http.Flusher).Flush()
				select {
				case <-r.Context().Done():
					ctxErr <- r.Context().Err()
					return
				case <-time.After(100 * time.Millisecond):
				}
			}
			fmt.Fprintf(sw, "data: end\n\n")
			ctxErr <- r.Context().Err()
		}
	}
	late := func(ctxErr chan<- error) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			readBody(r)
			select {
			case <-r.Context().Done():
			case <-time.After(long):
			}
			ctxErr <- r.Context().Err()
			io.WriteString(w, "data: end\n\n")
		}
	}
	for _, tc := range []struct {
		name, method, body string
		handler            func(chan<- error) http.HandlerFunc
	}{
		{"stream without a body", "GET", "", stream},
		{"stream after a body", "POST", `{"stream":true}`, stream},
		{"late answer without a body", "GET", "", late},
		{"late answer after a body", "POST", `{"stream":false}`, late},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctxErr := make(chan error, 1)
			addr := serve(t, tc.handler(ctxErr), small)
			var body io.Reader
			if tc.body != "" {
				body = strings.NewReader(tc.body)
			}
			req, _ := http.NewRequest(tc.method, "http://"+addr+"/", body)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || !strings.HasSuffix(string(b), "data: end\n\n") {
				t.Errorf("the answer was cut: %v; got %q", err, b)
			}
			if err := <-ctxErr; err != nil {
				t.Errorf("the handler's context ended: %v", err)
			}
		})
	}
}

// readBody reads a POST's body, as an API handler does; a GET's is left
// alone (a handler need not read an empty body).
func readBody(r *http.Request) {
	if r.Method == "POST" {
		io.ReadAll(r.Body)
	}
}

func TestUploadRoutesTakeTheUploadLimit(t *testing.T) {
	t.Parallel()
	l := httpserve.Limits{Body: config.Duration(300 * time.Millisecond), Upload: config.Duration(time.Minute)}
	read := func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			http.Error(w, err.Error(), http.StatusRequestTimeout)
		}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/json", read)
	mux.Handle("/upload", httpserve.Upload(http.HandlerFunc(read)))
	addr := serve(t, mux, l)
	// A body in three parts, 400 ms apart: beyond Body, within Upload.
	// The pauses are the workload (a slow uploader the limits must tell
	// apart), not a wait for anything.
	post := func(path string) (int, error) {
		pr, pw := io.Pipe()
		go func() {
			for i := range 3 {
				if i > 0 {
					time.Sleep(400 * time.Millisecond)
				}
				if _, err := pw.Write([]byte("part ")); err != nil {
					return
				}
			}
			pw.Close()
		}()
		req, _ := http.NewRequest("POST", "http://"+addr+path, pr)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	if code, err := post("/upload"); err != nil || code != http.StatusOK {
		t.Errorf("upload route: %d %v, want 200", code, err)
	}
	if code, err := post("/json"); err == nil && code == http.StatusOK {
		t.Errorf("plain route: %d, want the body cut after %v", code, l.Body)
	}
}

// TestWriteDeadlineDropsAClientThatStopsReading: an answer larger than the
// connection's buffers, to a client that reads none of it, fails within
// the write limit (plus slack) of its first byte.
func TestWriteDeadlineDropsAClientThatStopsReading(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		wrap func(http.ResponseWriter) http.ResponseWriter
	}{
		{"answer", func(w http.ResponseWriter) http.ResponseWriter { return w }},
		{"stream", httpserve.Stream},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			writeErr := make(chan error, 1)
			addr := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w = tc.wrap(w)
				chunk := make([]byte, 64<<10)
				for {
					if _, err := w.Write(chunk); err != nil {
						writeErr <- err
						return
					}
				}
			}), small)
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
			select {
			case err := <-writeErr:
				if !errors.Is(err, os.ErrDeadlineExceeded) {
					t.Errorf("the handler's write: %v, want the deadline's error", err)
				}
			case <-time.After(waittest.Timeout):
				// A bound on failure only: without a write deadline the
				// write never ends; with one it ends with its error.
				t.Errorf("the handler still writes to a client that reads nothing, %v after its first write", waittest.Timeout)
			}
		})
	}
}

// TestHijackedConnectionsKeepNoDeadline: a connection hijacked outlives
// every limit, also when the handler returns and another goroutine keeps
// it: whether the handler wrote the 101 through the server or on the
// hijacked connection.
func TestHijackedConnectionsKeepNoDeadline(t *testing.T) {
	t.Parallel()
	for _, viaServer := range []bool{true, false} {
		t.Run(fmt.Sprintf("101 through the server %v", viaServer), func(t *testing.T) {
			t.Parallel()
			addr := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if viaServer {
					w.Header().Set("Connection", "Upgrade")
					w.Header().Set("Upgrade", "test")
					w.WriteHeader(http.StatusSwitchingProtocols)
				}
				conn, brw, err := http.NewResponseController(w).Hijack()
				if err != nil {
					t.Errorf("hijack: %v", err)
					return
				}
				conn.SetDeadline(time.Time{})
				if !viaServer {
					io.WriteString(conn, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: test\r\n\r\n")
				}
				go func() {
					defer conn.Close()
					// The workload: the connection stays quiet past
					// every limit, which a deadline left on it would
					// cut. Nothing is waited for.
					time.Sleep((3 * small.Write).D())
					line, err := brw.ReadString('\n')
					if err == nil {
						_, err = io.WriteString(conn, "echo "+line)
					}
					if err != nil {
						t.Errorf("the hijacked connection, after %v: %v", 3*small.Write, err)
					}
				}()
			}), small)
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(30 * time.Second))
			fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: test\r\n\r\n")
			br := bufio.NewReader(conn)
			resp, err := http.ReadResponse(br, nil)
			if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
				t.Fatalf("upgrade: %v %v", resp, err)
			}
			io.WriteString(conn, "hello\n")
			if line, err := br.ReadString('\n'); err != nil || line != "echo hello\n" {
				t.Errorf("through the hijacked connection: %q %v", line, err)
			}
		})
	}
}

func TestLimitsDefaultsAndValidate(t *testing.T) {
	if diff := cmp.Diff(httpserve.DefaultLimits(), httpserve.Limits{}.WithDefaults()); diff != "" {
		t.Errorf("zero limits with defaults (-want +got):\n%s", diff)
	}
	l := httpserve.Limits{Body: config.Duration(time.Second)}.WithDefaults()
	if l.Body.D() != time.Second || l.Idle != httpserve.DefaultLimits().Idle {
		t.Errorf("a set field is kept, the others defaulted: %+v", l)
	}
	if err := httpserve.DefaultLimits().Validate(); err != nil {
		t.Errorf("defaults: %v", err)
	}
	err := httpserve.Limits{Body: -1, Idle: config.Duration(-time.Second), MaxHeaderBytes: -1}.Validate()
	for _, want := range []string{"http.body", "http.idle", "http.maxHeaderBytes"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate: %v, want it to name %s", err, want)
		}
	}
}

// Run serves until its context ends, lets a request in flight finish, and
// returns only once the server has stopped; the port is then closed.
func TestRunFinishesWhatIsInFlight(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	arrived, release := make(chan struct{}), make(chan struct{})
	hs := httpserve.New(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		<-release
		io.WriteString(w, "done")
	}), httpserve.Limits{}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- httpserve.Run(ctx, hs, ln, time.Minute) }()
	got := make(chan string, 1)
	go func() {
		resp, err := http.Get("http://" + addr + "/")
		if err != nil {
			got <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		got <- string(b)
	}()
	<-arrived
	cancel()
	select {
	case err := <-ran:
		t.Fatalf("Run returned (%v) with a request in flight", err)
	case <-time.After(50 * time.Millisecond): // not a timing assertion: Run must still be waiting
	}
	close(release)
	if b := <-got; b != "done" {
		t.Fatalf("the request in flight got %q, want done", b)
	}
	if err := <-ran; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Fatal("the port still takes connections after Run returned")
	}
}
