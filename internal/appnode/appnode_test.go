package appnode_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/apiv1"
	"github.com/cosmicac/cosmicac/internal/appnode"
	"github.com/cosmicac/cosmicac/internal/appnode/appnodetest"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/ork/orkapi"
	"github.com/cosmicac/cosmicac/internal/store"
)

const (
	containerSpec = `{"type":"gpu-container","name":"train","location":"us","image":"ubuntu:24.04","resources":{"gpu":2},"labels":{"app":"x"}}`
	rackKey       = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"
)

type answer struct {
	status int
	header http.Header
	body   []byte
}

func (a answer) err(t *testing.T) apiv1.ErrorBody {
	t.Helper()
	var er apiv1.ErrorResponse
	if err := json.Unmarshal(a.body, &er); err != nil || er.Error.Code == "" {
		t.Fatalf("status %d: body is not a JSON error: %q", a.status, a.body)
	}
	return er.Error
}

func (a answer) decode(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(a.body, v); err != nil {
		t.Fatalf("decode %q: %v", a.body, err)
	}
}

func call(t testing.TB, e *appnodetest.Env, method, path, token, body string) answer {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, e.URL()+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := e.Server.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{resp.StatusCode, resp.Header, b}
}

func create(t *testing.T, e *appnodetest.Env, token, spec string) cosmic.Job {
	t.Helper()
	a := call(t, e, "POST", "/api/v1/jobs", token, spec)
	if a.status != http.StatusCreated {
		t.Fatalf("create: %d %s", a.status, a.body)
	}
	var j cosmic.Job
	a.decode(t, &j)
	return j
}

func TestEveryRouteIsServed(t *testing.T) {
	e := appnodetest.NewEnv(t)
	j := create(t, e, e.AdminToken, containerSpec)
	for _, rt := range apiv1.Routes() {
		path := strings.NewReplacer("{id}", j.ID, "{n}", "0").Replace(rt.Path)
		if rt.Path == apiv1.Prefix+"/racks/{id}" {
			path = apiv1.Prefix + "/racks/r1"
		}
		a := call(t, e, rt.Method, path, e.AdminToken, "")
		if a.status == http.StatusMethodNotAllowed {
			t.Errorf("%s: 405", rt.Pattern())
		}
		if rt.Method == http.MethodHead {
			continue // no body to tell; TestJobHTTP serves HEAD
		}
		if a.status == http.StatusNotFound && strings.Contains(a.err(t).Message, "no route") {
			t.Errorf("%s: not routed", rt.Pattern())
		}
		if a.status >= 400 {
			a.err(t) // every error is JSON
		}
	}
}

func TestOpenAPIServed(t *testing.T) {
	e := appnodetest.NewEnv(t)
	a := call(t, e, "GET", "/api/v1/openapi.json", "", "")
	if a.status != 200 || !strings.HasPrefix(a.header.Get("Content-Type"), "application/json") {
		t.Fatalf("openapi: %d %s", a.status, a.header.Get("Content-Type"))
	}
	var doc struct {
		OpenAPI string                            `json:"openapi"`
		Paths   map[string]map[string]interface{} `json:"paths"`
	}
	a.decode(t, &doc)
	if doc.OpenAPI != apiv1.OpenAPIVersion {
		t.Errorf("openapi = %q", doc.OpenAPI)
	}
	for _, rt := range apiv1.Routes() {
		if doc.Paths[rt.Path][strings.ToLower(rt.Method)] == nil {
			t.Errorf("%s not in the served document", rt.Pattern())
		}
	}
	if h := call(t, e, "GET", "/api/v1/healthz", "", ""); h.status != 200 {
		t.Errorf("healthz: %d %s", h.status, h.body)
	}
}

func TestAuth(t *testing.T) {
	e := appnodetest.NewEnv(t)
	viewer := e.AddUser(t, "vera", "default", cosmic.RoleViewer)
	member := e.AddUser(t, "max", "default", cosmic.RoleMember)
	other := e.AddUser(t, "olga", "other", cosmic.RoleMember)
	otherAdmin := e.AddUser(t, "root2", "other", cosmic.RoleAdmin)
	j := create(t, e, member, containerSpec)
	wellFormedUnknown, _, _ := appnode.NewToken()

	for _, tc := range []struct {
		name, method, path, token, body string
		status                          int
	}{
		{"no token", "GET", "/api/v1/jobs", "", "", 401},
		{"unknown token", "GET", "/api/v1/jobs", wellFormedUnknown, "", 401},
		{"garbage token", "GET", "/api/v1/jobs", "hunter2", "", 401},
		{"viewer reads", "GET", "/api/v1/jobs/" + j.ID, viewer, "", 200},
		{"viewer creates", "POST", "/api/v1/jobs", viewer, containerSpec, 403},
		{"viewer kills", "POST", "/api/v1/jobs/" + j.ID + "/kill", viewer, "", 403},
		{"viewer command", "POST", "/api/v1/jobs/command", viewer, containerSpec, 200},
		{"other team gets", "GET", "/api/v1/jobs/" + j.ID, other, "", 404},
		{"other team kills", "POST", "/api/v1/jobs/" + j.ID + "/kill", other, "", 404},
		{"other team deletes", "DELETE", "/api/v1/jobs/" + j.ID + "?force=true", other, "", 404},
		{"other team labels", "PUT", "/api/v1/jobs/" + j.ID + "/label", other, `{"name":"a","value":"b"}`, 404},
		{"admin of another team gets", "GET", "/api/v1/jobs/" + j.ID, otherAdmin, "", 404},
		{"platform admin gets", "GET", "/api/v1/jobs/" + j.ID, e.AdminToken, "?team=*", 200},
		{"member registers rack", "POST", "/api/v1/racks", member, `{"id":"r1","location":"us","gpuModel":"H100","workerKey":"` + rackKey + `"}`, 403},
		{"member removes rack", "DELETE", "/api/v1/racks/r1", member, "", 403},
		{"member lists racks", "GET", "/api/v1/racks", member, "", 403},
		{"platform admin lists racks", "GET", "/api/v1/racks", e.AdminToken, "?team=*", 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := e.Ork.Writes()
			a := call(t, e, tc.method, tc.path, tc.token, tc.body)
			if a.status != tc.status {
				t.Fatalf("status %d, want %d: %s", a.status, tc.status, a.body)
			}
			if tc.status >= 400 {
				a.err(t)
				if e.Ork.Writes() != before {
					t.Errorf("the ork saw a write")
				}
			}
			if tc.status == 401 && !strings.HasPrefix(a.header.Get("WWW-Authenticate"), "Bearer") {
				t.Errorf("WWW-Authenticate = %q", a.header.Get("WWW-Authenticate"))
			}
		})
	}

	t.Run("other team lists nothing", func(t *testing.T) {
		var l apiv1.JobList
		call(t, e, "GET", "/api/v1/jobs", other, "").decode(t, &l)
		if l.Total != 0 || len(l.Items) != 0 {
			t.Errorf("other team sees %d jobs", l.Total)
		}
	})
	t.Run("expired token", func(t *testing.T) {
		secret, hash, _ := appnode.NewToken()
		err := e.Accounts.CreateToken(context.Background(), store.Token{ID: "old", UserName: "max", Hash: hash,
			CreatedAt: time.Now().Add(-2 * time.Hour), ExpiresAt: time.Now().Add(-time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		if a := call(t, e, "GET", "/api/v1/whoami", secret, ""); a.status != 401 {
			t.Errorf("expired token: %d", a.status)
		}
	})
	t.Run("whoami", func(t *testing.T) {
		var w apiv1.WhoAmI
		call(t, e, "GET", "/api/v1/whoami", viewer, "").decode(t, &w)
		if w.User != "vera" || w.Team != "default" || w.Role != cosmic.RoleViewer || w.Token == "" || len(w.Teams) != 1 || w.Credential != "token" {
			t.Errorf("whoami = %+v", w)
		}
	})
}

func TestBadInputChangesNothing(t *testing.T) {
	e := appnodetest.NewEnv(t)
	ctx := context.Background()
	if _, err := e.Ork.RegisterRack(ctx, orkapi.RegisterRackParams{Rack: cosmic.Rack{ID: "r1", Type: "server", Location: "us", GPUModel: "H100", WorkerKey: rackKey}}); err != nil {
		t.Fatal(err)
	}
	j := create(t, e, e.AdminToken, containerSpec)
	id := "/api/v1/jobs/" + j.ID
	big := `{"type":"gpu-container","location":"us","image":"x","name":"` + strings.Repeat("a", 2<<20) + `"}`
	for _, tc := range []struct {
		name, method, path, body string
		status                   int
		code                     string
		fields                   []string // fields named in details
		orkDecides               bool     // the ork refuses it, not the app-node
	}{
		{"malformed JSON", "POST", "/api/v1/jobs", `{"type":`, 400, "invalid", nil, false},
		{"empty body", "POST", "/api/v1/jobs", ``, 400, "invalid", nil, false},
		{"not an object", "POST", "/api/v1/jobs", `[1,2]`, 400, "invalid", nil, false},
		{"trailing data", "POST", "/api/v1/jobs", containerSpec + `{}`, 400, "invalid", nil, false},
		{"unknown field", "POST", "/api/v1/jobs", `{"type":"gpu-container","location":"us","image":"x","gpus":2}`, 400, "invalid", nil, false},
		{"unknown job type", "POST", "/api/v1/jobs", `{"type":"batch","location":"us","image":"x"}`, 400, "invalid", []string{"type"}, false},
		{"negative GPU count", "POST", "/api/v1/jobs", `{"type":"gpu-container","location":"us","image":"x","resources":{"gpu":-1}}`, 400, "invalid", []string{"resources.gpu"}, false},
		{"vllm flag the targeted vLLM lacks", "POST", "/api/v1/jobs", `{"type":"managed-inference","location":"us","inference":{"runtime":"vllm","model":"Qwen/Qwen3-8B","args":{"swap-space":"4"}}}`, 400, "invalid", []string{"inference.args.swap-space"}, false},
		{"every problem at once", "POST", "/api/v1/jobs", `{"type":"gpu-container","location":"u s","resources":{"gpu":-1}}`, 400, "invalid", []string{"location", "image", "resources.gpu"}, false},
		{"unknown location", "POST", "/api/v1/jobs", `{"type":"gpu-container","location":"mars","image":"x"}`, 400, "invalid", []string{"location"}, true},
		{"oversized body", "POST", "/api/v1/jobs", big, 413, "too_large", nil, false},
		{"oversized command", "POST", "/api/v1/jobs/command", big, 413, "too_large", nil, false},
		{"bad UUID", "GET", "/api/v1/jobs/not-a-uuid", "", 400, "invalid", []string{"id"}, false},
		{"bad UUID kill", "POST", "/api/v1/jobs/123/kill", "", 400, "invalid", []string{"id"}, false},
		{"missing job", "GET", "/api/v1/jobs/" + cosmic.NewJobID(), "", 404, "not_found", nil, false},
		{"missing job delete", "DELETE", "/api/v1/jobs/" + cosmic.NewJobID(), "", 404, "not_found", nil, false},
		{"bad force", "DELETE", id + "?force=maybe", "", 400, "invalid", []string{"force"}, false},
		{"unknown query on delete", "DELETE", id + "?forse=true", "", 400, "bad_request", nil, false},
		{"size 0", "GET", "/api/v1/jobs?size=0", "", 400, "invalid", []string{"size"}, false},
		{"size too big", "GET", "/api/v1/jobs?size=5000", "", 400, "invalid", []string{"size"}, false},
		{"page 0", "GET", "/api/v1/jobs?page=0", "", 400, "invalid", []string{"page"}, false},
		{"page not a number", "GET", "/api/v1/jobs?page=two", "", 400, "invalid", []string{"page"}, false},
		{"bad order", "GET", "/api/v1/jobs?order=up", "", 400, "invalid", []string{"order"}, false},
		{"bad sort", "GET", "/api/v1/jobs?sort=gpu", "", 400, "invalid", []string{"sort"}, false},
		{"bad state", "GET", "/api/v1/jobs?statusState=running&statusState=sleeping", "", 400, "invalid", []string{"statusState"}, false},
		{"bad time", "GET", "/api/v1/jobs?updatedAfter=yesterday", "", 400, "invalid", []string{"updatedAfter"}, false},
		{"after not before", "GET", "/api/v1/jobs?updatedAfter=2026-02-01T00:00:00Z&updatedBefore=2026-01-01T00:00:00Z", "", 400, "invalid", []string{"updatedAfter"}, false},
		{"bad label selector", "GET", "/api/v1/jobs?labelSelector=app", "", 400, "invalid", []string{"labelSelector"}, false},
		{"several bad params", "GET", "/api/v1/jobs?size=-1&order=x&sort=y", "", 400, "invalid", []string{"order", "sort", "size"}, false},
		{"unknown query param", "GET", "/api/v1/jobs?status=running", "", 400, "bad_request", nil, false},
		{"bad label key", "PUT", id + "/label", `{"name":"bad key!","value":"v"}`, 400, "invalid", []string{"name"}, false},
		{"reserved label", "PUT", id + "/label", `{"name":"cosmicac/owner","value":"v"}`, 400, "invalid", []string{"name"}, false},
		{"label unknown field", "PUT", id + "/label", `{"key":"a","value":"v"}`, 400, "invalid", nil, false},
		{"datasync bad direction", "POST", id + "/datasync", `{"direction":"sideways","volume":"data"}`, 400, "invalid", []string{"direction"}, false},
		{"datasync of a job not running", "POST", id + "/datasync", `{"direction":"push","volume":"data"}`, 409, "conflict", nil, false},
		{"replica not a number", "POST", id + "/replicas/x/restart", "", 400, "invalid", []string{"n"}, false},
		{"replica negative", "DELETE", id + "/replicas/-1", "", 400, "invalid", []string{"n"}, false},
		{"replica out of range", "POST", id + "/replicas/1/restart", "", 404, "not_found", nil, false},
		{"command of invalid spec", "POST", "/api/v1/jobs/command", `{"type":"gpu-container"}`, 400, "invalid", []string{"location", "image"}, false},
		{"invalid rack", "POST", "/api/v1/racks", `{"id":"r 2","location":"","gpuModel":"H100","workerKey":"abc","workerAddrs":["nope"]}`, 400, "invalid", []string{"id", "location", "workerKey", "workerAddrs[0]"}, false},
		{"rack unknown field", "POST", "/api/v1/racks", `{"id":"r2","nodes":3}`, 400, "invalid", nil, false},
		{"remove unknown rack", "DELETE", "/api/v1/racks/r9", "", 404, "not_found", nil, true},
		{"unknown path", "GET", "/api/v1/nope", "", 404, "not_found", nil, false},
		{"path outside the API", "GET", "/", "", 404, "not_found", nil, false},
		{"method not allowed", "PATCH", "/api/v1/jobs", "{}", 405, "method_not_allowed", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			writes, changes, jobs := e.Ork.Writes(), e.Ork.Changes(), e.Ork.Jobs()
			a := call(t, e, tc.method, tc.path, e.AdminToken, tc.body)
			if a.status != tc.status {
				t.Fatalf("status %d, want %d: %s", a.status, tc.status, a.body)
			}
			eb := a.err(t)
			if eb.Code != tc.code {
				t.Errorf("code %q, want %q (%s)", eb.Code, tc.code, eb.Message)
			}
			if len(tc.fields) > 0 {
				var fes []apiv1.FieldError
				if err := json.Unmarshal(eb.Details, &fes); err != nil {
					t.Fatalf("details %s: %v", eb.Details, err)
				}
				got := map[string]bool{}
				for _, f := range fes {
					got[f.Field] = true
				}
				for _, f := range tc.fields {
					if !got[f] {
						t.Errorf("details %s do not name %s", eb.Details, f)
					}
				}
			}
			if e.Ork.Changes() != changes || e.Ork.Jobs() != jobs {
				t.Errorf("the ork changed")
			}
			if !tc.orkDecides && e.Ork.Writes() != writes {
				t.Errorf("the app-node passed bad input to the ork")
			}
		})
	}
}

func TestJobs(t *testing.T) {
	e := appnodetest.NewEnv(t)
	member := e.AddUser(t, "max", "ml", cosmic.RoleMember)

	a := call(t, e, "POST", "/api/v1/jobs", member, strings.Replace(containerSpec, `"location"`, `"region"`, 1))
	if a.status != 201 {
		t.Fatalf("create: %d %s", a.status, a.body)
	}
	var j cosmic.Job
	a.decode(t, &j)
	if j.User != "max" || j.Team != "ml" || j.Spec.Location != "us" || j.Spec.DiskGB != cosmic.DefaultContainerDiskGB {
		t.Errorf("created %+v", j)
	}
	if a.header.Get("Location") != "/api/v1/jobs/"+j.ID {
		t.Errorf("Location = %q", a.header.Get("Location"))
	}
	id := "/api/v1/jobs/" + j.ID

	var got cosmic.Job
	call(t, e, "GET", "/api/v1/jobs/"+strings.ToUpper(j.ID), member, "").decode(t, &got)
	if got.ID != j.ID {
		t.Errorf("get = %+v", got)
	}

	step := func(method, path, body string, status int, state cosmic.State) cosmic.Job {
		t.Helper()
		a := call(t, e, method, path, member, body)
		if a.status != status {
			t.Fatalf("%s %s: %d %s", method, path, a.status, a.body)
		}
		var j cosmic.Job
		if status < 300 {
			a.decode(t, &j)
			if state != "" && j.Status.State != state {
				t.Errorf("%s %s: state %s, want %s", method, path, j.Status.State, state)
			}
		} else {
			a.err(t)
		}
		return j
	}
	if err := e.Ork.SetState(j.ID, cosmic.StatePending, nil); err != nil {
		t.Fatal(err)
	}
	if err := e.Ork.SetState(j.ID, cosmic.StateRunning, nil); err != nil {
		t.Fatal(err)
	}
	step("POST", id+"/restart", "", 200, cosmic.StateRestarting)
	step("POST", id+"/kill", "", 200, cosmic.StateStopped)
	step("POST", id+"/kill", "", 200, cosmic.StateStopped) // idempotent
	step("POST", id+"/restart", "", 200, cosmic.StateQueued)
	if l := step("PUT", id+"/label", `{"name":"team","value":"vision"}`, 200, ""); l.Spec.Labels["team"] != "vision" {
		t.Errorf("label not set: %v", l.Spec.Labels)
	}
	if l := step("PUT", id+"/label", `{"name":"team","value":""}`, 200, ""); l.Spec.Labels["team"] != "" {
		t.Errorf("label not removed: %v", l.Spec.Labels)
	}
	step("POST", id+"/replicas/0/restart", "", 409, "") // queued cannot restart
	if err := e.Ork.SetState(j.ID, cosmic.StatePending, nil); err != nil {
		t.Fatal(err)
	}
	step("DELETE", id+"/replicas/0", "", 200, cosmic.StateRestarting)
	step("DELETE", id, "", 409, "") // holds GPUs
	step("DELETE", id+"?force=true", "", 200, cosmic.StateDeleting)
	step("GET", id, "", 404, "")

	var cmd cosmic.Command
	call(t, e, "POST", "/api/v1/jobs/command", member, containerSpec).decode(t, &cmd)
	if want := "cosmicac jobs create --type gpu-container --name train --label app=x --location us --gpus 2 --image ubuntu:24.04"; cmd.Line != want {
		t.Errorf("command = %q, want %q", cmd.Line, want)
	}
	if len(cmd.Args) == 0 || cmd.Args[0] != "cosmicac" {
		t.Errorf("args = %q", cmd.Args)
	}
}

func TestList(t *testing.T) {
	e := appnodetest.NewEnv(t)
	alice := e.AddUser(t, "alice", "ml", cosmic.RoleMember)
	bob := e.AddUser(t, "bob", "ml", cosmic.RoleMember)
	carol := e.AddUser(t, "carol", "web", cosmic.RoleMember)
	var ids []string
	for i, tok := range []string{alice, alice, bob, carol, alice} {
		spec := fmt.Sprintf(`{"type":"gpu-container","name":"job-%d","location":"us","image":"x","labels":{"n":"%d","kind":"train"}}`, i, i%2)
		ids = append(ids, create(t, e, tok, spec).ID)
	}
	if err := e.Ork.SetState(ids[1], cosmic.StateStopped, nil); err != nil {
		t.Fatal(err)
	}
	list := func(token, query string) apiv1.JobList {
		t.Helper()
		a := call(t, e, "GET", "/api/v1/jobs"+query, token, "")
		if a.status != 200 {
			t.Fatalf("list %s: %d %s", query, a.status, a.body)
		}
		var l apiv1.JobList
		a.decode(t, &l)
		return l
	}
	names := func(l apiv1.JobList) string {
		var s []string
		for _, j := range l.Items {
			s = append(s, j.Spec.Name)
		}
		return strings.Join(s, ",")
	}
	for _, tc := range []struct {
		name, token, query, want string
		total, page, size        int
	}{
		{"platform admin sees all teams, newest first", e.AdminToken, "?team=*", "job-4,job-3,job-2,job-1,job-0", 5, 1, 50},
		{"team only", alice, "", "job-4,job-2,job-1,job-0", 4, 1, 50},
		{"other team", carol, "", "job-3", 1, 1, 50},
		{"asc by name", alice, "?sort=name&order=asc", "job-0,job-1,job-2,job-4", 4, 1, 50},
		{"page 2 of 3", e.AdminToken, "?order=asc&size=3&page=2&team=*", "job-3,job-4", 5, 2, 3},
		{"page past the end", e.AdminToken, "?size=3&page=9&team=*", "", 5, 9, 3},
		{"user", e.AdminToken, "?userName=alice&order=asc&team=*", "job-0,job-1,job-4", 3, 1, 50},
		{"label selector", e.AdminToken, "?labelSelector=n%3D1,kind%3Dtrain&order=asc&team=*", "job-1,job-3", 2, 1, 50},
		{"states repeated", e.AdminToken, "?statusState=stopped&statusState=running&team=*", "job-1", 1, 1, 50},
		{"states comma", e.AdminToken, "?statusState=queued,stopped&order=asc&team=*", "job-0,job-1,job-2,job-3,job-4", 5, 1, 50},
		{"updated after", e.AdminToken, "?updatedAfter=2030-01-01T00:00:00Z&team=*", "", 0, 1, 50},
		{"updated before", e.AdminToken, "?updatedBefore=2030-01-01T00:00:00Z&sort=updatedAt&team=*", "job-1,job-4,job-3,job-2,job-0", 5, 1, 50},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := list(tc.token, tc.query)
			if got := names(l); got != tc.want || l.Total != tc.total || l.Page != tc.page || l.Size != tc.size {
				t.Errorf("got %q total %d page %d size %d, want %q total %d page %d size %d",
					got, l.Total, l.Page, l.Size, tc.want, tc.total, tc.page, tc.size)
			}
			if l.Items == nil {
				t.Errorf("items is null")
			}
		})
	}
}

// TestListLimits: list filters over their limits are refused, 400 with
// the JSON error naming the limit, before the ork is asked; at the limits
// they are a query.
func TestListLimits(t *testing.T) {
	e := appnodetest.NewEnv(t)
	terms := func(n int) string {
		var s []string
		for i := range n {
			s = append(s, fmt.Sprintf("k%d=v", i))
		}
		return url.QueryEscape(strings.Join(s, ","))
	}
	long := strings.Repeat("a", 2000)
	for _, tc := range []struct {
		name, query, want string
	}{
		{"70 label terms", "labelSelector=" + terms(70), "has 70 terms, more than 16"},
		{"17 label terms", "labelSelector=" + terms(17), "more than 16"},
		{"17 empty terms", "labelSelector=" + strings.Repeat("%2C", 16), "more than 16"},
		{"long key", "labelSelector=" + strings.Repeat("k", 318) + "%3Dv", "longer than 317 bytes"},
		{"long value", "labelSelector=k%3D" + strings.Repeat("v", 64), "longer than 63 bytes"},
		{"33 states repeated", strings.Repeat("statusState=running&", 33), "has 33 values, more than 32"},
		{"33 states by commas", "statusState=" + strings.Repeat("running%2C", 32) + "queued", "more than 32"},
		{"long user", "userName=" + strings.Repeat("u", 129), "1 to 128 bytes"},
		{"size", "size=1001", "from 1 to 1000"},
		{"page", "page=1000001", "from 1 to 1000000"},
		{"long time, clipped", "updatedAfter=" + long, "(2000 bytes)"},
		{"long sort, clipped", "sort=" + long, "(2000 bytes)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := e.Ork.Calls(orkapi.MethodListJobs)
			a := call(t, e, "GET", "/api/v1/jobs?"+tc.query, e.AdminToken, "")
			if a.status != http.StatusBadRequest {
				t.Fatalf("%d %s, want 400", a.status, a.body)
			}
			if msg := a.err(t).Message; !strings.Contains(msg, tc.want) || len(msg) > 500 {
				t.Errorf("message %q: want it to say %q, briefly", msg, tc.want)
			}
			if e.Ork.Calls(orkapi.MethodListJobs) != before {
				t.Errorf("the ork was asked")
			}
		})
	}
	for _, q := range []string{
		"labelSelector=" + terms(16),
		strings.Repeat("statusState=running&", 32),
		"labelSelector=" + strings.Repeat("p", 253) + "%2F" + strings.Repeat("n", 63) + "%3D" + strings.Repeat("v", 63),
		"userName=" + strings.Repeat("u", 128),
	} {
		if a := call(t, e, "GET", "/api/v1/jobs?"+q, e.AdminToken, ""); a.status != http.StatusOK {
			t.Errorf("at the limit, %.60s…: %d %s", q, a.status, a.body)
		}
	}
}

func TestRacks(t *testing.T) {
	e := appnodetest.NewEnv(t)
	body := `{"id":"r1","location":"us","gpuModel":"GH100_H100_SXM5_80GB","workerKey":"` + rackKey + `","workerAddrs":["127.0.0.1:7000"]}`
	a := call(t, e, "POST", "/api/v1/racks", e.AdminToken, body)
	if a.status != 200 {
		t.Fatalf("register: %d %s", a.status, a.body)
	}
	var r apiv1.Rack
	a.decode(t, &r)
	if r.ID != "r1" || r.Type != "server" || r.GPUs != 16 || len(r.Nodes) != 2 {
		t.Errorf("rack = %+v", r)
	}
	var l apiv1.RackList
	call(t, e, "GET", "/api/v1/racks", e.AdminToken, "").decode(t, &l)
	if l.Total != 1 || l.Items[0].ID != "r1" {
		t.Errorf("racks = %+v", l)
	}
	if a := call(t, e, "DELETE", "/api/v1/racks/r1?force=true", e.AdminToken, ""); a.status != 204 || len(a.body) != 0 {
		t.Errorf("remove: %d %q", a.status, a.body)
	}
}

func TestOrkErrors(t *testing.T) {
	e := appnodetest.NewEnv(t)
	for _, tc := range []struct {
		name   string
		err    error
		status int
		code   string
		leak   string // must not appear in the answer
	}{
		{"unavailable", fabric.Errorf(fabric.CodeUnavailable, "dial 10.0.0.7:7000: refused"), 503, "unavailable", "10.0.0.7"},
		{"deadline", fabric.Errorf(fabric.CodeDeadlineExceeded, "after 30s"), 504, "deadline_exceeded", ""},
		{"internal", fabric.Errorf(fabric.CodeInternal, "sql: database is locked"), 500, "internal", "sql"},
		{"unknown code", fabric.Errorf("weird", "panic at ork.go:12"), 500, "internal", "ork.go"},
		{"forbidden", fabric.Errorf(fabric.CodeForbidden, "read-only key"), 403, "forbidden", ""},
		{"conflict", fabric.Errorf(orkapi.CodeConflict, "job is deleting"), 409, "conflict", ""},
		{"bad request", fabric.Errorf(fabric.CodeBadRequest, "bad params"), 400, "bad_request", ""},
		{"plain error", errors.New("boom: secret path /var/lib"), 500, "internal", "/var/lib"},
		{"domain not found", fmt.Errorf("rack x: %w", cosmic.ErrNotFound), 404, "not_found", ""},
		{"context deadline", context.DeadlineExceeded, 504, "deadline_exceeded", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.Ork.FailWith(tc.err)
			defer e.Ork.FailWith(nil)
			a := call(t, e, "GET", "/api/v1/racks", e.AdminToken, "")
			if a.status != tc.status || a.err(t).Code != tc.code {
				t.Errorf("got %d %s, want %d %s", a.status, a.body, tc.status, tc.code)
			}
			if tc.leak != "" && strings.Contains(string(a.body), tc.leak) {
				t.Errorf("answer leaks %q: %s", tc.leak, a.body)
			}
		})
	}
	t.Run("accounts down", func(t *testing.T) {
		e.Accounts.Close() // every later call fails; this is the last subtest
		if a := call(t, e, "GET", "/api/v1/whoami", e.AdminToken, ""); a.status != 500 || strings.Contains(string(a.body), "disk") {
			t.Errorf("got %d %s", a.status, a.body)
		}
	})
}

func TestBootstrap(t *testing.T) {
	ctx := context.Background()
	acc := appnodetest.NewAccounts(t)
	dir := filepath.Join(t.TempDir(), "data")
	path, created, err := appnode.Bootstrap(ctx, acc, dir)
	if err != nil || !created || path != filepath.Join(dir, "admin.token") {
		t.Fatalf("bootstrap: %q %v %v", path, created, err)
	}
	for p, mode := range map[string]os.FileMode{dir: 0o700 | os.ModeDir, path: 0o600} {
		fi, err := os.Stat(p)
		if err != nil || fi.Mode() != mode {
			t.Errorf("%s: mode %v, want %v (%v)", p, fi.Mode(), mode, err)
		}
	}
	b, _ := os.ReadFile(path)
	secret := strings.TrimSpace(string(b))
	if !strings.HasPrefix(secret, "cac_") || len(secret) < 4+43 {
		t.Errorf("token %q", secret)
	}
	_, u, err := acc.TokenByHash(ctx, appnode.HashToken(secret), time.Now())
	if err != nil || u.Name != "admin" || !u.PlatformAdmin {
		t.Errorf("token user %+v %v", u, err)
	}
	if ms, err := acc.Memberships(ctx, "admin"); err != nil || len(ms) != 1 || ms[0] != (cosmic.Member{Team: "default", User: "admin", Role: cosmic.RoleOwner}) {
		t.Errorf("admin's teams: %+v %v", ms, err)
	}
	if _, created, err := appnode.Bootstrap(ctx, acc, dir); err != nil || created {
		t.Errorf("second bootstrap: created %v, err %v", created, err)
	}

	t.Run("interrupted", func(t *testing.T) {
		acc := appnodetest.NewAccounts(t)
		dir := t.TempDir()
		// A first start that died after writing the pending file and the user.
		pending, _, _ := appnode.NewToken()
		if err := os.WriteFile(filepath.Join(dir, "admin.token.new"), []byte(pending+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		_ = acc.CreateTeam(ctx, cosmic.Team{Name: "default"})
		_ = acc.CreateUser(ctx, cosmic.User{Name: "admin", PlatformAdmin: true}, "")
		path, created, err := appnode.Bootstrap(ctx, acc, dir)
		if err != nil || !created {
			t.Fatalf("resume: %v %v", created, err)
		}
		b, _ := os.ReadFile(path)
		if strings.TrimSpace(string(b)) != pending {
			t.Errorf("resumed with another token")
		}
		if _, _, err := acc.TokenByHash(ctx, appnode.HashToken(pending), time.Now()); err != nil {
			t.Errorf("pending token not stored: %v", err)
		}
	})

	// Two app-nodes on one database bootstrapping at once: the second
	// read no users, wrote its pending token, then found the first's
	// bootstrap token stored. It writes no admin.token of a secret the
	// database does not hold.
	t.Run("another app-node won", func(t *testing.T) {
		acc := appnodetest.NewAccounts(t)
		first, second := t.TempDir(), t.TempDir()
		if _, created, err := appnode.Bootstrap(ctx, acc, first); err != nil || !created {
			t.Fatalf("first: %v %v", created, err)
		}
		pending, _, _ := appnode.NewToken()
		if err := os.WriteFile(filepath.Join(second, "admin.token.new"), []byte(pending+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, created, err := appnode.Bootstrap(ctx, acc, second); err != nil || created {
			t.Fatalf("second: created %v, %v; want neither", created, err)
		}
		for _, f := range []string{"admin.token", "admin.token.new"} {
			if _, err := os.Stat(filepath.Join(second, f)); !os.IsNotExist(err) {
				t.Errorf("the second app-node has %s (%v)", f, err)
			}
		}
	})
}

func TestConfig(t *testing.T) {
	cfg := appnode.DefaultConfig()
	if err := cfg.Validate(); err == nil {
		t.Error("default config without a data dir validates")
	}
	cfg.DataDir = t.TempDir()
	if err := cfg.Validate(); err != nil {
		t.Errorf("default config: %v", err)
	}
	bad := appnode.Config{Listen: "nope", MaxBody: 1}
	err := bad.Validate()
	for _, w := range []string{"listen", "dataDir", "maxBody", "orkTimeout"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("error %v does not name %s", err, w)
		}
	}
	if _, err := appnode.New(bad, appnode.Deps{Ork: appnodetest.NewOrk(), Accounts: appnodetest.NewAccounts(t), Log: slog.Default()}); err == nil {
		t.Error("New accepted a bad config")
	}
}

type observer struct{ ops []string }

func (o *observer) ObserveRequest(op string, status int, _ time.Duration) {
	o.ops = append(o.ops, fmt.Sprintf("%s %d", op, status))
}

func TestObserver(t *testing.T) {
	cfg := appnode.DefaultConfig()
	cfg.DataDir = t.TempDir()
	o := &observer{}
	s, err := appnode.New(cfg, appnode.Deps{Ork: appnodetest.NewOrk(), Accounts: appnodetest.NewAccounts(t), Log: slog.New(slog.DiscardHandler), Observer: o})
	if err != nil {
		t.Fatal(err)
	}
	h := s.Handler()
	for _, p := range []string{"/api/v1/healthz", "/api/v1/jobs", "/nope"} {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", p, nil))
	}
	if got := strings.Join(o.ops, ","); got != "health 200,listJobs 401, 404" {
		t.Errorf("observed %q", got)
	}
}

func TestRun(t *testing.T) {
	cfg := appnode.DefaultConfig()
	cfg.DataDir = t.TempDir()
	cfg.Listen = "127.0.0.1:0"
	s, err := appnode.New(cfg, appnode.Deps{Ork: appnodetest.NewOrk(), Accounts: appnodetest.NewAccounts(t), Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, ln) }()
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}

func benchEnv(b *testing.B) (http.Handler, string) {
	e := appnodetest.NewEnv(b)
	return e.App.Handler(), e.AdminToken
}

func serve(b *testing.B, h http.Handler, method, path, token, body string, want int) *httptest.ResponseRecorder {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, path, rd)
	req.Header.Set("Authorization", "Bearer "+token)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	if w.Code != want {
		b.Fatalf("%s %s: %d %s", method, path, w.Code, w.Body)
	}
	return w
}

func BenchmarkCreate(b *testing.B) {
	h, tok := benchEnv(b)
	b.ReportAllocs()
	for b.Loop() {
		serve(b, h, "POST", "/api/v1/jobs", tok, containerSpec, 201)
	}
}

func BenchmarkGet(b *testing.B) {
	h, tok := benchEnv(b)
	var j cosmic.Job
	_ = json.Unmarshal(serve(b, h, "POST", "/api/v1/jobs", tok, containerSpec, 201).Body.Bytes(), &j)
	b.ReportAllocs()
	for b.Loop() {
		serve(b, h, "GET", "/api/v1/jobs/"+j.ID, tok, "", 200)
	}
}

func BenchmarkList(b *testing.B) {
	h, tok := benchEnv(b)
	for range 1000 {
		serve(b, h, "POST", "/api/v1/jobs", tok, containerSpec, 201)
	}
	b.ReportAllocs()
	for b.Loop() {
		serve(b, h, "GET", "/api/v1/jobs?size=50&statusState=queued&labelSelector=app%3Dx", tok, "", 200)
	}
}

// BenchmarkWhoAmI is the cost of authentication alone: the token looked up
// and the caller's teams read (two SQLite reads), the active team resolved.
func BenchmarkWhoAmI(b *testing.B) {
	h, tok := benchEnv(b)
	b.ReportAllocs()
	for b.Loop() {
		serve(b, h, "GET", "/api/v1/whoami", tok, "", 200)
	}
}
