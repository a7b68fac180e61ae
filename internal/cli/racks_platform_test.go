package cli

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/cosmicac/cosmicac/internal/apiv1"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/cosmictest"
)

// TestRacksListNodesOnThePlatform: with 9 GPUs free on a rack, as 3 on each
// of 3 nodes, a 4-GPU job waits, and `cosmicac racks list --nodes` shows
// why: each node's used and free GPUs, which add up to the rack's.
func TestRacksListNodesOnThePlatform(t *testing.T) {
	e := cosmictest.NewEnv(t, cosmictest.Sim(3, 8))
	for _, name := range []string{"a", "b", "c"} {
		e.WaitState(e.Create(cosmictest.Container(name, 5)).ID, cosmic.StateRunning)
	}
	waiting := e.Create(cosmictest.Container("four", 4))
	tok, err := e.P.AdminToken()
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"COSMICAC_URL": e.P.URL, "COSMICAC_TOKEN": tok, "HOME": t.TempDir()}

	code, out, errs := runCLI(t, env, "racks", "list", "--nodes")
	if code != 0 {
		t.Fatalf("racks list --nodes: exit %d: %s", code, errs)
	}
	// The racks table, what each rack runs, then the nodes table.
	blocks := strings.Split(strings.TrimSpace(out), "\n\n")
	if len(blocks) != 3 || !strings.HasPrefix(blocks[1], "rack ") || !strings.Contains(blocks[1], " runs: ") {
		t.Fatalf("racks list --nodes printed %d blocks, want the racks, what they run and the nodes:\n%s", len(blocks), out)
	}
	racks, nodes := blocks[0], blocks[2]
	rl := strings.Split(racks, "\n")
	if len(rl) != 2 || !slices.Equal(strings.Fields(rl[1])[3:], []string{"3", "24", "9", "yes"}) {
		t.Errorf("racks table:\n%s", racks)
	}
	nl := strings.Split(nodes, "\n")
	if len(nl) != 4 || !slices.Equal(strings.Fields(nl[0]), []string{"RACK", "NODE", "GPUS", "USED", "FREE", "CPU", "MEMORY", "SCHEDULABLE", "READY"}) {
		t.Fatalf("nodes table:\n%s", nodes)
	}
	for _, row := range nl[1:] {
		// A 5-GPU job at the default 8 vCPUs and 64 GiB per GPU, on a
		// node of 224 vCPUs and 2 TiB.
		if f := strings.Fields(row); len(f) != 9 || !slices.Equal(f[2:], []string{"8", "5", "3", "184/224", "1728Gi/2048Gi", "yes", "yes"}) {
			t.Errorf("node row %q, want 8 GPUs, 5 used, 3 free, 184 of 224 vCPUs and 1728 of 2048 GiB free, schedulable and ready", row)
		}
	}

	if code, wide, _ := runCLI(t, env, "racks", "list", "-o", "wide"); code != 0 || wide != out {
		t.Errorf("racks list -o wide: exit %d\n%s\nwant what --nodes printed", code, wide)
	}

	// The plain table is as it was: one row per rack, no nodes.
	if code, out, _ := runCLI(t, env, "racks", "list"); code != 0 || strings.Contains(out, "SCHEDULABLE") || len(strings.Split(strings.Split(out, "\n\n")[0], "\n")) != 2 {
		t.Errorf("racks list: exit %d\n%s", code, out)
	}

	// -o json carries the same per node.
	code, out, _ = runCLI(t, env, "racks", "list", "-o", "json")
	var l apiv1.RackList
	if err := json.Unmarshal([]byte(out), &l); code != 0 || err != nil || len(l.Items) != 1 {
		t.Fatalf("racks list -o json: exit %d, %v\n%s", code, err, out)
	}
	sum := 0
	for _, n := range l.Items[0].Nodes {
		if n.UsedGPUs != 5 || n.FreeGPUs != 3 {
			t.Errorf("node %s: used %d, free %d; want 5, 3", n.Name, n.UsedGPUs, n.FreeGPUs)
		}
		sum += n.FreeGPUs
	}
	if sum != l.Items[0].FreeGPUs {
		t.Errorf("the nodes' free GPUs add up to %d, the rack's are %d", sum, l.Items[0].FreeGPUs)
	}

	if j, err := e.Client.GetJob(e.Ctx, waiting.ID); err != nil || j.Status.State != cosmic.StateQueued {
		t.Errorf("the 4-GPU job is %s (%v), want queued", j.Status.State, err)
	}
}
