package appnode

import (
	"context"
	"net/http"

	"github.com/cosmicac/cosmicac/internal/apiv1"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/ork/orkapi"
)

// RequireAuthSetter is the ork's setRequireAuth (*orkapi.Client implements
// it). It is asked of the Ork by a type assertion, not added to Ork, so
// that an Ork without it (an older fake) still builds; such an ork answers
// the route 501.
type RequireAuthSetter interface {
	SetRequireAuth(ctx context.Context, p orkapi.SetRequireAuthParams) (cosmic.Job, error)
}

var _ RequireAuthSetter = (*orkapi.Client)(nil)

// setInferenceAuth is PUT /api/v1/jobs/{id}/inference/auth: the job's
// team (or an admin) turns its "require authorization" on or off, as for
// the other job actions.
func (s *Server) setInferenceAuth(w http.ResponseWriter, r *http.Request, c *caller) (any, error) {
	raw, err := s.readBody(w, r)
	if err != nil {
		return nil, err
	}
	var in apiv1.InferenceAuth
	if err := decodeStrict(raw, &in); err != nil {
		return nil, err
	}
	if in.RequireAuth == nil {
		return nil, invalid(&cosmic.FieldError{Field: "requireAuth", Message: "is required (true or false)"})
	}
	setter, ok := s.ork.(RequireAuthSetter)
	if !ok {
		return nil, errorf(http.StatusNotImplemented, apiv1.CodeNotImplemented, "this ork cannot change a job's authorization")
	}
	j, err := s.visibleJob(r, c)
	if err != nil {
		return nil, err
	}
	if j.Spec.Type != cosmic.TypeManagedInference {
		return nil, errorf(http.StatusConflict, apiv1.CodeConflict, "job %s is a %s job: only a managed-inference job has \"require authorization\"", j.ID, j.Spec.Type)
	}
	ctx, cancel := s.orkCtx(r)
	defer cancel()
	j, err = setter.SetRequireAuth(ctx, orkapi.SetRequireAuthParams{ID: j.ID, RequireAuth: *in.RequireAuth})
	if err != nil {
		return nil, err
	}
	s.log.Info("inference auth set", "job_id", j.ID, "require_auth", *in.RequireAuth, "user", c.user.Name)
	js := []cosmic.Job{j}
	s.annotateModelHealth(r, js)
	return js[0], nil
}
