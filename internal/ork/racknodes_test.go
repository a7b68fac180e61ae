package ork_test

import (
	"testing"
	"testing/synctest"
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
