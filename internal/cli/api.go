package cli

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/cosmicac/cosmicac/internal/apiv1"
	"github.com/cosmicac/cosmicac/internal/client"
	"github.com/cosmicac/cosmicac/internal/cosmic"
)

// apiConn is a client of the API and where it points, for messages.
type apiConn struct {
	*client.Client
	url string
}

// connect makes an API client from the flags, environment and login config.
func (a *App) connect(f *connFlags, opts ...client.Option) (*apiConn, error) {
	cfg, err := a.clientConfig(f)
	if err != nil {
		return nil, err
	}
	if cfg.Team != "" {
		opts = append([]client.Option{client.WithTeam(cfg.Team)}, opts...)
	}
	return &apiConn{Client: client.New(cfg.URL, cfg.Token, opts...), url: cfg.URL}, nil
}

// api is the RunE of a verb that talks to the API: it connects (conn), then
// runs f with the connection. f explains the API's errors itself
// (apiConn.explain), as only it knows which of its errors are the API's: a
// failed write to stdout is none of them.
func (a *App) api(conn *connFlags, f func(cmd *cobra.Command, args []string, c *apiConn) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		return a.withAPI(conn, func(c *apiConn) error { return f(cmd, args, c) })
	}
}

// withAPI connects (conn) and runs f with the connection: api for a verb
// that checks its command line first, so that a wrong one is refused (exit
// 2) before the login config is read.
func (a *App) withAPI(conn *connFlags, f func(c *apiConn) error) error {
	c, err := a.connect(conn)
	if err != nil {
		return err
	}
	return f(c)
}

// completeArg completes a verb's first argument with what list returns,
// and no other argument.
func (a *App) completeArg(conn *connFlags, list func(ctx context.Context, c *apiConn, toComplete string) ([]cobra.Completion, error)) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		c, err := a.connect(conn)
		if err != nil {
			return nil, cobra.ShellCompDirectiveError
		}
		completions, err := list(cmd.Context(), c, toComplete)
		if err != nil {
			return nil, cobra.ShellCompDirectiveError
		}
		return completions, cobra.ShellCompDirectiveNoFileComp
	}
}

// explain turns an error of the API client into what the user reads, with
// exit 1: who to blame and what to do.
func (c *apiConn) explain(err error) error {
	if err == nil {
		return nil
	}
	var ae *client.APIError
	if errors.As(err, &ae) {
		if ae.Status == http.StatusUnauthorized {
			return WithExit(ExitFailure, fmt.Errorf("not logged in or token invalid: run `cosmicac login` (%s)", ae.Message))
		}
		var b strings.Builder
		fmt.Fprintf(&b, "%s: %s", ae.Code, ae.Message)
		if fes := ae.FieldErrors(); len(fes) > 1 || len(fes) == 1 && fes[0].Error() != ae.Message {
			// Each field has a line, unless the message is the only one.
			for _, fe := range fes {
				b.WriteString("\n  " + fe.Error())
			}
		}
		for _, fe := range ae.FieldErrors() {
			if fe.Reason != "" {
				if r := cosmic.NewReason(fe.Reason, ""); r.Fix != "" {
					fmt.Fprintf(&b, "\n  fix (%s): %s", fe.Reason, r.Fix)
				}
			}
		}
		return WithExit(ExitFailure, &explained{msg: b.String(), err: err})
	}
	if errors.Is(err, context.Canceled) {
		return err // the root command turns it into exit 130
	}
	var ne net.Error
	var oe *net.OpError
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return WithExit(ExitFailure, &explained{msg: fmt.Sprintf("cannot reach CosmicAC at %s: is `cosmicac up` running?", c.url), err: err})
	case errors.As(err, &oe) && oe.Op == "dial", errors.As(err, &ne):
		cause := errors.Unwrap(err)
		if cause == nil {
			cause = err
		}
		return WithExit(ExitFailure, &explained{msg: fmt.Sprintf("cannot reach CosmicAC at %s: is `cosmicac up` running? (%v)", c.url, cause), err: err})
	}
	return WithExit(ExitFailure, err)
}

// explained is an error with a message for people that still unwraps to
// its cause.
type explained struct {
	msg string
	err error
}

func (e *explained) Error() string { return e.msg }
func (e *explained) Unwrap() error { return e.err }

// MinJobIDPrefix is the fewest characters of a job's ID that name it: a
// shorter prefix (`jobs delete 9 --force`, a typo) is refused rather than
// taken for the one job it happens to match.
const MinJobIDPrefix = 4

// resolveJobID accepts a job's full ID, its name (unique within a team),
// or a unique prefix of its ID (MinJobIDPrefix characters at least),
// looked up among the jobs the caller sees. An argument that is both a
// name and an ID prefix of different jobs, or a prefix of several, is
// refused (exit 2) with the candidates.
func (c *apiConn) resolveJobID(ctx context.Context, arg string) (string, error) {
	if id, err := cosmic.ParseJobID(arg); err == nil {
		return id, nil
	}
	if arg == "" {
		return "", UsageErrorf("give a job's name, ID or a unique prefix of its ID")
	}
	named, err := c.listAll(ctx, client.ListOptions{Name: arg})
	if err != nil {
		return "", c.explain(err)
	}
	var all []apiv1.Job
	if isIDPrefix(arg) && len(arg) >= MinJobIDPrefix {
		if all, err = c.listAll(ctx, client.ListOptions{}); err != nil {
			return "", c.explain(err)
		}
	}
	return matchJob(arg, named, all)
}

// isIDPrefix says whether arg could begin a job's ID.
func isIDPrefix(arg string) bool {
	return strings.Trim(strings.ToLower(arg), "0123456789abcdef-") == "" && len(arg) <= 36
}

// matchJob picks the job arg names among named (the jobs listed by that
// name) and all (every job the caller sees, for an ID prefix): resolveJobID's
// rules.
func matchJob(arg string, named, all []apiv1.Job) (string, error) {
	candidates := map[string]string{} // ID → how it matched
	for _, j := range named {
		if j.Spec.Name != arg {
			continue // an API without the name filter answers every job
		}
		candidates[j.ID] = fmt.Sprintf("%s (named %q, team %s)", j.ID, j.Spec.Name, j.Team)
	}
	prefix := strings.ToLower(arg)
	short := isIDPrefix(arg) && len(arg) < MinJobIDPrefix
	if isIDPrefix(arg) && !short {
		for _, j := range all {
			if _, ok := candidates[j.ID]; !ok && strings.HasPrefix(j.ID, prefix) {
				candidates[j.ID] = j.ID
			}
		}
	}
	switch len(candidates) {
	case 0:
		if short {
			return "", UsageErrorf("no job is named %q, and %d characters are too few for an ID prefix: give at least %d of the ID, the whole ID or the job's name (cosmicac jobs list)",
				arg, len(arg), MinJobIDPrefix)
		}
		return "", WithExit(ExitFailure, fmt.Errorf("no job is named %q or has an ID starting with it", arg))
	case 1:
		for id := range candidates {
			return id, nil
		}
	}
	list := slices.Sorted(maps.Values(candidates))
	if len(list) > 5 {
		list = append(list[:5], "...")
	}
	return "", UsageErrorf("%q is ambiguous: %s", arg, strings.Join(list, ", "))
}

// listAll pages through every job that matches o.
func (c *apiConn) listAll(ctx context.Context, o client.ListOptions) ([]apiv1.Job, error) {
	o.Size, o.Page = 1000, 1
	var all []apiv1.Job
	for {
		l, err := c.ListJobs(ctx, o)
		if err != nil {
			return nil, err
		}
		all = append(all, l.Items...)
		if len(l.Items) == 0 || len(all) >= l.Total {
			return all, nil
		}
		o.Page++
	}
}
