package client

import (
	"context"
	"net/http"

	"github.com/cosmicac/cosmicac/internal/cosmic"
)

// UpdateJob gives a managed-inference job a new spec (PUT
// /api/v1/jobs/{id}/spec): what replicas run is rolled out to them, one
// at a time.
func (c *Client) UpdateJob(ctx context.Context, id string, spec cosmic.Spec) (cosmic.Job, error) {
	var j cosmic.Job
	err := c.do(ctx, http.MethodPut, jobPath(id, "spec"), nil, spec, &j)
	return j, err
}
