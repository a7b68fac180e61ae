package agent

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/dustin/go-humanize"
	"golang.org/x/sys/unix"

	"github.com/cosmicac/cosmicac/internal/agent/agentapi"
	"github.com/cosmicac/cosmicac/internal/cosmic"
)

// Standalone volumes (docs/data.md, "Standalone volumes"): a disk the
// rack keeps for the team and attaches to the job's VM with a serial
// (vmboot.StandaloneSerial). The agent waits for it, makes an ext4 file
// system on it the first time (a disk with none is a new volume), and
// mounts it at the volume's mount path before the command starts. Nothing
// is copied: what the last job wrote is there as it left it. On the
// simulated rack the volume is a directory the rack keeps on its host.

// diskSerialRe is a disk serial the bootstrap may name.
var diskSerialRe = regexp.MustCompile(`^[A-Za-z0-9_-]{1,20}$`)

// diskWait bounds the wait for the volume's disk to appear.
const diskWait = time.Minute

// mountStandalone mounts volume i, a standalone volume, and answers the
// reason the replica cannot run, or nil.
func (a *Agent) mountStandalone(ctx context.Context, i int, v Volume) *cosmic.Reason {
	fail := func(err error) *cosmic.Reason {
		r := cosmic.NewReason(cosmic.ReasonVolumeSyncFailed, fmt.Sprintf("volume %d (%s): standalone volume %s: %v", v.Index, v.MountPath, v.Standalone, err))
		a.failVolume(i, v, r, err)
		return &r
	}
	if v.Disk == "" {
		files, bytes := usage(v.Dir)
		a.setVolume(i, func(s *agentapi.VolumeStatus) { s.Phase, s.Objects, s.Bytes = agentapi.VolumeReady, files, bytes })
		a.record("volume", "volume %d (%s): standalone volume %s at %s (no VM here: a directory the rack keeps on the host): %d files, %d bytes",
			v.Index, v.MountPath, v.Standalone, v.Dir, files, bytes)
		return nil
	}
	dev := filepath.Join("/dev/disk/by-id", "virtio-"+v.Disk)
	if err := waitForPath(ctx, dev, diskWait); err != nil {
		return fail(fmt.Errorf("its disk (serial %s) did not appear in the VM within %v: %w", v.Disk, diskWait, err))
	}
	if mounted(v.Dir) {
		// The agent restarted in a VM that runs on: the volume stays.
		a.setVolume(i, func(s *agentapi.VolumeStatus) { s.Phase = agentapi.VolumeReady })
		a.record("volume", "volume %d (%s): standalone volume %s: mounted already", v.Index, v.MountPath, v.Standalone)
		return nil
	}
	fstype, err := fsType(ctx, dev)
	if err != nil {
		return fail(err)
	}
	made := fstype == ""
	if made && v.ReadOnly {
		// A disk attached read-only cannot be given a file system.
		return fail(errors.New("the volume is new and empty, and mounted read-only (RO, the default permission): give it permission RW in the job that makes it"))
	}
	if made {
		label := v.Standalone[:min(len(v.Standalone), 16)]
		if out, err := exec.CommandContext(ctx, "mkfs.ext4", "-q", "-F", "-L", label, "-E", "lazy_itable_init=1,lazy_journal_init=1", dev).CombinedOutput(); err != nil {
			return fail(fmt.Errorf("mkfs.ext4: %v: %s", err, strings.TrimSpace(string(out))))
		}
		fstype = "ext4"
	}
	if err := os.MkdirAll(v.Dir, 0o755); err != nil {
		return fail(err)
	}
	var flags uintptr = unix.MS_NOATIME
	mode := "read-write"
	if v.ReadOnly {
		flags |= unix.MS_RDONLY
		mode = "read-only"
	}
	if err := unix.Mount(dev, v.Dir, fstype, flags, ""); err != nil {
		return fail(fmt.Errorf("mount %s (%s) at %s: %w", dev, fstype, v.Dir, err))
	}
	var st unix.Statfs_t
	used := int64(-1)
	if unix.Statfs(v.Dir, &st) == nil {
		used = int64(st.Blocks-st.Bfree) * st.Bsize
	}
	a.setVolume(i, func(s *agentapi.VolumeStatus) { s.Phase, s.Bytes = agentapi.VolumeReady, max(used, 0) })
	if made {
		a.record("volume", "volume %d (%s): standalone volume %s: a new disk, given an ext4 file system, mounted %s", v.Index, v.MountPath, v.Standalone, mode)
	} else {
		a.record("volume", "volume %d (%s): standalone volume %s mounted %s as the last job left it (%s in use)", v.Index, v.MountPath, v.Standalone, mode, humanize.IBytes(uint64(max(used, 0))))
	}
	return nil
}

// waitForPath waits up to d for path to exist.
func waitForPath(ctx context.Context, path string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		_, err := os.Stat(path)
		if err == nil || !errors.Is(err, fs.ErrNotExist) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// fsType is the type of the file system on dev, "" when it has none
// (blkid exits 2 when it finds nothing).
func fsType(ctx context.Context, dev string) (string, error) {
	out, err := exec.CommandContext(ctx, "blkid", "-o", "value", "-s", "TYPE", dev).Output()
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() == 2 {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("blkid %s: %w", dev, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// mounted says whether dir is a mount point (/proc/self/mountinfo).
func mounted(dir string) bool {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) > 4 && fields[4] == dir {
			return true
		}
	}
	return false
}

// usage counts the regular files under dir and their bytes.
func usage(dir string) (files, bytes int64) {
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				files++
				bytes += fi.Size()
			}
		}
		return nil
	})
	return files, bytes
}
