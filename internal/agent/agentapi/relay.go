package agentapi

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cosmicac/cosmicac/internal/agent/shellproto"
	"github.com/cosmicac/cosmicac/internal/fabric"
)

// The HTTP side of a shell: the CLI asks the app-node with
//
//	POST /api/v1/jobs/{id}/shell
//	Authorization: Bearer TOKEN
//	Connection: Upgrade
//	Upgrade: cosmicac-shell.v1
//	Content-Type: application/json
//
//	{OpenParams, without user}
//
// The app-node authenticates the token, checks that the caller may use the
// job (its team), fills OpenParams.User with the caller's name, opens the
// shell on the job's agent over the fabric (the agent dialled the app-node,
// so the stream rides that connection) and answers 101 Switching Protocols
// with the session in headers; from then on the connection carries
// shellproto frames both ways, spliced to the fabric stream. A refusal is an
// ordinary JSON error response ({"error": {"code", "message"}}).
const (
	ShellUpgrade       = "cosmicac-shell.v1"
	HeaderShellSession = "X-Cosmicac-Shell-Session"
	HeaderShellPID     = "X-Cosmicac-Shell-Pid"
)

// ShellPath is the API path of a job's shell.
func ShellPath(jobID string) string { return "/api/v1/jobs/" + jobID + "/shell" }

// HTTPShellDialer opens shells through the platform's API (ShellPath).
type HTTPShellDialer struct {
	BaseURL string // e.g. http://127.0.0.1:8080
	Token   string
	// Client sends the request (default: a client without timeout; the
	// context bounds the opening).
	Client *http.Client
}

// HTTPError is an error response of the shell endpoint.
type HTTPError struct {
	Status  int
	Code    string
	Message string
}

func (e *HTTPError) Error() string {
	if e.Code == "" {
		return fmt.Sprintf("shell: HTTP %d: %s", e.Status, e.Message)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

// DialShell implements ShellDialer.
func (d HTTPShellDialer) DialShell(ctx context.Context, jobID string, p shellproto.OpenParams) (Conn, shellproto.OpenReply, error) {
	var reply shellproto.OpenReply
	p.User = "" // the platform says who the caller is
	c, h, err := d.upgrade(ctx, ShellPath(jobID), ShellUpgrade, p)
	if err != nil {
		return nil, reply, err
	}
	reply.Session = h.Get(HeaderShellSession)
	reply.PID, _ = strconv.Atoi(h.Get(HeaderShellPID))
	return c, reply, nil
}

// SSHPath is the API path that connects to port 22 in a job's VM (the
// app-node relays it to the agent's tcp.connect).
func SSHPath(jobID string) string { return "/api/v1/jobs/" + jobID + "/ssh" }

// TCPUpgrade is the Upgrade token of SSHPath.
const TCPUpgrade = "cosmicac-tcp.v1"

// DialSSH opens a byte stream to port 22 of the job's VM through the API.
func (d HTTPShellDialer) DialSSH(ctx context.Context, jobID string) (Conn, error) {
	c, _, err := d.upgrade(ctx, SSHPath(jobID), TCPUpgrade, struct{}{})
	return c, err
}

func (d HTTPShellDialer) upgrade(ctx context.Context, path, proto string, params any) (Conn, http.Header, error) {
	body, err := json.Marshal(params)
	if err != nil {
		return nil, nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(d.BaseURL, "/")+path, bytes.NewReader(body))
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", proto)
	if d.Token != "" {
		req.Header.Set("Authorization", "Bearer "+d.Token)
	}
	c := d.Client
	if c == nil {
		c = &http.Client{}
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, nil, err
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		he := &HTTPError{Status: resp.StatusCode, Message: strings.TrimSpace(string(b))}
		var e struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		if json.Unmarshal(b, &e) == nil && e.Error.Code != "" {
			he.Code, he.Message = e.Error.Code, e.Error.Message
		}
		if resp.StatusCode == http.StatusNotFound && he.Code == "" {
			he.Message = "this CosmicAC API has no endpoint " + path
		}
		return nil, nil, he
	}
	rwc, ok := resp.Body.(io.ReadWriteCloser)
	if !ok {
		resp.Body.Close()
		return nil, nil, errors.New("the upgraded connection is not writable")
	}
	return halfCloser{rwc}, resp.Header, nil
}

// halfCloser adapts a connection without half-close: shellproto ends input
// with a StdinEOF frame, so CloseWrite has nothing to do.
type halfCloser struct{ io.ReadWriteCloser }

func (halfCloser) CloseWrite() error { return nil }

// ServeShellRelay is the app-node's side of ShellPath, after it has
// authenticated the caller and checked the job: it reads the OpenParams,
// sets User, opens the session with open (a FabricDialer to the job's
// agent), answers 101 and splices the two until both ends are done. Errors
// before the upgrade are written as JSON errors.
func ServeShellRelay(w http.ResponseWriter, r *http.Request, user string, open func(context.Context, shellproto.OpenParams) (Conn, shellproto.OpenReply, error)) {
	if !strings.EqualFold(r.Header.Get("Upgrade"), ShellUpgrade) {
		writeJSONError(w, http.StatusBadRequest, "bad_request", "a shell needs `Upgrade: "+ShellUpgrade+"`")
		return
	}
	var p shellproto.OpenParams
	if err := json.NewDecoder(io.LimitReader(r.Body, 64<<10)).Decode(&p); err != nil {
		writeJSONError(w, http.StatusBadRequest, "bad_request", "shell parameters: "+err.Error())
		return
	}
	p.User = user
	ctx, cancel := context.WithTimeout(r.Context(), 15*time.Second)
	c, reply, err := open(ctx, p)
	cancel()
	if err != nil {
		status, code := http.StatusBadGateway, fabric.ErrorCode(err)
		switch code {
		case fabric.CodeBadRequest:
			status = http.StatusBadRequest
		case fabric.CodeUnavailable, fabric.CodeRefused, fabric.CodeDeadlineExceeded:
			status = http.StatusServiceUnavailable
		}
		if code == "" {
			code = "unavailable"
		}
		writeJSONError(w, status, code, "open the shell on the job's agent: "+err.Error())
		return
	}
	defer c.Close()
	w.Header().Set("Connection", "Upgrade")
	w.Header().Set("Upgrade", ShellUpgrade)
	w.Header().Set(HeaderShellSession, reply.Session)
	w.Header().Set(HeaderShellPID, strconv.Itoa(reply.PID))
	w.WriteHeader(http.StatusSwitchingProtocols)
	// ResponseController reaches through middleware that wraps w (Unwrap).
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	conn.SetDeadline(time.Time{}) // the server's read/write timeouts must not end a shell
	Splice(conn, brw.Reader, c)
}

// Splice copies a client connection (with what its reader has buffered)
// and an agent stream both ways until the agent's side ends (the session's
// exit) or the client goes away.
func Splice(client net.Conn, buffered *bufio.Reader, agent Conn) {
	var wg sync.WaitGroup
	wg.Go(func() {
		var src io.Reader = client
		if buffered != nil {
			src = buffered
		}
		io.Copy(agent, src)
		agent.CloseWrite()
	})
	io.Copy(client, agent)
	// The agent's side has ended: the exit frame went out.
	client.Close()
	agent.Close()
	wg.Wait()
}

func writeJSONError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"code": code, "message": msg}})
}
