package ork_test

import (
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/ork/orkapi"
	"github.com/cosmicac/cosmicac/internal/worker"
)

// TestStandaloneVolumeKeepsItsJobsToItsRack: a job that mounts a
// standalone volume runs on the rack that keeps it, never beside another
// job that has it mounted, whose VM the rack may still be powering off
// after a kill; a job waiting for a volume holds up no other job; a volume
// no rack keeps goes where its first job runs; volumes of two racks cannot
// be mounted together; another team's volume of the same name is not the
// team's.
func TestStandaloneVolumeKeepsItsJobsToItsRack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := newWorker(t, "a", 8), newWorker(t, "b", 8)
		b.keep(cosmic.StoredVolume{Team: "t", Name: "scratch", Bytes: 1 << 20})
		a.keep(cosmic.StoredVolume{Team: "other", Name: "scratch"}, cosmic.StoredVolume{Team: "t", Name: "elsewhere"})
		e := newEnv(t, a, b)
		e.heartbeats(1)
		spec := func(name string, gpus int, vols ...string) cosmic.Spec {
			s := cosmic.Spec{Type: cosmic.TypeGPUContainer, Name: name, Location: "eu", Image: "ubuntu:24.04", Resources: cosmic.Resources{GPU: gpus}}
			for _, v := range vols {
				s.Volumes = append(s.Volumes, cosmic.Volume{MountPath: "/" + v, Permission: "RW", Source: cosmic.VolumeSource{Standalone: &cosmic.StandaloneSource{Name: v}}})
			}
			return s
		}
		rackOf := func(id string) string {
			t.Helper()
			racks := map[string]bool{}
			for _, h := range e.held(id) { // rack/node/gpu each
				rack, _, _ := strings.Cut(h, "/")
				racks[rack] = true
			}
			if len(racks) != 1 {
				t.Fatalf("job %s holds GPUs of racks %v, want one", id, racks)
			}
			for r := range racks {
				return r
			}
			return ""
		}
		// Best-fit's tie goes to the lowest rack, a: only the volume puts it on b.
		first := e.createSpec(spec("first", 2, "scratch"))
		if got := rackOf(first.ID); got != "b" {
			t.Fatalf("the job mounting b's volume was placed on %s", got)
		}
		b.keep(cosmic.StoredVolume{Team: "t", Name: "scratch", Job: first.ID}) // its VM has it
		e.heartbeats(1)
		second := e.createSpec(spec("second", 2, "scratch"))
		j := e.wantState(second.ID, cosmic.StateQueued, cosmic.StateQueued)
		if j.Status.Reason == nil || j.Status.Reason.Code != cosmic.ReasonVolumeInUse || !strings.Contains(j.Status.Reason.Message, first.ID) {
			t.Fatalf("the second job mounting the volume: %+v, want volume_in_use naming %s", j.Status.Reason, first.ID)
		}
		plain := e.createSpec(spec("plain", 8))
		if got := rackOf(plain.ID); got != "a" {
			t.Errorf("a job behind the waiting one went to %s, want a: nothing holds it up", got)
		}
		// The kill frees the GPUs at once; the rack says the VM still has
		// the volume until it is off.
		if _, err := e.o.KillJob(e.ctx, first.ID); err != nil {
			t.Fatal(err)
		}
		e.heartbeats(1)
		if j := e.job(second.ID); j.Status.State != cosmic.StateQueued || j.Status.Reason == nil || j.Status.Reason.Code != cosmic.ReasonVolumeInUse {
			t.Fatalf("while the killed job's VM powers off: %s %+v, want queued on volume_in_use", j.Status.State, j.Status.Reason)
		}
		b.keep(cosmic.StoredVolume{Team: "t", Name: "scratch"})
		e.heartbeats(1)
		if got := rackOf(second.ID); got != "b" {
			t.Errorf("the second job went to %s once the volume was free, want b", got)
		}
		// A new volume goes where its job goes (b's GPUs left: a's are taken).
		fresh := e.createSpec(spec("fresh", 1, "new"))
		if got := rackOf(fresh.ID); got != "b" {
			t.Errorf("a job mounting a volume no rack keeps went to %s, want b, the one with GPUs", got)
		}
		// Another team's volume named scratch on a is not t's: t's keeps it to b.
		if _, err := e.o.KillJob(e.ctx, second.ID); err != nil {
			t.Fatal(err)
		}
		e.heartbeats(1)
		third := e.createSpec(spec("third", 1, "scratch"))
		if got := rackOf(third.ID); got != "b" {
			t.Errorf("t's volume scratch: placed on %s, want b", got)
		}
		_, err := e.o.CreateJob(e.ctx, orkapi.CreateJobParams{ID: cosmic.NewJobID(), User: "u", Team: "t", Spec: spec("both", 1, "scratch", "elsewhere")})
		var fe *cosmic.FieldError
		if !errors.As(err, &fe) || !strings.Contains(err.Error(), "different racks") {
			t.Errorf("a job mounting volumes of racks a and b: %v, want a field error saying they are on different racks", err)
		}
		// Deleting: refused while a job has it, another team's is not
		// found, then removed by the rack that keeps it.
		if err := e.o.DeleteVolume(e.ctx, orkapi.VolumeRef{Team: "t", Name: "scratch"}); !errors.Is(err, cosmic.ErrConflict) || !strings.Contains(err.Error(), third.ID) {
			t.Errorf("deleting a volume a job has: %v, want a conflict naming %s", err, third.ID)
		}
		if err := e.o.DeleteVolume(e.ctx, orkapi.VolumeRef{Team: "t", Name: "nope"}); !errors.Is(err, cosmic.ErrNotFound) {
			t.Errorf("deleting a volume no rack keeps: %v, want not found", err)
		}
		if err := e.o.DeleteVolume(e.ctx, orkapi.VolumeRef{Team: "other", Name: "scratch"}); err != nil {
			t.Errorf("deleting team other's scratch: %v", err)
		}
		if a.count("deleteVolume other/scratch") != 1 || b.count("deleteVolume t/scratch") != 0 {
			t.Errorf("the workers were asked %v and %v", a.calls, b.calls)
		}
		// A report the rack listed before the delete, arriving after it,
		// does not bring the volume back.
		stale := worker.Capacity{Rack: "a", ObservedAt: time.Now(), Nodes: a.nodes,
			Volumes: []cosmic.StoredVolume{{Team: "other", Name: "scratch"}, {Team: "t", Name: "elsewhere"}}}
		e.push(a, worker.Report{Rack: "a", Capacity: &stale})
		var vols []string
		for _, ri := range e.o.ListRacks().Racks {
			for _, v := range ri.Volumes {
				vols = append(vols, v.Rack+":"+v.Team+"/"+v.Name)
			}
		}
		if strings.Join(vols, " ") != "a:t/elsewhere b:t/scratch" {
			t.Errorf("the racks' volumes = %v, want a:t/elsewhere b:t/scratch", vols)
		}
		// While a rack deletes a volume, a job that mounts it waits: placed
		// then, its VM could find it half removed. It mounts a new one
		// once the delete is done.
		gate := make(chan struct{})
		a.mu.Lock()
		a.volumeGate = gate
		a.mu.Unlock()
		deleted := make(chan error, 1)
		go func() { deleted <- e.o.DeleteVolume(e.ctx, orkapi.VolumeRef{Team: "t", Name: "elsewhere"}) }()
		synctest.Wait()
		waiting := e.createSpec(spec("waiting", 1, "elsewhere"))
		if j := e.job(waiting.ID); j.Status.State != cosmic.StateQueued || j.Status.Reason == nil || j.Status.Reason.Code != cosmic.ReasonVolumeInUse || !strings.Contains(j.Status.Reason.Message, "being deleted") {
			t.Fatalf("a job mounting a volume being deleted: %s %+v, want queued on volume_in_use, being deleted", j.Status.State, j.Status.Reason)
		}
		if err := e.o.DeleteVolume(e.ctx, orkapi.VolumeRef{Team: "t", Name: "elsewhere"}); !errors.Is(err, cosmic.ErrConflict) {
			t.Errorf("deleting a volume being deleted: %v, want a conflict", err)
		}
		a.keep(cosmic.StoredVolume{Team: "t", Name: "elsewhere"})
		close(gate)
		if err := <-deleted; err != nil {
			t.Fatal(err)
		}
		e.heartbeats(1)
		if got := e.held(waiting.ID); len(got) != 1 {
			t.Errorf("the job waiting for the deleted volume holds %v once it is gone, want a GPU", got)
		}
	})
}
