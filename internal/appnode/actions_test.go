package appnode_test

import (
	"net/http"
	"slices"
	"testing"

	"github.com/cosmicac/cosmicac/internal/apiv1"
	"github.com/cosmicac/cosmicac/internal/appnode/appnodetest"
	"github.com/cosmicac/cosmicac/internal/cosmic"
)

// TestStatusActions: every job the API answers carries the actions its
// caller may take now: by its state for one who may operate the team's
// jobs (the create's answer, a get, a list, a kill's answer), none for a
// viewer; a managed-inference replica's own actions likewise.
func TestStatusActions(t *testing.T) {
	e := appnodetest.NewEnv(t)
	j := create(t, e, e.AdminToken, containerSpec)
	if want := []cosmic.Action{cosmic.ActionKill, cosmic.ActionDelete}; !slices.Equal(j.Status.Actions, want) {
		t.Errorf("created (%s): actions %v, want %v", j.Status.State, j.Status.Actions, want)
	}
	viewer := e.AddUser(t, "vera", j.Team, cosmic.RoleViewer)
	for _, st := range []cosmic.State{cosmic.StatePending, cosmic.StateRunning} {
		if err := e.Ork.SetState(j.ID, st, nil); err != nil {
			t.Fatal(err)
		}
	}
	get := func(id, token string) (j cosmic.Job) {
		t.Helper()
		call(t, e, "GET", apiv1.Prefix+"/jobs/"+id, token, "").decode(t, &j)
		return j
	}
	got := get(j.ID, e.AdminToken)
	if want := []cosmic.Action{cosmic.ActionRestart, cosmic.ActionKill, cosmic.ActionForceDelete}; !slices.Equal(got.Status.Actions, want) {
		t.Errorf("running: actions %v, want %v", got.Status.Actions, want)
	}
	var list apiv1.JobList
	call(t, e, "GET", apiv1.Prefix+"/jobs", e.AdminToken, "").decode(t, &list)
	if len(list.Items) != 1 || !slices.Equal(list.Items[0].Status.Actions, got.Status.Actions) {
		t.Errorf("list: %+v", list.Items)
	}
	if got := get(j.ID, viewer); got.Status.Actions != nil {
		t.Errorf("a viewer is answered actions %v", got.Status.Actions)
	}
	a := call(t, e, "POST", apiv1.Prefix+"/jobs/"+j.ID+"/kill", e.AdminToken, "")
	if a.status != http.StatusOK {
		t.Fatalf("kill: %d %s", a.status, a.body)
	}
	got = cosmic.Job{}
	a.decode(t, &got)
	if want := []cosmic.Action{cosmic.ActionRestart, cosmic.ActionDelete}; !slices.Equal(got.Status.Actions, want) {
		t.Errorf("killed (%s): actions %v, want %v", got.Status.State, got.Status.Actions, want)
	}

	inf := create(t, e, e.AdminToken, `{"type":"managed-inference","name":"m","location":"us","inference":{"runtime":"vllm","model":"Qwen/Qwen3-8B","replicas":2}}`)
	for _, st := range []cosmic.State{cosmic.StatePending, cosmic.StateRunning, cosmic.StateDegraded} {
		if err := e.Ork.SetState(inf.ID, st, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.Ork.SetReplicas(inf.ID, cosmic.StateRunning, cosmic.StateFailed); err != nil {
		t.Fatal(err)
	}
	got = get(inf.ID, e.AdminToken)
	if len(got.Status.Replicas) != 2 || got.Status.Replicas[0].Actions != nil ||
		!slices.Equal(got.Status.Replicas[1].Actions, []cosmic.Action{cosmic.ActionRestart, cosmic.ActionDelete}) {
		t.Errorf("a running and a failed replica: %+v", got.Status.Replicas)
	}
	for _, r := range get(inf.ID, viewer).Status.Replicas {
		if r.Actions != nil {
			t.Errorf("a viewer is answered replica %d's actions %v", r.Index, r.Actions)
		}
	}
}
