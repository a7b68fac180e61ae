package cli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/cosmicac/cosmicac/internal/apiv1"
)

func (a *App) jobsRequireAuthCommand(conn *connFlags) *cobra.Command {
	return a.jobActionCommand(conn, jobAction{
		use: "require-auth JOB on|off",
		short: "Turn a managed inference job's \"require authorization\" on or off while it runs " +
			"(off: its model is reached without an API key)",
		example:   "  cosmicac jobs require-auth chatbot off\n  cosmicac jobs require-auth chatbot on",
		extraArgs: 1,
		do: func(ctx context.Context, c *apiConn, id string, args []string) (apiv1.Job, string, error) {
			var on bool
			switch args[0] {
			case "on", "true":
				on = true
			case "off", "false":
			default:
				return apiv1.Job{}, "", UsageErrorf("%q: want on or off", args[0])
			}
			j, err := c.SetRequireAuth(ctx, id, on)
			msg := fmt.Sprintf("job %s: an API key is required (proxy-inference follows within a second)", id)
			if !on {
				msg = fmt.Sprintf("job %s: no API key is required: anyone who can reach /inference can use its model", id)
			}
			return j, msg, err
		},
	})
}
