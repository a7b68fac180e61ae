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
