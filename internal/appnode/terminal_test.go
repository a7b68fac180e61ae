package appnode_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/cosmicac/cosmicac/internal/agent/agentapi"
	"github.com/cosmicac/cosmicac/internal/agent/shellproto"
	"github.com/cosmicac/cosmicac/internal/apiv1"
	"github.com/cosmicac/cosmicac/internal/appnode/appnodetest"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
)

// echoShells plays a job's agent: a session echoes its stdin as output,
// answers a resize with "size ROWSxCOLS\n", and exits with N on "exit N\n".
// It keeps the parameters of each open.
type echoShells struct {
	mu    sync.Mutex
	opens []shellproto.OpenParams
}

func (f *echoShells) DialShell(_ context.Context, _ cosmic.Job, _ int, p shellproto.OpenParams) (agentapi.Conn, shellproto.OpenReply, error) {
	f.mu.Lock()
	f.opens = append(f.opens, p)
	f.mu.Unlock()
	a, b := net.Pipe()
	go func() {
		defer b.Close()
		in, out := shellproto.NewReader(b), shellproto.NewWriter(b)
		for {
			fr, err := in.Next()
			if err != nil {
				return
			}
			switch fr.Type {
			case shellproto.TypeStdin:
				var code int
				if _, err := fmt.Sscanf(string(fr.Payload), "exit %d\n", &code); err == nil {
					out.Exit(shellproto.ExitStatus{Code: code})
					return
				}
				out.Data(shellproto.TypeStdout, fr.Payload)
			case shellproto.TypeResize:
				rows, cols := fr.Resize()
				out.Data(shellproto.TypeStdout, fmt.Appendf(nil, "size %dx%d\n", rows, cols))
			}
		}
	}()
	return pipeConn{a}, shellproto.OpenReply{Session: "s1", PID: 42}, nil
}

func (f *echoShells) DialTCP(context.Context, cosmic.Job, int, int) (agentapi.Conn, error) {
	return nil, fabric.Errorf(fabric.CodeUnavailable, "no agent")
}

func (f *echoShells) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.opens)
}

func (f *echoShells) last() shellproto.OpenParams {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.opens[len(f.opens)-1]
}

// dialTerminal opens the job's terminal with the headers given (a token's
// Authorization, an Origin, a cookie); it returns the HTTP status of a
// refusal.
func dialTerminal(t *testing.T, e *appnodetest.Env, id, query string, h http.Header) (*websocket.Conn, int, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	u := "ws" + strings.TrimPrefix(e.URL(), "http") + apiv1.Prefix + "/jobs/" + id + "/terminal" + query
	c, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPHeader: h})
	if err != nil {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		return nil, status, err
	}
	t.Cleanup(func() { c.CloseNow() })
	return c, http.StatusSwitchingProtocols, nil
}

func bearer(token string) http.Header { return http.Header{"Authorization": {"Bearer " + token}} }

// readUntil reads the terminal's output until it contains want.
func readUntil(t *testing.T, c *websocket.Conn, want string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var got strings.Builder
	for !strings.Contains(got.String(), want) {
		typ, b, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("waiting for %q (got %q): %v", want, got.String(), err)
		}
		if typ != websocket.MessageBinary {
			t.Fatalf("waiting for %q: a %v message %s", want, typ, b)
		}
		got.Write(b)
	}
}

// readExit reads the exit message and the close after it.
func readExit(t *testing.T, c *websocket.Conn) apiv1.TerminalExit {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	typ, b, err := c.Read(ctx)
	var ex apiv1.TerminalExit
	if err != nil || typ != websocket.MessageText || json.Unmarshal(b, &ex) != nil || ex.Type != apiv1.TerminalExitType {
		t.Fatalf("want the exit message, got %v %s %v", typ, b, err)
	}
	if _, _, err := c.Read(ctx); websocket.CloseStatus(err) != websocket.StatusNormalClosure {
		t.Fatalf("after the exit: %v, want a normal close", err)
	}
	return ex
}

func TestTerminalRoute(t *testing.T) {
	e := appnodetest.NewEnv(t)
	j := create(t, e, e.AdminToken, containerSpec)
	if _, status, _ := dialTerminal(t, e, j.ID, "", bearer(e.AdminToken)); status != http.StatusConflict {
		t.Fatalf("pending job: %d, want 409", status)
	}
	for _, st := range []cosmic.State{cosmic.StatePending, cosmic.StateRunning} {
		if err := e.Ork.SetState(j.ID, st, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, status, _ := dialTerminal(t, e, j.ID, "", bearer(e.AdminToken)); status != http.StatusServiceUnavailable {
		t.Fatalf("no shells: %d, want 503", status)
	}
	sh := &echoShells{}
	e.SetShells(sh)

	// A session: input, a resize, the exit code; a login shell on a
	// terminal of the size asked for, opened for the caller.
	member := e.AddUser(t, "bob", "default", cosmic.RoleMember)
	c, status, err := dialTerminal(t, e, j.ID, "?cols=100&rows=30", bearer(member))
	if err != nil {
		t.Fatalf("member: %d %v", status, err)
	}
	if p := sh.last(); !p.TTY || p.Cols != 100 || p.Rows != 30 || len(p.Argv) != 0 || p.User != "bob" {
		t.Fatalf("opened with %+v", p)
	}
	ctx := context.Background()
	if err := c.Write(ctx, websocket.MessageBinary, []byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	readUntil(t, c, "hello\n")
	if err := c.Write(ctx, websocket.MessageText, []byte(`{"type":"resize","cols":132,"rows":50}`)); err != nil {
		t.Fatal(err)
	}
	readUntil(t, c, "size 50x132\n")
	if err := c.Write(ctx, websocket.MessageText, []byte(`{"type":"resize","cols":0,"rows":99999}`)); err != nil {
		t.Fatal(err)
	}
	readUntil(t, c, fmt.Sprintf("size %dx1\n", apiv1.MaxTerminalSize)) // clamped
	if err := c.Write(ctx, websocket.MessageBinary, []byte("exit 3\n")); err != nil {
		t.Fatal(err)
	}
	if ex := readExit(t, c); ex.Code != 3 {
		t.Fatalf("exit %+v, want code 3", ex)
	}

	// The default size; a bad text message closes the connection.
	c, _, err = dialTerminal(t, e, j.ID, "", bearer(member))
	if err != nil {
		t.Fatal(err)
	}
	if p := sh.last(); p.Cols != apiv1.DefaultTerminalCols || p.Rows != apiv1.DefaultTerminalRows {
		t.Fatalf("default size %dx%d", p.Cols, p.Rows)
	}
	if err := c.Write(ctx, websocket.MessageText, []byte(`{"type":"signal"}`)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Read(ctx); websocket.CloseStatus(err) != websocket.StatusPolicyViolation {
		t.Fatalf("after a bad message: %v, want 1008", err)
	}
	// A message over the limit closes it too.
	c, _, err = dialTerminal(t, e, j.ID, "", bearer(member))
	if err != nil {
		t.Fatal(err)
	}
	c.Write(ctx, websocket.MessageBinary, make([]byte, apiv1.TerminalReadLimit+1)) //nolint:errcheck // the server may close first
	if _, _, err := c.Read(ctx); websocket.CloseStatus(err) != websocket.StatusMessageTooBig {
		t.Fatalf("after a large message: %v, want 1009", err)
	}

	// A browser's session cookie, from the platform's own page (Origin is
	// the Host), needs no CSRF token.
	withPassword(t, e, "bob", "correct horse")
	rec := do(e, "POST", "/api/v1/session", `{"user":"bob","password":"correct horse"}`, nil)
	if rec.Code != http.StatusCreated {
		t.Fatalf("session: %d %s", rec.Code, rec.Body)
	}
	cookie := sessionCookie(t, rec)
	host := strings.TrimPrefix(e.URL(), "http://")
	browser := func(origin string) http.Header {
		return http.Header{"Cookie": {cookie.Name + "=" + cookie.Value}, "Origin": {origin}}
	}
	c, status, err = dialTerminal(t, e, j.ID, "", browser("http://"+host))
	if err != nil {
		t.Fatalf("the platform's page: %d %v", status, err)
	}
	c.Write(ctx, websocket.MessageBinary, []byte("exit 0\n")) //nolint:errcheck // checked by readExit
	if ex := readExit(t, c); ex.Code != 0 {
		t.Fatalf("exit %+v", ex)
	}

	// Refusals: other origins (a sandboxed page's null among them), a
	// viewer, another team, bad parameters, no upgrade.
	viewer := e.AddUser(t, "vera", "default", cosmic.RoleViewer)
	other := e.AddUser(t, "olga", "other", cosmic.RoleMember)
	opens := sh.count()
	for _, tc := range []struct {
		name, query string
		h           http.Header
		want        int
	}{
		{"Origin null, with a session", "", browser("null"), http.StatusForbidden},
		{"Origin null, with a token", "", http.Header{"Authorization": {"Bearer " + member}, "Origin": {"null"}}, http.StatusForbidden},
		{"another host's page", "", browser("http://evil.example"), http.StatusForbidden},
		{"a page on another port", "", browser("http://127.0.0.1:1"), http.StatusForbidden},
		{"viewer", "", bearer(viewer), http.StatusForbidden},
		{"another team", "", bearer(other), http.StatusNotFound},
		{"no credential", "", nil, http.StatusUnauthorized},
		{"cols out of range", "?cols=0", bearer(member), http.StatusBadRequest},
		{"rows not a number", "?rows=x", bearer(member), http.StatusBadRequest},
		{"no such replica", "?replica=1", bearer(member), http.StatusBadRequest},
		{"unknown parameter", "?colz=1", bearer(member), http.StatusBadRequest},
	} {
		if _, status, err := dialTerminal(t, e, j.ID, tc.query, tc.h); status != tc.want {
			t.Errorf("%s: %d %v, want %d", tc.name, status, err, tc.want)
		}
	}
	if a := call(t, e, "GET", apiv1.Prefix+"/jobs/"+j.ID+"/terminal", member, ""); a.status != http.StatusBadRequest {
		t.Errorf("no upgrade: %d %s", a.status, a.body)
	} else {
		a.err(t)
	}
	if a := call(t, e, "GET", apiv1.Prefix+"/jobs/"+j.ID+"/terminal", viewer, ""); a.status != http.StatusForbidden {
		t.Errorf("viewer without upgrade: %d %s", a.status, a.body)
	}
	if n := sh.count(); n != opens {
		t.Errorf("refused requests opened %d sessions", n-opens)
	}
	// The agent is not there: 503.
	e.SetShells(&fakeShells{err: fabric.Errorf(fabric.CodeUnavailable, "not announced")})
	if _, status, err := dialTerminal(t, e, j.ID, "", bearer(member)); status != http.StatusServiceUnavailable {
		t.Errorf("agent away: %d %v, want 503", status, err)
	}
}
