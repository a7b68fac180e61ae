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
		noWait  bool
	)
	cmd := withOutput(&cobra.Command{
		Use:   "datasync ID pull|push|status [--volume NAME|MOUNTPATH] [--replica N] [--no-wait]",
		Short: "Pull a running job's datastore volumes in again, or push what it wrote, now; or follow the last sync",
		Long: "pull copies the datastore's objects into the job's volumes; push sends back what the job\n" +
			"wrote (RW; RWD also deletes the remote objects the job deleted). --volume names one volume\n" +
			"by its name or mount path (default: every datastore volume). It returns when every volume is\n" +
			"done, saying what moved; a volume that failed keeps its files (docs/data.md). With --no-wait\n" +
			"it returns once the sync has begun; status shows the replica's last sync as it is now, each\n" +
			"volume's state and what moved of the whole.",
		Example:           "  cosmicac jobs datasync train push\n  cosmicac jobs datasync train pull --volume /data\n  cosmicac jobs datasync train push --no-wait\n  cosmicac jobs datasync train status",
		Args:              cobra.ExactArgs(2),
		ValidArgsFunction: a.completeJobIDs(conn),
		RunE: a.api(conn, func(cmd *cobra.Command, args []string, c *apiConn) error {
			dir := apiv1.DataSyncDirection(args[1])
			status := args[1] == "status"
			switch {
			case !status && dir != apiv1.DataSyncPull && dir != apiv1.DataSyncPush:
				return UsageErrorf("%q: want pull, push or status", args[1])
			case status && (volume != "" || noWait):
				return UsageErrorf("status takes neither --volume nor --no-wait: it shows the replica's last sync")
			case replica < 0:
				return UsageErrorf("--replica %d: want an index from 0", replica)
			}
			id, err := c.resolveJobID(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			var res apiv1.DataSyncResult
			switch {
			case status:
				res, err = c.GetDataSync(cmd.Context(), id, replica)
			case noWait:
				res, err = c.StartDataSync(cmd.Context(), id, apiv1.DataSync{Direction: dir, Volume: volume}, replica)
			default:
				res, err = c.DataSync(cmd.Context(), id, apiv1.DataSync{Direction: dir, Volume: volume}, replica)
			}
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
			if status || res.State == apiv1.DataSyncRunning {
				fmt.Fprintf(a.Stderr, "%s of job %s, replica %d: %s\n", res.Direction, id, res.Replica, res.State)
			}
			tw := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "VOLUME\tMOUNT PATH\tSTATE\tOBJECTS\tBYTES\tUNCHANGED\tDELETED\tRESULT")
			failed := 0
			for _, v := range res.Volumes {
				result := "ok"
				switch {
				case v.Error != "":
					failed++
					result = v.Reason + ": " + v.Error
				case v.State == apiv1.DataSyncQueued || v.State == apiv1.DataSyncRunning:
					result = "-"
				}
				if len(v.Skipped) > 0 {
					result += fmt.Sprintf(" (%d skipped: %s)", len(v.Skipped), strings.Join(v.Skipped, ", "))
				}
				objects, bytes := fmt.Sprint(v.Objects), fmt.Sprint(v.Bytes)
				if v.TotalObjects > 0 && v.State != apiv1.DataSyncDone {
					objects, bytes = fmt.Sprintf("%d of %d", v.Objects, v.TotalObjects), fmt.Sprintf("%d of %d", v.Bytes, v.TotalBytes)
				}
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d\t%d\t%s\n", v.Index, v.MountPath, v.State, objects, bytes, v.Unchanged, v.Deleted, result)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if res.State == apiv1.DataSyncRunning && !status {
				fmt.Fprintf(a.Stderr, "follow it with: cosmicac jobs datasync %s status\n", id)
			}
			if failed > 0 {
				return fmt.Errorf("%d of %d volumes failed to %s; their files are kept", failed, len(res.Volumes), res.Direction)
			}
			return nil
		}),
	}, &out)
	cmd.Flags().StringVar(&volume, "volume", "", "one volume, by its name or mount path (default: every datastore volume)")
	cmd.Flags().IntVar(&replica, "replica", 0, "the replica whose volumes sync")
	cmd.Flags().BoolVar(&noWait, "no-wait", false, "return once the sync has begun (follow it with status)")
	return cmd
}
