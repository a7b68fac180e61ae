package ork_test

import (
	"errors"
	"testing"
	"testing/synctest"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/ork/orkapi"
	"github.com/cosmicac/cosmicac/internal/worker"
)

// TestCreateRefusesWhatNoRackCanRun: once the location's racks report
// their catalogues, a create they can never run is refused with the
// field and not_in_catalogue, and nothing is stored; a spec one of them
// runs is admitted; a rack's cap refuses only what was asked for (a
// defaulted size is given up to the cap); ListRacks shows the catalogue.
func TestCreateRefusesWhatNoRackCanRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		qemu := newWorker(t, "q1", 1)
		qemu.catalogue = &cosmic.Catalogue{Images: []string{"debian-12"}, JobTypes: []cosmic.JobType{cosmic.TypeGPUContainer}, MaxVMCPUs: 1, MaxVMMemoryMiB: 512}
		e := newEnv(t, qemu)
		e.heartbeats(1)
		container := func(image string) cosmic.Spec {
			s := cosmic.Spec{Type: cosmic.TypeGPUContainer, Location: "eu", Image: image, Resources: cosmic.Resources{GPU: 1}}
			s.Default()
			return s
		}
		inference := cosmic.Spec{Type: cosmic.TypeManagedInference, Location: "eu", Inference: &cosmic.InferenceSpec{Model: "m"}}
		inference.Default()
		for _, c := range []struct {
			name  string
			spec  cosmic.Spec
			asked cosmic.Resources
			field string
		}{
			{"unknown image", container("ubuntu:24.04"), cosmic.Resources{}, "image"},
			{"job type", inference, cosmic.Resources{}, "type"},
			{"vCPUs asked", container("debian-12"), cosmic.Resources{CPU: 8}, "resources.cpu"},
			{"memory asked", container("debian-12"), cosmic.Resources{Memory: 1}, "resources.memory"},
		} {
			_, err := e.o.CreateJob(e.ctx, orkapi.CreateJobParams{ID: cosmic.NewJobID(), User: "u", Team: "t", Spec: c.spec, Asked: c.asked})
			var fe *cosmic.FieldError
			if !errors.As(err, &fe) || fe.Field != c.field || fe.Reason != cosmic.ReasonNotInCatalogue {
				t.Errorf("%s: %v, want a not_in_catalogue error on %s", c.name, err, c.field)
			}
		}
		if jobs, _ := e.o.ListJobs(e.ctx, orkapi.ListJobsParams{}); jobs.Total != 0 {
			t.Fatalf("%d jobs stored, want none", jobs.Total)
		}
		j := e.createSpec(container("debian-12")) // the defaults (8 vCPUs, 64 GiB) are given up to the cap
		e.wantState(j.ID, cosmic.StatePending, cosmic.StatePending)
		racks := e.o.ListRacks()
		if c := racks.Racks[0].Catalogue; c == nil || len(c.Images) != 1 || c.Images[0] != "debian-12" {
			t.Errorf("the rack's catalogue: %+v", c)
		}
	})
}

// TestRefusedReplicaFailsAndFreesItsGPUs: a worker that refuses a job
// (worker.Refused, as a QEMU rack does for what it cannot run) fails its
// replica with rack_refused and a fix, and the GPUs are free for the
// next job at once.
func TestRefusedReplicaFailsAndFreesItsGPUs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorker(t, "q1", 1)
		e := newEnv(t, w)
		j := e.create(1)
		if len(e.held(j.ID)) != 1 {
			t.Fatalf("held %v", e.held(j.ID))
		}
		e.push(w, worker.Report{Rack: w.rack, Jobs: []worker.JobReport{{JobID: j.ID, Replicas: []worker.ReplicaReport{worker.Refused(0, `no image "ubuntu:24.04" in this rack's catalogue`)}}}})
		got := e.wantState(j.ID, cosmic.StateFailed, cosmic.StateFailed)
		r := got.Status.Replicas[0].Reason
		if r == nil || r.Code != cosmic.ReasonRackRefused || r.Fix == "" {
			t.Fatalf("reason %+v, want rack_refused with a fix", r)
		}
		if h := e.held(j.ID); len(h) != 0 {
			t.Fatalf("the refused job holds %v", h)
		}
		next := e.create(1)
		e.wantState(next.ID, cosmic.StatePending, cosmic.StatePending)
	})
}

// TestGivenIsShownPerReplica: what the worker reports it gave a replica
// is the replica's Given.
func TestGivenIsShownPerReplica(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, w, j := oneJob(t)
		rep := w.observe(j.ID, 0, cosmic.StateStarting)
		rep.Jobs[0].Replicas[0].Given = &cosmic.Given{CPUs: 1, MemoryMiB: 512, Note: "capped"}
		e.push(w, rep)
		g := e.job(j.ID).Status.Replicas[0].Given
		if g == nil || g.CPUs != 1 || g.MemoryMiB != 512 || g.Note != "capped" {
			t.Fatalf("given %+v", g)
		}
	})
}
