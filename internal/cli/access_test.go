package cli

import (
	"net/http"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/cosmicac/cosmicac/internal/appnode/appnodetest"
	"github.com/cosmicac/cosmicac/internal/authz/authztest"
)

// cliRoute is how a CLI command reaches the API: its arguments in the
// access tests' world, the route whose permission decides, and stdin.
type cliRoute struct {
	args   func(e *appnodetest.AccessEnv, caller string) []string
	route  string // "METHOD /api/v1/pattern", as in docs/permissions.md
	stdin  string
	change bool // it changes something: a fresh world for each caller
}

func fixed(args ...string) func(*appnodetest.AccessEnv, string) []string {
	return func(*appnodetest.AccessEnv, string) []string { return args }
}

func onJob(args ...string) func(*appnodetest.AccessEnv, string) []string {
	return func(e *appnodetest.AccessEnv, _ string) []string {
		return append(append([]string{}, args[:2]...), append([]string{e.Job.ID}, args[2:]...)...)
	}
}

// cliRoutes lists every CLI command that reaches /api/v1. Commands that
// reach no API, or only /inference/v1 and /monitor/v1 (whose matrices are
// TestInferenceAccessMatrix and TestMonitorAccessMatrix), are in
// cliElsewhere.
var cliRoutes = map[string]cliRoute{
	"jobs create":  {args: fixed("jobs", "create", "--name", "b", "--location", "us", "--gpus", "1", "--image", "ubuntu:24.04"), route: "POST /api/v1/jobs", change: true},
	"jobs list":    {args: fixed("jobs", "list"), route: "GET /api/v1/jobs"},
	"jobs get":     {args: onJob("jobs", "get"), route: "GET /api/v1/jobs/{id}"},
	"jobs delete":  {args: onJob("jobs", "delete", "--force"), route: "DELETE /api/v1/jobs/{id}", change: true},
	"jobs kill":    {args: onJob("jobs", "kill"), route: "POST /api/v1/jobs/{id}/kill", change: true},
	"jobs restart": {args: onJob("jobs", "restart"), route: "POST /api/v1/jobs/{id}/restart", change: true},
	"jobs label":   {args: onJob("jobs", "label", "b=c"), route: "PUT /api/v1/jobs/{id}/label", change: true},
	"jobs require-auth": {args: func(e *appnodetest.AccessEnv, _ string) []string {
		return []string{"jobs", "require-auth", e.Job.ID, "off"}
	}, route: "PUT /api/v1/jobs/{id}/inference/auth", change: true},
	"jobs shell":    {args: onJob("jobs", "shell", "-T", "--", "true"), route: "POST /api/v1/jobs/{id}/shell"},
	"jobs datasync": {args: onJob("jobs", "datasync", "pull"), route: "POST /api/v1/jobs/{id}/datasync", change: true},
	// It reads the job's spec first (GET, which every caller it may PUT
	// for may read), then puts it back with the flags over it.
	"jobs update":      {args: onJob("jobs", "update", "--label", "b=c"), route: "PUT /api/v1/jobs/{id}/spec", change: true},
	"inference models": {args: fixed("inference", "models"), route: "GET /api/v1/jobs"},
	"api-keys create":  {args: fixed("api-keys", "create", "k2"), route: "POST /api/v1/api-keys", change: true},
	"api-keys list":    {args: fixed("api-keys", "list"), route: "GET /api/v1/api-keys"},
	"api-keys revoke": {args: func(e *appnodetest.AccessEnv, _ string) []string {
		return []string{"api-keys", "revoke", e.KeyID}
	}, route: "DELETE /api/v1/api-keys/{id}", change: true},
	"api-keys rotate": {args: func(e *appnodetest.AccessEnv, _ string) []string {
		return []string{"api-keys", "rotate", e.KeyID}
	}, route: "POST /api/v1/api-keys/{id}/rotate", change: true},
	"datastores add": {args: fixed("datastores", "add", "d2", "--endpoint", "https://s3.example.net", "--access-key", "AK123456789", "--secret-key-stdin"),
		route: "POST /api/v1/datastores", stdin: "secret\n", change: true},
	"datastores list": {args: fixed("datastores", "list"), route: "GET /api/v1/datastores"},
	"volumes list":    {args: fixed("volumes", "list"), route: "GET /api/v1/volumes"},
	"volumes delete":  {args: fixed("volumes", "delete", "zed"), route: "DELETE /api/v1/volumes/{name}", change: true},
	"datastores get":  {args: fixed("datastores", "get", "main"), route: "GET /api/v1/datastores/{alias}"},
	"datastores credentials": {args: fixed("datastores", "credentials", "main", "--access-key", "AK123456789", "--secret-key-stdin"),
		route: "PUT /api/v1/datastores/{alias}/credentials", stdin: "secret\n", change: true},
	"datastores delete":  {args: fixed("datastores", "delete", "main"), route: "DELETE /api/v1/datastores/{alias}", change: true},
	"racks list":         {args: fixed("racks", "list"), route: "GET /api/v1/racks"},
	"locations":          {args: fixed("locations"), route: "GET /api/v1/fleet"},
	"racks register":     {args: fixed("racks", "register", "--id", "r2", "--location", "us", "--gpu-model", "H100", "--worker-key", strings.Repeat("ab", 32)), route: "POST /api/v1/racks", change: true},
	"racks remove":       {args: fixed("racks", "remove", "r1", "--force"), route: "DELETE /api/v1/racks/{id}", change: true},
	"audit":              {args: fixed("audit"), route: "GET /api/v1/audit"},
	"usage":              {args: fixed("usage"), route: "GET /api/v1/usage"},
	"quotas list":        {args: fixed("quotas", "list", "--team", "ml"), route: "GET /api/v1/teams/{team}/quotas"},
	"quotas set":         {args: fixed("quotas", "set", "--team", "ml", "--location", "us", "--gpus", "4"), route: "PUT /api/v1/teams/{team}/quotas/{location}", change: true},
	"quotas delete":      {args: fixed("quotas", "delete", "--team", "ml", "--location", "us"), route: "DELETE /api/v1/teams/{team}/quotas/{location}", change: true},
	"teams list":         {args: fixed("teams", "list"), route: "GET /api/v1/teams"},
	"teams create":       {args: fixed("teams", "create", "newteam"), route: "POST /api/v1/teams", change: true},
	"teams delete":       {args: fixed("teams", "delete", "ml", "--team", "ml"), route: "DELETE /api/v1/teams/{team}", change: true},
	"teams members list": {args: fixed("teams", "members", "list", "--team", "ml"), route: "GET /api/v1/teams/{team}/members"},
	"teams members add": {args: fixed("teams", "members", "add", "zed", "--role", "viewer", "--team", "ml"),
		route: "PUT /api/v1/teams/{team}/members/{user}", change: true},
	"teams members role": {args: fixed("teams", "members", "role", "zed", "--role", "member", "--team", "ml"),
		route: "PUT /api/v1/teams/{team}/members/{user}", change: true},
	"teams members remove": {args: fixed("teams", "members", "remove", "zed", "--team", "ml"),
		route: "DELETE /api/v1/teams/{team}/members/{user}", change: true},
	"tokens create": {args: fixed("tokens", "create", "t"), route: "POST /api/v1/tokens", change: true},
	"tokens list":   {args: fixed("tokens", "list"), route: "GET /api/v1/tokens"},
	"tokens revoke": {args: func(e *appnodetest.AccessEnv, caller string) []string {
		id := e.TokenIDs[caller]
		if id == "" {
			id = "tok_0000000000000000"
		}
		return []string{"tokens", "revoke", id}
	}, route: "DELETE /api/v1/tokens/{id}", change: true},
	"users list":           {args: fixed("users", "list"), route: "GET /api/v1/users"},
	"users get":            {args: fixed("users", "get", "zed"), route: "GET /api/v1/users/{name}"},
	"users create":         {args: fixed("users", "create", "newbie"), route: "POST /api/v1/users", change: true},
	"users delete":         {args: fixed("users", "delete", "zed"), route: "DELETE /api/v1/users/{name}", change: true},
	"users platform-admin": {args: fixed("users", "platform-admin", "zed", "off"), route: "PATCH /api/v1/users/{name}", change: true},
	"users passwd": {args: fixed("users", "passwd", "zed", "--password-stdin"), route: "PUT /api/v1/users/{name}/password",
		stdin: "another-password\n", change: true},
}

// cliElsewhere are the user commands that do not reach /api/v1 with a
// permission of their own, and where their access is tested.
var cliElsewhere = map[string]string{
	"login":                "public sign-in, then whoami (self): TestLogin, TestPeopleOnThePlatform",
	"teams use":            "whoami (self) and the saved config: TestPeopleOnThePlatform",
	"jobs logs":            "/monitor/v1: TestMonitorAccessMatrix",
	"jobs ssh":             "runs OpenSSH through jobSSH: TestAccessMatrix, the ssh platform tests",
	"jobs command":         "converts a spec locally",
	"inference chat":       "/inference/v1 with an API key: TestInferenceAccessMatrix",
	"inference transcribe": "/inference/v1 with an API key: TestInferenceAccessMatrix",
	"version":              "no API",
	"keys generate":        "no API: writes a fabric key file",
	"keys show":            "no API: reads a fabric key file",
	"rpc":                  "the fabric, not the API: the peer's trust graph decides (TestRPC, internal/trust)",
}

// TestCLIAccessMatrix: each CLI command that reaches the API, run by each
// kind of caller, ends as docs/permissions.md says of the route it calls:
// allowed (exit 0, or a failure that is not about access), or refused with
// the message of the denial the model expects; and every user command of
// the CLI is in cliRoutes or cliElsewhere.
func TestCLIAccessMatrix(t *testing.T) {
	doc, err := authztest.Read()
	if err != nil {
		t.Fatal(err)
	}
	root := (&App{}).RootCommand()
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		name := strings.TrimPrefix(c.CommandPath(), "cosmicac ")
		top := strings.Fields(name + " x")[0]
		switch {
		case c == root:
		case top == "help", top == "completion": // (the component commands are not in package cli)
			return
		case !c.HasSubCommands():
			_, api := cliRoutes[name]
			_, other := cliElsewhere[name]
			if !api && !other {
				t.Errorf("cosmicac %s is in neither cliRoutes nor cliElsewhere", name)
			}
		}
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(root)

	shared := appnodetest.NewAccessEnv(t, false)
	for name, cr := range cliRoutes {
		method, path, _ := strings.Cut(cr.route, " ")
		if _, ok := doc.Routes[cr.route]; !ok {
			t.Errorf("cosmicac %s: %s is not a route of docs/permissions.md", name, cr.route)
			continue
		}
		t.Run(strings.ReplaceAll(name, " ", "_"), func(t *testing.T) {
			for _, w := range authztest.Callers {
				e := shared
				if cr.change {
					e = appnodetest.NewAccessEnv(t, false)
				}
				env := map[string]string{envURL: e.URL(), "HOME": t.TempDir()}
				if tok := e.Tokens[w.Name]; tok != "" && !w.Anon {
					env[envToken] = tok
				} else {
					env[envToken] = "cac_" + strings.Repeat("A", 43) // a well-formed token that is nobody's
				}
				if w.PlatformAdmin || w.Foreign {
					env[envTeam] = "ml"
				}
				args := cr.args(e, w.Name)
				code, out, errs := runCLIIn(t, env, cr.stdin, args...)
				msg := out + errs
				want := authztest.Expect(doc, method, path, w)
				denied := func(marker string) bool { return code != 0 && strings.Contains(msg, marker) }
				switch want {
				case 0:
					if code != 0 && (strings.Contains(msg, "forbidden") || strings.Contains(msg, "not_found") ||
						strings.Contains(msg, "not logged in") || strings.Contains(msg, "no active team")) {
						t.Errorf("%s: exit %d, want it allowed:\n%s", w.Name, code, msg)
					}
				case http.StatusUnauthorized:
					if !denied("not logged in or token invalid") {
						t.Errorf("%s: exit %d, want 401:\n%s", w.Name, code, msg)
					}
				case http.StatusForbidden:
					if !denied("forbidden") {
						t.Errorf("%s: exit %d, want 403:\n%s", w.Name, code, msg)
					}
				case http.StatusNotFound:
					if !denied("not_found") && !denied("no job is named") {
						t.Errorf("%s: exit %d, want 404:\n%s", w.Name, code, msg)
					}
				case http.StatusBadRequest:
					if !denied("no active team") && !denied("which team") {
						t.Errorf("%s: exit %d, want no active team:\n%s", w.Name, code, msg)
					}
				}
			}
		})
	}
}
