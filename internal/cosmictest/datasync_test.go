package cosmictest

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/cosmicac/cosmicac/internal/apiv1"
	"github.com/cosmicac/cosmicac/internal/client"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/datasync"
	"github.com/cosmicac/cosmicac/internal/datasync/dataapi"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/gittest"
	"github.com/cosmicac/cosmicac/internal/s3test"
	"github.com/cosmicac/cosmicac/internal/waittest"
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
	e.AddDatastore(srv, "main")
	spec := Container("data", 1)
	spec.Volumes = []cosmic.Volume{
		{MountPath: "/data", Permission: "RW", Source: cosmic.VolumeSource{DataStore: &cosmic.DataStoreSource{Alias: "main", Container: "datasets", Prefix: "train"}}},
		{MountPath: "/ro", Source: cosmic.VolumeSource{DataStore: &cosmic.DataStoreSource{Alias: "main", Container: "datasets", Prefix: "other"}}},
		{MountPath: "/tgt", Permission: "RW", Source: cosmic.VolumeSource{DataStore: &cosmic.DataStoreSource{Alias: "main", Container: "datasets", Prefix: "train"}},
			Target: &cosmic.VolumeTarget{TargetDataStore: &cosmic.DataStoreSource{Alias: "main", Container: "datasets", Prefix: "results"}}},
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
	// A volume pushed to a target reads its source, never writes it, and
	// writes its target, never reads it.
	src := dataapi.Signer{Node: n, AppNode: e.P.AppNode.PublicKey(), Job: j.ID, Volume: 2}
	tgt := dataapi.Signer{Node: n, AppNode: e.P.AppNode.PublicKey(), Job: j.ID, Volume: 2, Target: true}
	for name, try := range map[string]func() error{
		"put on the source":    func() error { _, err := src.Sign(cctx, datasync.OpPut, []string{"x"}, ""); return err },
		"delete on the source": func() error { _, err := src.Sign(cctx, datasync.OpDelete, []string{"x"}, ""); return err },
		"get on the target":    func() error { _, err := tgt.Sign(cctx, datasync.OpGet, []string{"x"}, ""); return err },
		"delete on the target": func() error { _, err := tgt.Sign(cctx, datasync.OpDelete, []string{"x"}, ""); return err },
	} {
		if err := try(); fabric.ErrorCode(err) != fabric.CodeBadRequest {
			t.Errorf("%s: %v, want bad_request", name, err)
		}
	}
	if _, err := tgt.Sign(cctx, datasync.OpPut, []string{"x"}, ""); err != nil {
		t.Errorf("a put on the target: %v", err)
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

// TestVolumePushedWhenTheCommandEnds: on the simulated rack, what the
// command wrote in an RW volume is in the store once the job has stopped;
// an RWD volume also loses the remote objects the command deleted; a
// push to a volumeTarget goes there, not to the source; an RO volume
// sends nothing back.
func TestVolumePushedWhenTheCommandEnds(t *testing.T) {
	e := NewEnv(t)
	srv := s3test.Start(t)
	for _, b := range []string{"datasets", "results"} {
		srv.MakeBucket(t, b)
	}
	s3 := srv.Client(t)
	ctx := context.Background()
	for _, k := range []string{"rw/keep.txt", "rwd/drop.txt", "rwd/keep.txt", "ro/a.txt"} {
		if _, err := s3.PutObject(ctx, "datasets", k, strings.NewReader("x"), 1, minio.PutObjectOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	e.AddDatastore(srv, "main")
	ds := func(bucket, prefix string) *cosmic.DataStoreSource {
		return &cosmic.DataStoreSource{Alias: "main", Container: bucket, Prefix: prefix}
	}
	s := Container("train", 1)
	s.Command = []string{"sh", "-c", `echo model > "$HOME/rw/out.txt" && rm "$HOME/rwd/drop.txt" && echo x > "$HOME/ro/new.txt" && echo r > "$HOME/tgt/result.txt"`}
	s.Volumes = []cosmic.Volume{
		{MountPath: "/rw", Permission: "RW", Source: cosmic.VolumeSource{DataStore: ds("datasets", "rw")}},
		{MountPath: "/rwd", Permission: "RWD", Source: cosmic.VolumeSource{DataStore: ds("datasets", "rwd")}},
		{MountPath: "/ro", Source: cosmic.VolumeSource{DataStore: ds("datasets", "ro")}},
		{MountPath: "/tgt", Permission: "RW", Source: cosmic.VolumeSource{DataStore: ds("datasets", "in")}, Target: &cosmic.VolumeTarget{TargetDataStore: ds("results", "run1")}},
	}
	j := e.Create(s)
	if j = e.WaitState(j.ID, cosmic.StateStopped, cosmic.StateFailed); j.Status.State != cosmic.StateStopped {
		t.Fatalf("the job %s: %+v", j.Status.State, j.Status.Reason)
	}
	keys := func(bucket string) map[string]bool {
		out := map[string]bool{}
		for o := range s3.ListObjects(ctx, bucket, minio.ListObjectsOptions{Recursive: true}) {
			out[o.Key] = true
		}
		return out
	}
	data, results := keys("datasets"), keys("results")
	for k, want := range map[string]bool{"rw/out.txt": true, "rw/keep.txt": true, "rwd/drop.txt": false, "rwd/keep.txt": true,
		"ro/new.txt": false, "in/result.txt": false} {
		if data[k] != want {
			t.Errorf("datasets/%s in the store: %v, want %v", k, data[k], want)
		}
	}
	if !results["run1/result.txt"] {
		t.Errorf("the target volume's file is not in results/run1: %v", results)
	}
}

// TestFailedPushKeepsTheFiles: a push refused by the store (the
// datastore's credentials were replaced with wrong ones while the job
// ran) fails the job with bad_credentials, saying the files are kept, and
// they are, on the replica's disk.
func TestFailedPushKeepsTheFiles(t *testing.T) {
	e := NewEnv(t)
	srv := s3test.Start(t)
	srv.MakeBucket(t, "datasets")
	e.AddDatastore(srv, "main")
	s := Container("train", 1)
	s.Command = []string{"sh", "-c", `while [ ! -f "$HOME/go" ]; do sleep 0.05; done; echo model > "$HOME/out/model.bin"`}
	s.Volumes = []cosmic.Volume{{MountPath: "/out", Permission: "RW",
		Source: cosmic.VolumeSource{DataStore: &cosmic.DataStoreSource{Alias: "main", Container: "datasets", Prefix: "out"}}}}
	j := e.Create(s)
	e.WaitState(j.ID, cosmic.StateRunning)
	if _, err := e.Client.SetDatastoreCredentials(e.Ctx, "main", apiv1.DatastoreCredentials{AccessKey: srv.AccessKey, SecretKey: "wrong-secret"}); err != nil {
		t.Fatal(err)
	}
	home := filepath.Join(e.DataDir, "vms", j.ID+"-r0")
	if err := os.WriteFile(filepath.Join(home, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	j = e.WaitState(j.ID, cosmic.StateFailed, cosmic.StateStopped)
	if j.Status.Reason == nil || j.Status.Reason.Code != cosmic.ReasonBadCredentials || !strings.Contains(j.Status.Reason.Message, "kept") {
		t.Errorf("the job ended %s with %+v, want failed with bad_credentials, its files kept", j.Status.State, j.Status.Reason)
	}
	if got, err := os.ReadFile(filepath.Join(home, "out", "model.bin")); err != nil || string(got) != "model\n" {
		t.Errorf("the job's file after the failed push: %q, %v", got, err)
	}
}

// TestDataSyncWhileRunning: POST …/datasync on a running job pushes what
// it wrote into its RW volume and pulls what arrived in the store since,
// each answered with what moved; a push of the RO volume is 400 naming
// it; every datastore volume is pulled when none is named.
func TestDataSyncWhileRunning(t *testing.T) {
	e := NewEnv(t)
	srv := s3test.Start(t)
	srv.MakeBucket(t, "datasets")
	s3 := srv.Client(t)
	ctx := context.Background()
	e.AddDatastore(srv, "main")
	s := Container("work", 1)
	s.Command = []string{"sleep", "600"}
	s.Volumes = []cosmic.Volume{
		{Name: "work", MountPath: "/work", Permission: "RW", Source: cosmic.VolumeSource{DataStore: &cosmic.DataStoreSource{Alias: "main", Container: "datasets", Prefix: "work"}}},
		{MountPath: "/ref", Source: cosmic.VolumeSource{DataStore: &cosmic.DataStoreSource{Alias: "main", Container: "datasets", Prefix: "ref"}}},
	}
	j := e.Create(s)
	e.WaitState(j.ID, cosmic.StateRunning)
	home := filepath.Join(e.DataDir, "vms", j.ID+"-r0")
	if err := os.WriteFile(filepath.Join(home, "work", "ckpt-1.bin"), []byte("checkpoint"), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := e.Client.DataSync(e.Ctx, j.ID, apiv1.DataSync{Direction: apiv1.DataSyncPush, Volume: "work"}, 0)
	if err != nil || len(res.Volumes) != 1 || res.Volumes[0].Objects != 1 || res.Volumes[0].Error != "" {
		t.Fatalf("push: %+v, %v", res, err)
	}
	if _, err := s3.StatObject(ctx, "datasets", "work/ckpt-1.bin", minio.StatObjectOptions{}); err != nil {
		t.Errorf("the pushed checkpoint is not in the store: %v", err)
	}
	if _, err := e.Client.DataSync(e.Ctx, j.ID, apiv1.DataSync{Direction: apiv1.DataSyncPush, Volume: "/ref"}, 0); !strings.Contains(fmt.Sprint(err), "read only") {
		t.Errorf("a push of the RO volume: %v, want a 400 saying it is read only", err)
	}
	for _, k := range []string{"work/new.txt", "ref/new.txt"} {
		if _, err := s3.PutObject(ctx, "datasets", k, strings.NewReader("fresh"), 5, minio.PutObjectOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	res, err = e.Client.DataSync(e.Ctx, j.ID, apiv1.DataSync{Direction: apiv1.DataSyncPull}, 0)
	if err != nil || len(res.Volumes) != 2 || res.State != apiv1.DataSyncDone || res.EndedAt.IsZero() {
		t.Fatalf("pull: %+v, %v", res, err)
	}
	for _, p := range []string{"work/new.txt", "ref/new.txt"} {
		if got, err := os.ReadFile(filepath.Join(home, p)); err != nil || string(got) != "fresh" {
			t.Errorf("%s after the pull: %q, %v", p, got, err)
		}
	}
	if got, err := e.Client.GetDataSync(e.Ctx, j.ID, 0); err != nil || got.State != apiv1.DataSyncDone || got.Direction != apiv1.DataSyncPull || len(got.Volumes) != 2 {
		t.Errorf("the last sync: %+v, %v; want the pull, done", got, err)
	}

	// Without waiting: the answer comes as the sync begins, the sync
	// runs on, GET follows it to its end, and another sync meanwhile is
	// refused.
	const many = 2000
	for i := range many {
		if _, err := s3.PutObject(ctx, "datasets", fmt.Sprintf("ref/many/%04d", i), strings.NewReader("x"), 1, minio.PutObjectOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	res, err = e.Client.StartDataSync(e.Ctx, j.ID, apiv1.DataSync{Direction: apiv1.DataSyncPull, Volume: "/ref"}, 0)
	if err != nil || res.State != apiv1.DataSyncRunning || len(res.Volumes) != 1 || res.Volumes[0].State != apiv1.DataSyncQueued {
		t.Fatalf("a pull without waiting: %+v, %v; want it running, its volume queued", res, err)
	}
	if _, err := e.Client.DataSync(e.Ctx, j.ID, apiv1.DataSync{Direction: apiv1.DataSyncPush}, 0); !strings.Contains(fmt.Sprint(err), "still runs") {
		t.Errorf("a sync while the last runs: %v, want a 409 saying it still runs", err)
	}
	var last apiv1.DataSyncResult
	waittest.Until(t, func() bool {
		last, err = e.Client.GetDataSync(e.Ctx, j.ID, 0)
		return err == nil && last.State == apiv1.DataSyncDone
	}, "the pull to end (last: %+v, %v)", last, err)
	if v := last.Volumes[0]; v.State != apiv1.DataSyncDone || v.Objects != many+1 || v.TotalObjects != many+1 || v.TotalBytes != many+5 || v.Error != "" {
		t.Errorf("the pull as it ended: %+v; want done, the %d objects listed copied", v, many+1)
	}
	if n, err := os.ReadDir(filepath.Join(home, "ref", "many")); err != nil || len(n) != many {
		t.Errorf("the pulled directory holds %d files, %v; want %d", len(n), err, many)
	}
}

// TestVolumePushedAtKill: a job with no command, whose user works in its
// shell, is killed; what it wrote in its RW volume is pushed back as its
// VM powers off (the agent stops, pushes, then ends; its key stays bound
// for that alone), and the job's log says so. The agent of the stopped
// job may sign its volumes' requests, and nothing else. A forced delete
// of a running job pushes too.
func TestVolumePushedAtKill(t *testing.T) {
	e := NewEnv(t)
	srv := s3test.Start(t)
	srv.MakeBucket(t, "datasets")
	s3 := srv.Client(t)
	ctx := context.Background()
	e.AddDatastore(srv, "main")
	s := Container("notebook", 1)
	s.Volumes = []cosmic.Volume{{MountPath: "/work", Permission: "RW",
		Source: cosmic.VolumeSource{DataStore: &cosmic.DataStoreSource{Alias: "main", Container: "datasets", Prefix: "nb"}}}}
	j := e.Create(s)
	e.WaitState(j.ID, cosmic.StateRunning)
	home := filepath.Join(e.DataDir, "vms", j.ID+"-r0")
	if err := os.WriteFile(filepath.Join(home, "work", "notes.md"), []byte("written in a shell"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Client.KillJob(e.Ctx, j.ID); err != nil {
		t.Fatal(err)
	}
	e.records(j.ID, func(rs []client.LogRecord) bool {
		for _, r := range rs {
			if r.Step == "volume" && strings.Contains(r.Line, "1 objects") && strings.Contains(r.Line, "pushed") {
				return true
			}
		}
		return false
	})
	if _, err := s3.StatObject(ctx, "datasets", "nb/notes.md", minio.StatObjectOptions{}); err != nil {
		t.Errorf("the file written before the kill is not in the store: %v", err)
	}

	// A forced delete of a running job is a kill first: the file is
	// pushed, then the job goes.
	s.Name = "deleted-with-force"
	s.Volumes[0].Source.DataStore.Prefix = "forced"
	f := e.Create(s)
	e.WaitState(f.ID, cosmic.StateRunning)
	if err := os.WriteFile(filepath.Join(e.DataDir, "vms", f.ID+"-r0", "work", "last.md"), []byte("written before a forced delete"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Client.DeleteJob(e.Ctx, f.ID, true); err != nil {
		t.Fatal(err)
	}
	waittest.Until(t, func() bool {
		_, err := e.Client.GetJob(e.Ctx, f.ID)
		return err != nil
	}, "the job deleted with force to go")
	if _, err := s3.StatObject(ctx, "datasets", "forced/last.md", minio.StatObjectOptions{}); err != nil {
		t.Errorf("the file written before the forced delete is not in the store: %v", err)
	}
}

// TestGitVolumeClonedBeforeTheCommand: on the simulated rack, a
// publicGit volume holds the repository's files, served by a real git
// server (git http-backend), before the command starts, which reads them;
// a repository that does not exist fails the job with
// volume_sync_failed, naming it, and runs no command.
func TestGitVolumeClonedBeforeTheCommand(t *testing.T) {
	e := NewEnv(t)
	git := gittest.Start(t, map[string]gittest.Repo{"tools": {
		Files: map[string]string{"README.md": "the tools\n", "bin/run.sh": "#!/bin/sh\necho ran\n"}, Exec: []string{"bin/run.sh"}}})
	withGit := func(name, url string) cosmic.Spec {
		s := Container(name, 1)
		s.Command = []string{"sh", "-c", `cat "$HOME/src/README.md" > "$HOME/seen.txt" && "$HOME/src/bin/run.sh" >> "$HOME/seen.txt"`}
		s.Volumes = []cosmic.Volume{{MountPath: "/src", Source: cosmic.VolumeSource{PublicGit: &cosmic.PublicGitSource{URL: url}}}}
		return s
	}
	good := e.Create(withGit("good", git.RepoURL("tools")))
	missing := e.Create(withGit("missing", git.RepoURL("nope")))
	j := e.WaitState(good.ID, cosmic.StateStopped, cosmic.StateFailed)
	home := filepath.Join(e.DataDir, "vms", good.ID+"-r0")
	if got, err := os.ReadFile(filepath.Join(home, "seen.txt")); err != nil || string(got) != "the tools\nran\n" {
		t.Fatalf("the command saw %q, %v (job %s: %+v)", got, err, j.Status.State, j.Status.Reason)
	}
	if out := git.Git(filepath.Join(home, "src"), "rev-parse", "HEAD"); strings.TrimSpace(out) != git.Head("tools") {
		t.Errorf("the volume's commit %q, want the repository's %s", out, git.Head("tools"))
	}
	j = e.WaitState(missing.ID, cosmic.StateFailed)
	if j.Status.Reason == nil || j.Status.Reason.Code != cosmic.ReasonVolumeSyncFailed || !strings.Contains(j.Status.Reason.Message, "nope.git") {
		t.Errorf("a missing repository failed the job with %+v, want volume_sync_failed naming it", j.Status.Reason)
	}
	if _, err := os.Stat(filepath.Join(e.DataDir, "vms", missing.ID+"-r0", "seen.txt")); err == nil {
		t.Error("the job ran its command without its volume")
	}
}

// TestArchiveVolume: a volume kept as one tar.gz object (dataStore.archive)
// is unpacked into the volume before the command, which reads it and
// writes beside it; when the command ends the volume is packed back into
// the object, which then holds what the job wrote.
func TestArchiveVolume(t *testing.T) {
	e := NewEnv(t)
	srv := s3test.Start(t)
	srv.MakeBucket(t, "datasets")
	s3 := srv.Client(t)
	var b bytes.Buffer
	gz := gzip.NewWriter(&b)
	tw := tar.NewWriter(gz)
	tw.WriteHeader(&tar.Header{Name: "in/a.txt", Mode: 0o644, Size: 5, Typeflag: tar.TypeReg})
	tw.Write([]byte("alpha"))
	tw.Close()
	gz.Close()
	if _, err := s3.PutObject(e.Ctx, "datasets", "packs/work.tar.gz", bytes.NewReader(b.Bytes()), int64(b.Len()), minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	e.AddDatastore(srv, "main")
	s := Container("packed", 1)
	s.Command = []string{"sh", "-c", `cat "$HOME/work/in/a.txt" > "$HOME/work/out.txt"`}
	s.Volumes = []cosmic.Volume{{MountPath: "/work", Permission: "RW",
		Source: cosmic.VolumeSource{DataStore: &cosmic.DataStoreSource{Alias: "main", Container: "datasets", Prefix: "packs/work.tar.gz", Archive: "tar.gz"}}}}
	j := e.Create(s)
	if j = e.WaitState(j.ID, cosmic.StateStopped, cosmic.StateFailed); j.Status.State != cosmic.StateStopped {
		t.Fatalf("the job %s: %+v", j.Status.State, j.Status.Reason)
	}
	obj, err := s3.GetObject(e.Ctx, "datasets", "packs/work.tar.gz", minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer obj.Close()
	zr, err := gzip.NewReader(obj)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	got := map[string]string{}
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		if h.Typeflag == tar.TypeReg {
			body, _ := io.ReadAll(tr)
			got[h.Name] = string(body)
		}
	}
	if got["in/a.txt"] != "alpha" || got["out.txt"] != "alpha" || len(got) != 2 {
		t.Errorf("the archive after the job: %v, want in/a.txt and the job's out.txt", got)
	}
}
