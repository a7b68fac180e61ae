package vms

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/cosmicac/cosmicac/internal/apiv1"
	"github.com/cosmicac/cosmicac/internal/client"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/gittest"
	"github.com/cosmicac/cosmicac/internal/platform"
	"github.com/cosmicac/cosmicac/internal/s3test"
)

// TestQEMURackVolumes: on the QEMU rack, with a real S3 server and a real
// git server (git http-backend) on the host's loopback listed in the
// rack's egress, a GPU Container Job's volumes are real files in the real
// VM at their mount paths: the objects of an RO volume are there before
// the job runs (sha256sum in the VM, by `jobs shell`, equals the uploaded
// objects'); a publicGit volume holds the repository's files; a file written in an RW
// volume reaches the bucket by `datasync` while the job runs, and another
// when the job is killed, pushed by the agent as the VM powers off. The
// VM reaches the store only through the rack's egress proxy (restrict=on:
// nothing else of the host), with requests the app-node signed: the VM
// never holds the datastore's key. Under TCG the boot takes about a
// minute.
func TestQEMURackVolumes(t *testing.T) { // not parallel: it sets the environment
	needAMD64Host(t)
	im, _ := vmImage(t)
	srv := s3test.Start(t)
	srv.MakeBucket(t, "datasets")
	s3 := srv.Client(t)
	want := map[string]string{} // path in /data -> sha256
	for _, k := range []string{"train/a.bin", "train/sub/b.bin", "train/sub/deeper/c.bin"} {
		b := make([]byte, 100_000+len(k)*1000)
		rand.Read(b)
		if _, err := s3.PutObject(t.Context(), "datasets", k, strings.NewReader(string(b)), int64(len(b)), minio.PutObjectOptions{}); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		want["./"+strings.TrimPrefix(k, "train/")] = hex.EncodeToString(sum[:])
	}
	git := gittest.Start(t, map[string]gittest.Repo{"tools": {Files: map[string]string{"README.md": "the tools\n", "bin/run.sh": "#!/bin/sh\necho ran\n"},
		Exec: []string{"bin/run.sh"}}})
	e, _ := qemuPlatform(t, "debian-12", im, 1, func(c *platform.Config) { c.QEMU.Rack.Egress = []string{srv.Endpoint, git.URL} })
	e.AddDatastore(srv, "main")
	j := e.Create(cosmic.Spec{Type: cosmic.TypeGPUContainer, Name: "data", Location: "local", Image: "debian-12",
		Resources: cosmic.Resources{GPU: 1}, Volumes: []cosmic.Volume{
			{MountPath: "/data", Permission: "RO", Source: cosmic.VolumeSource{DataStore: &cosmic.DataStoreSource{Alias: "main", Container: "datasets", Prefix: "train"}}},
			{Name: "out", MountPath: "/workspace/out", Permission: "RW", Source: cosmic.VolumeSource{DataStore: &cosmic.DataStoreSource{Alias: "main", Container: "datasets", Prefix: "out"}}},
			{MountPath: "/src", Source: cosmic.VolumeSource{PublicGit: &cosmic.PublicGitSource{URL: git.RepoURL("tools")}}},
		}})
	if j = e.WaitStateWithin(j.ID, 8*time.Minute, cosmic.StateRunning, cosmic.StateFailed); j.Status.State != cosmic.StateRunning {
		t.Fatalf("the job %s: %+v", j.Status.State, j.Status.Reason)
	}
	_, shell := jobShell(t, e, j.ID)
	got := map[string]string{}
	for _, line := range strings.Split(shell("cd /data && find . -type f | sort | xargs sha256sum"), "\n") {
		if sum, path, ok := strings.Cut(line, "  "); ok {
			got[path] = sum
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("sha256sum of /data in the VM:\n%v\nwant the uploaded objects':\n%v", got, want)
	}
	// The Git volume is the repository's commit, its files and modes.
	if got := shell("cat /src/README.md && /src/bin/run.sh"); got != "the tools\nran" {
		t.Errorf("the Git volume in the VM: %q", got)
	}
	// The VM reaches nothing of the host but through the forwards: the
	// store's own port, at the host's address in QEMU's user network, is
	// refused.
	port := srv.Endpoint[strings.LastIndex(srv.Endpoint, ":")+1:]
	if out := shell("timeout 5 bash -c 'echo > /dev/tcp/10.0.2.2/" + port + "' 2>/dev/null && echo reached || echo unreachable"); out != "unreachable" {
		t.Errorf("the VM and the store's port at the host's address: %q, want unreachable", out)
	}

	shell("echo checkpoint > /workspace/out/ckpt-1.txt && sync")
	res, err := e.Client.DataSync(e.Ctx, j.ID, apiv1.DataSync{Direction: apiv1.DataSyncPush, Volume: "out"}, 0)
	if err != nil || len(res.Volumes) != 1 || res.Volumes[0].Objects != 1 || res.Volumes[0].Error != "" {
		t.Fatalf("datasync push while running: %+v, %v", res, err)
	}
	if _, err := s3.StatObject(t.Context(), "datasets", "out/ckpt-1.txt", minio.StatObjectOptions{}); err != nil {
		t.Errorf("the checkpoint pushed while running is not in the bucket: %v", err)
	}

	shell("echo final > /workspace/out/final.txt && sync")
	if _, err := e.Client.KillJob(e.Ctx, j.ID); err != nil {
		t.Fatal(err)
	}
	e.WaitStateWithin(j.ID, 2*time.Minute, cosmic.StateStopped)
	var lines []string
	waitFor := time.Now().Add(3 * time.Minute)
	for {
		lines = lines[:0]
		err := e.Client.JobLogs(e.Ctx, j.ID, client.LogOptions{}, func(ev client.LogEvent) error {
			if ev.Record != nil {
				lines = append(lines, ev.Record.Line)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if slices.ContainsFunc(lines, func(l string) bool { return strings.Contains(l, "the VM is off") }) || time.Now().After(waitFor) {
			break
		}
		time.Sleep(time.Second)
	}
	if !slices.ContainsFunc(lines, func(l string) bool {
		return strings.Contains(l, "(/workspace/out): 1 objects") && strings.Contains(l, "pushed")
	}) {
		t.Errorf("the job's log does not say the kill pushed the volume:\n%s", strings.Join(lines, "\n"))
	}
	if _, err := s3.StatObject(t.Context(), "datasets", "out/final.txt", minio.StatObjectOptions{}); err != nil {
		t.Errorf("the file written before the kill is not in the bucket: %v", err)
	}
	if _, err := e.Client.DeleteJob(e.Ctx, j.ID, true); err != nil {
		t.Fatal(err)
	}
	e.WaitGone(j.ID)
}
