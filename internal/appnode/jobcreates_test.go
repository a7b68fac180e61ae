package appnode_test

import (
	"net/http"
	"testing"

	"github.com/cosmicac/cosmicac/internal/appnode"
	"github.com/cosmicac/cosmicac/internal/appnode/appnodetest"
	"github.com/cosmicac/cosmicac/internal/cosmic"
)

// TestJobCreatesPerTeamLimited: one team's burst of creates is cut at its
// bound with 429 and Retry-After, and reaches the ork no further, while
// another team still creates.
func TestJobCreatesPerTeamLimited(t *testing.T) {
	e := appnodetest.NewEnvConfig(t, func(c *appnode.Config) { c.JobCreatesPerMinute = 3 })
	ml := e.AddUser(t, "alice", "ml", cosmic.RoleMember)
	cv := e.AddUser(t, "bob", "cv", cosmic.RoleMember)
	spec := `{"type":"gpu-container","location":"us","image":"ubuntu:24.04"}`
	create := func(token string) *http.Response {
		rec := do(e, "POST", "/api/v1/jobs", spec, map[string]string{"Authorization": "Bearer " + token})
		return rec.Result()
	}
	for i := range 3 {
		if r := create(ml); r.StatusCode != http.StatusCreated {
			t.Fatalf("ml's create %d: %d", i, r.StatusCode)
		}
	}
	before := e.Ork.Writes()
	r := create(ml)
	if r.StatusCode != http.StatusTooManyRequests || r.Header.Get("Retry-After") == "" {
		t.Fatalf("ml's fourth create within the minute: %d, Retry-After %q; want 429 with it", r.StatusCode, r.Header.Get("Retry-After"))
	}
	if e.Ork.Writes() != before {
		t.Error("a refused create reached the ork")
	}
	if r := create(cv); r.StatusCode != http.StatusCreated {
		t.Errorf("another team's create: %d", r.StatusCode)
	}
}
