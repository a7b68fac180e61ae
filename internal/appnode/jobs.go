package appnode

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cosmicac/cosmicac/internal/agent/agentapi"
	"github.com/cosmicac/cosmicac/internal/apiv1"
	"github.com/cosmicac/cosmicac/internal/authz"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/jobflags"
	"github.com/cosmicac/cosmicac/internal/ork/orkapi"
	"github.com/cosmicac/cosmicac/internal/version"
)

// orkCtx bounds one call to the ork.
func (s *Server) orkCtx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), s.cfg.OrkTimeout.D())
}

// readBody reads the request body, at most cfg.MaxBody bytes.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	if r.ContentLength > s.cfg.MaxBody {
		return nil, &http.MaxBytesError{Limit: s.cfg.MaxBody}
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, err
		}
		if errors.Is(err, os.ErrDeadlineExceeded) { // the server's body limit
			return nil, errorf(http.StatusRequestTimeout, apiv1.CodeRequestTimeout, "the request body did not arrive in time")
		}
		return nil, badRequest("read body: %v", err)
	}
	return b, nil
}

// decodeStrict decodes one JSON value into v, refusing unknown fields and
// trailing data.
func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("decode body: %w: %w", cosmic.ErrInvalid, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("decode body: %w: trailing data after the JSON value", cosmic.ErrInvalid)
	}
	return nil
}

// readSpec reads, defaults and validates a spec, reporting every invalid
// field at once.
func (s *Server) readSpec(w http.ResponseWriter, r *http.Request) (raw []byte, spec cosmic.Spec, err error) {
	raw, err = s.readBody(w, r)
	if err != nil {
		return nil, cosmic.Spec{}, err
	}
	if spec, err = cosmic.ParseSpec(raw); err != nil {
		return nil, cosmic.Spec{}, err
	}
	spec.Default()
	if err := spec.Validate(); err != nil {
		return nil, cosmic.Spec{}, err
	}
	return raw, spec, nil
}

func (s *Server) createJob(w http.ResponseWriter, r *http.Request, c *caller) (any, error) {
	if s.jobCreates != nil {
		if ok, wait := s.jobCreates.reserve(c.team, s.now()); !ok {
			secs := max(int(math.Ceil(wait.Seconds())), 1)
			w.Header().Set("Retry-After", strconv.Itoa(secs))
			return nil, errorf(http.StatusTooManyRequests, apiv1.CodeTooManyRequests,
				"team %s creates jobs too fast (at most %d a minute); retry in %ds", c.team, s.cfg.JobCreatesPerMinute, secs)
		}
	}
	raw, spec, err := s.readSpec(w, r)
	if err != nil {
		return nil, err
	}
	// The resources as written, before Default: a rack's cap on a VM
	// refuses only what was asked for (orkapi.CreateJobParams.Asked).
	var asked cosmic.Resources
	if written, err := cosmic.ParseSpec(raw); err == nil {
		asked = written.Resources
	}
	// A token with a selector labels what it creates, so that the job is
	// one it reaches.
	for k, v := range c.tok.Selector {
		if got, ok := spec.Labels[k]; ok && got != v {
			return nil, invalid(&cosmic.FieldError{Field: "labels." + k, Message: fmt.Sprintf("is %q; this token creates jobs with %s=%s", got, k, v)})
		}
		if spec.Labels == nil {
			spec.Labels = map[string]string{}
		}
		spec.Labels[k] = v
	}
	if len(c.tok.Selector) > 0 {
		if err := spec.Validate(); err != nil {
			return nil, err
		}
	}
	if err := s.checkDatastores(r.Context(), c.team, spec); err != nil {
		return nil, err
	}
	ctx, cancel := s.orkCtx(r)
	defer cancel()
	j, err := s.createOnOrk(ctx, orkapi.CreateJobParams{
		ID: cosmic.NewJobID(), User: c.user.Name, Team: c.team, Spec: spec, Asked: asked,
	})
	if err == nil {
		c.auditTarget = j.ID
	}
	if err != nil {
		return nil, err
	}
	w.Header().Set("Location", apiv1.Prefix+"/jobs/"+j.ID)
	return j, nil
}

// createOnOrk asks the ork to create a job. A create whose connection was
// lost after the ork got it (the ork was killed, froze, or stepped down
// mid-call), or that the ork gave up as it stepped down, may be stored:
// it is asked again with the same job ID, which the ork answers with the
// stored job if it is there (a retried create), until an answer comes or
// ctx ends. So a 503 never hides a stored job, and most creates caught in
// a failover succeed once another ork leads.
func (s *Server) createOnOrk(ctx context.Context, p orkapi.CreateJobParams) (cosmic.Job, error) {
	j, err := s.ork.CreateJob(ctx, p)
	// Canceled with ctx alive is the ork's own doing: it gave the call up
	// as it stepped down, perhaps after storing the job.
	if !fabric.Unsure(err) && (fabric.ErrorCode(err) != fabric.CodeCanceled || ctx.Err() != nil) {
		return j, err
	}
	first := err
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, time.Second/2) {
		select {
		case <-ctx.Done():
			return cosmic.Job{}, errorf(http.StatusGatewayTimeout, apiv1.CodeTimeout,
				"the ork got the create of job %s but its answer was lost, and it did not answer again in time: the job may exist (GET %s/jobs/%s)", p.ID, apiv1.Prefix, p.ID)
		case <-time.After(wait):
		}
		j, err = s.ork.CreateJob(ctx, p)
		switch code := fabric.ErrorCode(err); {
		case err == nil:
			return j, nil
		case code == fabric.CodeUnavailable, code == fabric.CodeRefused, code == fabric.CodeDeadlineExceeded, code == fabric.CodeCanceled:
			s.log.Debug("create unconfirmed; asking the ork again", "job_id", p.ID, "first", first, "err", err)
		default:
			return j, err
		}
	}
}

// visibleJob returns the job named by the path's {id} if the caller holds
// the route's permission on it (reaches).
func (s *Server) visibleJob(r *http.Request, c *caller) (cosmic.Job, error) {
	id, err := cosmic.ParseJobID(r.PathValue("id"))
	if err != nil {
		return cosmic.Job{}, err
	}
	c.auditTarget = id
	ctx, cancel := s.orkCtx(r)
	defer cancel()
	j, err := s.ork.GetJob(ctx, id)
	if err != nil {
		return cosmic.Job{}, err
	}
	if err := c.reaches(j); err != nil {
		return cosmic.Job{}, err
	}
	return j, nil
}

// reaches checks the caller's permission (c.perm) on job j, in j's team
// (any team the caller is in, not only the active one; a bound token's
// only). A job the caller may not see at all is not found, so that IDs do
// not leak: another team's, one outside the token's selector, and one whose
// readUser the caller is, for anything but reading. A job the caller sees
// but may not act on is forbidden.
func (c *caller) reaches(j cosmic.Job) error {
	notFound := errorf(http.StatusNotFound, apiv1.CodeNotFound, "job %s not found", j.ID)
	if !c.selects(j.Spec.Labels) {
		return notFound
	}
	if !c.inTeam(j.Team) {
		// readUser: by a credential not bound to a team (a bound one acts
		// in its team only).
		if c.perm == authz.JobsRead && j.Spec.ReadUser != "" && j.Spec.ReadUser == c.user.Name && c.tok.Team == "" && authz.ScopeKeeps(authz.Scope(c.tok.Scope), authz.JobsRead) {
			c.auditTeam = j.Team
			return nil
		}
		return notFound
	}
	c.auditTeam = j.Team
	if !c.can(j.Team, c.perm) {
		if !c.can(j.Team, authz.JobsRead) {
			return notFound
		}
		return forbidden(c, c.perm, j.Team)
	}
	return nil
}

// watch holds a request that has ?watch=VERSION until the jobs' version
// passes VERSION (at most apiv1.MaxWatchWait; "" answers at once), and
// sets the version the answer shows in its header. The version is taken
// before the jobs are read, so a change in between wakes the next watch.
func (s *Server) watch(w http.ResponseWriter, r *http.Request) error {
	v, ok := r.URL.Query()[apiv1.QueryWatch]
	if !ok {
		return nil
	}
	if len(v) > 1 {
		return invalid(&cosmic.FieldError{Field: apiv1.QueryWatch, Message: "is given more than once"})
	}
	var p orkapi.WatchJobsParams
	if v[0] != "" {
		epoch, since, ok := strings.Cut(v[0], ".")
		n, err := strconv.ParseUint(since, 10, 64)
		if !ok || err != nil || epoch == "" {
			return invalid(&cosmic.FieldError{Field: apiv1.QueryWatch, Message: fmt.Sprintf("%s: want the %s of the last answer", clip(v[0]), apiv1.HeaderJobsVersion)})
		}
		p = orkapi.WatchJobsParams{Epoch: epoch, Since: n, WaitMillis: int(apiv1.MaxWatchWait / time.Millisecond)}
	}
	ctx, cancel := context.WithTimeout(r.Context(), apiv1.MaxWatchWait+s.cfg.OrkTimeout.D())
	defer cancel()
	ver, err := s.ork.WatchJobs(ctx, p)
	if err != nil {
		return err
	}
	w.Header().Set(apiv1.HeaderJobsVersion, ver.Epoch+"."+strconv.FormatUint(ver.Version, 10))
	return nil
}

func (s *Server) getJob(w http.ResponseWriter, r *http.Request, c *caller) (any, error) {
	if err := s.watch(w, r); err != nil {
		return nil, err
	}
	j, err := s.visibleJob(r, c)
	if err != nil {
		return nil, err
	}
	js := []cosmic.Job{j}
	s.annotateModelHealth(r, js)
	return js[0], nil
}

func (s *Server) listJobs(w http.ResponseWriter, r *http.Request, c *caller) (any, error) {
	p, page, err := parseListQuery(r.URL.Query())
	if err != nil {
		return nil, err
	}
	if err := s.watch(w, r); err != nil {
		return nil, err
	}
	p.Team = c.team // "" only for a platform admin (authorize)
	for k, v := range c.tok.Selector {
		if got, ok := p.Labels[k]; ok && got != v {
			return apiv1.JobList{Items: []cosmic.Job{}, Page: page, Size: p.Size}, nil // outside the token's selector
		}
		if p.Labels == nil {
			p.Labels = map[string]string{}
		}
		p.Labels[k] = v
	}
	ctx, cancel := s.orkCtx(r)
	defer cancel()
	rep, err := s.ork.ListJobs(ctx, p)
	if err != nil {
		return nil, err
	}
	items := rep.Jobs
	if items == nil {
		items = []cosmic.Job{}
	}
	s.annotateModelHealth(r, items)
	return apiv1.JobList{Items: items, Total: rep.Total, Page: page, Size: p.Size}, nil
}

// parseListQuery turns listJobs's query into the ork's params; page is the
// API's 1-based page.
func parseListQuery(q map[string][]string) (p orkapi.ListJobsParams, page int, err error) {
	var fes []*cosmic.FieldError
	bad := func(field, format string, args ...any) {
		fes = append(fes, &cosmic.FieldError{Field: field, Message: fmt.Sprintf(format, args...)})
	}
	one := func(name string) (string, bool) {
		v, ok := q[name]
		if !ok {
			return "", false
		}
		if len(v) > 1 {
			bad(name, "is given %d times; give it once", len(v))
		}
		return v[0], true
	}
	if v, ok := one(apiv1.QueryLabelSelector); ok {
		p.Labels = map[string]string{}
		var terms []string
		if n := strings.Count(v, ",") + 1; n > apiv1.MaxLabelSelectorTerms {
			bad(apiv1.QueryLabelSelector, "has %d terms, more than %d", n, apiv1.MaxLabelSelectorTerms)
		} else {
			terms = strings.Split(v, ",")
		}
		for _, term := range terms {
			k, val, found := strings.Cut(strings.TrimSpace(term), "=")
			switch {
			case !found:
				bad(apiv1.QueryLabelSelector, "term %s: want key=value", clip(term))
			case len(k) > cosmic.MaxLabelKeyLen:
				bad(apiv1.QueryLabelSelector, "term %s: the key is longer than %d bytes", clip(term), cosmic.MaxLabelKeyLen)
			case len(val) > cosmic.MaxLabelValueLen:
				bad(apiv1.QueryLabelSelector, "term %s: the value is longer than %d bytes", clip(term), cosmic.MaxLabelValueLen)
			case !cosmic.ValidLabelKey(k):
				bad(apiv1.QueryLabelSelector, "term %s: %s is not a label key", clip(term), clip(k))
			case !cosmic.ValidLabelValue(val):
				bad(apiv1.QueryLabelSelector, "term %s: %s is not a label value", clip(term), clip(val))
			default:
				if old, dup := p.Labels[k]; dup && old != val {
					bad(apiv1.QueryLabelSelector, "key %q is given twice with different values", k)
				}
				p.Labels[k] = val
			}
		}
	}
	if v, ok := one(apiv1.QueryOrder); ok {
		if !slices.Contains(apiv1.Orders, v) {
			bad(apiv1.QueryOrder, "%s: want asc or desc", clip(v))
		}
		p.Order = v
	}
	if v, ok := one(apiv1.QuerySort); ok {
		if !slices.Contains(apiv1.SortKeys, v) {
			bad(apiv1.QuerySort, "%s: want one of %s", clip(v), strings.Join(apiv1.SortKeys, ", "))
		}
		p.Sort = v
	}
	page = 1
	if v, ok := one(apiv1.QueryPage); ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1_000_000 {
			bad(apiv1.QueryPage, "%s: want a page number from 1 to 1000000", clip(v))
		} else {
			page = n
		}
	}
	p.Size = apiv1.DefaultPageSize
	if v, ok := one(apiv1.QuerySize); ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > apiv1.MaxPageSize {
			bad(apiv1.QuerySize, "%s: want a page size from 1 to %d", clip(v), apiv1.MaxPageSize)
		} else {
			p.Size = n
		}
	}
	p.Page = page - 1
	stateVals, states := q[apiv1.QueryStatusState], 0
	for _, v := range stateVals {
		states += strings.Count(v, ",") + 1
	}
	if states > apiv1.MaxStatusStates {
		bad(apiv1.QueryStatusState, "has %d values, more than %d", states, apiv1.MaxStatusStates)
		stateVals = nil
	}
	for _, v := range stateVals {
		for _, st := range strings.Split(v, ",") {
			st := cosmic.State(strings.TrimSpace(st))
			if !st.Valid() {
				bad(apiv1.QueryStatusState, "%s is not a job state", clip(string(st)))
				continue
			}
			if !slices.Contains(p.States, st) {
				p.States = append(p.States, st)
			}
		}
	}
	parseTime := func(name string, dst *time.Time) {
		if v, ok := one(name); ok {
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				bad(name, "%s is not an RFC 3339 time (2006-01-02T15:04:05Z)", clip(v))
				return
			}
			*dst = t
		}
	}
	parseTime(apiv1.QueryUpdatedAfter, &p.UpdatedAfter)
	parseTime(apiv1.QueryUpdatedBefore, &p.UpdatedBefore)
	if !p.UpdatedAfter.IsZero() && !p.UpdatedBefore.IsZero() && !p.UpdatedAfter.Before(p.UpdatedBefore) {
		bad(apiv1.QueryUpdatedAfter, "must be before updatedBefore")
	}
	if v, ok := one(apiv1.QueryUserName); ok {
		if v == "" || len(v) > apiv1.MaxUserNameLen {
			bad(apiv1.QueryUserName, "want a user name of 1 to %d bytes", apiv1.MaxUserNameLen)
		}
		p.User = v
	}
	if v, ok := one(apiv1.QueryName); ok {
		if v == "" || len(v) > cosmic.MaxNameLen {
			bad(apiv1.QueryName, "want a job name of 1 to %d characters", cosmic.MaxNameLen)
		}
		p.Name = v
	}
	if len(fes) > 0 {
		return orkapi.ListJobsParams{}, 0, invalid(fes...)
	}
	return p, page, nil
}

// clip quotes a value for an error message, cut to 64 bytes: the message
// need not repeat a huge input.
func clip(v string) string {
	const n = 64
	if len(v) <= n {
		return strconv.Quote(v)
	}
	return strconv.Quote(v[:n]) + fmt.Sprintf("… (%d bytes)", len(v))
}

// boolQuery parses an optional boolean query parameter.
func boolQuery(r *http.Request, name string) (bool, error) {
	v, ok := r.URL.Query()[name]
	if !ok {
		return false, nil
	}
	b, err := strconv.ParseBool(v[len(v)-1])
	if err != nil || len(v) > 1 {
		return false, invalid(&cosmic.FieldError{Field: name, Message: fmt.Sprintf("%s: want true or false, once", clip(v[len(v)-1]))})
	}
	return b, nil
}

func (s *Server) deleteJob(_ http.ResponseWriter, r *http.Request, c *caller) (any, error) {
	force, err := boolQuery(r, apiv1.QueryForce)
	if err != nil {
		return nil, err
	}
	j, err := s.visibleJob(r, c)
	if err != nil {
		return nil, err
	}
	ctx, cancel := s.orkCtx(r)
	defer cancel()
	return s.ork.DeleteJob(ctx, orkapi.DeleteJobParams{ID: j.ID, Force: force})
}

func (s *Server) restartJob(_ http.ResponseWriter, r *http.Request, c *caller) (any, error) {
	j, err := s.visibleJob(r, c)
	if err != nil {
		return nil, err
	}
	ctx, cancel := s.orkCtx(r)
	defer cancel()
	return s.ork.RestartJob(ctx, orkapi.RestartJobParams{ID: j.ID})
}

func (s *Server) killJob(_ http.ResponseWriter, r *http.Request, c *caller) (any, error) {
	j, err := s.visibleJob(r, c)
	if err != nil {
		return nil, err
	}
	ctx, cancel := s.orkCtx(r)
	defer cancel()
	return s.ork.KillJob(ctx, j.ID)
}

func (s *Server) labelJob(w http.ResponseWriter, r *http.Request, c *caller) (any, error) {
	raw, err := s.readBody(w, r)
	if err != nil {
		return nil, err
	}
	var l apiv1.Label
	if err := decodeStrict(raw, &l); err != nil {
		return nil, err
	}
	if err := cosmic.ValidateLabel("name", l.Name, l.Value); err != nil {
		return nil, err
	}
	j, err := s.visibleJob(r, c)
	if err != nil {
		return nil, err
	}
	if _, ok := c.tok.Selector[l.Name]; ok {
		return nil, errorf(http.StatusForbidden, apiv1.CodeForbidden, "label %s is this token's selector; it may not change it", l.Name)
	}
	ctx, cancel := s.orkCtx(r)
	defer cancel()
	return s.ork.LabelJob(ctx, orkapi.LabelJobParams{ID: j.ID, Name: l.Name, Value: l.Value})
}

func (s *Server) dataSyncJob(w http.ResponseWriter, r *http.Request, c *caller) (any, error) {
	raw, err := s.readBody(w, r)
	if err != nil {
		return nil, err
	}
	var ds apiv1.DataSync
	if err := decodeStrict(raw, &ds); err != nil {
		return nil, err
	}
	if !slices.Contains(apiv1.DataSyncDirections, ds.Direction) {
		return nil, invalid(&cosmic.FieldError{Field: "direction", Message: fmt.Sprintf("%q: want push or pull", ds.Direction)})
	}
	j, replica, err := s.agentTarget(r, c, "a data sync")
	if err != nil {
		return nil, err
	}
	c.auditTarget = j.ID
	// The volumes: the one named (by name, else mount path), or every
	// datastore volume (for a push, every one that may be written).
	var idx []int
	for i, v := range j.Spec.Volumes {
		named := ds.Volume != "" && (v.Name == ds.Volume || v.MountPath == ds.Volume)
		if ds.Volume != "" && !named {
			continue
		}
		perm := strings.ToUpper(v.Permission)
		switch {
		case v.Source.DataStore == nil && named:
			return nil, invalid(&cosmic.FieldError{Field: "volume", Message: fmt.Sprintf("%q is not a datastore volume: only those sync", ds.Volume)})
		case v.Source.DataStore == nil:
		case ds.Direction == apiv1.DataSyncPush && perm != cosmic.PermissionRW && perm != cosmic.PermissionRWD:
			if named {
				return nil, invalid(&cosmic.FieldError{Field: "volume", Message: fmt.Sprintf("%q is read only (permission RO): nothing to push", ds.Volume)})
			}
		default:
			idx = append(idx, i)
		}
		if named {
			break
		}
	}
	if ds.Volume != "" && len(idx) == 0 {
		return nil, invalid(&cosmic.FieldError{Field: "volume", Message: fmt.Sprintf("job %s has no volume named %q (give a volume's name or mount path)", j.ID, ds.Volume)})
	}
	if len(idx) == 0 {
		// Nothing of the job syncs that way: done at once.
		return apiv1.DataSyncResult{Direction: ds.Direction, Replica: replica, State: apiv1.DataSyncDone, Volumes: []apiv1.VolumeSync{}}, nil
	}
	wait := true
	if _, ok := r.URL.Query()[apiv1.QueryWait]; ok {
		if wait, err = boolQuery(r, apiv1.QueryWait); err != nil {
			return nil, err
		}
	}
	syncer, ok := s.shells.(DataSyncer)
	if !ok {
		return nil, errorf(http.StatusNotImplemented, apiv1.CodeNotImplemented, "this app-node does not reach the agents' data sync")
	}
	rep, err := syncer.DataSync(r.Context(), j, replica, agentapi.DataSyncParams{Direction: string(ds.Direction), Volumes: idx, Detach: !wait})
	if errors.Is(err, ErrNoDataSync) || fabric.ErrorCode(err) == fabric.CodeNotFound {
		return nil, errorf(http.StatusNotImplemented, apiv1.CodeNotImplemented, "job %s's agent does not sync volumes: only the simulated and QEMU racks do yet (docs/data.md)", j.ID)
	}
	if err != nil {
		return nil, agentError(err)
	}
	s.log.Info("datasync", "job_id", j.ID, "replica", replica, "direction", ds.Direction, "volumes", len(idx), "wait", wait, "user", c.user.Name)
	return dataSyncResult(replica, rep), nil
}

// getDataSync answers the replica's last datasync as its agent has it now.
func (s *Server) getDataSync(_ http.ResponseWriter, r *http.Request, c *caller) (any, error) {
	j, replica, err := s.agentTarget(r, c, "a data sync")
	if err != nil {
		return nil, err
	}
	syncer, ok := s.shells.(DataSyncer)
	if !ok {
		return nil, errorf(http.StatusNotImplemented, apiv1.CodeNotImplemented, "this app-node does not reach the agents' data sync")
	}
	st, err := syncer.LastDataSync(r.Context(), j, replica)
	if errors.Is(err, ErrNoDataSync) {
		return nil, errorf(http.StatusNotImplemented, apiv1.CodeNotImplemented, "job %s's agent does not sync volumes: only the simulated and QEMU racks do yet (docs/data.md)", j.ID)
	}
	if err != nil {
		return nil, agentError(err)
	}
	if st == nil {
		return nil, errorf(http.StatusNotFound, apiv1.CodeNotFound, "replica %d of job %s has done no datasync since its agent started", replica, j.ID)
	}
	return dataSyncResult(replica, *st), nil
}

// dataSyncResult is the API's form of an agent's datasync.
func dataSyncResult(replica int, st agentapi.DataSyncStatus) apiv1.DataSyncResult {
	out := apiv1.DataSyncResult{Direction: apiv1.DataSyncDirection(st.Direction), Replica: replica, State: apiv1.DataSyncRunning,
		StartedAt: st.StartedAt, EndedAt: st.EndedAt, Volumes: []apiv1.VolumeSync{}}
	if !st.EndedAt.IsZero() {
		out.State = apiv1.DataSyncDone
	}
	for _, v := range st.Volumes {
		out.Volumes = append(out.Volumes, apiv1.VolumeSync{Index: v.Index, MountPath: v.MountPath, State: cmp.Or(v.State, apiv1.DataSyncDone),
			Objects: v.Objects, Bytes: v.Bytes, TotalObjects: v.TotalObjects, TotalBytes: v.TotalBytes,
			Unchanged: v.Unchanged, Deleted: v.Deleted, Skipped: v.Skipped, Error: v.Error, Reason: v.Reason})
	}
	return out
}

func (s *Server) jobCommand(w http.ResponseWriter, r *http.Request, _ *caller) (any, error) {
	raw, _, err := s.readSpec(w, r)
	if err != nil {
		return nil, err
	}
	spec, err := cosmic.ParseSpec(raw) // as given: defaults need no flags
	if err != nil {
		return nil, err
	}
	return jobflags.Command(spec), nil
}

// replica returns the visible job of the path's {id} and the index of the
// path's {n}, which must name one of its replicas.
func (s *Server) replica(r *http.Request, c *caller) (cosmic.Job, int, error) {
	n, err := strconv.Atoi(r.PathValue("n"))
	if err != nil || n < 0 {
		return cosmic.Job{}, 0, invalid(&cosmic.FieldError{Field: "n", Message: fmt.Sprintf("%s is not a replica index (from 0)", clip(r.PathValue("n")))})
	}
	j, err := s.visibleJob(r, c)
	if err != nil {
		return cosmic.Job{}, 0, err
	}
	if n >= j.Spec.Replicas() {
		return cosmic.Job{}, 0, errorf(http.StatusNotFound, apiv1.CodeNotFound, "job %s has no replica %d (it has %d)", j.ID, n, j.Spec.Replicas())
	}
	return j, n, nil
}

func (s *Server) restartReplica(_ http.ResponseWriter, r *http.Request, c *caller) (any, error) {
	j, n, err := s.replica(r, c)
	if err != nil {
		return nil, err
	}
	ctx, cancel := s.orkCtx(r)
	defer cancel()
	return s.ork.RestartJob(ctx, orkapi.RestartJobParams{ID: j.ID, Replica: &n})
}

func (s *Server) deleteReplica(_ http.ResponseWriter, r *http.Request, c *caller) (any, error) {
	j, n, err := s.replica(r, c)
	if err != nil {
		return nil, err
	}
	ctx, cancel := s.orkCtx(r)
	defer cancel()
	return s.ork.DeleteJob(ctx, orkapi.DeleteJobParams{ID: j.ID, Replica: &n})
}

func (s *Server) whoAmI(_ http.ResponseWriter, _ *http.Request, c *caller) (any, error) {
	out := apiv1.WhoAmI{User: c.user.Name, PlatformAdmin: c.user.PlatformAdmin, Team: c.team, Role: c.role, Teams: []cosmic.Member{},
		Token: c.tok.ID, Credential: string(c.tok.Kind), BoundTeam: c.tok.Team, Scope: c.tok.Scope, Selector: c.tok.Selector, ExpiresAt: c.tok.ExpiresAt}
	for _, t := range slices.Sorted(maps.Keys(c.roles)) {
		out.Teams = append(out.Teams, cosmic.Member{Team: t, User: c.user.Name, Role: c.roles[t]})
	}
	out.CSRFToken = c.csrf
	out.Permissions = []authz.Permission{}
	for _, p := range authz.Permissions {
		if c.can(c.team, p) {
			out.Permissions = append(out.Permissions, p)
		}
	}
	return out, nil
}

func (s *Server) openAPI(_ http.ResponseWriter, _ *http.Request, _ *caller) (any, error) {
	return s.openapi, nil
}

func (s *Server) health(_ http.ResponseWriter, _ *http.Request, _ *caller) (any, error) {
	return apiv1.Health{Status: "ok", Version: version.Version}, nil
}

// ErrNoDataSync is a DataSyncer's answer when what it stands for reaches
// no data sync (a test harness's Shells): POST …/datasync answers 501.
var ErrNoDataSync = errors.New("no data sync")
