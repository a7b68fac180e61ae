package replay

import (
	"slices"
	"strings"
	"testing"
)

const openbNodes = `sn,cpu_milli,memory_mib,gpu,model
openb-node-0000,64000,262144,2,P100
openb-node-0001,96000,786432,8,G2
`

// openbPods: a whole GPU, a share of one, a CPU-only pod (left out), two
// GPUs of a named model, and one of two models; the trace's time and phase
// columns are read past.
const openbPods = `name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time
p0,12000,16384,1,1000,,LS,Running,0,12537496,0
p1,6000,12288,1,460,,LS,Running,427061,12902960,427061
p2,88000,327680,0,0,,BE,Running,1,2,1
p3,8000,30720,2,1000,G2,LS,Running,5,6,5
p4,8000,30720,1,1000,G2|T4,LS,Running,5,6,5
`

func TestReadOpenB(t *testing.T) {
	f, err := ReadOpenBNodes(strings.NewReader(openbNodes), "nodes.csv")
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Nodes) != 2 || f.Nodes[1].GPUs != 8 || f.Nodes[1].GPUModel != "G2" || f.Nodes[1].CPUMilli != 96000*1000 || f.Nodes[1].MemoryMiB != 786432*1024 {
		t.Fatalf("nodes %+v", f.Nodes)
	}
	pods, err := ReadOpenBPods(strings.NewReader(openbPods), "pods.csv", f, OpenBOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := []Pod{
		{Name: "p0", GPUs: 1, CPUMilli: 12000, MemoryMiB: 16384, Location: DefaultLocation},
		{Name: "p1", GPUs: 1, CPUMilli: 6000, MemoryMiB: 12288, Location: DefaultLocation}, // a share is a whole GPU
		{Name: "p3", GPUs: 2, CPUMilli: 8000, MemoryMiB: 30720, GPUModel: "G2", Location: DefaultLocation},
		{Name: "p4", GPUs: 1, CPUMilli: 8000, MemoryMiB: 30720, Location: DefaultLocation}, // one of two models: any
	}
	if !slices.Equal(pods, want) {
		t.Errorf("pods\n%+v\nwant\n%+v", pods, want)
	}
	// The replay runs them: 5 GPUs asked of 10; all placed.
	_, sum, err := Run(f, pods, Options{})
	if err != nil || sum.Placed != 4 || sum.AllocatedGPUs != 5 {
		t.Errorf("Run: %+v, %v", sum, err)
	}
	for _, bad := range []string{
		"sn,cpu_milli,memory_mib,gpu\nn,1,1,1\n",                                 // no model column
		"sn,cpu_milli,memory_mib,gpu,model\nn,1,1,x,G\n",                         // not a number
		"name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,1,1001\n",            // more than a GPU
		"name,cpu_milli,memory_mib,num_gpu,gpu_milli,color\np,1,1,1,1000,blue\n", // unknown column
	} {
		if strings.HasPrefix(bad, "sn") {
			if _, err := ReadOpenBNodes(strings.NewReader(bad), "nodes.csv"); err == nil {
				t.Errorf("nodes %q read", bad)
			}
		} else if _, err := ReadOpenBPods(strings.NewReader(bad), "pods.csv", f, OpenBOptions{}); err == nil {
			t.Errorf("pods %q read", bad)
		}
	}
}

// TestOpenBTune: tuned down, pods drawn at random leave until the rest ask
// no more than the target, the others in the file's order; tuned up, pods
// drawn from the file are appended, renamed, until one more would pass it.
// The same seed draws the same pods; shuffled, the same pods in another
// order.
func TestOpenBTune(t *testing.T) {
	f, err := ReadOpenBNodes(strings.NewReader(openbNodes), "nodes.csv") // 10 GPUs
	if err != nil {
		t.Fatal(err)
	}
	read := func(o OpenBOptions) []Pod {
		pods, err := ReadOpenBPods(strings.NewReader(openbPods), "pods.csv", f, o)
		if err != nil {
			t.Fatal(err)
		}
		return pods
	}
	gpus := func(ps []Pod) (n int) {
		for _, p := range ps {
			n += p.GPUs
		}
		return n
	}
	down := read(OpenBOptions{Tune: 0.3, Seed: 1})
	if gpus(down) > 3 || len(down) >= 4 {
		t.Errorf("tuned to 3 GPUs: %d GPUs in %d pods", gpus(down), len(down))
	}
	if !slices.IsSortedFunc(down, func(a, b Pod) int { return strings.Compare(a.Name, b.Name) }) {
		t.Errorf("tuned down out of order: %+v", down)
	}
	up := read(OpenBOptions{Tune: 2, Seed: 1})
	if g := gpus(up); g > 20 || g < 18 {
		t.Errorf("tuned to 20 GPUs: %d", g)
	}
	if !slices.Equal(up[:4], read(OpenBOptions{})) || !strings.Contains(up[4].Name, "-tuned-0") {
		t.Errorf("tuned up: %+v", up)
	}
	if !slices.Equal(up, read(OpenBOptions{Tune: 2, Seed: 1})) {
		t.Error("the same seed drew other pods")
	}
	sh := read(OpenBOptions{Shuffle: true, Seed: 3})
	sorted := slices.SortedFunc(slices.Values(sh), func(a, b Pod) int { return strings.Compare(a.Name, b.Name) })
	if !slices.Equal(sorted, read(OpenBOptions{})) || slices.Equal(sh, read(OpenBOptions{})) {
		t.Errorf("shuffled: %+v", sh)
	}
}
