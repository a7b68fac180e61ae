package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"syscall"

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
func (a *app) connect(f *connFlags, opts ...client.Option) (*apiConn, error) {
	cfg, err := a.clientConfig(f)
	if err != nil {
		return nil, err
	}
	return &apiConn{Client: client.New(cfg.URL, cfg.Token, opts...), url: cfg.URL}, nil
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
			return withExit(ExitFailure, fmt.Errorf("not logged in or token invalid: run `cosmicac login` (%s)", ae.Message))
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
		return withExit(ExitFailure, &explained{msg: b.String(), err: err})
	}
	if errors.Is(err, context.Canceled) {
		return err // the root command turns it into exit 130
	}
	var ne net.Error
	var oe *net.OpError
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return withExit(ExitFailure, &explained{msg: fmt.Sprintf("cannot reach CosmicAC at %s: is `cosmicac up` running?", c.url), err: err})
	case errors.As(err, &oe) && oe.Op == "dial", errors.As(err, &ne):
		return withExit(ExitFailure, &explained{msg: fmt.Sprintf("cannot reach CosmicAC at %s: is `cosmicac up` running? (%v)", c.url, errors.Unwrap(err)), err: err})
	}
	return withExit(ExitFailure, err)
}

// explained is an error with a message for people that still unwraps to
// its cause.
type explained struct {
	msg string
	err error
}

func (e *explained) Error() string { return e.msg }
func (e *explained) Unwrap() error { return e.err }

// resolveJobID accepts a full job ID, or a unique prefix of one, which it
// looks up among the jobs the caller sees.
func (c *apiConn) resolveJobID(ctx context.Context, arg string) (string, error) {
	if id, err := cosmic.ParseJobID(arg); err == nil {
		return id, nil
	}
	prefix := strings.ToLower(arg)
	if prefix == "" || strings.Trim(prefix, "0123456789abcdef-") != "" || len(prefix) > 36 {
		return "", usageErrorf("%q is not a job ID: give the job's UUID or a unique prefix of it", arg)
	}
	jobs, err := c.listAll(ctx, client.ListOptions{})
	if err != nil {
		return "", c.explain(err)
	}
	var matches []string
	for _, j := range jobs {
		if strings.HasPrefix(j.ID, prefix) {
			matches = append(matches, j.ID)
		}
	}
	switch len(matches) {
	case 0:
		return "", withExit(ExitFailure, fmt.Errorf("no job ID starts with %q", arg))
	case 1:
		return matches[0], nil
	}
	if len(matches) > 5 {
		matches = append(matches[:5], "...")
	}
	return "", usageErrorf("job ID prefix %q is ambiguous: %s", arg, strings.Join(matches, ", "))
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
