package cli

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/cosmicac/cosmicac/internal/apiv1"
	"github.com/cosmicac/cosmicac/internal/client"
)

func init() { Register((*App).locationsCommand) }

// locationsCommand is the read-only view of the racks every team member
// may run (GET /api/v1/fleet, jobs.read): what `racks list` shows platform
// admins, without naming racks, nodes or workers.
func (a *App) locationsCommand() *cobra.Command {
	var (
		conn connFlags
		out  outputFlag
	)
	cmd := withOutput(&cobra.Command{
		Use:     "locations",
		Aliases: []string{"location", "fleet"},
		Short:   "List the locations and GPU models jobs may ask for, their free GPUs and what their racks run",
		Long: "List each location and GPU model a job's spec may name (--location, --gpu-model), with its nodes,\n" +
			"GPUs and free GPUs, the most GPUs one node holds (the most a single-node job may ask for), the most\n" +
			"vCPUs and memory a node has, and what its racks run: job types, runtimes, images, and the most a\n" +
			"VM gets (a create they cannot run is refused with not_in_catalogue). Any member of the active\n" +
			"team may run it (jobs.read); `cosmicac racks list` is the platform admins' view, with the racks.",
		Example: "  cosmicac locations\n  cosmicac locations -o json",
		Args:    cobra.NoArgs,
		RunE: a.api(&conn, func(cmd *cobra.Command, _ []string, c *apiConn) error {
			f, err := c.Fleet(cmd.Context())
			if err != nil {
				return c.explain(err)
			}
			if ok, err := out.structured(a.Stdout, f); ok {
				return err
			}
			if len(f.Locations) == 0 {
				fmt.Fprintln(a.Stderr, "no locations: no rack is registered yet (a platform admin registers racks)")
				return nil
			}
			return writeLocationsTable(a.Stdout, f)
		}),
	}, &out)
	conn.add(cmd)
	return cmd
}

// membersSee adds to an API refusal (403) of an admin's command what a
// member may run instead, so that no hint leaves a member at a dead end.
func membersSee(err error, hint string) error {
	var ae *client.APIError
	if errors.As(err, &ae) && ae.Status == http.StatusForbidden {
		out := *ae
		out.Message += "; " + hint
		return &out
	}
	return err
}

// writeLocationsTable prints the fleet a row per location and GPU model,
// then what each runs.
func writeLocationsTable(w io.Writer, f apiv1.Fleet) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "LOCATION\tGPU MODEL\tNODES\tGPUS\tFREE\tMAX/NODE\tCPU/NODE\tMEMORY/NODE")
	for _, l := range f.Locations {
		for _, m := range l.GPUModels {
			cpu, mem := "-", "-"
			if m.MaxCPUPerNode > 0 {
				cpu = fmt.Sprint(m.MaxCPUPerNode)
			}
			if m.MaxMemoryMiBPerNode > 0 {
				mem = gib(m.MaxMemoryMiBPerNode)
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%s\t%s\n", l.Name, m.Model, m.Nodes, m.GPUs, m.Free, m.MaxPerNode, cpu, mem)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	for _, l := range f.Locations {
		for _, m := range l.GPUModels {
			fmt.Fprintf(w, "%s %s runs: %s\n", l.Name, m.Model, catalogueText(m.Catalogue))
		}
	}
	return nil
}
