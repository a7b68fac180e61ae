// Command placement-openb measures placement policies on the Alibaba GPU
// trace of 2023 (openb), the workload the FGD paper was published on:
// CosmicAC's own policies (`cosmicac ork replay`) and independent ports of
// the paper's (internal/ork/replay/reference), on the very same pods, for
// each of several seeds, as the paper's artifact runs them (the workload
// tuned to 1.3 times the fleet's GPUs, seeds 42 and on).
//
//	go run ./hack/placement-openb -trace DIR [-workloads default,multigpu50] [-seeds 10] [-workload online|trace] [-shuffle]
//
// DIR holds the trace's csv folder (github.com/alibaba/clusterdata,
// cluster-trace-gpu-v2023/csv): openb_node_list_gpu_node.csv and
// openb_pod_list_WORKLOAD.csv. It prints, per workload, each policy's share
// of the fleet's GPUs unallocated when the arrived pods first ask for all
// of them (the mean over the seeds, and the range), and CosmicAC's
// decisions per second. docs/placement.md reports its figures.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"

	"github.com/cosmicac/cosmicac/internal/ork/replay"
	"github.com/cosmicac/cosmicac/internal/ork/replay/reference"
)

func main() {
	trace := flag.String("trace", "", "the folder of the openb trace's csv files")
	workloads := flag.String("workloads", "default,multigpu50", "the pod lists to replay, comma-separated (openb_pod_list_NAME.csv)")
	seeds := flag.Int("seeds", 10, "how many seeds (42, 43, …)")
	tuneTo := flag.Float64("tune", 1.3, "the GPUs the pods ask, as a multiple of the fleet's (0: as the file has them)")
	policies := flag.String("policies", "best-fit,fgd,FGD,BestFit,GpuPacking,Random", "the policies: CosmicAC's in lower case, the reference ports in the artifact's names")
	workload := flag.String("workload", replay.WorkloadOnline, "what CosmicAC's fgd knows of the workload: online (as the ork: the pods placed and waiting) or trace (every pod, as the paper's FGD)")
	shuffle := flag.Bool("shuffle", false, "put the pods in an order drawn with the seed (the artifact's shufflePod)")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the run to this file")
	flag.Parse()
	if *trace == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: placement-openb -trace DIR [-workloads default,multigpu50] [-seeds 10] [-tune 1.3]")
		os.Exit(2)
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "placement-openb:", err)
			os.Exit(1)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, "placement-openb:", err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	if err := run(*trace, strings.Split(*workloads, ","), strings.Split(*policies, ","), *seeds, *tuneTo, *workload, *shuffle); err != nil {
		pprof.StopCPUProfile()
		fmt.Fprintln(os.Stderr, "placement-openb:", err)
		os.Exit(1)
	}
}

func run(dir string, workloads, policies []string, seeds int, tuneTo float64, workload string, shuffle bool) error {
	nf := filepath.Join(dir, "openb_node_list_gpu_node.csv")
	r, err := os.Open(nf)
	if err != nil {
		return err
	}
	fleet, err := replay.ReadOpenBNodes(r, nf)
	r.Close()
	if err != nil {
		return err
	}
	order := "the files' order"
	if shuffle {
		order = "shuffled by the seed"
	}
	fmt.Printf("fleet: %d nodes; pods tuned to %.2f× its GPUs, %s; seeds %d–%d; CosmicAC's fgd knows the workload %s\n\n", len(fleet.Nodes), tuneTo, order, 42, 42+seeds-1, workload)
	fmt.Printf("| workload | policy | unallocated GPU %% at 100%% arrival: mean | min | max | decisions/s |\n|---|---|---|---|---|---|\n")
	for _, w := range workloads {
		pf := filepath.Join(dir, "openb_pod_list_"+w+".csv")
		orig, err := readPods(pf, fleet, replay.OpenBOptions{})
		if err != nil {
			return err
		}
		got := map[string][]float64{}
		rate := map[string][]float64{}
		for s := range seeds {
			seed := uint64(42 + s)
			pods, err := readPods(pf, fleet, replay.OpenBOptions{Tune: tuneTo, Seed: seed, Shuffle: shuffle})
			if err != nil {
				return err
			}
			for _, p := range policies {
				if slices.Contains(reference.Policies, p) {
					res, err := reference.Run(fleet, pods, orig, p, seed)
					if err != nil {
						return err
					}
					got[p] = append(got[p], 100*res.UnallocatedAtFull)
					continue
				}
				_, sum, err := replay.Run(fleet, pods, replay.Options{Policy: p, Workload: workload})
				if err != nil {
					return fmt.Errorf("%s: %w", p, err)
				}
				got[p] = append(got[p], 100*sum.UnallocatedAtFull)
				rate[p] = append(rate[p], sum.DecisionsPerSecond())
			}
		}
		for _, p := range policies {
			v := got[p]
			dps := "—"
			if len(rate[p]) > 0 {
				dps = fmt.Sprintf("%.0f", mean(rate[p]))
			}
			fmt.Printf("| %s | %s | %.2f | %.2f | %.2f | %s |\n", w, p, mean(v), slices.Min(v), slices.Max(v), dps)
		}
	}
	return nil
}

func readPods(file string, fleet replay.Fleet, o replay.OpenBOptions) ([]replay.Pod, error) {
	r, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return replay.ReadOpenBPods(r, file, fleet, o)
}

func mean(v []float64) float64 {
	var s float64
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}
