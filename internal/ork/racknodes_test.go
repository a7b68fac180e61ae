package ork_test

import (
	"errors"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/ork/orkapi"
)

// TestListRacksCountsEachNodesGPUs: each node of a listed rack carries the
// GPUs replicas hold there and those a replica could still get, which a
// cordoned node has none of though it has GPUs unheld; the rack's free GPUs
// are its nodes' added up.
func TestListRacksCountsEachNodesGPUs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorker(t, "r1", 8, 8, 8)
		e := newEnv(t, w)
		for range 3 {
			if j := e.create(5); len(e.held(j.ID)) != 5 {
				t.Fatalf("job %s holds %v, want 5 GPUs", j.ID, e.held(j.ID))
			}
		}
		w.mu.Lock()
		w.nodes[2].Schedulable = false // cordoned, its replica still running
		w.mu.Unlock()
		e.heartbeats(2)

		racks := e.o.ListRacks().Racks
		if len(racks) != 1 {
			t.Fatalf("racks %+v", racks)
		}
		r := racks[0]
		type counts struct{ used, free int }
		want := map[string]counts{"n0": {5, 3}, "n1": {5, 3}, "n2": {5, 0}}
		for _, n := range r.Nodes {
			if got := (counts{n.UsedGPUs, n.FreeGPUs}); got != want[n.Name] {
				t.Errorf("node %s: used, free = %v, want %v", n.Name, got, want[n.Name])
			}
		}
		if r.GPUs != 24 || r.FreeGPUs != 6 {
			t.Errorf("rack: %d GPUs, %d free; want 24, 6", r.GPUs, r.FreeGPUs)
		}
	})
}

// TestPlacementUsesCPUAndMemory: a job goes to the node with the CPU it
// asks for (plus the rack's overhead), not to the one with free GPUs and
// no CPU; one larger than any node is refused at create, naming
// resources.cpu; one that fits only later waits, naming CPU; the CPU held
// survives an ork restart, and a job deleted gives it back.
func TestPlacementUsesCPUAndMemory(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorker(t, "r1", 8, 8)
		w.nodes[0].CPUMilli, w.nodes[0].MemoryMiB = 16000, 512*1024
		w.nodes[1].CPUMilli, w.nodes[1].MemoryMiB = 128000, 512*1024
		w.overhead = cosmic.VMOverhead{CPUMilli: 100, MemoryMiB: 256}
		e := newEnv(t, w)
		spec := func(name string, cpu int) cosmic.Spec {
			return cosmic.Spec{Type: cosmic.TypeGPUContainer, Name: name, Location: "eu", Image: "ubuntu:24.04",
				Resources: cosmic.Resources{GPU: 1, CPU: cpu, Memory: 64}}
		}
		a := e.createSpec(spec("a", 64))
		if got := e.held(a.ID); len(got) != 1 || !strings.HasPrefix(got[0], "r1/n1/") {
			t.Fatalf("job a holds %v, want a GPU of n1 (n0 has 16 vCPUs)", got)
		}
		used := func() (int64, int64) {
			for _, n := range e.o.ListRacks().Racks[0].Nodes {
				if n.Name == "n1" {
					return n.UsedCPUMilli, n.UsedMemoryMiB
				}
			}
			return -1, -1
		}
		if c, m := used(); c != 64100 || m != 64*1024+256 {
			t.Errorf("n1 holds %dm CPU, %d MiB; want 64100m, %d MiB", c, m, 64*1024+256)
		}

		_, err := e.o.CreateJob(e.ctx, orkapi.CreateJobParams{ID: cosmic.NewJobID(), User: "u", Team: "t", Spec: spec("huge", 200)})
		var fe *cosmic.FieldError
		if !errors.As(err, &fe) || fe.Reason != cosmic.ReasonExceedsNodeCPU || fe.Field != "resources.cpu" {
			t.Fatalf("a 200-vCPU job: %v, want exceeds_node_cpu on resources.cpu", err)
		}

		b := e.createSpec(spec("b", 64)) // 63.9 vCPUs are left on n1
		j := e.wantState(b.ID, cosmic.StateQueued, cosmic.StateQueued)
		if !strings.Contains(j.Status.WaitingFor, "waiting for CPU") {
			t.Errorf("job b waits for %q, want it to name CPU", j.Status.WaitingFor)
		}

		e.restart()
		e.heartbeats(1)
		if c, _ := used(); c != 64100 {
			t.Errorf("after a restart n1 holds %dm CPU, want 64100m", c)
		}
		e.wantState(b.ID, cosmic.StateQueued, cosmic.StateQueued)
		if _, err := e.o.DeleteJob(e.ctx, orkapi.DeleteJobParams{ID: a.ID, Force: true}); err != nil {
			t.Fatal(err)
		}
		e.push(w, w.gone(a.ID, 0)) // the worker confirms
		e.wantGone(a.ID)
		if got := e.held(b.ID); len(got) != 1 || !strings.HasPrefix(got[0], "r1/n1/") {
			t.Errorf("job b holds %v once a is deleted, want a GPU of n1", got)
		}
		e.checkBooks()
	})
}
