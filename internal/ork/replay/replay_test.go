package replay

import (
	"strings"
	"testing"
)

const nodesCSV = `name,gpus,gpu_model,cpu_milli,memory_mib
a,8,H100,32000,262144
b,8,H100,128000,262144
c,4,A100,64000,131072
`

func TestRunKnownAnswers(t *testing.T) {
	f, err := ReadNodes(strings.NewReader(nodesCSV), "nodes.csv")
	if err != nil {
		t.Fatal(err)
	}
	// Columns in another order; p2 needs b's CPU; p3 any model; p4 too
	// big for any node's CPU; p5 fits nowhere now; p6 asks A100.
	pods, err := ReadPods(strings.NewReader(`memory_mib,name,cpu_milli,gpus,gpu_model
1024,p1,8000,2,H100
1024,p2,96000,1,H100
1024,p3,4000,4,
1024,p4,200000,1,
1024,p5,1000,8,H100
2048,p6,1000,3,A100
1024,p7,1000,1,H100
`), "pods.csv")
	if err != nil {
		t.Fatal(err)
	}
	// Both policies agree here: p7 ties on fragmentation and goes as
	// best-fit.
	want := `name,node,gpus
p1,a,0;1
p2,b,0
p3,c,0;1;2;3
p4,,
p5,,
p6,,
p7,a,2
`
	for _, policy := range []string{"best-fit", "fgd"} {
		tt := struct{ policy, want string }{policy, want}
		placed, sum, err := Run(f, pods, Options{Policy: tt.policy})
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		if err := WriteCSV(&b, placed); err != nil {
			t.Fatal(err)
		}
		if b.String() != tt.want {
			t.Errorf("%s: placed\n%s\nwant\n%s", tt.policy, b.String(), tt.want)
		}
		// Demand reaches the fleet's 20 GPUs with p7, when 8 are allocated.
		if sum.Placed != 4 || sum.AllocatedGPUs != 8 || sum.FleetGPUs != 20 || !sum.ReachedFull || sum.UnallocatedAtFull != 0.6 || sum.Decisions != 7 {
			t.Errorf("%s: summary %+v", tt.policy, sum)
		}
	}
}

func TestDemandNeverFull(t *testing.T) {
	f, err := ReadNodes(strings.NewReader(nodesCSV), "nodes.csv")
	if err != nil {
		t.Fatal(err)
	}
	pods, err := ReadPods(strings.NewReader("name,gpus,cpu_milli,memory_mib\nx,1,0,0\n"), "pods.csv")
	if err != nil {
		t.Fatal(err)
	}
	_, sum, err := Run(f, pods, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if sum.ReachedFull || sum.UnallocatedAtFull != 0.95 || sum.Policy == "" {
		t.Errorf("summary %+v, want 95%% unallocated at the end, demand never full", sum)
	}
}

func TestBadFiles(t *testing.T) {
	for _, tt := range []struct {
		name, nodes, pods, want string
	}{
		{"empty", "", "", "nodes.csv: empty: want a header line"},
		{"missing column", "name,gpus,gpu_model,cpu_milli\n", "", `nodes.csv:1: no column "memory_mib"`},
		{"unknown column", "name,gpus,gpu_model,cpu_milli,memory_mib,colour\n", "", `nodes.csv:1: unknown column "colour"`},
		{"bad number", "name,gpus,gpu_model,cpu_milli,memory_mib\na,8,H100,32000,1\nb,eight,H100,1,1\n", "", `nodes.csv:3: gpus "eight": want a whole number from 0 to 64`},
		{"too many GPUs", "name,gpus,gpu_model,cpu_milli,memory_mib\na,65,H100,1,1\n", "", `nodes.csv:2: gpus "65"`},
		{"no CPU", "name,gpus,gpu_model,cpu_milli,memory_mib\na,8,H100,0,1\n", "", `nodes.csv:2: cpu_milli "0": want a whole number from 1`},
		{"node twice", "name,gpus,gpu_model,cpu_milli,memory_mib\na,8,H100,1,1\na,8,H100,1,1\n", "", "nodes.csv:3: node a of rack rack-H100 is listed twice (first on line 2)"},
		{"short row", "name,gpus,gpu_model,cpu_milli,memory_mib\na,8,H100\n", "", "nodes.csv:2: 3 fields, the header has 5"},
		{"negative pod", nodesCSV, "name,gpus,cpu_milli,memory_mib\np,1,-5,0\n", `pods.csv:2: cpu_milli "-5"`},
		{"nameless pod", nodesCSV, "name,gpus,cpu_milli,memory_mib\n,1,5,0\n", "pods.csv:2: name must not be empty"},
		{"quote", nodesCSV, "name,gpus,cpu_milli,memory_mib\n\"p,1,5,0\n", "pods.csv:2:"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ReadNodes(strings.NewReader(tt.nodes), "nodes.csv")
			if err == nil {
				_, err = ReadPods(strings.NewReader(tt.pods), "pods.csv")
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want it to contain %q", err, tt.want)
			}
		})
	}
}
