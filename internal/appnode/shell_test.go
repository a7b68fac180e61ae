package appnode_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/cosmicac/cosmicac/internal/agent/agentapi"
	"github.com/cosmicac/cosmicac/internal/agent/shellproto"
	"github.com/cosmicac/cosmicac/internal/apiv1"
	"github.com/cosmicac/cosmicac/internal/appnode/appnodetest"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
)

// fakeShells answers every shell with an exit code and remembers who asked.
type fakeShells struct {
	mu    sync.Mutex
	users []string
	code  int
	err   error
}

type pipeConn struct{ net.Conn }

func (pipeConn) CloseWrite() error { return nil }

func (f *fakeShells) DialShell(_ context.Context, _ cosmic.Job, _ int, p shellproto.OpenParams) (agentapi.Conn, shellproto.OpenReply, error) {
	f.mu.Lock()
	f.users = append(f.users, p.User)
	f.mu.Unlock()
	if f.err != nil {
		return nil, shellproto.OpenReply{}, f.err
	}
	a, b := net.Pipe()
	go func() {
		shellproto.NewWriter(b).Exit(shellproto.ExitStatus{Code: f.code})
		b.Close()
	}()
	return pipeConn{a}, shellproto.OpenReply{Session: "s1", PID: 42}, nil
}

func (f *fakeShells) DialTCP(context.Context, cosmic.Job, int, int) (agentapi.Conn, error) {
	return nil, fabric.Errorf(fabric.CodeUnavailable, "no agent")
}

func openShell(e *appnodetest.Env, token, id string) (int, error) {
	c, _, err := agentapi.HTTPShellDialer{BaseURL: e.URL(), Token: token}.DialShell(context.Background(), id, shellproto.OpenParams{Argv: []string{"true"}})
	if err != nil {
		return 0, err
	}
	st, err := agentapi.RunSession(context.Background(), c, agentapi.SessionIO{})
	return st.Code, err
}

func status(err error) int {
	var he *agentapi.HTTPError
	if errors.As(err, &he) {
		return he.Status
	}
	return 0
}

func TestShellRoute(t *testing.T) {
	e := appnodetest.NewEnv(t)
	j := create(t, e, e.AdminToken, containerSpec)
	// Not running yet: 409.
	if _, err := openShell(e, e.AdminToken, j.ID); status(err) != http.StatusConflict {
		t.Fatalf("pending job: %v, want 409", err)
	}
	for _, st := range []cosmic.State{cosmic.StatePending, cosmic.StateRunning} {
		if err := e.Ork.SetState(j.ID, st, nil); err != nil {
			t.Fatal(err)
		}
	}
	// Running, but this app-node reaches no agents: 503.
	if _, err := openShell(e, e.AdminToken, j.ID); status(err) != http.StatusServiceUnavailable {
		t.Fatalf("no shells: %v, want 503", err)
	}
	sh := &fakeShells{code: 7}
	e.SetShells(sh)
	if code, err := openShell(e, e.AdminToken, j.ID); err != nil || code != 7 {
		t.Fatalf("admin: code %d, err %v", code, err)
	}
	member := e.AddUser(t, "bob", "default", cosmic.RoleMember)
	if code, err := openShell(e, member, j.ID); err != nil || code != 7 {
		t.Fatalf("member: code %d, err %v", code, err)
	}
	if want := []string{"admin", "bob"}; strings.Join(sh.users, ",") != strings.Join(want, ",") {
		t.Fatalf("users vouched for: %v, want %v", sh.users, want)
	}
	viewer := e.AddUser(t, "vera", "default", cosmic.RoleViewer)
	if _, err := openShell(e, viewer, j.ID); status(err) != http.StatusForbidden {
		t.Fatalf("viewer: %v, want 403", err)
	}
	other := e.AddUser(t, "olga", "other", cosmic.RoleMember)
	if _, err := openShell(e, other, j.ID); status(err) != http.StatusNotFound {
		t.Fatalf("other team: %v, want 404", err)
	}
	// The agent is not there: 503.
	sh.err = fabric.Errorf(fabric.CodeUnavailable, "not announced")
	if _, err := openShell(e, e.AdminToken, j.ID); status(err) != http.StatusServiceUnavailable {
		t.Fatalf("agent away: %v, want 503", err)
	}
	// Without the upgrade: 400.
	if a := call(t, e, "POST", apiv1.Prefix+"/jobs/"+j.ID+"/shell", e.AdminToken, `{}`); a.status != http.StatusBadRequest {
		t.Fatalf("no upgrade: %d %s", a.status, a.body)
	}
	if a := call(t, e, "POST", apiv1.Prefix+"/jobs/"+j.ID+"/shell?replica=x", e.AdminToken, `{}`); a.status != http.StatusBadRequest {
		t.Fatalf("bad replica: %d %s", a.status, a.body)
	}
	// SSH: the agent is unreachable, 503; no upgrade, 400.
	if _, err := (agentapi.HTTPShellDialer{BaseURL: e.URL(), Token: e.AdminToken}).DialSSH(context.Background(), j.ID); status(err) != http.StatusServiceUnavailable {
		t.Fatalf("ssh: %v, want 503", err)
	}
	if a := call(t, e, "POST", apiv1.Prefix+"/jobs/"+j.ID+"/ssh", e.AdminToken, ""); a.status != http.StatusBadRequest {
		t.Fatalf("ssh without upgrade: %d %s", a.status, a.body)
	}
}
