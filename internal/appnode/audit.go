package appnode

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/cosmicac/cosmicac/internal/apiv1"
	"github.com/cosmicac/cosmicac/internal/store"
)

// The audit log (docs/security.md, "Audit log") records every request that
// changes something, and every shell and SSH session, with who, which
// team, what, when, from where and the outcome, denied ones included. It
// leaves out reads, previews that change nothing (apiv1.Route.Preview: the
// new-job form's command preview, asked on each keystroke), the HTTP relay into jobs (the job's own traffic), and
// requests that carry no valid credential at all except sign-ins (so that
// anonymous noise cannot fill it); those are in the request log.

// auditTimeout bounds one write of the audit log.
const auditTimeout = 5 * time.Second

// audited reports whether requests of rt are recorded.
func audited(rt apiv1.Route) bool {
	if rt.Proxy || rt.Preview {
		return false
	}
	return unsafeMethod(rt.Method)
}

// auditRequest records a request of rt once it is answered (c is nil when
// it carried no valid credential).
func (s *Server) auditRequest(r *http.Request, rt apiv1.Route, c *caller, w http.ResponseWriter, err error) {
	if !audited(rt) {
		return
	}
	in, _ := r.Context().Value(infoKey{}).(*info)
	rec := store.AuditRecord{At: s.now().UTC(), Action: rt.Op, Remote: s.clientAddr(r)}
	switch {
	case c != nil:
		rec.User, rec.Team, rec.Target = c.user.Name, c.auditTeam, c.auditTarget
		if rec.Team == "" {
			rec.Team = c.team
		}
	case rt.Op == apiv1.OpLogin || rt.Op == apiv1.OpCreateSession:
		if in != nil {
			rec.Target = in.target
			if err == nil {
				rec.User = in.target
			}
		}
	default:
		return // no credential: not recorded (see above)
	}
	if rec.Target == "" {
		rec.Target = pathTarget(r, rt)
	}
	if sw, ok := w.(*statusWriter); ok && sw.status != 0 {
		rec.Status = sw.status
	} else if err != nil {
		rec.Status, _, _ = toHTTP(err)
	} else {
		rec.Status = rt.Status
	}
	if err != nil {
		_, body, _ := toHTTP(err)
		rec.Detail = body.Code
	}
	s.appendAudit(r.Context(), rec)
}

// auditText is v as the audit log keeps it: as it is when short and
// plain, else quoted and clipped (so that a record cannot carry terminal
// escapes or be made huge).
func auditText(v string) string {
	if len(v) > 128 {
		return clip(v)
	}
	for _, r := range v {
		if r < 0x20 || r > 0x7e || r == '"' {
			return clip(v)
		}
	}
	return v
}

// pathTarget is what the path names: its parameters' values.
func pathTarget(r *http.Request, rt apiv1.Route) string {
	var parts []string
	for _, p := range rt.Params {
		if p.In == apiv1.InPath {
			if v := r.PathValue(p.Name); v != "" {
				parts = append(parts, auditText(v))
			}
		}
	}
	return strings.Join(parts, "/")
}

// appendAudit writes rec; a failure is logged (the request is answered by
// then).
func (s *Server) appendAudit(ctx context.Context, rec store.AuditRecord) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), auditTimeout)
	defer cancel()
	if err := s.acc.AppendAudit(ctx, rec); err != nil {
		s.log.Error("write audit log", "action", rec.Action, "user", rec.User, "err", err)
	}
}

// auditSession records the start of a shell or SSH session.
func (s *Server) auditSession(r *http.Request, c *caller, action, target string) {
	s.appendAudit(r.Context(), store.AuditRecord{At: s.now().UTC(), User: c.user.Name, Team: c.auditTeam,
		Action: action, Target: target, Remote: s.clientAddr(r), Status: http.StatusSwitchingProtocols})
}

// Audit actions beyond the operation IDs.
const (
	AuditShellOpen = "shell.open"
	AuditSSHOpen   = "ssh.open"
)

// outcome sums up a status for readers of the log.
func outcome(status int) string {
	switch {
	case status < 400:
		return "ok"
	case status == http.StatusUnauthorized, status == http.StatusForbidden, status == http.StatusNotFound, status == http.StatusTooManyRequests:
		return "denied"
	}
	return "failed"
}

func (s *Server) listAudit(_ http.ResponseWriter, r *http.Request, c *caller) (any, error) {
	q := store.AuditQuery{Team: c.team}
	v := r.URL.Query()
	var err error
	one := func(name string) string {
		if len(v[name]) > 1 && err == nil {
			err = badRequest("%s is given more than once", name)
		}
		return v.Get(name)
	}
	q.User, q.Action = one(apiv1.QueryUser), one(apiv1.QueryAction)
	parseTime := func(name string, dst *time.Time) {
		if s := one(name); s != "" && err == nil {
			t, perr := time.Parse(time.RFC3339Nano, s)
			if perr != nil {
				err = badRequest("%s %s: want an RFC 3339 time", name, clip(s))
			}
			*dst = t
		}
	}
	parseTime(apiv1.QuerySince, &q.Since)
	parseTime(apiv1.QueryUntil, &q.Until)
	parseInt := func(name string, max int64) int64 {
		s := one(name)
		if s == "" || err != nil {
			return 0
		}
		n, perr := strconv.ParseInt(s, 10, 64)
		if perr != nil || n < 1 || n > max {
			err = badRequest("%s %s: want a whole number from 1 to %d", name, clip(s), max)
		}
		return n
	}
	q.Before = parseInt(apiv1.QueryBefore, 1<<62)
	q.Limit = int(parseInt(apiv1.QueryLimit, store.MaxAuditLimit))
	if err != nil {
		return nil, err
	}
	recs, more, err := s.acc.ListAudit(r.Context(), q)
	if err != nil {
		return nil, fmt.Errorf("list audit: %w", err)
	}
	out := apiv1.AuditList{Items: make([]apiv1.AuditRecord, len(recs))}
	for i, rec := range recs {
		out.Items[i] = apiv1.AuditRecord{ID: rec.ID, At: rec.At, User: rec.User, Team: rec.Team, Action: rec.Action,
			Target: rec.Target, Remote: rec.Remote, Status: rec.Status, Outcome: outcome(rec.Status), Detail: rec.Detail}
	}
	if more && len(recs) > 0 {
		out.Next = recs[len(recs)-1].ID
	}
	return out, nil
}

// RunAuditRetention deletes the audit records older than cfg.AuditRetention
// now and every hour until ctx ends. Its owner is the app-node's
// component.
func (s *Server) RunAuditRetention(ctx context.Context) error {
	if s.cfg.AuditRetention <= 0 {
		return nil // kept for ever
	}
	t := time.NewTicker(time.Hour)
	defer t.Stop()
	for {
		n, err := s.acc.PruneAudit(ctx, s.now().Add(-s.cfg.AuditRetention.D()))
		switch {
		case errors.Is(err, context.Canceled):
		case err != nil:
			s.log.Warn("prune audit log", "err", err)
		case n > 0:
			s.log.Info("pruned audit log", "records", n, "retention", s.cfg.AuditRetention.D().String())
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
