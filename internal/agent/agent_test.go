package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/agent/agentapi"
	"github.com/cosmicac/cosmicac/internal/agent/shellproto"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/joblog"
	"github.com/cosmicac/cosmicac/internal/waittest"
)

// testRig is a platform node (the app-node's role: it relays shells) and a
// dial-only agent that connects to it.
type testRig struct {
	platform *fabric.Node
	agent    *Agent
	logs     *joblog.Ring
	dialer   agentapi.FabricDialer
	cancel   context.CancelFunc
	done     chan error
}

func mustID(t testing.TB) *fabric.Identity {
	t.Helper()
	id, err := fabric.GenerateIdentity()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func newRig(t testing.TB, mod func(*Config)) *testRig {
	t.Helper()
	agentID := mustID(t)
	pn, err := fabric.New(fabric.Config{Component: "app-node", Identity: mustID(t), Listen: "127.0.0.1:0",
		Policy: fabric.NewAllowList(agentID.PublicKey())})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pn.Close() })
	r := &testRig{platform: pn, logs: joblog.NewRing(10000), done: make(chan error, 1)}
	cfg := Config{JobID: "0b7c54a8-5f0e-4c1e-9d3a-2f6b8e1c4d70", Team: "ml", Identity: agentID,
		Peers: []Peer{{Role: agentapi.RoleAppNode, Key: pn.PublicKey(), Addrs: []string{pn.Addr()}}},
		Shell: "/bin/bash", Env: []string{"COSMICAC_TEST=1"}, WorkDir: t.TempDir(), Logs: r.logs}
	if mod != nil {
		mod(&cfg)
	}
	r.agent = New(cfg, nil)
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { r.done <- r.agent.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-r.done:
		case <-time.After(20 * time.Second):
			t.Error("agent did not stop")
		}
	})
	select {
	case <-r.agent.Ready():
	case err := <-r.done:
		t.Fatalf("agent stopped: %v", err)
	case <-time.After(15 * time.Second):
		t.Fatal("agent not ready")
	}
	r.dialer = agentapi.FabricDialer{Node: pn, Agent: agentID.PublicKey()}
	return r
}

// syncBuf is a bytes.Buffer safe for one writer and concurrent readers.
type syncBuf = waittest.Buffer

// waitFor waits until out contains want.
func waitFor(t testing.TB, out *syncBuf, want string) {
	t.Helper()
	waittest.NoError(t, func() error {
		if o := out.String(); !strings.Contains(o, want) {
			return fmt.Errorf("output so far:\n%s", o)
		}
		return nil
	}, "%q", want)
}

type tsession struct {
	in     *io.PipeWriter
	out    *syncBuf
	errb   *syncBuf
	resize chan agentapi.Size
	sig    chan string
	res    chan result
}

type result struct {
	es  shellproto.ExitStatus
	err error
}

func (r *testRig) open(t testing.TB, p shellproto.OpenParams) *tsession {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := r.dialer.DialShell(ctx, "", p)
	if err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	s := &tsession{in: pw, out: &syncBuf{}, errb: &syncBuf{}, resize: make(chan agentapi.Size, 1), sig: make(chan string, 1), res: make(chan result, 1)}
	go func() {
		es, err := agentapi.RunSession(context.Background(), c, agentapi.SessionIO{Stdin: pr, Stdout: s.out, Stderr: s.errb, Resize: s.resize, Signals: s.sig})
		s.res <- result{es, err}
	}()
	return s
}

func (s *tsession) wait(t testing.TB) shellproto.ExitStatus {
	t.Helper()
	select {
	case r := <-s.res:
		if r.err != nil {
			t.Fatalf("session: %v; output:\n%s", r.err, s.out.String())
		}
		return r.es
	case <-time.After(2 * time.Minute): // a bound on failure only: 20 shells under -race on a loaded machine are slow
		t.Fatalf("session did not end; output:\n%s", s.out.String())
	}
	return shellproto.ExitStatus{}
}

func (s *tsession) send(t testing.TB, text string) {
	t.Helper()
	if _, err := io.WriteString(s.in, text); err != nil {
		t.Fatal(err)
	}
}

func TestShellTTYInteractiveExitCode(t *testing.T) {
	r := newRig(t, nil)
	s := r.open(t, shellproto.OpenParams{TTY: true, Rows: 24, Cols: 80, Env: []string{"PS1=$ "}})
	s.send(t, "echo hi-$((40+2)) $COSMICAC_TEST\n")
	waitFor(t, s.out, "hi-42 1")
	s.send(t, "exit 3\n")
	if es := s.wait(t); es.Code != 3 {
		t.Fatalf("exit code %d, want 3", es.Code)
	}
	// The session is in the job's system log: who, when, how long.
	var opened, closed bool
	for _, rec := range r.logs.Job(r.agent.cfg.JobID) {
		if rec.Source != joblog.SourceSystem || rec.Step != "shell" {
			continue
		}
		opened = opened || strings.Contains(rec.Line, "opened by key "+r.platform.PublicKey().Short())
		closed = closed || strings.Contains(rec.Line, "closed after") && strings.Contains(rec.Line, "exit code 3")
	}
	if !opened || !closed {
		t.Fatalf("session records missing (opened %v, closed %v): %+v", opened, closed, r.logs.Job(r.agent.cfg.JobID))
	}
}

func TestShellResize(t *testing.T) {
	r := newRig(t, nil)
	s := r.open(t, shellproto.OpenParams{TTY: true, Rows: 24, Cols: 80})
	s.send(t, "stty size\n")
	waitFor(t, s.out, "24 80")
	// The resize frame and the next input go by different goroutines: the
	// shell waits for the new size (the echo of this line does not match).
	s.resize <- agentapi.Size{Rows: 50, Cols: 132}
	s.send(t, "until [ \"$(stty size)\" = '50 132' ]; do sleep 0.01; done; echo resized-$((50+132)); exit\n")
	waitFor(t, s.out, "resized-182")
	if es := s.wait(t); es.Code != 0 {
		t.Fatalf("exit %d", es.Code)
	}
}

func TestShellCtrlCTTY(t *testing.T) {
	r := newRig(t, nil)
	// The command says when it runs on the terminal (sh is in the
	// foreground process group by then): a ^C before or after the exec
	// kills it by INT.
	s := r.open(t, shellproto.OpenParams{TTY: true, Argv: []string{"sh", "-c", "echo started-$((6*7)); exec sleep 100"}})
	waitFor(t, s.out, "started-42")
	s.send(t, "\x03") // ^C typed: the remote line discipline sends SIGINT
	es := s.wait(t)
	if es.Code != 130 || es.Signal != "INT" {
		t.Fatalf("exit %+v, want 130 by INT", es)
	}
}

func TestShellCtrlCShellContinues(t *testing.T) {
	r := newRig(t, nil)
	s := r.open(t, shellproto.OpenParams{TTY: true})
	s.send(t, "sh -c 'echo sleeping-$((2*3)); exec sleep 100'\n")
	waitFor(t, s.out, "sleeping-6") // the foreground process: the ^C is its
	s.send(t, "\x03")
	s.send(t, "echo after-$((6*7))\n")
	waitFor(t, s.out, "after-42")
	s.send(t, "exit 0\n")
	if es := s.wait(t); es.Code != 0 {
		t.Fatalf("exit %+v", es)
	}
}

func TestShellSignalPipeMode(t *testing.T) {
	r := newRig(t, nil)
	// Not "echo started; sleep 100": a SIGINT that reaches sh after the
	// echo but before it forks sleep is held by sh until sleep ends (13% of
	// tries when sent at once, measured with dash), so the session would
	// last 100 s. The trap ends the shell however the signal lands.
	s := r.open(t, shellproto.OpenParams{Argv: []string{"sh", "-c", "trap 'exit 130' INT; echo started; while :; do sleep 0.05; done"}})
	waitFor(t, s.out, "started")
	s.sig <- "INT"
	if es := s.wait(t); es.Code != 130 {
		t.Fatalf("exit %+v, want 130", es)
	}
}

func TestShellStdinPipe(t *testing.T) {
	r := newRig(t, nil)
	c, _, err := r.dialer.DialShell(context.Background(), "", shellproto.OpenParams{Argv: []string{"wc", "-l"}})
	if err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	es, err := agentapi.RunSession(context.Background(), c, agentapi.SessionIO{Stdin: strings.NewReader("a\nb\n"), Stdout: &out, Stderr: &errb})
	if err != nil {
		t.Fatal(err)
	}
	if es.Code != 0 || strings.TrimSpace(out.String()) != "2" {
		t.Fatalf("exit %d, stdout %q, stderr %q", es.Code, out.String(), errb.String())
	}
	// stderr stays apart in pipe mode, and exit codes come back.
	c, _, err = r.dialer.DialShell(context.Background(), "", shellproto.OpenParams{Argv: []string{"sh", "-c", "echo out; echo err >&2; exit 7"}})
	if err != nil {
		t.Fatal(err)
	}
	out.Reset()
	errb.Reset()
	es, err = agentapi.RunSession(context.Background(), c, agentapi.SessionIO{Stdout: &out, Stderr: &errb})
	if err != nil || es.Code != 7 || out.String() != "out\n" || errb.String() != "err\n" {
		t.Fatalf("exit %+v %v, stdout %q, stderr %q", es, err, out.String(), errb.String())
	}
	// A command that does not exist: 127, like a shell.
	c, _, err = r.dialer.DialShell(context.Background(), "", shellproto.OpenParams{Argv: []string{"no-such-command-here"}})
	if err != nil {
		t.Fatal(err)
	}
	es, err = agentapi.RunSession(context.Background(), c, agentapi.SessionIO{Stdout: &out, Stderr: &errb})
	if err != nil || es.Code != 127 {
		t.Fatalf("exit %+v %v", es, err)
	}
}

func TestShellConcurrent(t *testing.T) {
	r := newRig(t, nil)
	const n = 20
	sessions := make([]*tsession, n)
	for i := range sessions {
		sessions[i] = r.open(t, shellproto.OpenParams{TTY: i%2 == 0, Argv: []string{"bash"}})
	}
	// All 20 are open at once.
	waitStatus(t, r.agent, func(s agentapi.Status) bool { return len(s.Sessions) == n })
	for i, s := range sessions {
		s.send(t, fmt.Sprintf("echo session-$((%d*1000)); exit %d\n", i, i))
	}
	for i, s := range sessions {
		es := s.wait(t)
		if es.Code != i {
			t.Errorf("session %d: exit %d", i, es.Code)
		}
		if want := fmt.Sprintf("session-%d", i*1000); !strings.Contains(s.out.String(), want) {
			t.Errorf("session %d: output %q lacks %q", i, s.out.String(), want)
		}
	}
	if st := r.agent.Status(); len(st.Sessions) != 0 || st.SessionsTotal != n {
		t.Fatalf("after: %d open, %d total", len(st.Sessions), st.SessionsTotal)
	}
}

// A closed (not exited) session ends its processes, but never the job's
// command, and the agent keeps serving.
func TestClosedShellLeavesAgentAndJob(t *testing.T) {
	r := newRig(t, func(c *Config) { c.Command = []string{"sh", "-c", "echo job-up; sleep 100"} })
	waitStatus(t, r.agent, func(s agentapi.Status) bool { return s.Command != nil && len(s.Command.Tail) > 0 })

	c, reply, err := r.dialer.DialShell(context.Background(), "", shellproto.OpenParams{TTY: true, Argv: []string{"sleep", "100"}})
	if err != nil {
		t.Fatal(err)
	}
	if reply.PID == 0 || reply.Session == "" {
		t.Fatalf("reply %+v", reply)
	}
	waitStatus(t, r.agent, func(s agentapi.Status) bool { return len(s.Sessions) == 1 })
	c.Close() // the user's terminal goes away
	waitStatus(t, r.agent, func(s agentapi.Status) bool { return len(s.Sessions) == 0 })

	st := r.agent.Status()
	if st.Command.State != agentapi.CommandRunning {
		t.Fatalf("the job's command stopped with the session: %+v", st.Command)
	}
	s := r.open(t, shellproto.OpenParams{Argv: []string{"echo", "still-here"}})
	if es := s.wait(t); es.Code != 0 || !strings.Contains(s.out.String(), "still-here") {
		t.Fatalf("second session: %+v %q", es, s.out.String())
	}
}

func waitStatus(t testing.TB, a *Agent, ok func(agentapi.Status) bool) agentapi.Status {
	t.Helper()
	var st agentapi.Status
	waittest.NoError(t, func() error {
		if st = a.Status(); !ok(st) {
			return fmt.Errorf("status %+v", st)
		}
		return nil
	}, "the agent's status to match")
	return st
}

func TestUnlistedPeerRefused(t *testing.T) {
	r := newRig(t, func(c *Config) { c.Listen = "127.0.0.1:0" })
	stranger, err := fabric.New(fabric.Config{Component: "cli", Identity: mustID(t), Policy: fabric.NewAllowList()})
	if err != nil {
		t.Fatal(err)
	}
	defer stranger.Close()
	stranger.AddAddrs(r.dialer.Agent, r.agent.Node().Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, _, err = agentapi.FabricDialer{Node: stranger, Agent: r.dialer.Agent}.DialShell(ctx, "", shellproto.OpenParams{Argv: []string{"id"}})
	if fabric.ErrorCode(err) != fabric.CodeRefused {
		t.Fatalf("stranger's shell: %v (code %q), want refused", err, fabric.ErrorCode(err))
	}
	if _, err := agentapi.GetStatus(ctx, stranger, r.dialer.Agent); fabric.ErrorCode(err) != fabric.CodeRefused {
		t.Fatalf("stranger's status: %v, want refused", err)
	}
	// The listed platform peer still gets in.
	st, err := agentapi.GetStatus(ctx, r.platform, r.dialer.Agent)
	if err != nil || !st.Ready || st.JobID != r.agent.cfg.JobID {
		t.Fatalf("status %+v %v", st, err)
	}
}

func TestCommandExitAndReports(t *testing.T) {
	reports := make(chan agentapi.Status, 100)
	var worker *fabric.Node
	r := newRig(t, func(c *Config) {
		var err error
		worker, err = fabric.New(fabric.Config{Component: "worker", Identity: mustID(t), Listen: "127.0.0.1:0",
			Policy: fabric.NewAllowList(c.Identity.PublicKey())})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { worker.Close() })
		HandleReports(worker, func(peer fabric.PublicKey, st agentapi.Status) {
			if peer == c.Identity.PublicKey() {
				reports <- st
			}
		})
		c.Peers = append(c.Peers, Peer{Role: agentapi.RoleWorker, Key: worker.PublicKey(), Addrs: []string{worker.Addr()}})
		c.Command = []string{"sh", "-c", "echo hello $COSMICAC_TEST; echo oops >&2; exit 4"}
	})
	select {
	case <-r.agent.CommandDone():
	case <-time.After(15 * time.Second):
		t.Fatal("command did not finish")
	}
	st := r.agent.Status()
	state, reason, done := st.Command.Outcome()
	if !done || state != "failed" || reason == nil || reason.Code != "command_failed" ||
		!strings.Contains(reason.Message, "exit code 4") || !strings.Contains(reason.Message, "oops") {
		t.Fatalf("outcome %v %+v %v; command %+v", state, reason, done, st.Command)
	}
	var app []string
	for _, rec := range r.logs.Job(r.agent.cfg.JobID) {
		if rec.Source == joblog.SourceApplication {
			app = append(app, rec.Stream+":"+rec.Line)
		}
	}
	if strings.Join(app, ",") != "stdout:hello 1,stderr:oops" && strings.Join(app, ",") != "stderr:oops,stdout:hello 1" {
		t.Fatalf("application records %q", app)
	}
	// The worker hears of the exit.
	deadline := time.After(15 * time.Second)
	for {
		select {
		case rep := <-reports:
			if rep.Command != nil && rep.Command.State == agentapi.CommandExited && *rep.Command.ExitCode == 4 && rep.Ready {
				return
			}
		case <-deadline:
			t.Fatal("no report of the command's exit reached the worker")
		}
	}
}

func TestCommandSuccessOutcome(t *testing.T) {
	code := 0
	c := agentapi.CommandStatus{State: agentapi.CommandExited, ExitCode: &code}
	if s, r, done := c.Outcome(); s != "stopped" || r != nil || !done {
		t.Fatalf("%v %v %v", s, r, done)
	}
	if _, _, done := (agentapi.CommandStatus{State: agentapi.CommandRunning}).Outcome(); done {
		t.Fatal("running command is done")
	}
}

// The app-node's relay (agentapi.ServeShellRelay) and the CLI's HTTP dialer.
func TestHTTPRelay(t *testing.T) {
	r := newRig(t, nil)
	var gotUser string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Header.Get("Authorization") != "Bearer good" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusForbidden)
			io.WriteString(w, `{"error":{"code":"forbidden","message":"not on the job's team"}}`)
			return
		}
		agentapi.ServeShellRelay(w, req, "alice", func(ctx context.Context, p shellproto.OpenParams) (agentapi.Conn, shellproto.OpenReply, error) {
			gotUser = p.User
			return r.dialer.DialShell(ctx, "", p)
		})
	}))
	defer srv.Close()
	ctx := context.Background()
	_, _, err := agentapi.HTTPShellDialer{BaseURL: srv.URL, Token: "bad"}.DialShell(ctx, "job", shellproto.OpenParams{})
	var he *agentapi.HTTPError
	if !errors.As(err, &he) || he.Status != http.StatusForbidden || he.Code != "forbidden" {
		t.Fatalf("bad token: %v", err)
	}
	c, reply, err := agentapi.HTTPShellDialer{BaseURL: srv.URL, Token: "good"}.DialShell(ctx, "job", shellproto.OpenParams{Argv: []string{"wc", "-l"}, User: "mallory"})
	if err != nil {
		t.Fatal(err)
	}
	if reply.Session == "" || reply.PID == 0 {
		t.Fatalf("reply %+v", reply)
	}
	var out bytes.Buffer
	es, err := agentapi.RunSession(ctx, c, agentapi.SessionIO{Stdin: strings.NewReader("a\nb\n"), Stdout: &out})
	if err != nil || es.Code != 0 || strings.TrimSpace(out.String()) != "2" {
		t.Fatalf("exit %+v %v, out %q", es, err, out.String())
	}
	if gotUser != "alice" {
		t.Fatalf("user %q reached the agent, want the platform's alice", gotUser)
	}
	found := false
	for _, rec := range r.logs.Job(r.agent.cfg.JobID) {
		found = found || strings.Contains(rec.Line, "opened by alice (via key")
	}
	if !found {
		t.Fatal("the session record does not name alice")
	}
}

// Config.Notice is told on stderr at the start of every session, before
// its output, and never on a command's stdout; Config.RefuseShells starts
// none and says why (the simulated rack's host shells, issue 32).
func TestShellNoticeAndRefusal(t *testing.T) {
	const notice = "CosmicAC: this shell runs on the platform's host"
	r := newRig(t, func(c *Config) { c.Notice = notice })
	c, _, err := r.dialer.DialShell(context.Background(), "", shellproto.OpenParams{Argv: []string{"echo", "out"}})
	if err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if es, err := agentapi.RunSession(context.Background(), c, agentapi.SessionIO{Stdout: &out, Stderr: &errb}); err != nil || es.Code != 0 ||
		out.String() != "out\n" || errb.String() != notice+"\n" {
		t.Fatalf("pipes: exit %+v %v, stdout %q, stderr %q", es, err, out.String(), errb.String())
	}
	s := r.open(t, shellproto.OpenParams{TTY: true, Rows: 24, Cols: 80, Env: []string{"PS1=$ "}})
	waitFor(t, s.errb, notice+"\r\n")
	s.send(t, "exit 4\n")
	if es := s.wait(t); es.Code != 4 {
		t.Fatalf("tty: exit %d, want 4", es.Code)
	}

	const off = "CosmicAC: shells are turned off here"
	r = newRig(t, func(c *Config) { c.RefuseShells = off })
	c, _, err = r.dialer.DialShell(context.Background(), "", shellproto.OpenParams{Argv: []string{"sh", "-c", "echo ran"}})
	if err != nil {
		t.Fatal(err)
	}
	out.Reset()
	errb.Reset()
	if es, err := agentapi.RunSession(context.Background(), c, agentapi.SessionIO{Stdout: &out, Stderr: &errb}); err != nil || es.Code != 126 ||
		out.String() != "" || errb.String() != off+"\n" {
		t.Fatalf("refused: exit %+v %v, stdout %q, stderr %q", es, err, out.String(), errb.String())
	}
	refused := false
	for _, rec := range r.logs.Job(r.agent.cfg.JobID) {
		refused = refused || strings.Contains(rec.Line, "refused: shells are turned off")
	}
	if !refused {
		t.Errorf("no record of the refused session: %+v", r.logs.Job(r.agent.cfg.JobID))
	}
}

// TestRecordsGoToTheMonitorTheBootstrapNames: an agent given no sink
// forwards its records (here its command's output) to the monitor its
// peers name, from its own node (joblog.Append), as in a VM; given a
// sink, it forwards nothing.
func TestRecordsGoToTheMonitorTheBootstrapNames(t *testing.T) {
	agentID := mustID(t)
	mon, err := fabric.New(fabric.Config{Component: "wrk-monitor", Identity: mustID(t), Listen: "127.0.0.1:0",
		Policy: fabric.NewAllowList(agentID.PublicKey())})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mon.Close() })
	var mu sync.Mutex
	var got []joblog.Record
	joblog.Append.Handle(mon, func(_ context.Context, _ fabric.PublicKey, p joblog.AppendParams) (joblog.AppendReply, error) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, p.Records...)
		return joblog.AppendReply{}, nil
	})
	r := newRig(t, func(c *Config) {
		c.Identity, c.Logs = agentID, nil
		c.Peers = append(c.Peers, Peer{Role: agentapi.RoleMonitor, Key: mon.PublicKey(), Addrs: []string{mon.Addr()}})
		c.Command = []string{"sh", "-c", "echo to-the-monitor; sleep 100"}
	})
	if r.agent.Forwarder() == nil {
		t.Fatal("an agent whose bootstrap names a monitor has no forwarder")
	}
	waittest.Until(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.ContainsFunc(got, func(rec joblog.Record) bool { return strings.Contains(rec.Line, "to-the-monitor") })
	}, "the command's output at the monitor")
	if New(Config{Identity: agentID, Logs: joblog.Discard, Peers: []Peer{{Role: agentapi.RoleMonitor, Key: mon.PublicKey()}}}, nil).Forwarder() != nil {
		t.Error("an agent given a sink forwards too")
	}
}
