package cli

import (
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/cosmicac/cosmicac/internal/apiv1"
	"github.com/cosmicac/cosmicac/internal/cosmic"
)

func init() { Register((*App).racksCommand) }

func (a *App) racksCommand() *cobra.Command {
	var conn connFlags
	cmd := &cobra.Command{
		Use:     "racks",
		Aliases: []string{"rack"},
		Short:   "Register, list and remove racks (the GPU capacity behind one worker)",
	}
	conn.add(cmd)
	cmd.AddCommand(a.racksRegisterCommand(&conn), a.racksListCommand(&conn), a.racksRemoveCommand(&conn))
	return cmd
}

func rackRows(racks []apiv1.Rack) []rackRow {
	rows := make([]rackRow, len(racks))
	for i, r := range racks {
		rows[i] = rackRow{ID: r.ID, Location: r.Location, GPUModel: r.GPUModel, Nodes: len(r.Nodes),
			GPUs: r.GPUs, Free: r.FreeGPUs, Reachable: r.Reachable, Problem: r.Problem, Note: r.Note, Catalogue: r.Catalogue}
	}
	return rows
}

func (a *App) racksRegisterCommand(conn *connFlags) *cobra.Command {
	var (
		out      outputFlag
		r        apiv1.RegisterRack
		addrs    []string
		deadline time.Duration
	)
	cmd := withOutput(&cobra.Command{
		Use:   "register --id ID --location L --gpu-model M --worker-key KEY [--worker-addr HOST:PORT]",
		Short: "Register a rack, or update the rack with that ID (admins only)",
		Long: "Register a rack: the worker (cosmicac wrk-server-k8s-nvidia) whose fabric public key is KEY\n" +
			"(`cosmicac keys show --data-dir` on the worker prints it) and where the ork dials it.",
		Example: "  cosmicac racks register --id r2 --location us --gpu-model GH100_H100_SXM5_80GB \\\n" +
			"    --worker-key 3b6a27bcceb6a42d62a3a8d02a6f0d73653215771de243a63ac048a18b59da29 --worker-addr 10.0.0.7:7000",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var missing []string
			for _, name := range []string{"id", "location", "gpu-model", "worker-key"} {
				if !cmd.Flags().Changed(name) {
					missing = append(missing, "--"+name)
				}
			}
			if len(missing) > 0 {
				return UsageErrorf("give %s", strings.Join(missing, ", "))
			}
			for _, ad := range addrs {
				if _, _, err := net.SplitHostPort(ad); err != nil {
					return UsageErrorf("--worker-addr %q: want HOST:PORT", ad)
				}
			}
			r.WorkerAddrs = addrs
			if deadline%time.Second != 0 || deadline < 0 {
				return UsageErrorf("--agent-deadline %s: want whole seconds, e.g. 10m or 90s", deadline)
			}
			r.AgentDeadline = int(deadline / time.Second)
			rack := cosmic.Rack{ID: r.ID, Type: cosmic.RackTypeServer, Location: r.Location, GPUModel: r.GPUModel, WorkerKey: r.WorkerKey,
				AgentDeadline: r.AgentDeadline, PlacementPolicy: r.PlacementPolicy}
			if err := rack.Validate(); err != nil {
				return WithExit(ExitUsage, fieldProblems("invalid rack", cosmic.FieldErrors(err), err))
			}
			return a.withAPI(conn, func(c *apiConn) error {
				got, err := c.RegisterRack(cmd.Context(), r)
				if err != nil {
					return c.explain(err)
				}
				if ok, err := out.structured(a.Stdout, got); ok {
					return err
				}
				return writeRacksTable(a.Stdout, rackRows([]apiv1.Rack{got}))
			})
		},
	}, &out)
	f := cmd.Flags()
	f.StringVar(&r.ID, "id", "", "rack ID")
	f.StringVar(&r.Location, "location", "", "location the rack serves")
	f.StringVar(&r.GPUModel, "gpu-model", "", "GPU model of the rack's nodes, e.g. GH100_H100_SXM5_80GB")
	f.StringVar(&r.WorkerKey, "worker-key", "", "the worker's fabric public key (64 hex digits)")
	f.StringArrayVar(&addrs, "worker-addr", nil, "HOST:PORT of the worker's fabric listener (repeatable)")
	f.StringVar(&r.PlacementPolicy, "placement-policy", "", "how the ork ranks the nodes of the rack's location: "+cosmic.PolicyBestFit+" or "+cosmic.PolicyFGD+
		" (default: the ork's; the racks of a location share one; docs/placement.md)")
	f.DurationVar(&deadline, "agent-deadline", 0, "how long a replica may take to start until its agent connects, then it fails with agent_timeout (0: the default, "+cosmic.DefaultAgentDeadline.String()+")")
	return cmd
}

func (a *App) racksListCommand(conn *connFlags) *cobra.Command {
	var (
		out   outputFlag
		nodes bool
	)
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List racks with their nodes, GPUs, free GPUs and whether their worker answers",
		Long: "List racks with their nodes, GPUs, free GPUs and whether their worker answers. With --nodes,\n" +
			"a second table shows each node's GPUs, those jobs use and those free, its vCPUs and memory as\n" +
			"FREE/TOTAL (\"-\": not reported, so not limited), and whether it is schedulable and ready. A rack's free GPUs are its nodes' added up, and a job (or replica) that\n" +
			"runs on one node needs them on one node: 12 free as 4 on each of 3 nodes take no 8-GPU job.\n" +
			"-o wide is --nodes.",
		Example: "  cosmicac racks list\n  cosmicac racks list --nodes\n  cosmicac racks list -o yaml",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out.format == "wide" {
				// kubectl's word for the table with more in it.
				out.format, nodes = outTable, true
			}
			if err := out.check(); err != nil {
				return err
			}
			return a.withAPI(conn, func(c *apiConn) error {
				racks, err := c.ListRacks(cmd.Context())
				if err != nil {
					return c.explain(membersSee(err, "a team member sees the locations, GPU models and what their racks run with `cosmicac locations`"))
				}
				if racks == nil {
					racks = []apiv1.Rack{}
				}
				if ok, err := out.structured(a.Stdout, apiv1.RackList{Items: racks, Total: len(racks)}); ok {
					return err
				}
				if len(racks) == 0 {
					fmt.Fprintln(a.Stderr, "no racks: register one with `cosmicac racks register`")
					return nil
				}
				if err := writeRacksTable(a.Stdout, rackRows(racks)); err != nil || !nodes {
					return err
				}
				fmt.Fprintln(a.Stdout)
				return writeNodesTable(a.Stdout, racks)
			})
		},
	}
	out.add(cmd)
	cmd.Flags().BoolVar(&nodes, "nodes", false, "also list each node: its GPUs, those used and free, schedulable and ready")
	return cmd
}

// writeNodesTable prints every node of the racks, a row each, with the GPUs
// that jobs use and those a job could still get there: where a rack's free
// GPUs are split across nodes, it shows why a job that needs them on one
// node waits.
func writeNodesTable(w io.Writer, racks []apiv1.Rack) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RACK\tNODE\tGPUS\tUSED\tFREE\tCPU\tMEMORY\tSCHEDULABLE\tREADY")
	for _, r := range racks {
		for _, n := range r.Nodes {
			cpu, mem := "-", "-" // not reported: not limited
			if n.CPUMilli > 0 {
				cpu = fmt.Sprintf("%s/%s", vcpus(n.CPUMilli-n.UsedCPUMilli), vcpus(n.CPUMilli))
			}
			if n.MemoryMiB > 0 {
				mem = fmt.Sprintf("%s/%s", gib(n.MemoryMiB-n.UsedMemoryMiB), gib(n.MemoryMiB))
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\t%s\t%s\t%s\n", r.ID, n.Name, n.GPUs, n.UsedGPUs, n.FreeGPUs, cpu, mem,
				yesNo(n.Schedulable), yesNo(n.Ready))
		}
	}
	return tw.Flush()
}

// vcpus writes millicores as vCPUs, gib MiB as GiB: "13.5", "2048Gi".
func vcpus(m int64) string { return strconv.FormatFloat(float64(m)/1000, 'f', -1, 64) }

func gib(m int64) string {
	return strconv.FormatFloat(math.Round(float64(m)/1024*10)/10, 'f', -1, 64) + "Gi"
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func (a *App) racksRemoveCommand(conn *connFlags) *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:     "remove ID",
		Aliases: []string{"rm", "delete"},
		Short:   "Remove a rack (admins only); --force even if jobs hold its GPUs (they fail with rack_removed)",
		Example: "  cosmicac racks remove r2\n  cosmicac racks remove r2 --force",
		Args:    cobra.ExactArgs(1),
		ValidArgsFunction: a.completeArg(conn, func(ctx context.Context, c *apiConn, _ string) ([]cobra.Completion, error) {
			racks, err := c.ListRacks(ctx)
			if err != nil {
				return nil, err
			}
			var ids []cobra.Completion
			for _, r := range racks {
				ids = append(ids, cobra.CompletionWithDesc(r.ID, r.Location+" "+r.GPUModel))
			}
			return ids, nil
		}),
		RunE: a.api(conn, func(cmd *cobra.Command, args []string, c *apiConn) error {
			if err := c.RemoveRack(cmd.Context(), args[0], force); err != nil {
				return c.explain(err)
			}
			fmt.Fprintf(a.Stdout, "removed rack %s\n", args[0])
			return nil
		}),
	}
	cmd.Flags().BoolVar(&force, "force", false, "remove it even if jobs hold GPUs there, failing them")
	return cmd
}
