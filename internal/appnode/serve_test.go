package appnode_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/agent/agentapi"
	"github.com/cosmicac/cosmicac/internal/agent/shellproto"
	"github.com/cosmicac/cosmicac/internal/appnode"
	"github.com/cosmicac/cosmicac/internal/appnode/appnodetest"
	"github.com/cosmicac/cosmicac/internal/config"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/httpserve"
	"github.com/cosmicac/cosmicac/internal/httpserve/httpservetest"
)

// slowShells answers every shell with a session that prints "done" and
// exits 0 after a while.
type slowShells struct{ fakeShells }

const slowShellFor = 3 * time.Second

func (s *slowShells) DialShell(_ context.Context, _ cosmic.Job, _ int, _ shellproto.OpenParams) (agentapi.Conn, shellproto.OpenReply, error) {
	a, b := net.Pipe()
	go io.Copy(io.Discard, b) // the client's frames
	go func() {
		defer b.Close()
		// The workload: a session quiet for longer than every limit,
		// which a deadline left on the shell's connection would cut.
		// Nothing is waited for.
		time.Sleep(slowShellFor)
		w := shellproto.NewWriter(b)
		w.Data(shellproto.TypeStdout, []byte("done\n"))
		w.Exit(shellproto.ExitStatus{Code: 0})
	}()
	return pipeConn{a}, shellproto.OpenReply{Session: "s1", PID: 42}, nil
}

// TestServeLimits: the app-node's own server (Serve, as `cosmicac
// app-node` runs it) cuts a client that sends its body too slowly and
// closes an idle keep-alive connection, each within its configured limit;
// a shell that lasts longer than every limit is not cut.
func TestServeLimits(t *testing.T) {
	e := appnodetest.NewEnv(t) // its accounts and ork, served by Serve below
	lim := httpserve.Limits{Body: config.Duration(time.Second), Write: config.Duration(time.Second), Idle: config.Duration(time.Second)}
	cfg := appnode.DefaultConfig()
	cfg.DataDir, cfg.HTTP = t.TempDir(), lim
	s, err := appnode.New(cfg, appnode.Deps{Ork: e.Ork, Accounts: e.Accounts, Log: slog.New(slog.DiscardHandler), Shells: &slowShells{}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, ln) }()
	defer func() { cancel(); <-done }()
	addr := ln.Addr().String()

	auth := http.Header{"Authorization": {"Bearer " + e.AdminToken}}
	if code := httpservetest.SlowBody(t, addr, "POST", "/api/v1/jobs", auth, lim.Body.D()); code != http.StatusRequestTimeout {
		t.Errorf("a job spec sent a byte every %v: answered %d, want 408", httpservetest.ByteEvery, code)
	}
	httpservetest.SlowBody(t, addr, "POST", "/api/v1/jobs", nil, lim.Body.D()) // 401, the body unread
	httpservetest.Idle(t, addr, "/api/v1/healthz", nil, lim.Idle.D())

	j := create(t, e, e.AdminToken, containerSpec)
	for _, st := range []cosmic.State{cosmic.StatePending, cosmic.StateRunning} {
		if err := e.Ork.SetState(j.ID, st, nil); err != nil {
			t.Fatal(err)
		}
	}
	c, _, err := agentapi.HTTPShellDialer{BaseURL: "http://" + addr, Token: e.AdminToken}.DialShell(ctx, j.ID, shellproto.OpenParams{Argv: []string{"sleep", "3"}})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	st, err := agentapi.RunSession(ctx, c, agentapi.SessionIO{Stdout: &out})
	if err != nil || st.Code != 0 || out.String() != "done\n" {
		t.Errorf("a shell of %v (limits %+v): code %d, output %q, err %v; want 0, \"done\\n\"", slowShellFor, lim, st.Code, out.String(), err)
	}
}
