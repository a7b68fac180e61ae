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
	"github.com/cosmicac/cosmicac/internal/cosmictest"
	"github.com/cosmicac/cosmicac/internal/gittest"
	"github.com/cosmicac/cosmicac/internal/platform"
	"github.com/cosmicac/cosmicac/internal/s3test"
)

// vmData is what TestQEMURackEndToEnd's job finds in its VM: a real S3
// server and a real git server (git http-backend) on the host's loopback,
// listed in the rack's egress, and the job's volumes on them. Its boot is
// the one of the end-to-end test: under TCG a boot is a minute and more.
type vmData struct {
	srv  *s3test.Server
	git  *gittest.Server
	want map[string]string // path under /data -> sha256
}

// newVMData starts the servers and uploads the RO volume's objects.
func newVMData(t *testing.T) *vmData {
	t.Helper()
	d := &vmData{srv: s3test.Start(t), want: map[string]string{}}
	d.srv.MakeBucket(t, "datasets")
	for _, k := range []string{"train/a.bin", "train/sub/b.bin", "train/sub/deeper/c.bin"} {
		b := make([]byte, 100_000+len(k)*1000)
		rand.Read(b)
		if _, err := d.srv.Client(t).PutObject(t.Context(), "datasets", k, strings.NewReader(string(b)), int64(len(b)), minio.PutObjectOptions{}); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		d.want["./"+strings.TrimPrefix(k, "train/")] = hex.EncodeToString(sum[:])
	}
	d.git = gittest.Start(t, map[string]gittest.Repo{"tools": {Files: map[string]string{"README.md": "the tools\n", "bin/run.sh": "#!/bin/sh\necho ran\n"},
		Exec: []string{"bin/run.sh"}}})
	return d
}

// egress lists the two servers in the QEMU rack's egress.
func (d *vmData) egress(c *platform.Config) { c.QEMU.Rack.Egress = []string{d.srv.Endpoint, d.git.URL} }

// volumes are the job's: an RO datastore volume, an RW one, a Git one.
func (d *vmData) volumes() []cosmic.Volume {
	return []cosmic.Volume{
		{MountPath: "/data", Permission: "RO", Source: cosmic.VolumeSource{DataStore: &cosmic.DataStoreSource{Alias: "main", Container: "datasets", Prefix: "train"}}},
		{Name: "out", MountPath: "/workspace/out", Permission: "RW", Source: cosmic.VolumeSource{DataStore: &cosmic.DataStoreSource{Alias: "main", Container: "datasets", Prefix: "out"}}},
		{MountPath: "/src", Source: cosmic.VolumeSource{PublicGit: &cosmic.PublicGitSource{URL: d.git.RepoURL("tools")}}},
	}
}

// checkRunning: the volumes are real files in the real VM at their mount
// paths: the RO volume's objects (sha256sum in the VM, by `jobs shell`,
// equals the uploaded objects'), the repository's files and modes; the
// VM reaches the store only through the egress proxy (its port at the
// host's address is refused), with requests the app-node signed; a file
// written in the RW volume reaches the bucket by `datasync` while the job
// runs.
func (d *vmData) checkRunning(t *testing.T, e *cosmictest.Env, jobID string, shell func(string) string) {
	t.Helper()
	got := map[string]string{}
	for _, line := range strings.Split(shell("cd /data && find . -type f | sort | xargs sha256sum"), "\n") {
		if sum, path, ok := strings.Cut(line, "  "); ok {
			got[path] = sum
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(d.want) {
		t.Errorf("sha256sum of /data in the VM:\n%v\nwant the uploaded objects':\n%v", got, d.want)
	}
	if got := shell("cat /src/README.md && /src/bin/run.sh"); got != "the tools\nran" {
		t.Errorf("the Git volume in the VM: %q", got)
	}
	port := d.srv.Endpoint[strings.LastIndex(d.srv.Endpoint, ":")+1:]
	if out := shell("timeout 5 bash -c 'echo > /dev/tcp/10.0.2.2/" + port + "' 2>/dev/null && echo reached || echo unreachable"); out != "unreachable" {
		t.Errorf("the VM and the store's port at the host's address: %q, want unreachable", out)
	}
	shell("echo checkpoint > /workspace/out/ckpt-1.txt && sync")
	res, err := e.Client.DataSync(e.Ctx, jobID, apiv1.DataSync{Direction: apiv1.DataSyncPush, Volume: "out"}, 0)
	if err != nil || len(res.Volumes) != 1 || res.Volumes[0].Objects != 1 || res.Volumes[0].Error != "" {
		t.Fatalf("datasync push while running: %+v, %v", res, err)
	}
	if _, err := d.srv.Client(t).StatObject(t.Context(), "datasets", "out/ckpt-1.txt", minio.StatObjectOptions{}); err != nil {
		t.Errorf("the checkpoint pushed while running is not in the bucket: %v", err)
	}
}

// checkPushAtKill: a file written in the RW volume reaches the bucket when
// the job is killed, pushed by the agent as the VM powers off; the job's
// log says so, then that the VM is off.
func (d *vmData) checkPushAtKill(t *testing.T, e *cosmictest.Env, jobID string, shell func(string) string) {
	t.Helper()
	shell("echo final > /workspace/out/final.txt && sync")
	// What hears the power button (qemu.PowerButtonRepeat), for a failure's reader.
	t.Logf("at the kill: the boot is %s; systemd-logind is %s", shell("systemctl is-system-running || true"), shell("systemctl is-active systemd-logind || true"))
	if _, err := e.Client.KillJob(e.Ctx, jobID); err != nil {
		t.Fatal(err)
	}
	e.WaitStateWithin(jobID, 2*time.Minute, cosmic.StateStopped)
	lines := jobLines(t, e, jobID, "the VM is off", 3*time.Minute)
	if !slices.ContainsFunc(lines, func(l string) bool {
		return strings.Contains(l, "(/workspace/out): 1 objects") && strings.Contains(l, "pushed")
	}) {
		t.Errorf("the job's log does not say the kill pushed the volume:\n%s", strings.Join(lines, "\n"))
	}
	if _, err := d.srv.Client(t).StatObject(t.Context(), "datasets", "out/final.txt", minio.StatObjectOptions{}); err != nil {
		t.Errorf("the file written before the kill is not in the bucket: %v", err)
	}
}

// jobLines reads the job's log lines until one holds until, or within.
func jobLines(t *testing.T, e *cosmictest.Env, jobID, until string, within time.Duration) []string {
	t.Helper()
	var lines []string
	deadline := time.Now().Add(within)
	for {
		lines = lines[:0]
		err := e.Client.JobLogs(e.Ctx, jobID, client.LogOptions{}, func(ev client.LogEvent) error {
			if ev.Record != nil {
				lines = append(lines, ev.Record.Line)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if slices.ContainsFunc(lines, func(l string) bool { return strings.Contains(l, until) }) || time.Now().After(deadline) {
			return lines
		}
		time.Sleep(time.Second)
	}
}
