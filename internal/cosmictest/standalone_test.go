package cosmictest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/client"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/waittest"
)

// withScratch is a spec whose standalone volume scratch is mounted RW at
// /scratch and whose command, if any, is cmd.
func withScratch(name, cmd string) cosmic.Spec {
	s := Container(name, 1)
	if cmd != "" {
		s.Command = []string{"sh", "-c", cmd}
	}
	s.Volumes = []cosmic.Volume{{MountPath: "/scratch", Permission: "RW", Source: cosmic.VolumeSource{Standalone: &cosmic.StandaloneSource{Name: "scratch"}}}}
	return s
}

// TestStandaloneVolumeOutlivesTheJob: on the simulated rack, a standalone
// volume is a directory the rack keeps: what one job wrote in it the next
// job of the team that mounts it reads, after the first was deleted; while
// a job has it mounted, another that mounts it waits (volume_in_use) and
// runs once the first is killed; the rack reports it with the job that
// has it.
func TestStandaloneVolumeOutlivesTheJob(t *testing.T) {
	e := NewEnv(t)
	first := e.Create(withScratch("first", `echo "written by the first job" > "$HOME/scratch/kept.txt"`))
	if j := e.WaitState(first.ID, cosmic.StateStopped, cosmic.StateFailed); j.Status.State != cosmic.StateStopped {
		t.Fatalf("the first job: %s %+v", j.Status.State, j.Status.Reason)
	}
	if _, err := e.Client.DeleteJob(e.Ctx, first.ID, false); err != nil {
		t.Fatal(err)
	}
	second := e.Create(withScratch("second", `cat "$HOME/scratch/kept.txt" > "$HOME/seen.txt"`))
	if j := e.WaitState(second.ID, cosmic.StateStopped, cosmic.StateFailed); j.Status.State != cosmic.StateStopped {
		t.Fatalf("the second job: %s %+v", j.Status.State, j.Status.Reason)
	}
	seen, err := os.ReadFile(filepath.Join(e.DataDir, "vms", second.ID+"-r0", "seen.txt"))
	if err != nil || string(seen) != "written by the first job\n" {
		t.Fatalf("the second job read %q, %v; want what the first wrote", seen, err)
	}
	e.records(second.ID, func(rs []client.LogRecord) bool {
		for _, r := range rs {
			if r.Step == "volume" && strings.Contains(r.Line, "standalone volume scratch") && strings.Contains(r.Line, "1 files") {
				return true
			}
		}
		return false
	})

	// The API lists it, the team's; another team has none, and its own
	// volume named scratch is another volume.
	waittest.NoErrorWithin(t, 10*time.Second, func() error {
		vols, err := e.Client.ListVolumes(e.Ctx)
		if err != nil || len(vols) != 1 || vols[0].Name != "scratch" || vols[0].Bytes != int64(len("written by the first job\n")) || vols[0].Job != "" {
			return fmt.Errorf("volumes %+v, %v; want scratch of 25 bytes, held by no job", vols, err)
		}
		return nil
	}, "the team's volume to be listed")
	other := client.New(e.P.URL, e.AddUser("olga", "team-o", cosmic.RoleAdmin))
	if vols, err := other.ListVolumes(e.Ctx); err != nil || len(vols) != 0 {
		t.Errorf("another team's volumes: %+v, %v; want none", vols, err)
	}
	theirs, err := other.CreateJob(e.Ctx, withScratch("theirs", `ls "$HOME/scratch" | wc -l > "$HOME/seen.txt"`))
	if err != nil {
		t.Fatal(err)
	}
	e.WaitState(theirs.ID, cosmic.StateStopped)
	if seen, err := os.ReadFile(filepath.Join(e.DataDir, "vms", theirs.ID+"-r0", "seen.txt")); err != nil || strings.TrimSpace(string(seen)) != "0" {
		t.Errorf("another team's job mounting its own scratch found %q files, %v; want none", seen, err)
	}

	holder := e.Create(withScratch("holder", ""))
	e.WaitState(holder.ID, cosmic.StateRunning)
	waittest.NoErrorWithin(t, 10*time.Second, func() error {
		if vols, err := e.Client.ListVolumes(e.Ctx); err != nil || len(vols) != 1 || vols[0].Job != holder.ID {
			return fmt.Errorf("volumes %+v, %v; want scratch mounted by %s", vols, err, holder.ID)
		}
		return nil
	}, "the volume to be listed as the running job's")
	waiter := e.Create(withScratch("waiter", ""))
	j := e.WaitState(waiter.ID, cosmic.StateQueued)
	if j.Status.Reason == nil || j.Status.Reason.Code != cosmic.ReasonVolumeInUse || !strings.Contains(j.Status.Reason.Message, holder.ID) {
		t.Fatalf("a second job mounting the volume: %+v, want volume_in_use naming %s", j.Status.Reason, holder.ID)
	}
	if err := e.Client.DeleteVolume(e.Ctx, "scratch"); client.StatusOf(err) != 409 || !strings.Contains(err.Error(), holder.ID) {
		t.Errorf("deleting the volume a job has: %v, want 409 naming %s", err, holder.ID)
	}
	if _, err := e.Client.KillJob(e.Ctx, holder.ID); err != nil {
		t.Fatal(err)
	}
	e.WaitState(waiter.ID, cosmic.StateRunning)

	// Deleted once no job has it: its directory goes, the API lists none,
	// another team's is not the team's to delete.
	if _, err := e.Client.KillJob(e.Ctx, waiter.ID); err != nil {
		t.Fatal(err)
	}
	e.WaitState(waiter.ID, cosmic.StateStopped)
	if err := other.DeleteVolume(e.Ctx, "nope"); client.StatusOf(err) != 404 {
		t.Errorf("deleting a volume the team does not have: %v, want 404", err)
	}
	waittest.NoErrorWithin(t, 10*time.Second, func() error { return e.Client.DeleteVolume(e.Ctx, "scratch") }, "the volume to be deleted once its job stopped")
	if vols, err := e.Client.ListVolumes(e.Ctx); err != nil || len(vols) != 0 {
		t.Errorf("volumes after the delete: %+v, %v; want none", vols, err)
	}
	if ents, _ := filepath.Glob(filepath.Join(e.DataDir, "volumes", "*", "*", "scratch")); len(ents) != 1 {
		t.Errorf("the rack's directories named scratch after the delete: %v, want another team's only", ents)
	}
}
