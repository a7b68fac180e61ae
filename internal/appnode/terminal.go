package appnode

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/cosmicac/cosmicac/internal/agent/agentapi"
	"github.com/cosmicac/cosmicac/internal/agent/shellproto"
	"github.com/cosmicac/cosmicac/internal/apiv1"
)

// The browser's terminal (docs/shell.md, "The browser's terminal"): GET
// /api/v1/jobs/{id}/terminal is a WebSocket onto a login shell on a
// terminal, opened with Shells.DialShell as the shell route opens one, its
// shellproto frames bridged to WebSocket messages:
//
//	client -> server  binary: stdin bytes      text: {"type":"resize","cols":N,"rows":N}
//	server -> client  binary: terminal output  text, last: {"type":"exit","code":N}, then close 1000
//
// A WebSocket's GET carries no CSRF token, and a browser sends the session
// cookie with it; what keeps another page from opening one is the Origin
// check (coder/websocket's, made here first to answer a JSON error before
// the job is looked at).

// terminalWriteTimeout bounds each message to the client: one that stops
// reading is dropped.
const terminalWriteTimeout = time.Minute

func (s *Server) jobTerminal(w http.ResponseWriter, r *http.Request, c *caller) (any, error) {
	if err := sameOrigin(r); err != nil {
		return nil, err
	}
	j, replica, err := s.shellTarget(r, c)
	if err != nil {
		return nil, err
	}
	cols, err := terminalSize(r, apiv1.QueryCols, apiv1.DefaultTerminalCols)
	if err != nil {
		return nil, err
	}
	rows, err := terminalSize(r, apiv1.QueryRows, apiv1.DefaultTerminalRows)
	if err != nil {
		return nil, err
	}
	if !headerHasToken(r.Header, "Connection", "upgrade") || !headerHasToken(r.Header, "Upgrade", "websocket") {
		return nil, badRequest("the terminal is a WebSocket: send `Connection: Upgrade` and `Upgrade: websocket`")
	}
	ctx, cancel := context.WithTimeout(r.Context(), 15*time.Second)
	st, reply, err := s.shells.DialShell(ctx, j, replica, shellproto.OpenParams{
		TTY: true, Cols: cols, Rows: rows, Term: "xterm-256color", User: c.user.Name})
	cancel()
	if err != nil {
		return nil, agentError(err)
	}
	defer st.Close()
	// The default options keep coder/websocket's own Origin check.
	ws, err := websocket.Accept(w, r, nil)
	if err != nil {
		return written{}, nil // Accept answered
	}
	start := time.Now()
	s.log.Info("terminal opened", "job_id", j.ID, "replica", replica, "user", c.user.Name, "session", reply.Session)
	s.auditSession(r, c, AuditShellOpen, fmt.Sprintf("%s/%d", j.ID, replica))
	ws.SetReadLimit(apiv1.TerminalReadLimit)
	end := bridgeTerminal(r.Context(), ws, st)
	s.log.Info("terminal ended", "job_id", j.ID, "replica", replica, "user", c.user.Name, "session", reply.Session,
		"end", end, "duration_ms", time.Since(start).Milliseconds())
	return written{}, nil
}

// sameOrigin refuses a request whose Origin is not the request's own host,
// as coder/websocket's Accept does (the scheme is not compared): a
// browser's page of another origin, or a sandboxed page (Origin: null). A
// request without an Origin (not a browser's) passes.
func sameOrigin(r *http.Request) error {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return nil
	}
	if u, err := url.Parse(origin); err == nil && u.Host != "" && strings.EqualFold(u.Host, r.Host) {
		return nil
	}
	return errorf(http.StatusForbidden, apiv1.CodeForbidden, "a terminal opens only from this platform's own pages: Origin %s is not %s", clip(origin), clip(r.Host))
}

// terminalSize reads a size parameter: 1 to MaxTerminalSize, def when
// absent.
func terminalSize(r *http.Request, name string, def int) (uint16, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return uint16(def), nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > apiv1.MaxTerminalSize {
		return 0, badRequest("%s %s: want 1 to %d", name, clip(v), apiv1.MaxTerminalSize)
	}
	return uint16(n), nil
}

// clampSize bounds a resize's rows or columns.
func clampSize(n int) uint16 { return uint16(min(max(n, 1), apiv1.MaxTerminalSize)) }

// headerHasToken reports whether a comma-separated header has token,
// case-insensitively.
func headerHasToken(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// bridgeTerminal carries the session both ways until it ends: the shell's
// exit (sent to the client, then a normal close), the client going away
// (the stream to the agent closes, which hangs the session up), a bad
// message from the client, or the agent's stream ending. It returns how it
// ended, for the log.
func bridgeTerminal(ctx context.Context, ws *websocket.Conn, st agentapi.Conn) string {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	frames := shellproto.NewWriter(st)
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		clientEnd string
	)
	wg.Go(func() {
		why := readTerminal(ctx, ws, frames)
		mu.Lock()
		clientEnd = why
		mu.Unlock()
		cancel()   // writeTerminal: the end is the client's
		st.Close() // the client is gone: the agent hangs the session up
	})
	end := writeTerminal(ctx, ws, shellproto.NewReader(st))
	st.Close()
	ws.CloseNow() // the reader returns; after a close handshake, a no-op
	wg.Wait()
	if end == "" {
		mu.Lock()
		end = clientEnd
		mu.Unlock()
	}
	return end
}

// readTerminal turns the client's messages into frames to the agent until
// the connection ends or a message is bad; it returns why it stopped.
func readTerminal(ctx context.Context, ws *websocket.Conn, frames *shellproto.Writer) string {
	for {
		typ, data, err := ws.Read(ctx)
		if err != nil {
			if st := websocket.CloseStatus(err); st != -1 {
				return "client closed (" + st.String() + ")"
			}
			return "client gone: " + err.Error()
		}
		switch typ {
		case websocket.MessageBinary:
			err = frames.Data(shellproto.TypeStdin, data)
		case websocket.MessageText:
			var m apiv1.TerminalResize
			if json.Unmarshal(data, &m) != nil || m.Type != apiv1.TerminalResizeType {
				ws.Close(websocket.StatusPolicyViolation, `a text message must be {"type":"resize","cols":N,"rows":N}`)
				return "bad message from the client"
			}
			err = frames.Frame(shellproto.TypeResize, shellproto.ResizePayload(clampSize(m.Rows), clampSize(m.Cols)))
		}
		if err != nil {
			ws.Close(websocket.StatusInternalError, "the shell's stream broke off")
			return "write to the agent: " + err.Error()
		}
	}
}

// writeTerminal turns the agent's frames into messages to the client until
// the exit frame, which it sends as the last message before a normal close;
// it returns "" when the client's side ended first.
func writeTerminal(ctx context.Context, ws *websocket.Conn, frames *shellproto.Reader) string {
	send := func(typ websocket.MessageType, p []byte) error {
		wctx, cancel := context.WithTimeout(ctx, terminalWriteTimeout)
		defer cancel()
		return ws.Write(wctx, typ, p)
	}
	for {
		f, err := frames.Next()
		if err != nil {
			if ctx.Err() != nil {
				return ""
			}
			ws.Close(websocket.StatusInternalError, "the shell's stream ended without an exit")
			return "agent stream ended: " + err.Error()
		}
		switch f.Type {
		case shellproto.TypeStdout, shellproto.TypeStderr:
			if err := send(websocket.MessageBinary, f.Payload); err != nil {
				return ""
			}
		case shellproto.TypeExit:
			es := f.Exit()
			b, _ := json.Marshal(apiv1.TerminalExit{Type: apiv1.TerminalExitType, Code: es.Code, Signal: es.Signal, Error: es.Error})
			if err := send(websocket.MessageText, b); err != nil {
				return ""
			}
			ws.Close(websocket.StatusNormalClosure, "")
			return "exit " + strconv.Itoa(es.Code)
		}
	}
}
