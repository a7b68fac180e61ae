package cli

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/cosmicac/cosmicac/internal/apiv1"
	"github.com/cosmicac/cosmicac/internal/client"
)

func init() { Register((*App).usageCommand) }

func (a *App) usageCommand() *cobra.Command {
	var (
		conn         connFlags
		out          outputFlag
		since, until string
		by           string
		csv, all     bool
	)
	cmd := withOutput(&cobra.Command{
		Use:   "usage [--since 720h|TIME] [--until TIME] [--by day,key,model] [--csv]",
		Short: "Show the team's inference usage: requests and tokens by day, API key, model or job",
		Long: "What the engines counted in their answers (their usage), as proxy-inference metered it: by\n" +
			"the team of the API key (requests without a key: the model's team). --by groups by any of\n" +
			"hour or day, team, key, model, job (none: the total only); --csv prints the server's CSV\n" +
			"export. Platform admins read every team's with --all-teams (docs/inference.md, \"Metering\").",
		Example: "  cosmicac usage --since 24h --by key,model\n  cosmicac usage --since 720h --by day --csv > usage.csv",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if csv && cmd.Flags().Changed("output") {
				return UsageErrorf("give --csv or -o, not both")
			}
			var q client.UsageQuery
			var err error
			if q.From, err = timeFlag("since", since); err != nil {
				return err
			}
			if q.To, err = timeFlag("until", until); err != nil {
				return err
			}
			if cmd.Flags().Changed("by") {
				q.GroupBy = []string{}
				if by != "none" {
					for _, g := range strings.Split(by, ",") {
						if g = strings.TrimSpace(g); g != "" {
							q.GroupBy = append(q.GroupBy, g)
						}
					}
				}
			}
			if err := conn.allTeams(all); err != nil {
				return err
			}
			return a.withAPI(&conn, func(c *apiConn) error {
				if csv {
					b, err := c.UsageCSV(cmd.Context(), q)
					if err != nil {
						return c.explain(err)
					}
					_, err = a.Stdout.Write(b)
					return err
				}
				u, err := c.Usage(cmd.Context(), q)
				if err != nil {
					return c.explain(err)
				}
				if ok, err := out.structured(a.Stdout, u); ok {
					return err
				}
				return a.printUsage(u)
			})
		},
	}, &out)
	conn.add(cmd)
	f := cmd.Flags()
	f.StringVar(&since, "since", "", "from this time (RFC 3339) or this long ago (720h); default 30 days ago at 00:00 UTC")
	f.StringVar(&until, "until", "", "until this time (RFC 3339) or this long ago; default now")
	f.StringVar(&by, "by", "day", "group by any of hour or day, team, key, model, job (comma-separated; none: the total only)")
	f.BoolVar(&csv, "csv", false, "print the server's CSV export")
	f.BoolVar(&all, "all-teams", false, "every team's usage (platform admins)")
	return cmd
}

// printUsage prints u as a table, the period it covers on stderr.
func (a *App) printUsage(u apiv1.UsageList) error {
	fmt.Fprintf(a.Stderr, "usage from %s to %s\n", u.From.Local().Format(time.DateTime), u.To.Local().Format(time.DateTime))
	tw := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
	var head []string
	for _, g := range u.GroupBy {
		head = append(head, strings.ToUpper(g))
	}
	fmt.Fprintln(tw, strings.Join(append(head, "REQUESTS", "PROMPT TOKENS", "COMPLETION TOKENS", "TOTAL TOKENS", "GPU HOURS"), "\t"))
	row := func(cells []string, it apiv1.UsageItem) {
		fmt.Fprintf(tw, "%s%d\t%d\t%d\t%d\t%.2f\n", strings.Join(append(cells, ""), "\t"), it.Requests, it.PromptTokens, it.CompletionTokens, it.TotalTokens,
			float64(it.GPUSeconds)/3600)
	}
	for _, it := range u.Items {
		var cells []string
		for _, g := range u.GroupBy {
			switch g {
			case "hour":
				cells = append(cells, it.Start.Local().Format("2006-01-02 15:04"))
			case "day":
				cells = append(cells, it.Start.Format(time.DateOnly))
			case "team":
				cells = append(cells, it.Team)
			case "key":
				k := "-"
				if it.KeyID != "" {
					k = it.KeyID
					if it.KeyName != "" {
						k = it.KeyName + " (" + it.KeyID + ")"
					}
				}
				cells = append(cells, k)
			case "model":
				cells = append(cells, it.Model)
			case "job":
				cells = append(cells, it.JobID)
			}
		}
		row(cells, it)
	}
	if len(u.GroupBy) > 0 {
		cells := make([]string, len(u.GroupBy))
		cells[0] = "TOTAL"
		row(cells, u.Total)
	} else {
		row(nil, u.Total)
	}
	return tw.Flush()
}
