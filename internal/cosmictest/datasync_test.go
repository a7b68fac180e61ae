package cosmictest

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/cosmicac/cosmicac/internal/apiv1"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/datasync"
	"github.com/cosmicac/cosmicac/internal/datasync/dataapi"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/s3test"
)

// TestVolumeSignedForItsJobAlone: on `cosmicac up`, a team admin
// registers a datastore on a real S3 server; a job names it in an RW
// volume; the job's instance agent, with its own key over the fabric,
// gets signed requests from the app-node and pulls the volume's objects
// and pushes its changes, never holding the datastore's key; another
// job's agent is refused that job's volume; a read-only volume of it is
// signed no put (docs/data.md).
func TestVolumeSignedForItsJobAlone(t *testing.T) {
	e := NewEnv(t)
	srv := s3test.Start(t)
	srv.MakeBucket(t, "datasets")
	s3 := srv.Client(t)
	ctx := context.Background()
	for k, v := range map[string]string{"train/a.txt": "alpha", "train/sub/b.txt": "beta", "other/c.txt": "not the volume's"} {
		if _, err := s3.PutObject(ctx, "datasets", k, strings.NewReader(v), int64(len(v)), minio.PutObjectOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.Client.CreateDatastore(e.Ctx, apiv1.CreateDatastore{Alias: "main", Endpoint: srv.Endpoint, Region: srv.Region,
		Credentials: apiv1.DatastoreCredentials{AccessKey: srv.AccessKey, SecretKey: srv.SecretKey}}); err != nil {
		t.Fatal(err)
	}
	spec := Container("data", 1)
	spec.Volumes = []cosmic.Volume{
		{MountPath: "/data", Permission: "RW", Source: cosmic.VolumeSource{DataStore: &cosmic.DataStoreSource{Alias: "main", Container: "datasets", Prefix: "train"}}},
		{MountPath: "/ro", Source: cosmic.VolumeSource{DataStore: &cosmic.DataStoreSource{Alias: "main", Container: "datasets", Prefix: "other"}}},
	}
	j := e.Create(spec)
	other := e.Create(Container("other", 1))
	e.WaitState(j.ID, cosmic.StateRunning)
	e.WaitState(other.ID, cosmic.StateRunning)

	agentNode := func(jobID string) *fabric.Node {
		t.Helper()
		id, ok := e.P.AgentIdentity(jobID, 0)
		if !ok {
			t.Fatalf("no agent identity of job %s", jobID)
		}
		n, err := fabric.New(fabric.Config{Component: "test-agent", Identity: id, Policy: fabric.NewAllowList(e.P.AppNode.PublicKey())})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
		n.AddAddrs(e.P.AppNode.PublicKey(), e.P.AppNode.Addr())
		return n
	}
	n := agentNode(j.ID)
	signer := dataapi.Signer{Node: n, AppNode: e.P.AppNode.PublicKey(), Job: j.ID, Volume: 0}
	dir := t.TempDir()
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	st, err := datasync.Pull(cctx, signer, dir, datasync.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "sub/b.txt")); st.Objects != 2 || string(got) != "beta" {
		t.Fatalf("pulled %+v, sub/b.txt %q", st, got)
	}
	os.WriteFile(filepath.Join(dir, "result.txt"), []byte("written in the job"), 0o644)
	if st, err := datasync.Push(cctx, signer, dir, false, datasync.Options{}); err != nil || st.Objects != 1 {
		t.Fatalf("push: %+v, %v", st, err)
	}
	obj, err := s3.GetObject(ctx, "datasets", "train/result.txt", minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	b.ReadFrom(obj)
	if b.String() != "written in the job" {
		t.Errorf("train/result.txt in the store: %q", b.String())
	}
	// The read-only volume: listed and read, never written.
	ro := dataapi.Signer{Node: n, AppNode: e.P.AppNode.PublicKey(), Job: j.ID, Volume: 1}
	if _, err := ro.Sign(cctx, datasync.OpPut, []string{"x"}, ""); fabric.ErrorCode(err) != fabric.CodeBadRequest {
		t.Errorf("a put on the RO volume: %v, want bad_request", err)
	}
	// Another job's agent: refused this job's volumes.
	thief := dataapi.Signer{Node: agentNode(other.ID), AppNode: e.P.AppNode.PublicKey(), Job: j.ID, Volume: 0}
	if _, err := thief.Sign(cctx, datasync.OpList, nil, ""); fabric.ErrorCode(err) != fabric.CodeForbidden {
		t.Errorf("another job's agent: %v, want forbidden", err)
	}
	// Nothing signed carries the secret key.
	reqs, err := signer.Sign(cctx, datasync.OpGet, []string{"a.txt"}, "")
	if err != nil || len(reqs) != 1 || strings.Contains(reqs[0].URL, srv.SecretKey) {
		t.Errorf("a signed request: %+v, %v", reqs, err)
	}
}

// TestVolumeCopiedInBeforeTheCommand: on the simulated rack, a job's
// datastore volume is in (at the replica's home + its mount path, as the
// job's system log says) before the job is running and its command
// starts, which reads it; the job's log tells what came in. A wrong secret
// key fails the job with bad_credentials, a missing bucket with
// no_such_container, and neither runs its command.
func TestVolumeCopiedInBeforeTheCommand(t *testing.T) {
	e := NewEnv(t)
	srv := s3test.Start(t)
	srv.MakeBucket(t, "datasets")
	ctx := context.Background()
	if _, err := srv.Client(t).PutObject(ctx, "datasets", "train/a.txt", strings.NewReader("alpha"), 5, minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	for alias, secret := range map[string]string{"main": srv.SecretKey, "wrong": srv.SecretKey + "x"} {
		if _, err := e.Client.CreateDatastore(e.Ctx, apiv1.CreateDatastore{Alias: alias, Endpoint: srv.Endpoint, Region: srv.Region,
			Credentials: apiv1.DatastoreCredentials{AccessKey: srv.AccessKey, SecretKey: secret}}); err != nil {
			t.Fatal(err)
		}
	}
	withVolume := func(name, alias, bucket string) cosmic.Spec {
		s := Container(name, 1)
		s.Command = []string{"sh", "-c", `cp "$HOME/data/a.txt" "$HOME/seen.txt"`}
		s.Volumes = []cosmic.Volume{{MountPath: "/data", Source: cosmic.VolumeSource{DataStore: &cosmic.DataStoreSource{Alias: alias, Container: bucket, Prefix: "train"}}}}
		return s
	}
	good := e.Create(withVolume("good", "main", "datasets"))
	bad := e.Create(withVolume("bad", "wrong", "datasets"))
	missing := e.Create(withVolume("missing", "main", "nope"))

	j := e.WaitState(good.ID, cosmic.StateStopped, cosmic.StateFailed)
	home := filepath.Join(e.DataDir, "vms", good.ID+"-r0")
	if got, err := os.ReadFile(filepath.Join(home, "seen.txt")); err != nil || string(got) != "alpha" {
		t.Fatalf("the command saw %q, %v (job %s: %+v)", got, err, j.Status.State, j.Status.Reason)
	}
	for id, code := range map[string]cosmic.ReasonCode{bad.ID: cosmic.ReasonBadCredentials, missing.ID: cosmic.ReasonNoSuchContainer} {
		j := e.WaitState(id, cosmic.StateFailed)
		if j.Status.Reason == nil || j.Status.Reason.Code != code {
			t.Errorf("job %s failed with %+v, want %s", j.Spec.Name, j.Status.Reason, code)
		}
		if _, err := os.Stat(filepath.Join(e.DataDir, "vms", id+"-r0", "seen.txt")); err == nil {
			t.Errorf("job %s ran its command without its volume", j.Spec.Name)
		}
	}
}
