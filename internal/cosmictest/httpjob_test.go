package cosmictest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/cosmicac/cosmicac/internal/appnode"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/waittest"
)

// The job's HTTP server is this test binary, run again as the job's
// command with -test.run selecting TestHelperJobHTTPServer: a Go server
// that answers what it received (method, path, query, headers, body) as
// JSON, with nothing to install (no python3, no busybox httpd) and the
// same on every machine that can run the tests.
const helperPortEnv = "COSMICTEST_JOB_HTTP_PORT"

// TestHelperJobHTTPServer is the job's HTTP server, not a test: without
// its environment variable it skips.
func TestHelperJobHTTPServer(t *testing.T) {
	port := os.Getenv(helperPortEnv)
	if port == "" {
		t.Skip("the job's HTTP server of TestJobHTTPThroughThePlatform")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:"+port)
	if err != nil {
		t.Fatal(err)
	}
	err = http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(jobEcho{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Host: r.Host, Header: r.Header, Body: string(body)})
	}))
	t.Fatal(err) // the agent ends the job's command with SIGTERM
}

type jobEcho struct {
	Method, Path, Query, Host, Body string
	Header                          http.Header
}

// freePort is a port nothing listens on now.
func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// serverJob is a running gpu-container job whose command serves HTTP on
// its defaultHttpPort (or, with serve false, a job where nothing listens).
func (e *Env) serverJob(name string, serve, unsecure bool) cosmic.Job {
	e.T.Helper()
	port := freePort(e.T)
	spec := Container(name, 1)
	spec.DefaultHTTPPort, spec.UnsecureHTTP = port, unsecure
	if serve {
		exe, err := os.Executable()
		if err != nil {
			e.T.Fatal(err)
		}
		spec.Command = []string{exe, "-test.run=^TestHelperJobHTTPServer$", "-test.count=1"}
		spec.EnvVars = []cosmic.EnvVar{{Name: helperPortEnv, Value: strconv.Itoa(port)}}
	}
	j := e.Create(spec)
	return e.WaitState(j.ID, cosmic.StateRunning)
}

// jobHTTP sends a request to the job's HTTP port through the platform.
func (e *Env) jobHTTP(method, jobID, path, token, body string) (int, []byte) {
	e.T.Helper()
	req, err := http.NewRequestWithContext(e.Ctx, method, e.P.URL+"/api/v1/jobs/"+jobID+"/http"+path, strings.NewReader(body))
	if err != nil {
		e.T.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.T.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// waitServing polls until the job's server answers (the job runs once its
// agent is ready; its command's server listens a moment later: 502 until
// then).
func (e *Env) waitServing(jobID, token string) jobEcho {
	e.T.Helper()
	var got jobEcho
	waittest.NoError(e.T, func() error {
		status, b := e.jobHTTP("GET", jobID, "/ready", token, "")
		switch status {
		case http.StatusOK:
			if err := json.Unmarshal(b, &got); err != nil {
				e.T.Fatalf("the job's answer %q: %v", b, err)
			}
			return nil
		case http.StatusBadGateway:
			return fmt.Errorf("%d %s", status, b)
		}
		e.T.Fatalf("the job's server: %d %s", status, b)
		return nil
	}, "the job's server")
	return got
}

// TestJobHTTPThroughThePlatform: a job's defaultHttpPort is reachable at
// /api/v1/jobs/{id}/http/… through the app-node and the job's agent: with
// a token of the job's team, never forwarding that token; without one
// when the spec sets unsecureHttp; 502 when nothing listens in the VM; 409
// once the job stopped.
func TestJobHTTPThroughThePlatform(t *testing.T) {
	e := NewEnv(t)
	admin, err := e.P.AdminToken()
	if err != nil {
		t.Fatal(err)
	}
	j := e.serverJob("web", true, false)
	e.waitServing(j.ID, admin)

	status, b := e.jobHTTP("POST", j.ID, "/a/b?x=1&y=2", admin, "hello")
	var got jobEcho
	if status != http.StatusOK || json.Unmarshal(b, &got) != nil {
		t.Fatalf("POST: %d %s", status, b)
	}
	if got.Method != "POST" || got.Path != "/a/b" || got.Query != "x=1&y=2" || got.Body != "hello" {
		t.Fatalf("the job got %+v", got)
	}
	if a := got.Header.Get("Authorization"); a != "" || bytes.Contains(b, []byte(admin)) {
		t.Fatalf("the caller's token reached the job: %q", a)
	}
	if got.Header.Get("X-Forwarded-For") == "" || got.Header.Get("X-Forwarded-Host") == "" ||
		got.Header.Get(appnode.HeaderForwardedPrefix) != "/api/v1/jobs/"+j.ID+"/http" {
		t.Fatalf("forwarding headers: %v", got.Header)
	}

	// Who may: the team (a viewer reads only); no token, 401; another
	// team, 404.
	member := e.AddUser("bob", appnode.BootstrapTeam, cosmic.RoleMember)
	if status, b := e.jobHTTP("PUT", j.ID, "/x", member, "m"); status != http.StatusOK {
		t.Fatalf("member: %d %s", status, b)
	}
	viewer := e.AddUser("vera", appnode.BootstrapTeam, cosmic.RoleViewer)
	if status, b := e.jobHTTP("GET", j.ID, "/x", viewer, ""); status != http.StatusOK {
		t.Fatalf("viewer GET: %d %s", status, b)
	}
	if status, b := e.jobHTTP("POST", j.ID, "/x", viewer, ""); status != http.StatusForbidden {
		t.Fatalf("viewer POST: %d %s", status, b)
	}
	if status, b := e.jobHTTP("GET", j.ID, "/", "", ""); status != http.StatusUnauthorized {
		t.Fatalf("no token: %d %s", status, b)
	}
	other := e.AddUser("olga", "other-team", cosmic.RoleMember)
	if status, b := e.jobHTTP("GET", j.ID, "/", other, ""); status != http.StatusNotFound {
		t.Fatalf("another team: %d %s", status, b)
	}

	// unsecureHttp: no token needed.
	open := e.serverJob("open", true, true)
	if got := e.waitServing(open.ID, ""); got.Path != "/ready" || got.Header.Get("Authorization") != "" {
		t.Fatalf("unsecure job got %+v", got)
	}

	// Nothing listens on the port in the VM: 502.
	idle := e.serverJob("idle", false, true)
	if status, b := e.jobHTTP("GET", idle.ID, "/", "", ""); status != http.StatusBadGateway {
		t.Fatalf("nothing listening: %d %s", status, b)
	}

	// A stopped job: 409.
	if _, err := e.Client.KillJob(e.Ctx, j.ID); err != nil {
		t.Fatal(err)
	}
	e.WaitState(j.ID, cosmic.StateStopped)
	if status, b := e.jobHTTP("GET", j.ID, "/", admin, ""); status != http.StatusConflict {
		t.Fatalf("stopped job: %d %s", status, b)
	}

	// The routes are in the OpenAPI document.
	doc, err := e.Client.OpenAPI(e.Ctx)
	if err != nil || !bytes.Contains(doc, []byte(`"/api/v1/jobs/{id}/http/{path}"`)) || !bytes.Contains(doc, []byte(`"jobHTTPPost"`)) {
		t.Fatalf("OpenAPI document lacks the job's HTTP routes (err %v)", err)
	}
}
