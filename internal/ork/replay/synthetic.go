package replay

import (
	"fmt"
	"math/rand/v2"
)

// Synthetic is a deterministic trace for comparing policies (seeded): a
// fleet of 1,200 nodes of 1, 2, 4 and 8 GPUs with CPU and memory of
// several sizes, some CPU-scarce, in the spirit of the Alibaba GPU
// cluster trace's 1,213 nodes; and pods mixing 1-, 2-, 4- and 8-GPU jobs
// with CPU-heavy 1-GPU jobs, arriving until they ask for 130% of the
// fleet's GPUs.
func Synthetic(seed uint64) (Fleet, []Pod) {
	rng := rand.New(rand.NewPCG(seed, 17))
	var f Fleet
	shapes := []struct {
		n, gpus  int
		cpu, mem int64 // vCPUs, GiB
		rack     string
	}{
		{700, 8, 96, 384, "r8a"}, // CPU-scarce: 12 vCPUs a GPU
		{200, 8, 128, 1024, "r8b"},
		{150, 4, 64, 256, "r4"},
		{100, 2, 32, 128, "r2"},
		{50, 1, 16, 64, "r1"},
	}
	gpus := 0
	for _, sh := range shapes {
		f.Racks = append(f.Racks, rackOf(sh.rack))
		for i := range sh.n {
			f.Nodes = append(f.Nodes, nodeOf(fmt.Sprintf("%s-%03d", sh.rack, i), sh.rack, sh.gpus, sh.cpu*1000, sh.mem*1024))
			gpus += sh.gpus
		}
	}
	var pods []Pod
	between := func(lo, hi int) int64 { return int64(lo + rng.IntN(hi-lo+1)) }
	for demand := 0; demand < gpus*13/10; {
		p := Pod{Name: fmt.Sprintf("p%05d", len(pods)), Location: DefaultLocation}
		switch x := rng.IntN(100); {
		case x < 45:
			p.GPUs, p.CPUMilli, p.MemoryMiB = 1, between(4, 12)*1000, between(16, 64)*1024
		case x < 60: // CPU-heavy
			p.GPUs, p.CPUMilli, p.MemoryMiB = 1, between(32, 64)*1000, between(64, 256)*1024
		case x < 75:
			p.GPUs, p.CPUMilli, p.MemoryMiB = 2, between(8, 32)*1000, between(32, 128)*1024
		case x < 90:
			p.GPUs, p.CPUMilli, p.MemoryMiB = 4, between(16, 64)*1000, between(64, 256)*1024
		default:
			p.GPUs, p.CPUMilli, p.MemoryMiB = 8, between(32, 96)*1000, between(256, 768)*1024
		}
		demand += p.GPUs
		pods = append(pods, p)
	}
	return f, pods
}
