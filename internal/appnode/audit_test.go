package appnode_test

import (
	"net/http"
	"testing"

	"github.com/cosmicac/cosmicac/internal/apiv1"
	"github.com/cosmicac/cosmicac/internal/appnode/appnodetest"
	"github.com/cosmicac/cosmicac/internal/cosmic"
)

// TestPreviewsAreNotAudited: the new-job form asks POST /jobs/command on
// each keystroke; the command preview changes nothing, so it leaves no
// record, while creating the job does (issue 32, item 15).
func TestPreviewsAreNotAudited(t *testing.T) {
	e := appnodetest.NewEnv(t)
	alice := e.AddUser(t, "alice", "ml", cosmic.RoleMember)
	for range 3 {
		if a := call(t, e, "POST", "/api/v1/jobs/command?team=ml", alice, containerSpec); a.status != http.StatusOK {
			t.Fatalf("jobs/command: %d %s", a.status, a.body)
		}
	}
	if a := call(t, e, "POST", "/api/v1/jobs/command?team=ml", alice, `{"type":"gpu-container"}`); a.status != http.StatusBadRequest {
		t.Fatalf("jobs/command of an invalid spec: %d %s", a.status, a.body)
	}
	create(t, e, alice, containerSpec)
	var log apiv1.AuditList
	call(t, e, "GET", "/api/v1/audit?team=*", e.AdminToken, "").decode(t, &log)
	var creates int
	for _, r := range log.Items {
		switch r.Action {
		case apiv1.OpJobCommand:
			t.Errorf("the audit log records a command preview: %+v", r)
		case apiv1.OpCreateJob:
			creates++
		}
	}
	if creates != 1 {
		t.Errorf("the audit log has %d job creates, want 1: %+v", creates, log.Items)
	}
}
