package client

import (
	"context"
	"net/http"

	"github.com/cosmicac/cosmicac/internal/apiv1"
)

// ListVolumes lists the caller's team's standalone volumes.
func (c *Client) ListVolumes(ctx context.Context) ([]apiv1.Volume, error) {
	var out apiv1.VolumeList
	err := c.do(ctx, http.MethodGet, "/volumes", nil, nil, &out)
	return out.Items, err
}
