package cosmictest

import (
	"context"
	"net/http"
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

func TestZZSourceWritableWithTarget(t *testing.T) {
	e := NewEnv(t)
	srv := s3test.Start(t)
	srv.MakeBucket(t, "datasets")
	srv.MakeBucket(t, "results")
	s3 := srv.Client(t)
	ctx := context.Background()
	s3.PutObject(ctx, "datasets", "imagenet/shard0", strings.NewReader("precious"), 8, minio.PutObjectOptions{})
	if _, err := e.Client.CreateDatastore(e.Ctx, apiv1.CreateDatastore{Alias: "main", Endpoint: srv.Endpoint, Region: srv.Region,
		Credentials: apiv1.DatastoreCredentials{AccessKey: srv.AccessKey, SecretKey: srv.SecretKey}}); err != nil {
		t.Fatal(err)
	}
	spec := Container("data", 1)
	spec.Volumes = []cosmic.Volume{{MountPath: "/data", Permission: "RWD",
		Source: cosmic.VolumeSource{DataStore: &cosmic.DataStoreSource{Alias: "main", Container: "datasets", Prefix: "imagenet"}},
		Target: &cosmic.VolumeTarget{TargetDataStore: &cosmic.DataStoreSource{Alias: "main", Container: "results"}}}}
	j := e.Create(spec)
	e.WaitState(j.ID, cosmic.StateRunning)
	id, _ := e.P.AgentIdentity(j.ID, 0)
	n, err := fabric.New(fabric.Config{Component: "test-agent", Identity: id, Policy: fabric.NewAllowList(e.P.AppNode.PublicKey())})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	n.AddAddrs(e.P.AppNode.PublicKey(), e.P.AppNode.Addr())
	src := dataapi.Signer{Node: n, AppNode: e.P.AppNode.PublicKey(), Job: j.ID, Volume: 0} // Target: false
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for _, op := range []datasync.Op{datasync.OpPut, datasync.OpDelete} {
		reqs, err := src.Sign(cctx, op, []string{"shard0"}, "")
		t.Logf("%s on the SOURCE of a volume with a target: %d requests, err %v", op, len(reqs), err)
		if op == datasync.OpDelete && err == nil {
			req, _ := http.NewRequest(reqs[0].Method, reqs[0].URL, nil)
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				t.Logf("DELETE: %d", resp.StatusCode)
				resp.Body.Close()
			}
			_, serr := s3.StatObject(ctx, "datasets", "imagenet/shard0", minio.StatObjectOptions{})
			t.Logf("source object after: %v", serr)
		}
	}
}
