package cosmictest

import (
	"errors"
	"slices"
	"testing"

	"github.com/cosmicac/cosmicac/internal/apiv1"
	"github.com/cosmicac/cosmicac/internal/client"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/waittest"
)

// TestFleetForMembers: a member, who may not list racks, reads the fleet
// by location and model, counted as the racks are; a running job's GPUs
// leave its free count.
func TestFleetForMembers(t *testing.T) {
	e := NewEnv(t)
	member := client.New(e.P.URL, e.AddUser("mia", "default", cosmic.RoleMember))
	if _, err := member.ListRacks(e.Ctx); !errors.Is(err, cosmic.ErrForbidden) {
		t.Fatalf("a member lists racks: %v, want forbidden", err)
	}
	racks, err := e.Client.ListRacks(e.Ctx)
	if err != nil || len(racks) != 1 {
		t.Fatalf("racks: %v %v", racks, err)
	}
	r := racks[0]
	model := func() apiv1.FleetGPUModel {
		t.Helper()
		f, err := member.Fleet(e.Ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(f.Locations) != 1 || f.Locations[0].Name != r.Location || len(f.Locations[0].GPUModels) != 1 {
			t.Fatalf("fleet %+v, want one model in %s", f, r.Location)
		}
		return f.Locations[0].GPUModels[0]
	}
	m := model()
	perNode := 0
	for _, n := range r.Nodes {
		perNode = max(perNode, n.GPUs)
	}
	// The rack's catalogue, as its worker reported it, and its largest node.
	if m.Catalogue == nil || r.Catalogue == nil || !slices.Equal(m.Catalogue.JobTypes, r.Catalogue.JobTypes) || m.MaxCPUPerNode != int(r.Nodes[0].CPUMilli/1000) {
		t.Fatalf("fleet %+v (catalogue %+v), want the rack's catalogue %+v and its node's vCPUs", m, m.Catalogue, r.Catalogue)
	}
	m.Catalogue, m.MaxCPUPerNode, m.MaxMemoryMiBPerNode = nil, 0, 0
	if want := (apiv1.FleetGPUModel{Model: r.GPUModel, Nodes: len(r.Nodes), GPUs: r.GPUs, Free: r.FreeGPUs, MaxPerNode: perNode, MaxFreePerNode: perNode}); m != want {
		t.Fatalf("fleet %+v, want %+v (rack %+v)", m, want, r)
	}
	j, err := member.CreateJob(e.Ctx, Container("two", 2))
	if err != nil {
		t.Fatal(err)
	}
	e.WaitState(j.ID, cosmic.StateRunning)
	// What the rack gave the replica: on the simulated rack, the spec's
	// resources as defaulted (8 vCPUs and 64 GiB a GPU).
	got, err := member.GetJob(e.Ctx, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if g := got.Status.Replicas[0].Given; g == nil || *g != (cosmic.Given{CPUs: 16, MemoryMiB: 128 * 1024, GPUs: 2}) {
		t.Errorf("replica 0 was given %+v, want 16 vCPUs, 128 GiB and 2 GPUs", g)
	}
	waittest.Until(t, func() bool { return model().Free == r.FreeGPUs-2 }, "the job's GPUs to leave the fleet's free count")
	if m := model(); m.MaxFreePerNode != perNode && len(r.Nodes) > 1 {
		t.Errorf("with a 2-GPU job on one node of %d: %+v", len(r.Nodes), m)
	}
}
