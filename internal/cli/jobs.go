package cli

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cosmicac/cosmicac/internal/apiv1"
	"github.com/cosmicac/cosmicac/internal/client"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/jobflags"
)

func init() { Register((*App).jobsCommand) }

func (a *App) jobsCommand() *cobra.Command {
	var conn connFlags
	cmd := &cobra.Command{
		Use:     "jobs",
		Aliases: []string{"job"},
		Short:   "Create, list and manage GPU container and managed inference jobs",
		Long: "Jobs run as KubeVirt GPU VMs on the racks of a location. A job ID may be given as its full\n" +
			"UUID or as a unique prefix of it.",
	}
	conn.add(cmd)
	cmd.AddCommand(
		a.jobsCreateCommand(&conn),
		a.jobsListCommand(&conn),
		a.jobsGetCommand(&conn),
		a.jobsDeleteCommand(&conn),
		a.jobsRestartCommand(&conn),
		a.jobsKillCommand(&conn),
		a.jobsLabelCommand(&conn),
		a.jobsRequireAuthCommand(&conn),
		a.jobsUpdateCommand(&conn),
		a.jobsCommandCommand(&conn),
		a.jobsLogsCommand(&conn),
		a.jobsShellCommand(&conn),
		a.jobsSSHCommand(&conn),
		a.jobsDataSyncCommand(&conn),
	)
	return cmd
}

// completeJobIDs completes the first argument with the IDs of the jobs the
// caller sees, each described by its name and state.
func (a *App) completeJobIDs(conn *connFlags) cobra.CompletionFunc {
	return a.completeArg(conn, func(ctx context.Context, c *apiConn, toComplete string) ([]cobra.Completion, error) {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		l, err := c.ListJobs(ctx, client.ListOptions{Size: 1000})
		if err != nil {
			return nil, err
		}
		var out []cobra.Completion
		for _, j := range l.Items {
			if strings.HasPrefix(j.ID, toComplete) {
				out = append(out, cobra.CompletionWithDesc(j.ID, strings.TrimSpace(j.Spec.Name+" "+string(j.Status.State))))
			}
		}
		return out, nil
	})
}

// printJob prints a job in the -o format; the table format is one row of
// the jobs table.
func (a *App) printJob(o *outputFlag, j apiv1.Job) error {
	if ok, err := o.structured(a.Stdout, j); ok {
		return err
	}
	return writeJobsTable(a.Stdout, []apiv1.Job{j}, a.color())
}

func (a *App) jobsCreateCommand(conn *connFlags) *cobra.Command {
	var (
		sf     specFlags
		out    outputFlag
		w      waitFlags
		dryRun bool
		quiet  bool
	)
	cmd := withOutput(&cobra.Command{
		Use:   "create [flags] [-- COMMAND...]",
		Short: "Create a job from flags or a spec file",
		Long: "Create a job from flags, from a full spec with -f FILE (YAML or JSON; '-' reads stdin), or\n" +
			"both (flags override the file's fields). The spec is defaulted and validated here first, and\n" +
			"every problem is reported at once (exit 2). With --wait the command follows the job until it\n" +
			"runs (exit 0), or ends failed or stopped (exit 3), printing each status change on stderr.",
		Example: "  cosmicac jobs create --location us --gpus 8 --image ubuntu:24.04 --name train -- python train.py\n" +
			"  cosmicac jobs create --model meta-llama/Llama-3.1-8B-Instruct --location us --replicas 2 --wait\n" +
			"  cosmicac jobs create -f spec.yaml --gpus 4",
		RunE: func(cmd *cobra.Command, args []string) error {
			spec, err := sf.spec(cmd, args, a.Stdin)
			if err != nil {
				return err
			}
			if _, err := validateSpec(spec); err != nil {
				return err
			}
			if dryRun {
				d := spec
				d.Default()
				if ok, err := out.structured(a.Stdout, d); ok {
					return err
				}
				fmt.Fprintln(a.Stdout, jobflags.Command(d).Line)
				return nil
			}
			c, err := a.connect(conn, client.WithPollInterval(w.poll))
			if err != nil {
				return err
			}
			// The server defaults the spec itself; send what the user asked.
			job, err := c.CreateJob(cmd.Context(), spec)
			if err != nil {
				return c.explain(err)
			}
			if !w.wait {
				if quiet {
					fmt.Fprintln(a.Stdout, job.ID)
					return nil
				}
				return a.printJob(&out, job)
			}
			fmt.Fprintf(a.Stderr, "job %s created\n", job.ID)
			final, werr := a.waitJob(cmd.Context(), c, job, w.timeout)
			if final.ID != "" {
				if quiet {
					fmt.Fprintln(a.Stdout, final.ID)
				} else if err := a.printJob(&out, final); err != nil {
					return err
				}
			}
			return werr
		},
	}, &out)
	sf.add(cmd)
	w.add(cmd, "follow the job until it runs or fails, printing each status change on stderr")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "only default and validate the spec locally and print it (-o table prints the equivalent command)")
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "print only the job ID")
	return cmd
}

// waitFlags are --wait, --wait-timeout and the hidden --poll-interval of
// the verbs that can follow a job until it settles (create, update).
type waitFlags struct {
	wait    bool
	timeout time.Duration
	poll    time.Duration
}

// add gives cmd the flags; usage is --wait's.
func (f *waitFlags) add(cmd *cobra.Command, usage string) {
	cmd.Flags().BoolVar(&f.wait, "wait", false, usage)
	cmd.Flags().DurationVar(&f.timeout, "wait-timeout", 0, "give up waiting after this long (0: never)")
	cmd.Flags().DurationVar(&f.poll, "poll-interval", client.DefaultPollInterval, "how often --wait asks for the job's status")
	_ = cmd.Flags().MarkHidden("poll-interval")
}

// elapsed is the time since start as --wait prints it: 0s, 12s, 3m05s.
func elapsed(start time.Time) string {
	d := time.Since(start).Round(time.Second)
	if d < time.Minute {
		return strconv.Itoa(int(d/time.Second)) + "s"
	}
	return fmt.Sprintf("%dm%02ds", int(d/time.Minute), int(d%time.Minute/time.Second))
}

// waitJob follows a job until it settles, printing each change of its
// status line on stderr. Running and degraded end it with exit 0; failed
// and stopped with exit 3 and the reason.
func (a *App) waitJob(ctx context.Context, c *apiConn, created apiv1.Job, timeout time.Duration) (apiv1.Job, error) {
	id := created.ID
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	start := time.Now()
	last := describeStatus(created.Status)
	fmt.Fprintf(a.Stderr, "[%s] %s\n", elapsed(start), last)
	j, err := c.WaitJob(ctx, id, client.Settled, func(j cosmic.Job) {
		if line := describeStatus(j.Status); line != last {
			fmt.Fprintf(a.Stderr, "[%s] %s\n", elapsed(start), line)
			last = line
		}
	})
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) && timeout > 0 {
			return j, WithExit(ExitFailure, fmt.Errorf("gave up waiting after %s: job %s is %s", timeout, id, j.Status.State))
		}
		return j, c.explain(err)
	}
	switch j.Status.State {
	case cosmic.StateFailed, cosmic.StateStopped:
		msg := fmt.Sprintf("job %s %s", id, j.Status.State)
		if r := j.Status.Reason; r != nil {
			msg += fmt.Sprintf(": %s: %s", r.Code, r.Message)
			if r.Fix != "" {
				msg += "\nfix: " + r.Fix
			}
		} else if j.Status.Message != "" {
			msg += ": " + j.Status.Message
		}
		return j, WithExit(ExitJobFailed, errors.New(msg))
	case cosmic.StateDegraded:
		if r := j.Status.Reason; r != nil {
			fmt.Fprintf(a.Stderr, "warning: job %s is degraded: %s: %s\n", id, r.Code, r.Message)
		}
	}
	return j, nil
}

func (a *App) jobsListCommand(conn *connFlags) *cobra.Command {
	var (
		out                outputFlag
		states, labels     []string
		user, sort, order  string
		page, size         int
		all, watch         bool
		updAfter, updBefor string
	)
	cmd := withOutput(&cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List jobs, newest first",
		Example: "  cosmicac jobs list --state running --state queued --label team=ml\n  cosmicac jobs list --all -o json\n  cosmicac jobs list --watch",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o := client.ListOptions{UserName: user, Sort: sort, Order: order, Page: page, Size: size}
			for _, s := range states {
				st := cosmic.State(s)
				if !st.Valid() {
					return UsageErrorf("--state %q: not a job state (%s)", s, stateNames())
				}
				o.States = append(o.States, st)
			}
			for _, kv := range labels {
				k, v, ok := strings.Cut(kv, "=")
				if !ok || k == "" {
					return UsageErrorf("--label %q: want NAME=VALUE", kv)
				}
				if o.Labels == nil {
					o.Labels = map[string]string{}
				}
				o.Labels[k] = v
			}
			if all && cmd.Flags().Changed("page") {
				return UsageErrorf("--all and --page go not together")
			}
			if order != "" && order != "asc" && order != "desc" {
				return UsageErrorf("--order %q: want asc or desc", order)
			}
			for _, t := range []struct {
				flag, v string
				dst     *time.Time
			}{{"updated-after", updAfter, &o.UpdatedAfter}, {"updated-before", updBefor, &o.UpdatedBefore}} {
				if t.v == "" {
					continue
				}
				tm, err := parseWhen(t.v)
				if err != nil {
					return UsageErrorf("--%s: %v", t.flag, err)
				}
				*t.dst = tm
			}
			if watch && all {
				return UsageErrorf("--watch and --all go not together: a watch shows one page")
			}
			return a.withAPI(conn, func(c *apiConn) error {
				if watch {
					return a.watchJobs(cmd.Context(), c, o, &out)
				}
				var l apiv1.JobList
				if all {
					items, err := c.listAll(cmd.Context(), o)
					if err != nil {
						return c.explain(err)
					}
					l = apiv1.JobList{Items: items, Total: len(items), Page: 1, Size: len(items)}
				} else {
					var err error
					if l, err = c.ListJobs(cmd.Context(), o); err != nil {
						return c.explain(err)
					}
				}
				if l.Items == nil {
					l.Items = []apiv1.Job{}
				}
				if ok, err := out.structured(a.Stdout, l); ok {
					return err
				}
				if len(l.Items) == 0 {
					fmt.Fprintln(a.Stderr, "no jobs")
					return nil
				}
				if err := writeJobsTable(a.Stdout, l.Items, a.color()); err != nil {
					return err
				}
				if shown := (max(l.Page, 1)-1)*l.Size + len(l.Items); shown < l.Total {
					fmt.Fprintf(a.Stderr, "showing %d of %d jobs: use --page %d or --all for more\n", len(l.Items), l.Total, max(l.Page, 1)+1)
				}
				return nil
			})
		},
	}, &out)
	f := cmd.Flags()
	f.StringSliceVar(&states, "state", nil, "only jobs in this state (repeatable, or comma-separated)")
	f.StringArrayVar(&labels, "label", nil, "only jobs with label NAME=VALUE (repeatable; all must match)")
	f.StringVar(&user, "user", "", "only jobs of this user")
	f.StringVar(&sort, "sort", "", "sort by createdAt, updatedAt, name or state (default createdAt)")
	f.StringVar(&order, "order", "", "asc or desc (default desc)")
	f.IntVar(&page, "page", 0, "page, from 1")
	f.IntVar(&size, "size", 0, "jobs per page (default 50, at most 1000)")
	f.BoolVar(&all, "all", false, "every page")
	f.BoolVarP(&watch, "watch", "w", false, "redraw the list as jobs change, until Ctrl-C")
	f.StringVar(&updAfter, "updated-after", "", "only jobs updated after this time (RFC 3339, or a duration ago such as 1h)")
	f.StringVar(&updBefor, "updated-before", "", "only jobs updated before this time (RFC 3339, or a duration ago)")
	_ = cmd.RegisterFlagCompletionFunc("state", func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
		return strings.Split(stateNames(), ", "), cobra.ShellCompDirectiveNoFileComp
	})
	_ = cmd.RegisterFlagCompletionFunc("sort", cobra.FixedCompletions([]string{"createdAt", "updatedAt", "name", "state"}, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("order", cobra.FixedCompletions([]string{"asc", "desc"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

func stateNames() string {
	names := make([]string, len(cosmic.States))
	for i, s := range cosmic.States {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}

// parseWhen reads an RFC 3339 time, or a duration meaning that long ago.
func parseWhen(v string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is neither an RFC 3339 time nor a duration", v)
	}
	return timeNow().Add(-d), nil
}

// jobAction is a command on one job ID that prints the job it gets back.
type jobAction struct {
	use, short, example string
	extraArgs           int
	flags               func(*cobra.Command)
	do                  func(ctx context.Context, c *apiConn, id string, args []string) (apiv1.Job, string, error)
}

func (a *App) jobActionCommand(conn *connFlags, act jobAction) *cobra.Command {
	var out outputFlag
	cmd := withOutput(&cobra.Command{
		Use:               act.use,
		Short:             act.short,
		Example:           act.example,
		Args:              cobra.ExactArgs(1 + act.extraArgs),
		ValidArgsFunction: a.completeJobIDs(conn),
		RunE: a.api(conn, func(cmd *cobra.Command, args []string, c *apiConn) error {
			id, err := c.resolveJobID(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			j, msg, err := act.do(cmd.Context(), c, id, args[1:])
			if err != nil {
				var ee *exitError
				if errors.As(err, &ee) {
					return err
				}
				return c.explain(err)
			}
			if out.format == outTable && msg != "" {
				fmt.Fprintln(a.Stdout, msg)
				return nil
			}
			return a.printJob(&out, j)
		}),
	}, &out)
	if act.flags != nil {
		act.flags(cmd)
	}
	return cmd
}

func (a *App) jobsGetCommand(conn *connFlags) *cobra.Command {
	var (
		out   outputFlag
		watch bool
	)
	cmd := withOutput(&cobra.Command{
		Use:               "get ID",
		Aliases:           []string{"describe", "show"},
		Short:             "Show a job: its spec, status, reason, replicas and history",
		Example:           "  cosmicac jobs get train\n  cosmicac jobs get 3f2a -o yaml\n  cosmicac jobs get train -w",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completeJobIDs(conn),
		RunE: a.api(conn, func(cmd *cobra.Command, args []string, c *apiConn) error {
			id, err := c.resolveJobID(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if watch {
				return a.watchJob(cmd.Context(), c, id, &out)
			}
			j, err := c.GetJob(cmd.Context(), id)
			if err != nil {
				return c.explain(err)
			}
			if ok, err := out.structured(a.Stdout, j); ok {
				return err
			}
			return writeJobDetail(a.Stdout, j, c.url)
		}),
	}, &out)
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "print a line each time the job's status changes, until it is deleted or Ctrl-C")
	return cmd
}

// replicaFlag is --replica N; set reports whether it was given.
func replicaFlag(cmd *cobra.Command, n *int, usage string) {
	cmd.Flags().IntVar(n, "replica", -1, usage)
}

func (a *App) jobsDeleteCommand(conn *connFlags) *cobra.Command {
	var force bool
	replica := -1
	return a.jobActionCommand(conn, jobAction{
		use:     "delete ID",
		short:   "Delete a job (--force: even if it runs), or one replica of it (--replica N)",
		example: "  cosmicac jobs delete 3f2a --force\n  cosmicac jobs delete 3f2a --replica 1",
		flags: func(cmd *cobra.Command) {
			cmd.Flags().BoolVar(&force, "force", false, "delete a running job (it is killed first)")
			replicaFlag(cmd, &replica, "delete only this replica (from 0); the ork places it again")
		},
		do: func(ctx context.Context, c *apiConn, id string, _ []string) (apiv1.Job, string, error) {
			if replica >= 0 {
				if force {
					return apiv1.Job{}, "", UsageErrorf("--force and --replica go not together")
				}
				j, err := c.DeleteReplica(ctx, id, replica)
				return j, fmt.Sprintf("deleted replica %d of job %s", replica, id), err
			}
			j, err := c.DeleteJob(ctx, id, force)
			if errors.Is(err, cosmic.ErrConflict) && !force {
				// The API's "delete it with force" is this flag.
				return j, "", WithExit(ExitFailure, &explained{msg: c.explain(err).Error() + "\nrun `cosmicac jobs delete " + id + " --force` to kill and delete it", err: err})
			}
			msg := "deleted job " + id
			if j.Status.State == cosmic.StateDeleting {
				msg = "job " + id + " is being deleted"
			}
			return j, msg, err
		},
	})
}

func (a *App) jobsRestartCommand(conn *connFlags) *cobra.Command {
	replica := -1
	return a.jobActionCommand(conn, jobAction{
		use:     "restart ID",
		short:   "Restart a job (storage and GPUs kept), or one replica of it (--replica N)",
		example: "  cosmicac jobs restart 3f2a\n  cosmicac jobs restart 3f2a --replica 0",
		flags: func(cmd *cobra.Command) {
			replicaFlag(cmd, &replica, "restart only this replica (from 0)")
		},
		do: func(ctx context.Context, c *apiConn, id string, _ []string) (apiv1.Job, string, error) {
			if replica >= 0 {
				j, err := c.RestartReplica(ctx, id, replica)
				return j, fmt.Sprintf("restarting replica %d of job %s (%s)", replica, id, j.Status.State), err
			}
			j, err := c.RestartJob(ctx, id)
			return j, fmt.Sprintf("restarting job %s (%s)", id, j.Status.State), err
		},
	})
}

func (a *App) jobsKillCommand(conn *connFlags) *cobra.Command {
	return a.jobActionCommand(conn, jobAction{
		use:     "kill ID",
		short:   "Stop a job: its GPUs are released, its storage kept; restart runs it again",
		example: "  cosmicac jobs kill 3f2a",
		do: func(ctx context.Context, c *apiConn, id string, _ []string) (apiv1.Job, string, error) {
			j, err := c.KillJob(ctx, id)
			return j, fmt.Sprintf("killed job %s (%s)", id, j.Status.State), err
		},
	})
}

func (a *App) jobsLabelCommand(conn *connFlags) *cobra.Command {
	return a.jobActionCommand(conn, jobAction{
		use:       "label ID NAME=VALUE",
		short:     "Set a label of a job (NAME= or NAME- removes it)",
		example:   "  cosmicac jobs label 3f2a team=ml\n  cosmicac jobs label 3f2a team-",
		extraArgs: 1,
		do: func(ctx context.Context, c *apiConn, id string, args []string) (apiv1.Job, string, error) {
			name, value, ok := strings.Cut(args[0], "=")
			if !ok {
				n, removed := strings.CutSuffix(args[0], "-")
				if !removed {
					return apiv1.Job{}, "", UsageErrorf("%q: want NAME=VALUE, or NAME- to remove the label", args[0])
				}
				name = n
			}
			if err := cosmic.ValidateLabel("labels", name, value); err != nil {
				return apiv1.Job{}, "", UsageErrorf("%v", err)
			}
			j, err := c.LabelJob(ctx, id, name, value)
			msg := fmt.Sprintf("job %s: label %s=%s", id, name, value)
			if value == "" {
				msg = fmt.Sprintf("job %s: label %s removed", id, name)
			}
			return j, msg, err
		},
	})
}

func (a *App) jobsCommandCommand(conn *connFlags) *cobra.Command {
	var (
		sf  specFlags
		out outputFlag
	)
	cmd := withOutput(&cobra.Command{
		Use:   "command [flags|-f FILE] [-- COMMAND...]",
		Short: "Print the `cosmicac jobs create` command line equivalent to a spec (asks the API)",
		Example: "  cosmicac jobs command -f spec.yaml\n" +
			"  cosmicac jobs get 3f2a -o json | jq .spec | cosmicac jobs command -f -",
		RunE: func(cmd *cobra.Command, args []string) error {
			spec, err := sf.spec(cmd, args, a.Stdin)
			if err != nil {
				return err
			}
			return a.withAPI(conn, func(c *apiConn) error {
				line, err := c.Command(cmd.Context(), spec)
				if err != nil {
					return c.explain(err)
				}
				if ok, err := out.structured(a.Stdout, line); ok {
					return err
				}
				fmt.Fprintln(a.Stdout, line.Line)
				if len(line.Unexpressed) > 0 {
					fmt.Fprintf(a.Stderr, "note: no flag expresses %s; save the spec to a file and run: %s\n",
						strings.Join(line.Unexpressed, ", "), cosmic.FileCommand)
				}
				return nil
			})
		},
	}, &out)
	sf.add(cmd)
	return cmd
}
