package cli

import (
	"fmt"
	"text/tabwriter"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"github.com/cosmicac/cosmicac/internal/apiv1"
)

func init() { Register((*App).volumesCommand) }

func (a *App) volumesCommand() *cobra.Command {
	var conn connFlags
	cmd := &cobra.Command{
		Use:     "volumes",
		Aliases: []string{"volume"},
		Short:   "List and delete your team's standalone volumes",
		Long: "A standalone volume is a disk a rack keeps for your team: the first job that mounts it\n" +
			"(spec.volumes[].volumeSource.standalone.name) makes it, and it outlives that job. A later\n" +
			"job that mounts it runs on the same rack, and waits while another job has it (docs/data.md).",
	}
	conn.add(cmd)
	cmd.AddCommand(a.volumesListCommand(&conn),
		a.deleteCommand(&conn, "volume", "Delete a standalone volume of your team, and what it holds (refused while a job has it)", (*apiConn).DeleteVolume))
	return cmd
}

func (a *App) volumesListCommand(conn *connFlags) *cobra.Command {
	var out outputFlag
	return withOutput(&cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List your team's standalone volumes: where each is kept, its size, the job that has it",
		Args:    cobra.NoArgs,
		RunE: a.api(conn, func(cmd *cobra.Command, _ []string, c *apiConn) error {
			l, err := c.ListVolumes(cmd.Context())
			if err != nil {
				return c.explain(err)
			}
			if l == nil {
				l = []apiv1.Volume{}
			}
			if ok, err := out.structured(a.Stdout, apiv1.VolumeList{Items: l, Total: len(l)}); ok {
				return err
			}
			if len(l) == 0 {
				fmt.Fprintln(a.Stderr, "no standalone volumes: a job makes one by mounting it (volumeSource.standalone.name in its spec)")
				return nil
			}
			tw := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tRACK\tUSED\tSIZE\tMOUNTED BY")
			for _, v := range l {
				size, job := "-", "-"
				if v.Size > 0 {
					size = humanize.IBytes(uint64(v.Size))
				}
				if v.Job != "" {
					job = v.Job
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", v.Name, v.Rack, humanize.IBytes(uint64(max(v.Bytes, 0))), size, job)
			}
			return tw.Flush()
		}),
	}, &out)
}
