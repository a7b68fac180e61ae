package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cosmicac/cosmicac/internal/apiv1"
	"github.com/cosmicac/cosmicac/internal/client"
	"github.com/cosmicac/cosmicac/internal/cosmic"
)

// Watches follow jobs as they change: each request is held by the API
// until the jobs change after the version of the last answer (?watch=,
// apiv1.MaxWatchWait at most), so the client waits on the server, never on
// a clock of its own. They end with Ctrl-C (exit 130).

// clearScreen moves a terminal's cursor home and clears it, as watch(1)
// does before each redraw.
const clearScreen = "\x1b[H\x1b[2J"

// watchJobs prints the jobs table (or the page as JSON or YAML) each time
// it changes: redrawn in place on a terminal, appended after a blank line
// otherwise.
func (a *App) watchJobs(ctx context.Context, c *apiConn, o client.ListOptions, out *outputFlag) error {
	version, last := "", []byte(nil)
	for {
		l, v, err := c.WatchJobs(ctx, o, version)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return c.explain(err)
		}
		version = v
		if l.Items == nil {
			l.Items = []apiv1.Job{}
		}
		var b bytes.Buffer
		if ok, err := out.structured(&b, l); !ok {
			if len(l.Items) == 0 {
				b.WriteString("no jobs\n")
			} else {
				err = writeJobsTable(&b, l.Items, a.color())
			}
			if err != nil {
				return err
			}
		} else if err != nil {
			return err
		}
		if bytes.Equal(b.Bytes(), last) {
			continue // a change to jobs this page does not show
		}
		switch {
		case a.stdoutTerminal() && out.format == outTable:
			fmt.Fprintf(a.Stdout, "%s%s\nEvery change, %s. Ctrl-C to stop.\n", clearScreen, b.Bytes(), time.Now().Format(time.TimeOnly))
		case last != nil && out.format == outTable:
			fmt.Fprintf(a.Stdout, "\n%s", b.Bytes())
		default:
			a.Stdout.Write(b.Bytes())
		}
		last = b.Bytes()
	}
}

// watchJob prints a line per change of one job's status (its time and the
// line --wait prints), or the job as JSON or YAML each time, until the job
// is deleted.
func (a *App) watchJob(ctx context.Context, c *apiConn, id string, out *outputFlag) error {
	version, last := "", ""
	for {
		j, v, err := c.WatchJob(ctx, id, version)
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, cosmic.ErrNotFound) && version != "":
			fmt.Fprintf(a.Stderr, "%s  job %s deleted\n", time.Now().Format(time.TimeOnly), id)
			return nil
		case err != nil:
			return c.explain(err)
		}
		version = v
		line := describeStatus(j.Status)
		if out.format != outTable {
			line = j.UpdatedAt.String() // every change, not only the status line's
		}
		if line == last {
			continue
		}
		last = line
		if ok, err := out.structured(a.Stdout, j); ok {
			if err != nil {
				return err
			}
			continue
		}
		fmt.Fprintf(a.Stdout, "%s  %s\n", time.Now().Format(time.TimeOnly), line)
	}
}
