package replay

import (
	"bytes"
	"cmp"
	"encoding/csv"
	"io"
	"math/rand/v2"
	"slices"
	"strconv"
)

// The Alibaba GPU cluster trace of 2023 ("openb", github.com/alibaba/
// clusterdata, cluster-trace-gpu-v2023/csv), on which fragmentation
// gradient descent was published (Weng et al., USENIX ATC '23), read into
// a replay's fleet and pods, so that `cosmicac ork replay` and the
// reference ports (package replay/reference) run on the very files the
// paper used.
//
// What CosmicAC cannot express is mapped, and said so:
//   - a GPU-sharing pod (num_gpu 1, gpu_milli < 1000) asks one whole GPU:
//     a CosmicAC job's VM is given whole GPUs;
//   - a pod without GPUs is left out: CosmicAC places GPU jobs only (its
//     placement refuses a replica of no GPUs), and the reference ports get
//     the same pods;
//   - a pod's gpu_spec ("A|B", any of several models) is kept only when it
//     names one model (the default and multi-GPU workloads name none);
//   - the nodes' GPUs, CPU and memory are as the file gives them.
//
// The workload is tuned as the paper's artifact tunes it
// (kubernetes-scheduler-simulator, pkg/simulator/simulator.go,
// TunePodsByNodeTotalResource): to Tune times the fleet's GPUs, by
// removing pods drawn at random while it asks more, or by appending pods
// drawn at random from the original list while it asks less, with a seed;
// the pods otherwise keep the file's order (creation time; the artifact's
// shufflePod is false), unless OpenBOptions.Shuffle.

// OpenBOptions shapes a read of the openb trace.
type OpenBOptions struct {
	// Tune is the GPUs the pods ask, as a multiple of the fleet's (the
	// artifact's 1.3); 0 keeps the file's pods as they are.
	Tune float64
	// Seed draws the pods tuning removes or adds, and the order Shuffle
	// gives them.
	Seed uint64
	// Shuffle puts the pods in an order drawn with Seed (the artifact's
	// shufflePod), before tuning adds any: arrivals whose mix does not
	// drift, where the files' own order puts, for one, every multi-GPU pod
	// of the multigpu workloads after the others.
	Shuffle bool
}

// ReadOpenBNodes reads an openb nodes file (sn, cpu_milli, memory_mib,
// gpu, model), one rack per GPU model as ReadNodes makes them.
func ReadOpenBNodes(r io.Reader, file string) (Fleet, error) {
	t, err := readTable(r, file, []string{"sn", "cpu_milli", "memory_mib", "gpu", "model"}, nil)
	if err != nil {
		return Fleet{}, err
	}
	// Rewritten in the replay's own format, so that both readers build a
	// fleet the same way.
	var b bytes.Buffer
	w := csv.NewWriter(&b)
	w.Write([]string{"name", "gpus", "gpu_model", "cpu_milli", "memory_mib"})
	for i := range t.rows {
		w.Write([]string{t.get(i, "sn"), t.get(i, "gpu"), cmp.Or(t.get(i, "model"), "CPU"), t.get(i, "cpu_milli"), t.get(i, "memory_mib")})
	}
	w.Flush()
	return ReadNodes(&b, file)
}

// ReadOpenBPods reads an openb pods file (name, cpu_milli, memory_mib,
// num_gpu, gpu_milli, gpu_spec, and the columns of time and phase, which
// a replay does not use), in the file's order, tuned against fleet by o.
func ReadOpenBPods(r io.Reader, file string, fleet Fleet, o OpenBOptions) ([]Pod, error) {
	t, err := readTable(r, file, []string{"name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"},
		[]string{"gpu_spec", "qos", "pod_phase", "creation_time", "deletion_time", "scheduled_time"})
	if err != nil {
		return nil, err
	}
	pods := make([]Pod, 0, len(t.rows))
	for i := range t.rows {
		p := Pod{Name: t.get(i, "name"), Location: DefaultLocation}
		g, err := t.num(i, "num_gpu", 0, 1<<10)
		if err != nil {
			return nil, err
		}
		if _, err := t.num(i, "gpu_milli", 0, 1000); err != nil {
			return nil, err
		}
		if p.CPUMilli, err = t.num(i, "cpu_milli", 0, maxCPUMilli); err != nil {
			return nil, err
		}
		if p.MemoryMiB, err = t.num(i, "memory_mib", 0, maxMemoryMiB); err != nil {
			return nil, err
		}
		if g == 0 {
			continue
		}
		p.GPUs = int(g) // a sharing pod's fraction of one GPU is one GPU
		if spec := t.get(i, "gpu_spec"); spec != "" && !slices.Contains([]byte(spec), '|') {
			p.GPUModel = spec
		}
		pods = append(pods, p)
	}
	if o.Shuffle {
		rng := rand.New(rand.NewPCG(o.Seed, 0x5bf1e))
		rng.Shuffle(len(pods), func(i, j int) { pods[i], pods[j] = pods[j], pods[i] })
	}
	if o.Tune > 0 {
		pods = tune(pods, fleet, o)
	}
	return pods, nil
}

// tune is the artifact's TunePodsByNodeTotalResource on whole GPUs.
func tune(pods []Pod, fleet Fleet, o OpenBOptions) []Pod {
	fleetGPUs := 0
	for _, n := range fleet.Nodes {
		fleetGPUs += n.GPUs
	}
	target := o.Tune * float64(fleetGPUs)
	asked := 0
	for _, p := range pods {
		asked += p.GPUs
	}
	rng := rand.New(rand.NewPCG(o.Seed, 0x0be1))
	out := slices.Clone(pods)
	for float64(asked) > target && len(out) > 0 {
		i := rng.IntN(len(out))
		asked -= out[i].GPUs
		out = slices.Delete(out, i, i+1)
	}
	for n := 0; float64(asked) < target && len(pods) > 0; n++ {
		p := pods[rng.IntN(len(pods))]
		if float64(asked+p.GPUs) > target {
			break
		}
		p.Name += "-tuned-" + strconv.Itoa(n)
		asked += p.GPUs
		out = append(out, p)
	}
	return out
}
