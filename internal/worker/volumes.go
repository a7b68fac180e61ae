package worker

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/cosmicac/cosmicac/internal/cosmic"
)

// A rack that keeps its standalone volumes on its host (the QEMU rack:
// a disk file each; the simulated rack: a directory each) keeps team
// TEAM's volume NAME at ROOT/TEAM/NAME+suffix (docs/data.md).

// VolumePath is where a rack keeps team's standalone volume name under
// root: root/team/name+suffix. A team or name that is not one path
// element is refused.
func VolumePath(root, team, name, suffix string) (string, error) {
	for _, s := range []string{team, name} {
		if s == "" || s == "." || s == ".." || strings.ContainsAny(s, `/\`) || strings.HasPrefix(s, ".") {
			return "", fmt.Errorf("standalone volume %q of team %q: no such name on a rack's disk", name, team)
		}
	}
	return filepath.Join(root, team, name+suffix), nil
}

// ListVolumes lists the standalone volumes kept under root, those of
// ROOT/TEAM/NAME+suffix, by team and name; Bytes is what each file takes
// on the disk (its allocated blocks), -1 for a directory (datasync.DirBytes counts
// it: a walk of every file, which the caller may want to do less often
// than it lists) and Size the size given (a disk's), if any. A root that
// does not exist holds none.
func ListVolumes(root, suffix string, size int64) ([]cosmic.StoredVolume, error) {
	teams, err := os.ReadDir(root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []cosmic.StoredVolume
	for _, t := range teams {
		if !t.IsDir() || strings.HasPrefix(t.Name(), ".") {
			continue
		}
		entries, err := os.ReadDir(filepath.Join(root, t.Name()))
		if err != nil {
			return out, err
		}
		for _, e := range entries {
			name, ok := strings.CutSuffix(e.Name(), suffix)
			if !ok || name == "" || strings.HasPrefix(name, ".") || e.IsDir() != (suffix == "") {
				continue
			}
			v := cosmic.StoredVolume{Team: t.Name(), Name: name, Size: size}
			if e.IsDir() {
				v.Bytes = -1
			} else if fi, err := e.Info(); err == nil {
				v.Bytes = fi.Size()
				if st, ok := fi.Sys().(*syscall.Stat_t); ok {
					v.Bytes = st.Blocks * 512
				}
			}
			out = append(out, v)
		}
	}
	slices.SortFunc(out, func(a, b cosmic.StoredVolume) int {
		return strings.Compare(cosmic.VolumeKey(a.Team, a.Name), cosmic.VolumeKey(b.Team, b.Name))
	})
	return out, nil
}

// RemoveVolume removes team's standalone volume name kept under root
// (root/team/name+suffix: a file, or with suffix "" a directory and all
// it holds), unless inUse says a VM has it: cosmic.ErrNotFound when there
// is none, cosmic.ErrConflict while in use.
func RemoveVolume(root, suffix string, p VolumeRef, inUse func() string) error {
	path, err := VolumePath(root, p.Team, p.Name, suffix)
	if err != nil {
		return fmt.Errorf("%w: %v", cosmic.ErrNotFound, err)
	}
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: this rack keeps no volume %s of team %s", cosmic.ErrNotFound, p.Name, p.Team)
	} else if err != nil {
		return err
	}
	if job := inUse(); job != "" {
		return fmt.Errorf("%w: volume %s is mounted by job %s: it is removed once that job has stopped", cosmic.ErrConflict, p.Name, job)
	}
	// Moved aside first, then removed: a volume half removed is never
	// found by the next job that mounts one of its name.
	gone := filepath.Join(root, p.Team, ".deleting-"+p.Name+suffix)
	if err := os.Rename(path, gone); err != nil {
		return err
	}
	return os.RemoveAll(gone)
}
