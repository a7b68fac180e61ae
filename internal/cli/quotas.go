package cli

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/cosmicac/cosmicac/internal/apiv1"
)

func init() { Register((*App).quotasCommand) }

func (a *App) quotasCommand() *cobra.Command {
	var conn connFlags
	cmd := &cobra.Command{
		Use:     "quotas",
		Aliases: []string{"quota"},
		Short:   "Show the team's GPU quotas, or set them (platform admins)",
		Long: "A quota caps the GPUs a team's jobs hold at once in a location, of one GPU model or of\n" +
			"every model together. A job that would go over waits queued with reason team_quota; between\n" +
			"teams the queue is fair, weighted by quota (docs/scheduling.md).",
	}
	conn.add(cmd)
	cmd.AddCommand(a.quotasListCommand(&conn), a.quotasSetCommand(&conn), a.quotasDeleteCommand(&conn))
	return cmd
}

func (a *App) quotasListCommand(conn *connFlags) *cobra.Command {
	var (
		out outputFlag
		all bool
	)
	cmd := withOutput(&cobra.Command{
		Use: "list [--all-teams]", Aliases: []string{"ls"}, Args: cobra.NoArgs,
		Short: "List the team's quotas and what its jobs use of them (--all-teams: every team's)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if all && conn.team != "" {
				return UsageErrorf("give --team or --all-teams, not both")
			}
			return a.withAPI(conn, func(c *apiConn) error {
				team := ""
				if !all {
					var err error
					if team, err = a.memberTeam(cmd, c, conn); err != nil {
						return err
					}
				}
				qs, err := c.ListQuotas(cmd.Context(), team)
				if err != nil {
					return c.explain(err)
				}
				if ok, err := out.structured(a.Stdout, apiv1.QuotaList{Items: qs, Total: len(qs)}); ok {
					return err
				}
				if len(qs) == 0 {
					fmt.Fprintln(a.Stderr, "no quotas: the team's jobs are capped only by the GPUs there are")
					return nil
				}
				tw := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "TEAM\tLOCATION\tGPU MODEL\tUSED\tQUOTA\tSET BY")
				for _, q := range qs {
					model := q.GPUModel
					if model == "" {
						model = "(all)"
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\n", q.Team, q.Location, model, q.Used, q.GPUs, dash(q.UpdatedBy))
				}
				return tw.Flush()
			})
		},
	}, &out)
	cmd.Flags().BoolVar(&all, "all-teams", false, "every team's quotas (platform admins)")
	return cmd
}

func (a *App) quotasSetCommand(conn *connFlags) *cobra.Command {
	var (
		out           outputFlag
		location, gpu string
		gpus          int
	)
	cmd := withOutput(&cobra.Command{
		Use:     "set --team TEAM --location L [--gpu-model M] --gpus N",
		Short:   "Set a team's GPU quota in a location (platform admins)",
		Example: "  cosmicac quotas set --team ml --location us --gpu-model GH100_H100_SXM5_80GB --gpus 16",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if conn.team == "" || location == "" || !cmd.Flags().Changed("gpus") {
				return UsageErrorf("give --team, --location and --gpus")
			}
			return a.withAPI(conn.withoutTeam(), func(c *apiConn) error {
				q, err := c.SetQuota(cmd.Context(), conn.team, location, apiv1.SetQuota{GPUModel: gpu, GPUs: gpus})
				if err != nil {
					return c.explain(err)
				}
				return a.printResult(&out, q, "team %s: at most %d GPUs%s in %s (uses %d)\n", q.Team, q.GPUs, modelSuffix(q.GPUModel), q.Location, q.Used)
			})
		},
	}, &out)
	cmd.Flags().StringVar(&location, "location", "", "the location")
	cmd.Flags().StringVar(&gpu, "gpu-model", "", "the GPU model (none: every model together)")
	cmd.Flags().IntVar(&gpus, "gpus", 0, "the most GPUs the team's jobs hold at once")
	return cmd
}

// withoutTeam is f without its team: the quota commands' --team names the
// quota's team, which a platform admin sets without acting in that team.
func (f *connFlags) withoutTeam() *connFlags {
	return &connFlags{url: f.url, token: f.token}
}

func modelSuffix(m string) string {
	if m == "" {
		return ""
	}
	return " of " + m
}

func (a *App) quotasDeleteCommand(conn *connFlags) *cobra.Command {
	var (
		location, gpu string
		out           outputFlag
	)
	cmd := withOutput(&cobra.Command{
		Use: "delete --team TEAM --location L [--gpu-model M]", Aliases: []string{"rm"}, Args: cobra.NoArgs,
		Short: "Remove a team's quota (platform admins)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if conn.team == "" || location == "" {
				return UsageErrorf("give --team and --location")
			}
			return a.withAPI(conn.withoutTeam(), func(c *apiConn) error {
				if err := c.DeleteQuota(cmd.Context(), conn.team, location, gpu); err != nil {
					return c.explain(err)
				}
				return a.printResult(&out, changed{Action: "removed", Kind: "quota", Name: location + modelSuffix(gpu), Team: conn.team},
					"quota of team %s in %s%s removed\n", conn.team, location, modelSuffix(gpu))
			})
		},
	}, &out)
	cmd.Flags().StringVar(&location, "location", "", "the location")
	cmd.Flags().StringVar(&gpu, "gpu-model", "", "the GPU model of the quota (none: the one of every model)")
	return cmd
}
