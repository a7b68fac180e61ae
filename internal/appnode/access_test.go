package appnode_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/cosmicac/cosmicac/internal/apiv1"
	"github.com/cosmicac/cosmicac/internal/appnode/appnodetest"
	"github.com/cosmicac/cosmicac/internal/authz/authztest"
)

// The access matrix (docs/permissions.md) tried on the real handlers: every
// route of apiv1.Routes, with every kind of caller, against what the doc's
// tables say it should answer.

// who is a kind of caller, as the model (authztest.Expect) sees it.
type who = authztest.Caller

var callers = authztest.Callers

// accessEnv is appnodetest's world of the access tests.
type accessEnv struct {
	*appnodetest.AccessEnv
}

const zedPassword = appnodetest.ZedPassword

func newAccessEnv(t *testing.T, withPassword bool) *accessEnv {
	return &accessEnv{appnodetest.NewAccessEnv(t, withPassword)}
}

// request makes rt's request as w: the path filled in with the env's
// objects, and a valid body.
func (e *accessEnv) request(rt apiv1.Route, w who) *http.Request {
	path := rt.Path
	tokenID := e.TokenIDs[w.Name]
	if tokenID == "" {
		tokenID = "tok_0000000000000000"
	}
	for k, v := range map[string]string{"{id}": e.Job.ID, "{team}": "ml", "{n}": "0", "{location}": "us", "{name}": "zed", "{user}": "zed", "{path}": "", "{alias}": "main"} {
		path = strings.ReplaceAll(path, k, v)
	}
	switch rt.Op {
	case apiv1.OpRevokeToken:
		path = apiv1.Prefix + "/tokens/" + tokenID
	case apiv1.OpRevokeAPIKey:
		path = apiv1.Prefix + "/api-keys/" + e.KeyID
	case apiv1.OpRotateAPIKey:
		path = apiv1.Prefix + "/api-keys/" + e.KeyID + "/rotate"
	case apiv1.OpRemoveRack:
		path = apiv1.Prefix + "/racks/r1"
	}
	body := map[string]string{
		apiv1.OpCreateJob:               `{"type":"gpu-container","name":"b","location":"us","image":"ubuntu:24.04"}`,
		apiv1.OpJobCommand:              containerSpec,
		apiv1.OpUpdateJob:               containerSpec,
		apiv1.OpLabelJob:                `{"name":"b","value":"c"}`,
		apiv1.OpDataSyncJob:             `{"direction":"push","volume":"v"}`,
		apiv1.OpRegisterRack:            `{"id":"r2","location":"us","gpuModel":"H100","workerKey":"` + rackKey + `"}`,
		apiv1.OpCreateAPIKey:            `{"name":"k2"}`,
		apiv1.OpLogin:                   `{"user":"zed","password":"` + zedPassword + `"}`,
		apiv1.OpCreateSession:           `{"user":"zed","password":"` + zedPassword + `"}`,
		apiv1.OpChangePassword:          `{"password":"a-new-password"}`,
		apiv1.OpCreateToken:             `{"name":"t"}`,
		apiv1.OpCreateUser:              `{"name":"newbie"}`,
		apiv1.OpUpdateUser:              `{"platformAdmin":false}`,
		apiv1.OpSetPassword:             `{"password":"another-password"}`,
		apiv1.OpCreateTeam:              `{"name":"newteam"}`,
		apiv1.OpPutMember:               `{"role":"viewer"}`,
		apiv1.OpSetQuota:                `{"gpus":4}`,
		apiv1.OpInferenceAuth:           `{"requireAuth":false}`,
		apiv1.OpRotateAPIKey:            `{}`,
		apiv1.OpCreateDatastore:         `{"alias":"d2","endpoint":"https://s3.example.net","credentials":{"accessKey":"AK123456789","secretKey":"s"}}`,
		apiv1.OpSetDatastoreCredentials: `{"accessKey":"AK123456789","secretKey":"s"}`,
	}[rt.Op]
	req := httptest.NewRequest(rt.Method, path, strings.NewReader(body))
	req.RemoteAddr = fmt.Sprintf("192.0.2.%d:4000", len(w.Name))
	if tok := e.Tokens[w.Name]; tok != "" && !w.Anon {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	if w.PlatformAdmin || w.Foreign {
		req.Header.Set(apiv1.HeaderTeam, "ml")
	}
	return req
}

// TestAccessMatrix: each route answers each kind of caller as
// docs/permissions.md says: allowed (anything but 401, 403 and 404; the
// request is valid, so the handler's own answer), or the denial the model
// expects. A route that changes something gets a fresh platform for each
// caller.
func TestAccessMatrix(t *testing.T) {
	doc, err := authztest.Read()
	if err != nil {
		t.Fatal(err)
	}
	shared := newAccessEnv(t, false)
	for _, rt := range apiv1.Routes() {
		t.Run(rt.Op, func(t *testing.T) {
			for _, w := range callers {
				e := shared
				if rt.Method != http.MethodGet && rt.Method != http.MethodHead {
					e = newAccessEnv(t, rt.Op == apiv1.OpLogin || rt.Op == apiv1.OpCreateSession)
				}
				want := authztest.Expect(doc, rt.Method, rt.Path, w)
				before := e.Ork.Writes()
				rec := httptest.NewRecorder()
				e.App.Handler().ServeHTTP(rec, e.request(rt, w))
				got := rec.Code
				switch {
				case want == 0 && (got == 401 || got == 403 || got == 404 || got == 400):
					t.Errorf("%s: %d, want it allowed: %s", w.Name, got, rec.Body)
				case want != 0 && got != want:
					t.Errorf("%s: %d, want %d: %s", w.Name, got, want, rec.Body)
				case want != 0 && e.Ork.Writes() != before:
					t.Errorf("%s: denied (%d), but the ork saw a write", w.Name, got)
				}
				if want == http.StatusNotFound && strings.Contains(rec.Body.String(), e.Job.Spec.Name+`"`) {
					t.Errorf("%s: a 404 shows the job: %s", w.Name, rec.Body)
				}
			}
		})
	}
}
