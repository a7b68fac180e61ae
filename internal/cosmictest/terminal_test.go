package cosmictest

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/cosmicac/cosmicac/internal/apiv1"
	"github.com/cosmicac/cosmicac/internal/client"
	"github.com/cosmicac/cosmicac/internal/cosmic"
)

// TestTerminalThroughThePlatform: the browser's terminal (a WebSocket on
// GET /api/v1/jobs/{id}/terminal) reaches a login shell on a terminal in
// the job's VM through the app-node and the job's instance agent: typed
// input, the size at the open and after a resize, the exit code in the
// last message, and the session in the job's system log.
func TestTerminalThroughThePlatform(t *testing.T) {
	e := NewEnv(t)
	j := e.Create(Container("workstation", 1))
	e.WaitState(j.ID, cosmic.StateRunning)
	t.Setenv("HOME", t.TempDir()) // no login config of the user's
	member := e.AddUser("mia", "default", cosmic.RoleMember)
	ctx, cancel := context.WithTimeout(e.Ctx, 30*time.Second)
	defer cancel()
	u := "ws" + strings.TrimPrefix(e.P.URL, "http") + apiv1.Prefix + "/jobs/" + j.ID + "/terminal?cols=100&rows=30"
	c, _, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + member}}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	type message struct {
		typ websocket.MessageType
		b   []byte
		err error
	}
	msgs := make(chan message, 64)
	go func() { // one reader: a Read's timeout would close the connection
		for {
			typ, b, err := c.Read(ctx)
			msgs <- message{typ, b, err}
			if err != nil {
				return
			}
		}
	}()
	var out strings.Builder
	typeIn := func(s string) {
		t.Helper()
		if err := c.Write(ctx, websocket.MessageBinary, []byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	// next is the next message, or false after d.
	next := func(d time.Duration) (message, bool) {
		select {
		case m := <-msgs:
			return m, true
		case <-time.After(d):
			return message{}, false
		}
	}
	waitFor := func(s string) {
		t.Helper()
		for !strings.Contains(out.String(), s) {
			m, ok := next(10 * time.Second)
			if !ok || m.err != nil || m.typ != websocket.MessageBinary {
				t.Fatalf("waiting for %q: %v %v %q; the terminal:\n%s", s, m.typ, m.err, m.b, out.String())
			}
			out.Write(m.b)
		}
	}
	typeIn("echo hi-$((6*7))\n")
	waitFor("hi-42")
	typeIn("stty size; echo term=$TERM\n")
	waitFor("30 100")
	waitFor("term=xterm")
	if err := c.Write(ctx, websocket.MessageText, []byte(`{"type":"resize","cols":132,"rows":50}`)); err != nil {
		t.Fatal(err)
	}
	// The resize frame may overtake the typed line or follow it: ask until
	// the shell has the new size.
	for i := 0; !strings.Contains(out.String(), "50 132"); i++ {
		if i == 50 {
			t.Fatalf("the resize never arrived; the terminal:\n%s", out.String())
		}
		typeIn("stty size\n")
		for {
			m, ok := next(200 * time.Millisecond)
			if !ok {
				break
			}
			if m.err != nil {
				t.Fatalf("%v; the terminal:\n%s", m.err, out.String())
			}
			out.Write(m.b)
		}
	}
	typeIn("exit 3\n")
	var ex apiv1.TerminalExit
	for {
		m, ok := next(10 * time.Second)
		if !ok || m.err != nil {
			t.Fatalf("waiting for the exit: %v; the terminal:\n%s", m.err, out.String())
		}
		if m.typ == websocket.MessageText {
			if json.Unmarshal(m.b, &ex) != nil || ex.Type != apiv1.TerminalExitType {
				t.Fatalf("last message %s", m.b)
			}
			break
		}
		out.Write(m.b)
	}
	if ex.Code != 3 {
		t.Fatalf("exit %+v, want code 3", ex)
	}
	if m, _ := next(10 * time.Second); websocket.CloseStatus(m.err) != websocket.StatusNormalClosure {
		t.Fatalf("after the exit: %v, want a normal close", m.err)
	}
	e.records(j.ID, func(r []client.LogRecord) bool {
		sys := strings.Join(lines(r, "system"), "\n")
		return strings.Contains(sys, "opened by mia") && strings.Contains(sys, "exit code 3")
	})
	if got, err := e.Client.GetJob(e.Ctx, j.ID); err != nil || got.Status.State != cosmic.StateRunning {
		t.Fatalf("after the terminal: %v %v", got.Status.State, err)
	}
}
