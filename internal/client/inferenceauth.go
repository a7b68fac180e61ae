package client

import (
	"context"
	"net/http"

	"github.com/cosmicac/cosmicac/internal/apiv1"
	"github.com/cosmicac/cosmicac/internal/cosmic"
)

// SetRequireAuth turns a managed-inference job's "require authorization"
// on or off (PUT /api/v1/jobs/{id}/inference/auth) and returns the job.
func (c *Client) SetRequireAuth(ctx context.Context, id string, requireAuth bool) (cosmic.Job, error) {
	var j cosmic.Job
	err := c.do(ctx, http.MethodPut, jobPath(id, "inference/auth"), nil, apiv1.InferenceAuth{RequireAuth: &requireAuth}, &j)
	return j, err
}
