package components

import (
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/cosmicac/cosmicac/internal/cli"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/ork"
	"github.com/cosmicac/cosmicac/internal/ork/replay"
)

func init() { register((*app).orkCommand) }

func (a *app) orkCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ork",
		Short: "Tools of the ork that run without a platform",
	}
	cmd.AddCommand(a.orkReplayCommand())
	return cmd
}

func (a *app) orkReplayCommand() *cobra.Command {
	var nodesFile, podsFile, policy, workload string
	cmd := &cobra.Command{
		Use:   "replay --nodes FILE --pods FILE [--policy best-fit|fgd] [--workload online|trace]",
		Short: "Run the ork's placement over a trace: a fleet of nodes and pods arriving in order",
		Long: "Run the ork's real placement code over files, with no platform running. --nodes is a CSV\n" +
			"with a header naming name,gpus,gpu_model,cpu_milli,memory_mib (optionally location, rack);\n" +
			"--pods a CSV naming name,gpus,cpu_milli,memory_mib (optionally gpu_model, empty for any, and\n" +
			"location), in arrival order. Every pod is a GPU Container Job; nothing departs; a pod that\n" +
			"does not fit is skipped. Prints name,node,gpus per pod (node empty: not placed; gpus joined\n" +
			"by ;) and, on stderr, the pods placed, GPUs allocated, unallocated GPUs at 100% arrived GPU\n" +
			"demand and decisions per second. fgd weighs the job sizes it knows: with --workload online (the\n" +
			"default), as the ork does, the pods placed and those waiting; with --workload trace, every pod\n" +
			"of the file from the start, as the FGD paper gives its policy the workload (docs/placement.md).",
		Example: "  cosmicac ork replay --nodes nodes.csv --pods pods.csv --policy best-fit > placed.csv",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if nodesFile == "" || podsFile == "" {
				return cli.UsageErrorf("give --nodes FILE and --pods FILE")
			}
			if policy != "" && !cosmic.ValidPolicy(policy) {
				return cli.UsageErrorf("--policy %q: want %s or %s", policy, cosmic.PolicyBestFit, cosmic.PolicyFGD)
			}
			if workload != replay.WorkloadOnline && workload != replay.WorkloadTrace {
				return cli.UsageErrorf("--workload %q: want %s or %s", workload, replay.WorkloadOnline, replay.WorkloadTrace)
			}
			fleet, err := readReplayFile(nodesFile, replay.ReadNodes)
			if err != nil {
				return err
			}
			pods, err := readReplayFile(podsFile, replay.ReadPods)
			if err != nil {
				return err
			}
			placed, sum, err := replay.Run(fleet, pods, replay.Options{Policy: policy, Workload: workload})
			if err != nil {
				return cli.WithExit(cli.ExitUsage, err)
			}
			if err := replay.WriteCSV(a.Stdout, placed); err != nil {
				return err
			}
			full := "at 100% arrived GPU demand"
			if !sum.ReachedFull {
				full = "at the end (arrived GPU demand never reached 100% of the fleet)"
			}
			fmt.Fprintf(a.Stderr, "policy %s: %d of %d pods placed, %d of %d GPUs allocated; %.2f%% of GPUs unallocated %s; %d decisions in %s, %.0f decisions/s\n",
				sum.Policy, sum.Placed, sum.Pods, sum.AllocatedGPUs, sum.FleetGPUs, 100*sum.UnallocatedAtFull, full,
				sum.Decisions, sum.Elapsed.Round(time.Microsecond), sum.DecisionsPerSecond())
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&nodesFile, "nodes", "", "the fleet: CSV of name,gpus,gpu_model,cpu_milli,memory_mib[,location][,rack]")
	f.StringVar(&podsFile, "pods", "", "the pods, in arrival order: CSV of name,gpus,cpu_milli,memory_mib[,gpu_model][,location]")
	f.StringVar(&policy, "policy", "", "the placement policy: "+cosmic.PolicyBestFit+" or "+cosmic.PolicyFGD+" (default "+ork.DefaultPlacementPolicy+")")
	f.StringVar(&workload, "workload", replay.WorkloadOnline, "the job sizes fgd weighs: "+replay.WorkloadOnline+" (the pods placed and waiting, as the ork knows them) or "+replay.WorkloadTrace+" (every pod of the file from the start)")
	return cmd
}

// readReplayFile opens and reads one of replay's files; a bad file is a
// usage error (exit 2) naming the file and line.
func readReplayFile[T any](path string, read func(io.Reader, string) (T, error)) (T, error) {
	var zero T
	f, err := os.Open(path)
	if err != nil {
		return zero, cli.WithExit(cli.ExitUsage, err)
	}
	defer f.Close()
	v, err := read(f, path)
	var fe *replay.FileError
	if errors.As(err, &fe) {
		return zero, cli.WithExit(cli.ExitUsage, err)
	}
	return v, err
}
