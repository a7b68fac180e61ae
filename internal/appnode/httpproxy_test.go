package appnode_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/cosmicac/cosmicac/internal/agent/agentapi"
	"github.com/cosmicac/cosmicac/internal/agent/shellproto"
	"github.com/cosmicac/cosmicac/internal/apiv1"
	"github.com/cosmicac/cosmicac/internal/appnode"
	"github.com/cosmicac/cosmicac/internal/appnode/appnodetest"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
)

// tcpShells connects every tcp.connect to addr (the job's server), or
// fails with err; it remembers the ports asked for.
type tcpShells struct {
	addr string
	mu   sync.Mutex
	err  error
	asks []string
}

func (f *tcpShells) setErr(err error) {
	f.mu.Lock()
	f.err = err
	f.mu.Unlock()
}

func (f *tcpShells) DialShell(context.Context, cosmic.Job, int, shellproto.OpenParams) (agentapi.Conn, shellproto.OpenReply, error) {
	return nil, shellproto.OpenReply{}, fabric.Errorf(fabric.CodeUnavailable, "no shells here")
}

func (f *tcpShells) DialTCP(ctx context.Context, j cosmic.Job, replica, port int) (agentapi.Conn, error) {
	f.mu.Lock()
	f.asks = append(f.asks, fmt.Sprintf("%s/%d:%d", j.ID, replica, port))
	err := f.err
	f.mu.Unlock()
	if err != nil {
		return nil, err
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", f.addr)
	if err != nil {
		return nil, err
	}
	return c.(*net.TCPConn), nil
}

// echoServer answers what it received as JSON; /events streams two
// server-sent events, the second once secondEvent is closed (the first
// must reach the client before it); an Upgrade: echo request is switched
// and echoes bytes.
func echoServer(t *testing.T, secondEvent <-chan struct{}) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Header.Get("Upgrade") == "echo":
			w.Header().Set("Connection", "Upgrade")
			w.Header().Set("Upgrade", "echo")
			w.WriteHeader(http.StatusSwitchingProtocols)
			c, brw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return
			}
			defer c.Close()
			io.Copy(c, brw)
		case r.URL.Path == "/setcookie":
			http.SetCookie(w, &http.Cookie{Name: apiv1.SessionCookie, Value: "cas_fixed", Path: "/"})
			http.SetCookie(w, &http.Cookie{Name: "app", Value: "1", Path: "/"})
		case r.URL.Path == "/csp":
			// A page that would leave the sandbox if it could.
			w.Header().Set("Content-Security-Policy", "sandbox allow-scripts allow-same-origin")
			w.Header().Add("Content-Security-Policy", "default-src *")
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprint(w, "<script>fetch('/api/v1/whoami')</script>")
		case r.URL.Path == "/events":
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, "data: one\n\n")
			http.NewResponseController(w).Flush()
			select {
			case <-secondEvent:
			case <-r.Context().Done():
				return
			}
			fmt.Fprint(w, "data: two\n\n")
		default:
			body, _ := io.ReadAll(r.Body)
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(map[string]any{"method": r.Method, "path": r.URL.Path, "rawPath": r.URL.EscapedPath(),
				"query": r.URL.RawQuery, "host": r.Host, "header": r.Header, "body": string(body)})
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

type echoed struct {
	Method, Path, RawPath, Query, Host, Body string
	Header                                   http.Header
}

func httpCall(t *testing.T, e *appnodetest.Env, method, path, token, body string) (answer, echoed) {
	t.Helper()
	a := call(t, e, method, path, token, body)
	var got echoed
	if a.status == http.StatusOK && method != http.MethodHead {
		a.decode(t, &got)
	}
	return a, got
}

func runningJob(t *testing.T, e *appnodetest.Env, token, spec string) cosmic.Job {
	t.Helper()
	j := create(t, e, token, spec)
	for _, st := range []cosmic.State{cosmic.StatePending, cosmic.StateRunning} {
		if err := e.Ork.SetState(j.ID, st, nil); err != nil {
			t.Fatal(err)
		}
	}
	return j
}

const httpSpec = `{"type":"gpu-container","name":"web","location":"us","image":"ubuntu:24.04","resources":{"gpu":1},"defaultHttpPort":8888}`

func TestJobHTTP(t *testing.T) {
	e := appnodetest.NewEnv(t)
	secondEvent := make(chan struct{})
	srv := echoServer(t, secondEvent)
	j := create(t, e, e.AdminToken, httpSpec)
	base := apiv1.Prefix + "/jobs/" + j.ID + "/http"

	// Not running yet: 409; running but no agents reachable: 503.
	if a := call(t, e, "GET", base+"/", e.AdminToken, ""); a.status != http.StatusConflict {
		t.Fatalf("pending job: %d %s", a.status, a.body)
	}
	for _, st := range []cosmic.State{cosmic.StatePending, cosmic.StateRunning} {
		if err := e.Ork.SetState(j.ID, st, nil); err != nil {
			t.Fatal(err)
		}
	}
	if a := call(t, e, "GET", base+"/", e.AdminToken, ""); a.status != http.StatusServiceUnavailable {
		t.Fatalf("no shells: %d %s", a.status, a.body)
	}
	sh := &tcpShells{addr: srv.Listener.Addr().String()}
	e.SetShells(sh)

	// Path (escapes kept), query and body reach the job; the token does
	// not; X-Forwarded-* do.
	a, got := httpCall(t, e, "POST", base+"/a/b%2Fc?x=1&token=y&team=nope", e.AdminToken, "payload") // ?team= is the job's
	if a.status != http.StatusOK {
		t.Fatalf("post: %d %s", a.status, a.body)
	}
	if got.Method != "POST" || got.RawPath != "/a/b%2Fc" || got.Query != "x=1&token=y&team=nope" || got.Body != "payload" {
		t.Fatalf("the job got %+v", got)
	}
	if got.Header.Get("Authorization") != "" {
		t.Fatalf("the caller's token reached the job: %q", got.Header.Get("Authorization"))
	}
	if got.Host != "localhost:8888" || got.Header.Get("X-Forwarded-Host") == "" || got.Header.Get("X-Forwarded-Proto") != "http" ||
		got.Header.Get("X-Forwarded-For") == "" || got.Header.Get(appnode.HeaderForwardedPrefix) != base {
		t.Fatalf("host %q, forwarding headers %v", got.Host, got.Header)
	}
	sh.mu.Lock()
	asks := sh.asks
	sh.mu.Unlock()
	if want := j.ID + "/0:8888"; len(asks) != 1 || asks[0] != want {
		t.Fatalf("dials %v, want [%s]", asks, want)
	}
	// The root, with and without its slash.
	if a, got := httpCall(t, e, "GET", base+"/", e.AdminToken, ""); a.status != http.StatusOK || got.Path != "/" {
		t.Fatalf("root: %d %+v", a.status, got)
	}
	if a, got := httpCall(t, e, "GET", base+"?q=1", e.AdminToken, ""); a.status != http.StatusOK || got.Path != "/" || got.Query != "q=1" {
		t.Fatalf("root without its slash: %d %+v", a.status, got)
	}
	for _, m := range []string{"GET", "HEAD", "PUT", "PATCH", "DELETE", "OPTIONS"} {
		if a, got := httpCall(t, e, m, base+"/x", e.AdminToken, ""); a.status != http.StatusOK || (m != "HEAD" && got.Method != m) {
			t.Fatalf("%s: %d %+v", m, a.status, got)
		}
	}

	// Who may: a member; a viewer only reads; another team sees nothing;
	// no token, 401 (also for a job that does not exist).
	member := e.AddUser(t, "bob", "default", cosmic.RoleMember)
	if a, _ := httpCall(t, e, "DELETE", base+"/x", member, ""); a.status != http.StatusOK {
		t.Fatalf("member: %d %s", a.status, a.body)
	}
	viewer := e.AddUser(t, "vera", "default", cosmic.RoleViewer)
	if a, _ := httpCall(t, e, "GET", base+"/x", viewer, ""); a.status != http.StatusOK {
		t.Fatalf("viewer GET: %d %s", a.status, a.body)
	}
	if a := call(t, e, "POST", base+"/x", viewer, "x"); a.status != http.StatusForbidden {
		t.Fatalf("viewer POST: %d %s", a.status, a.body)
	}
	other := e.AddUser(t, "olga", "other", cosmic.RoleMember)
	if a := call(t, e, "GET", base+"/x", other, ""); a.status != http.StatusNotFound {
		t.Fatalf("other team: %d %s", a.status, a.body)
	}
	if a := call(t, e, "GET", base+"/x", "", ""); a.status != http.StatusUnauthorized || a.header.Get("WWW-Authenticate") == "" {
		t.Fatalf("no token: %d %s", a.status, a.body)
	}
	if a := call(t, e, "GET", apiv1.Prefix+"/jobs/00000000-0000-0000-0000-000000000000/http/", "", ""); a.status != http.StatusUnauthorized {
		t.Fatalf("no token, no job: %d %s", a.status, a.body)
	}
	if a := call(t, e, "GET", apiv1.Prefix+"/jobs/00000000-0000-0000-0000-000000000000/http/", e.AdminToken, ""); a.status != http.StatusNotFound {
		t.Fatalf("no job: %d %s", a.status, a.body)
	}

	// Server-sent events arrive as they are sent.
	req, _ := http.NewRequest("GET", e.URL()+base+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+e.AdminToken)
	resp, err := e.Server.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	// The job's server holds its second event until the first is read:
	// a relay that buffered would never deliver the first.
	events := bufio.NewReader(resp.Body)
	line, err := events.ReadString('\n')
	if err != nil || line != "data: one\n" {
		t.Fatalf("first event %q (err %v): want it before the second is sent", line, err)
	}
	close(secondEvent)
	events.ReadString('\n')
	if line, _ := events.ReadString('\n'); line != "data: two\n" {
		t.Fatalf("second event %q", line)
	}
	resp.Body.Close()

	// An upgrade passes through, both ways.
	c, err := net.Dial("tcp", e.Server.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET %s/ws HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n", base, e.AdminToken)
	br := bufio.NewReader(c)
	uresp, err := http.ReadResponse(br, nil)
	if err != nil || uresp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v %v", uresp, err)
	}
	fmt.Fprint(c, "ping\n")
	if l, err := br.ReadString('\n'); err != nil || l != "ping\n" {
		t.Fatalf("echo through the upgrade: %q %v", l, err)
	}
	c.Close()

	// A viewer may not upgrade.
	vreq, _ := http.NewRequest("GET", e.URL()+base+"/ws", nil)
	vreq.Header.Set("Authorization", "Bearer "+viewer)
	vreq.Header.Set("Connection", "Upgrade")
	vreq.Header.Set("Upgrade", "echo")
	if vresp, err := e.Server.Client().Do(vreq); err != nil || vresp.StatusCode != http.StatusForbidden {
		t.Fatalf("viewer upgrade: %v %v", vresp, err)
	} else {
		vresp.Body.Close()
	}

	// Errors on the way: nothing listens on the port (the agent says so),
	// 502; the agent is unreachable, 503.
	sh.setErr(fabric.Errorf(fabric.CodeUnavailable, "connect to port 8888 in the VM: connection refused"))
	if a := call(t, e, "GET", base+"/", e.AdminToken, ""); a.status != http.StatusBadGateway {
		t.Fatalf("closed port: %d %s", a.status, a.body)
	} else {
		a.err(t)
	}
	sh.setErr(fabric.Errorf(fabric.CodeUnavailable, "the agent of job %s replica 0 has not announced itself", j.ID))
	if a := call(t, e, "GET", base+"/", e.AdminToken, ""); a.status != http.StatusServiceUnavailable {
		t.Fatalf("agent away: %d %s", a.status, a.body)
	}
	sh.setErr(nil)

	// The replica header; a job without defaultHttpPort, 409.
	req, _ = http.NewRequest("GET", e.URL()+base+"/", nil)
	req.Header.Set("Authorization", "Bearer "+e.AdminToken)
	req.Header.Set(appnode.HeaderReplica, "1")
	if resp, err := e.Server.Client().Do(req); err != nil || resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("replica 1 of 1: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	plain := runningJob(t, e, e.AdminToken, containerSpec)
	if a := call(t, e, "GET", apiv1.Prefix+"/jobs/"+plain.ID+"/http/", e.AdminToken, ""); a.status != http.StatusConflict {
		t.Fatalf("no defaultHttpPort: %d %s", a.status, a.body)
	}
}

func TestJobHTTPUnsecure(t *testing.T) {
	e := appnodetest.NewEnv(t)
	srv := echoServer(t, nil)
	e.SetShells(&tcpShells{addr: srv.Listener.Addr().String()})
	j := runningJob(t, e, e.AdminToken, strings.Replace(httpSpec, `"defaultHttpPort"`, `"unsecureHttp":true,"defaultHttpPort"`, 1))
	base := apiv1.Prefix + "/jobs/" + j.ID + "/http"
	if a, got := httpCall(t, e, "POST", base+"/open", "", "x"); a.status != http.StatusOK || got.Body != "x" {
		t.Fatalf("no token: %d %s", a.status, a.body)
	}
	// A token sent anyway (even a bad one) is not checked, and not forwarded.
	if a, got := httpCall(t, e, "GET", base+"/open", "cac_not-a-token", ""); a.status != http.StatusOK || got.Header.Get("Authorization") != "" {
		t.Fatalf("with a token: %d %s", a.status, a.body)
	}
}

// TestJobHTTPKeepsTheSessionFromTheJob: a browser's session cookie and
// CSRF token never reach the job's server (which the job's team controls),
// the job's own cookies do, and the job cannot set the platform's session
// cookie.
func TestJobHTTPKeepsTheSessionFromTheJob(t *testing.T) {
	e := appnodetest.NewEnv(t)
	srv := echoServer(t, nil)
	e.SetShells(&tcpShells{addr: srv.Listener.Addr().String()})
	j := runningJob(t, e, e.AdminToken, httpSpec)
	base := e.URL() + apiv1.Prefix + "/jobs/" + j.ID + "/http"
	req, _ := http.NewRequest("GET", base+"/", nil)
	req.Header.Set("Authorization", "Bearer "+e.AdminToken)
	req.Header.Set("Cookie", apiv1.SessionCookie+"=cas_secret; app=1")
	req.Header.Set(apiv1.HeaderCSRF, "csrf_secret")
	resp, err := e.Server.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var got echoed
	json.NewDecoder(resp.Body).Decode(&got) //nolint:errcheck // checked below
	resp.Body.Close()
	if resp.StatusCode != 200 || got.Header.Get("Cookie") != "app=1" || got.Header.Get(apiv1.HeaderCSRF) != "" {
		t.Errorf("the job got Cookie %q, CSRF %q (status %d)", got.Header.Get("Cookie"), got.Header.Get(apiv1.HeaderCSRF), resp.StatusCode)
	}
	req, _ = http.NewRequest("GET", base+"/setcookie", nil)
	req.Header.Set("Authorization", "Bearer "+e.AdminToken)
	resp, err = e.Server.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var names []string
	for _, c := range resp.Cookies() {
		names = append(names, c.Name)
	}
	if len(names) != 1 || names[0] != "app" {
		t.Errorf("the job set cookies %v, want only [app]", names)
	}
}

// TestJobHTTPPagesAreSandboxed: every answer relayed from a job carries the
// platform's sandbox policy, beside (never instead of) the job's own; so do
// the relay's own errors and a switched (upgraded) answer.
func TestJobHTTPPagesAreSandboxed(t *testing.T) {
	e := appnodetest.NewEnv(t)
	srv := echoServer(t, nil)
	sh := &tcpShells{addr: srv.Listener.Addr().String()}
	e.SetShells(sh)
	j := runningJob(t, e, e.AdminToken, httpSpec)
	base := apiv1.Prefix + "/jobs/" + j.ID + "/http"
	sandboxed := func(what string, h http.Header, others ...string) {
		t.Helper()
		got := h.Values("Content-Security-Policy")
		want := append([]string{}, others...)
		want = append(want, appnode.JobPageCSP)
		if strings.Join(got, " | ") != strings.Join(want, " | ") {
			t.Errorf("%s: Content-Security-Policy %q, want %q", what, got, want)
		}
	}
	a := call(t, e, "GET", base+"/csp", e.AdminToken, "")
	if a.status != http.StatusOK {
		t.Fatalf("csp page: %d %s", a.status, a.body)
	}
	sandboxed("a page with its own policy", a.header, "sandbox allow-scripts allow-same-origin", "default-src *")
	sandboxed("a JSON answer", call(t, e, "POST", base+"/x", e.AdminToken, "").header)
	sh.setErr(fabric.Errorf(fabric.CodeUnavailable, "connect to port 8888 in the VM: refused"))
	if a := call(t, e, "GET", base+"/", e.AdminToken, ""); a.status != http.StatusBadGateway {
		t.Fatalf("nothing listening: %d %s", a.status, a.body)
	} else {
		sandboxed("the relay's 502", a.header)
	}
	sh.setErr(nil)
	req, _ := http.NewRequest("GET", e.URL()+base+"/ws", nil)
	req.Header.Set("Authorization", "Bearer "+e.AdminToken)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "echo")
	resp, err := e.Server.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %d", resp.StatusCode)
	}
	sandboxed("a switched answer", resp.Header)
}
