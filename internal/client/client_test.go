package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/apiv1"
	"github.com/cosmicac/cosmicac/internal/appnode/appnodetest"
	"github.com/cosmicac/cosmicac/internal/client"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/ork/orkapi"
	"github.com/cosmicac/cosmicac/internal/waittest"
)

const rackKey = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"

func spec(name string) cosmic.Spec {
	return cosmic.Spec{Type: cosmic.TypeGPUContainer, Name: name, Location: "us", Image: "ubuntu:24.04",
		Labels: map[string]string{"app": name}, Resources: cosmic.Resources{GPU: 2}}
}

func TestJobsRoundTrip(t *testing.T) {
	e := appnodetest.NewEnv(t)
	ctx := context.Background()
	c := client.New(e.URL()+"/api/v1/", e.AdminToken) // a trailing /api/v1 is accepted

	j, err := c.CreateJob(ctx, spec("a"))
	if err != nil {
		t.Fatal(err)
	}
	if j.User != "admin" || j.Status.State != cosmic.StateQueued {
		t.Errorf("created %+v", j)
	}
	if _, err := c.CreateJob(ctx, spec("b")); err != nil {
		t.Fatal(err)
	}
	got, err := c.GetJob(ctx, j.ID)
	if err != nil || got.ID != j.ID {
		t.Fatalf("get: %+v %v", got, err)
	}
	l, err := c.ListJobs(ctx, client.ListOptions{Labels: map[string]string{"app": "a"}, States: []cosmic.State{cosmic.StateQueued},
		UserName: "admin", UpdatedBefore: time.Now().Add(24 * 365 * time.Hour * 10), Sort: "name", Order: "asc", Page: 1, Size: 10})
	if err != nil || l.Total != 1 || l.Items[0].ID != j.ID || l.Size != 10 {
		t.Fatalf("list: %+v %v", l, err)
	}
	if l, err := c.ListJobs(ctx, client.ListOptions{}); err != nil || l.Total != 2 {
		t.Fatalf("list all: %+v %v", l, err)
	}
	if j, err = c.LabelJob(ctx, j.ID, "tier", "gold"); err != nil || j.Spec.Labels["tier"] != "gold" {
		t.Fatalf("label: %v %v", j.Spec.Labels, err)
	}
	if j, err = c.KillJob(ctx, j.ID); err != nil || j.Status.State != cosmic.StateStopped {
		t.Fatalf("kill: %s %v", j.Status.State, err)
	}
	if j, err = c.RestartJob(ctx, j.ID); err != nil || j.Status.State != cosmic.StateQueued {
		t.Fatalf("restart: %s %v", j.Status.State, err)
	}
	if err := e.Ork.SetState(j.ID, cosmic.StatePending, nil); err != nil {
		t.Fatal(err)
	}
	if j, err = c.RestartReplica(ctx, j.ID, 0); err != nil || j.Status.State != cosmic.StateRestarting {
		t.Fatalf("restart replica: %s %v", j.Status.State, err)
	}
	if _, err = c.DeleteReplica(ctx, j.ID, 3); client.StatusOf(err) != http.StatusNotFound {
		t.Fatalf("delete replica 3: %v", err)
	}
	if _, err = c.DeleteReplica(ctx, j.ID, 0); err != nil {
		t.Fatalf("delete replica: %v", err)
	}
	_, err = c.DataSync(ctx, j.ID, apiv1.DataSync{Direction: apiv1.DataSyncPush, Volume: "data"}, 0)
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != http.StatusConflict || ae.Code != apiv1.CodeConflict { // the job is not running
		t.Fatalf("datasync: %v", err)
	}
	if _, err := c.DeleteJob(ctx, j.ID, false); !errors.Is(err, cosmic.ErrConflict) {
		t.Fatalf("delete without force: %v", err)
	}
	if j, err = c.DeleteJob(ctx, j.ID, true); err != nil || j.Status.State != cosmic.StateDeleting {
		t.Fatalf("delete: %s %v", j.Status.State, err)
	}
	if _, err := c.GetJob(ctx, j.ID); !errors.Is(err, cosmic.ErrNotFound) {
		t.Fatalf("get deleted: %v", err)
	}
	cmd, err := c.Command(ctx, spec("a"))
	if err != nil || !strings.HasPrefix(cmd.Line, "cosmicac jobs create --type gpu-container") {
		t.Fatalf("command: %+v %v", cmd, err)
	}
}

func TestErrors(t *testing.T) {
	e := appnodetest.NewEnv(t)
	ctx := context.Background()
	c := client.New(e.URL(), e.AdminToken)
	bad := spec("x")
	bad.Resources.GPU = -1
	bad.Image = ""
	_, err := c.CreateJob(ctx, bad)
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != 400 || ae.Code != apiv1.CodeInvalid || !errors.Is(err, cosmic.ErrInvalid) {
		t.Fatalf("create invalid: %v", err)
	}
	fields := map[string]bool{}
	for _, f := range ae.FieldErrors() {
		fields[f.Field] = true
	}
	if !fields["resources.gpu"] || !fields["image"] {
		t.Errorf("field errors %v", ae.FieldErrors())
	}
	if !strings.Contains(err.Error(), "resources.gpu") {
		t.Errorf("message %q does not name the field", err)
	}
	if _, err := client.New(e.URL(), "").WhoAmI(ctx); client.StatusOf(err) != 401 {
		t.Errorf("no token: %v", err)
	}
	if _, err := c.GetJob(ctx, "nope"); client.StatusOf(err) != 400 {
		t.Errorf("bad id: %v", err)
	}
	// A non-JSON error body still gives an APIError.
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "bad gateway", http.StatusBadGateway)
	}))
	defer plain.Close()
	if _, err := client.New(plain.URL, "t").WhoAmI(ctx); client.StatusOf(err) != 502 || !strings.Contains(err.Error(), "bad gateway") {
		t.Errorf("plain error: %v", err)
	}
}

func TestRacksAndAccounts(t *testing.T) {
	e := appnodetest.NewEnv(t)
	ctx := context.Background()
	c := client.New(e.URL(), e.AdminToken)
	r, err := c.RegisterRack(ctx, apiv1.RegisterRack{ID: "r1", Location: "us", GPUModel: "GH100_H100_SXM5_80GB", WorkerKey: rackKey})
	if err != nil || r.ID != "r1" || r.Type != cosmic.RackTypeServer {
		t.Fatalf("register: %+v %v", r, err)
	}
	racks, err := c.ListRacks(ctx)
	if err != nil || len(racks) != 1 {
		t.Fatalf("list racks: %+v %v", racks, err)
	}
	viewer := client.New(e.URL(), e.AddUser(t, "v", "default", cosmic.RoleViewer))
	if err := viewer.RemoveRack(ctx, "r1", false); !errors.Is(err, cosmic.ErrForbidden) {
		t.Errorf("viewer removes rack: %v", err)
	}
	if err := c.RemoveRack(ctx, "r1", true); err != nil {
		t.Fatalf("remove: %v", err)
	}
	w, err := c.WhoAmI(ctx)
	if err != nil || w.User != "admin" || w.Role != cosmic.RoleOwner || !w.PlatformAdmin {
		t.Fatalf("whoami: %+v %v", w, err)
	}
	if h, err := client.New(e.URL(), "").Health(ctx); err != nil || h.Status != "ok" {
		t.Fatalf("health: %+v %v", h, err)
	}
	doc, err := client.New(e.URL(), "").OpenAPI(ctx)
	if err != nil || !json.Valid(doc) {
		t.Fatalf("openapi: %v", err)
	}
}

func TestWaitJob(t *testing.T) {
	e := appnodetest.NewEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := client.New(e.URL(), e.AdminToken, client.WithPollInterval(5*time.Millisecond))
	j, err := c.CreateJob(ctx, spec("w"))
	if err != nil {
		t.Fatal(err)
	}
	// Each state the client reports moves the job on to the next, so the
	// job changes only once the client has seen the state before: each
	// one is observed, however the polls fall. onChange runs in WaitJob's
	// caller, this goroutine.
	next := map[cosmic.State]cosmic.State{cosmic.StateQueued: cosmic.StatePending,
		cosmic.StatePending: cosmic.StateStarting, cosmic.StateStarting: cosmic.StateRunning}
	var seen []cosmic.State
	onChange := func(j cosmic.Job) {
		seen = append(seen, j.Status.State)
		if s, ok := next[j.Status.State]; ok {
			if err := e.Ork.SetState(j.ID, s, nil); err != nil {
				t.Errorf("move the job to %s: %v", s, err)
			}
		}
	}
	final, err := c.WaitJob(ctx, j.ID, client.Settled, onChange)
	if err != nil || final.Status.State != cosmic.StateRunning {
		t.Fatalf("wait: %s %v", final.Status.State, err)
	}
	want := []cosmic.State{cosmic.StateQueued, cosmic.StatePending, cosmic.StateStarting, cosmic.StateRunning}
	if !slices.Equal(seen, want) {
		t.Errorf("onChange saw %v, want %v", seen, want)
	}

	t.Run("not found ends the wait", func(t *testing.T) {
		if _, err := c.WaitJob(ctx, cosmic.NewJobID(), client.Settled, nil); !errors.Is(err, cosmic.ErrNotFound) {
			t.Errorf("err = %v", err)
		}
	})
	t.Run("context ends the wait", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
		defer cancel()
		if _, err := c.WaitJob(ctx, j.ID, func(cosmic.Job) bool { return false }, nil); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("err = %v", err)
		}
	})
	t.Run("unavailable is retried", func(t *testing.T) {
		e.Ork.FailWith(errUnavailable)
		before := e.Ork.Calls(orkapi.MethodGetJob)
		done := make(chan error, 1)
		go func() {
			_, err := c.WaitJob(ctx, j.ID, client.Settled, nil)
			done <- err
		}()
		// The ork comes back once it has refused two polls, so the wait
		// has ridden out an outage (or ended, wrongly, on the first).
		waittest.Until(t, func() bool { return len(done) > 0 || e.Ork.Calls(orkapi.MethodGetJob) >= before+2 },
			"two polls refused by the ork")
		e.Ork.FailWith(nil)
		if err := <-done; err != nil {
			t.Errorf("err = %v", err)
		}
	})
}

var errUnavailable = fabric.Errorf(fabric.CodeUnavailable, "ork down")
