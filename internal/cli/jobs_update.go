package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cosmicac/cosmicac/internal/client"
	"github.com/cosmicac/cosmicac/internal/cosmic"
)

// jobsUpdateCommand is `cosmicac jobs update JOB [flags]`: the job's spec,
// or -f FILE's, with the flags given over it, sent as the job's new spec
// (PUT /api/v1/jobs/{id}/spec: a rolling update; docs/inference.md,
// "Rolling updates").
func (a *App) jobsUpdateCommand(conn *connFlags) *cobra.Command {
	var (
		sf  specFlags
		out outputFlag
		w   waitFlags
	)
	cmd := withOutput(&cobra.Command{
		Use:   "update JOB [flags]",
		Short: "Update a managed inference job: its model, args, adapters, image or environment roll out to its replicas one at a time",
		Long: "Update a managed inference job's spec: the job's own spec (or -f FILE's, whole) with the flags given\n" +
			"over it. Routing, authorization, autoscaling and the replica count change at once. A change of what\n" +
			"the replicas run (--model, --arg, --adapter, --image, --env) rolls out to a running job: one replica\n" +
			"of the new spec starts first, then each older replica is drained and replaced, one at a time, and\n" +
			"the job serves throughout; a replica of the new spec that fails rolls the job back. With --wait\n" +
			"the command follows the rollout to its end: exit 0 when rolled out, 3 when rolled back.",
		Example: "  cosmicac jobs update chat --arg max-model-len=16384 --wait\n" +
			"  cosmicac jobs update chat --model cosmicac/test-chat --adapter sql=acme/sql-lora\n" +
			"  cosmicac jobs update chat --max-replicas 4\n" +
			"  cosmicac jobs get chat -o yaml > chat.yaml; $EDITOR chat.yaml; cosmicac jobs update chat -f chat.yaml",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completeJobIDs(conn),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect(conn, client.WithPollInterval(w.poll))
			if err != nil {
				return err
			}
			id, err := c.resolveJobID(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			var spec cosmic.Spec
			if sf.file != "" {
				if spec, err = readSpecFile(sf.file, a.Stdin); err != nil {
					return WithExit(ExitUsage, err)
				}
			} else {
				cur, err := c.GetJob(cmd.Context(), id)
				if err != nil {
					return c.explain(err)
				}
				spec = cur.Spec
			}
			if err := sf.Flags.Apply(cmd.Flags(), &spec, true); err != nil {
				return WithExit(ExitUsage, err)
			}
			if _, err := validateSpec(spec); err != nil {
				return err
			}
			j, err := c.UpdateJob(cmd.Context(), id, spec)
			if err != nil {
				return c.explain(err)
			}
			ro := j.Status.Rollout
			if !w.wait || ro == nil {
				if out.format == outTable {
					if ro != nil {
						fmt.Fprintf(a.Stdout, "job %s: rolling out generation %d to %d replicas, one at a time (cosmicac jobs get %s -w follows it)\n", id, j.Status.Generation, ro.Replicas, args[0])
					} else {
						fmt.Fprintf(a.Stdout, "job %s updated: nothing to roll out (generation %d)\n", id, j.Status.Generation)
					}
					return nil
				}
				return a.printJob(&out, j)
			}
			fmt.Fprintf(a.Stderr, "job %s: rolling out generation %d to %d replicas\n", id, j.Status.Generation, ro.Replicas)
			ctx := cmd.Context()
			if w.timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, w.timeout)
				defer cancel()
			}
			start := time.Now()
			last := ""
			final, err := c.WaitJob(ctx, id, func(j cosmic.Job) bool { return j.Status.Rollout == nil }, func(j cosmic.Job) {
				if line := describeRollout(j); line != last {
					fmt.Fprintf(a.Stderr, "[%s] %s\n", elapsed(start), line)
					last = line
				}
			})
			if err != nil {
				if errors.Is(err, context.DeadlineExceeded) && w.timeout > 0 {
					return WithExit(ExitFailure, fmt.Errorf("gave up waiting after %s: the rollout goes on", w.timeout))
				}
				return c.explain(err)
			}
			if lr := final.Status.LastRollout; lr != nil {
				fmt.Fprintf(a.Stderr, "[%s] generation %d %s in %s\n", elapsed(start), lr.Generation, strings.ReplaceAll(lr.Outcome, "_", " "), lr.Ended.Sub(lr.Started).Round(time.Second))
			}
			if err := a.printJob(&out, final); err != nil {
				return err
			}
			if lr := final.Status.LastRollout; lr == nil || lr.Outcome != cosmic.RolloutDone {
				msg := "the rollout did not finish"
				if lr != nil {
					msg = fmt.Sprintf("the rollout of generation %d %s", lr.Generation, lr.Outcome)
					if lr.Reason != nil {
						msg += ": " + lr.Reason.Message
						if lr.Reason.Fix != "" {
							msg += "\nfix: " + lr.Reason.Fix
						}
					}
				}
				return WithExit(ExitJobFailed, errors.New(msg))
			}
			return nil
		},
	}, &out)
	sf.add(cmd)
	w.add(cmd, "follow the rollout to its end, printing each step on stderr")
	return cmd
}

// describeRollout is a rollout's progress in a line: how many replicas
// run the new generation, and which one drains.
func describeRollout(j cosmic.Job) string {
	ro := j.Status.Rollout
	if ro == nil {
		return describeStatus(j.Status)
	}
	done := 0
	for i, r := range j.Status.Replicas {
		if i < ro.Replicas && r.Generation == j.Status.Generation && r.State == cosmic.StateRunning {
			done++
		}
	}
	line := fmt.Sprintf("%d of %d replicas run generation %d", done, ro.Replicas, j.Status.Generation)
	if ro.RollingBack {
		line += " (rolling back)"
	}
	for _, r := range j.Status.Replicas {
		if r.Drain != nil {
			line += fmt.Sprintf("; draining replica %d", r.Index)
		}
	}
	return line
}
