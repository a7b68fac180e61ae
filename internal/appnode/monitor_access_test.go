package appnode_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/cosmicac/cosmicac/internal/authz/authztest"
	"github.com/cosmicac/cosmicac/internal/monitor"
)

// TestMonitorAccessMatrix: /monitor/v1 (a job's logs) answers each kind of
// caller what docs/permissions.md says of reading the job: the monitor asks
// the app-node with the caller's own credential, and answers its status.
func TestMonitorAccessMatrix(t *testing.T) {
	doc, err := authztest.Read()
	if err != nil {
		t.Fatal(err)
	}
	e := newAccessEnv(t, true)
	auth := monitor.NewAPIAuthorizer("http://app-node", monitor.HandlerTransport(e.App.Handler()))
	auth.TTL = -1 // no cache: each caller is asked anew
	m, err := monitor.New(monitor.DefaultConfig(""), monitor.Deps{Viewers: auth})
	if err != nil {
		t.Fatal(err)
	}
	h := m.Handler()
	for _, w := range callers {
		want := authztest.Expect(doc, http.MethodGet, "/api/v1/jobs/{id}", w)
		if w.Foreign {
			want = 404 // no team is named to the monitor; the job is not in theirs
		}
		r := httptest.NewRequest(http.MethodGet, monitor.LogsPath+e.Job.ID+"/logs?follow=false", nil)
		if tok := e.Tokens[w.Name]; tok != "" && !w.Anon {
			r.Header.Set("Authorization", "Bearer "+tok)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		switch {
		case want == 0 && rec.Code != http.StatusOK:
			t.Errorf("%s: %d, want 200: %s", w.Name, rec.Code, rec.Body)
		case want != 0 && rec.Code != want:
			t.Errorf("%s: %d, want %d: %s", w.Name, rec.Code, want, rec.Body)
		}
	}
	// A browser session: the cookie alone (zed is a viewer of ml).
	ses := do(e.Env, "POST", "/api/v1/session", `{"user":"zed","password":"`+zedPassword+`"}`, nil)
	if ses.Code != http.StatusCreated {
		t.Fatalf("session: %d %s", ses.Code, ses.Body)
	}
	r := httptest.NewRequest(http.MethodGet, monitor.LogsPath+e.Job.ID+"/logs?follow=false", nil)
	r.AddCookie(sessionCookie(t, ses))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	if rec.Code != http.StatusOK {
		t.Errorf("with the session cookie: %d %s", rec.Code, rec.Body)
	}
}
