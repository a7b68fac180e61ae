package cli

import (
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/cosmicac/cosmicac/internal/apiv1"
)

func (a *App) jobsDataSyncCommand(conn *connFlags) *cobra.Command {
	var (
		out     outputFlag
		volume  string
		replica int
	)
	cmd := withOutput(&cobra.Command{
		Use:   "datasync ID pull|push [--volume NAME|MOUNTPATH] [--replica N]",
		Short: "Pull a running job's datastore volumes in again, or push what it wrote, now",
		Long: "pull copies the datastore's objects into the job's volumes; push sends back what the job\n" +
			"wrote (RW; RWD also deletes the remote objects the job deleted). --volume names one volume\n" +
			"by its name or mount path (default: every datastore volume). It returns when every volume is\n" +
			"done, saying what moved; a volume that failed keeps its files (docs/data.md).",
		Example:           "  cosmicac jobs datasync train push\n  cosmicac jobs datasync train pull --volume /data",
		Args:              cobra.ExactArgs(2),
		ValidArgsFunction: a.completeJobIDs(conn),
		RunE: a.api(conn, func(cmd *cobra.Command, args []string, c *apiConn) error {
			dir := apiv1.DataSyncDirection(args[1])
			if dir != apiv1.DataSyncPull && dir != apiv1.DataSyncPush {
				return UsageErrorf("%q: want pull or push", args[1])
			}
			if replica < 0 {
				return UsageErrorf("--replica %d: want an index from 0", replica)
			}
			id, err := c.resolveJobID(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			res, err := c.DataSync(cmd.Context(), id, apiv1.DataSync{Direction: dir, Volume: volume}, replica)
			if err != nil {
				return c.explain(err)
			}
			if ok, err := out.structured(a.Stdout, res); ok {
				return err
			}
			if len(res.Volumes) == 0 {
				fmt.Fprintf(a.Stderr, "job %s has no datastore volume to %s\n", id, dir)
				return nil
			}
			tw := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "VOLUME\tMOUNT PATH\tOBJECTS\tBYTES\tUNCHANGED\tDELETED\tRESULT")
			failed := 0
			for _, v := range res.Volumes {
				result := "ok"
				if v.Error != "" {
					failed++
					result = v.Reason + ": " + v.Error
				}
				if len(v.Skipped) > 0 {
					result += fmt.Sprintf(" (%d skipped: %s)", len(v.Skipped), strings.Join(v.Skipped, ", "))
				}
				fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%d\t%d\t%s\n", v.Index, v.MountPath, v.Objects, v.Bytes, v.Unchanged, v.Deleted, result)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if failed > 0 {
				return fmt.Errorf("%d of %d volumes failed to %s; their files are kept", failed, len(res.Volumes), dir)
			}
			return nil
		}),
	}, &out)
	cmd.Flags().StringVar(&volume, "volume", "", "one volume, by its name or mount path (default: every datastore volume)")
	cmd.Flags().IntVar(&replica, "replica", 0, "the replica whose volumes sync")
	return cmd
}
