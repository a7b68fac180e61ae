package appnode

import (
	"context"
	"fmt"
	"net/http"

	"github.com/cosmicac/cosmicac/internal/apiv1"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/ork/orkapi"
)

// JobUpdater is the ork's updateJob (*orkapi.Client implements it), asked
// of the Ork by a type assertion as RequireAuthSetter is: an ork without
// it answers the route 501.
type JobUpdater interface {
	UpdateJob(ctx context.Context, p orkapi.UpdateJobParams) (cosmic.Job, error)
}

var _ JobUpdater = (*orkapi.Client)(nil)

// updateJob is PUT /api/v1/jobs/{id}/spec: the job's team (or an admin)
// gives a managed-inference job a new spec, whole, as create takes it;
// the ork rolls what replicas run out to them one at a time
// (docs/inference.md, "Rolling updates").
func (s *Server) updateJob(w http.ResponseWriter, r *http.Request, c *caller) (any, error) {
	raw, spec, err := s.readSpec(w, r)
	if err != nil {
		return nil, err
	}
	var asked cosmic.Resources
	if written, err := cosmic.ParseSpec(raw); err == nil {
		asked = written.Resources
	}
	j, err := s.visibleJob(r, c)
	if err != nil {
		return nil, err
	}
	updater, ok := s.ork.(JobUpdater)
	if !ok {
		return nil, errorf(http.StatusNotImplemented, apiv1.CodeNotImplemented, "this ork cannot update a job")
	}
	// A token with a selector keeps its labels on what it changes, so
	// that the job stays one it reaches.
	for k, v := range c.tok.Selector {
		if got := spec.Labels[k]; got != v {
			return nil, invalid(&cosmic.FieldError{Field: "labels." + k, Message: fmt.Sprintf("is %q; this token's jobs keep %s=%s", got, k, v)})
		}
	}
	ctx, cancel := s.orkCtx(r)
	defer cancel()
	j, err = updater.UpdateJob(ctx, orkapi.UpdateJobParams{ID: j.ID, Spec: spec, Asked: asked})
	if err != nil {
		return nil, err
	}
	s.log.Info("job updated", "job_id", j.ID, "generation", j.Status.Generation, "rollout", j.Status.Rollout != nil, "user", c.user.Name)
	js := []cosmic.Job{j}
	s.annotateModelHealth(r, js)
	return js[0], nil
}
