package vms

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
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
	"github.com/cosmicac/cosmicac/internal/waittest"
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

// volumes are the job's: an RO datastore volume, an RW one, a Git one,
// and an RW standalone volume.
func (d *vmData) volumes() []cosmic.Volume {
	return []cosmic.Volume{
		{MountPath: "/scratch", Permission: "RW", Source: cosmic.VolumeSource{Standalone: &cosmic.StandaloneSource{Name: "scratch"}}},
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
	// The standalone volume: a disk of its own, new, given ext4 by the
	// agent, mounted read-write at its mount path.
	if got := shell("test -b /dev/disk/by-id/virtio-cosmicac-vol0 && findmnt -n -o FSTYPE,OPTIONS /scratch"); !strings.HasPrefix(got, "ext4 ") || !strings.Contains(got, " rw,") {
		t.Errorf("the standalone volume at /scratch in the VM: %q, want its disk mounted ext4 rw", got)
	}
	shell("echo kept > /scratch/kept.txt && sync")
	shell("echo checkpoint > /workspace/out/ckpt-1.txt && sync")
	res, err := e.Client.DataSync(e.Ctx, jobID, apiv1.DataSync{Direction: apiv1.DataSyncPush, Volume: "out"}, 0)
	if err != nil || len(res.Volumes) != 1 || res.Volumes[0].Objects != 1 || res.Volumes[0].Error != "" {
		t.Fatalf("datasync push while running: %+v, %v", res, err)
	}
	if got, err := e.Client.GetDataSync(e.Ctx, jobID, 0); err != nil || got.State != apiv1.DataSyncDone || got.Direction != apiv1.DataSyncPush || len(got.Volumes) != 1 || got.Volumes[0].State != apiv1.DataSyncDone {
		t.Errorf("the VM agent's last datasync: %+v, %v; want the push, done", got, err)
	}
	if _, err := d.srv.Client(t).StatObject(t.Context(), "datasets", "out/ckpt-1.txt", minio.StatObjectOptions{}); err != nil {
		t.Errorf("the checkpoint pushed while running is not in the bucket: %v", err)
	}
}

// checkStandaloneKept: after a restart, the standalone volume is mounted
// again as the job left it (the path a next job of the team takes too:
// the rack's disk, its file system found, not made); the job's log says
// so.
func (d *vmData) checkStandaloneKept(t *testing.T, e *cosmictest.Env, jobID string, shell func(string) string) {
	t.Helper()
	if got := shell("cat /scratch/kept.txt"); got != "kept" {
		t.Errorf("after restart the standalone volume's file = %q, want kept", got)
	}
	lines := jobLines(t, e, jobID, "mounted read-write as the last job left it", time.Minute)
	if !slices.ContainsFunc(lines, func(l string) bool {
		return strings.Contains(l, "standalone volume scratch mounted read-write as the last job left it")
	}) {
		t.Errorf("the job's log does not say the restarted VM mounted the kept volume:\n%s", strings.Join(lines, "\n"))
	}
}

// checkStandaloneOutlives: the deleted job's standalone volume is still
// the rack's, a qcow2 disk kept under its directory, listed by the API
// with no job holding it; deleted through the API, its disk goes.
func (d *vmData) checkStandaloneOutlives(t *testing.T, e *cosmictest.Env, vms, team string) {
	t.Helper()
	disk := filepath.Join(vms, ".volumes", team, "scratch.qcow2")
	if _, err := os.Stat(disk); err != nil {
		t.Errorf("the standalone volume's disk after the job was deleted: %v", err)
	}
	waittest.NoErrorWithin(t, time.Minute, func() error {
		vols, err := e.Client.ListVolumes(e.Ctx)
		if err != nil {
			return err
		}
		if len(vols) != 1 || vols[0].Name != "scratch" || vols[0].Job != "" || vols[0].Bytes <= 0 {
			return fmt.Errorf("volumes %+v, want scratch, held by no job, with its bytes", vols)
		}
		return nil
	}, "the API to list the volume the deleted job left")
	if err := e.Client.DeleteVolume(e.Ctx, "scratch"); err != nil {
		t.Errorf("delete the standalone volume: %v", err)
	}
	if _, err := os.Stat(disk); !os.IsNotExist(err) {
		t.Errorf("the deleted volume's disk: %v, want it gone", err)
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
