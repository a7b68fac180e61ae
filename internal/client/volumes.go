package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/cosmicac/cosmicac/internal/apiv1"
)

// ListVolumes lists the caller's team's standalone volumes.
func (c *Client) ListVolumes(ctx context.Context) ([]apiv1.Volume, error) {
	var out apiv1.VolumeList
	err := c.do(ctx, http.MethodGet, "/volumes", nil, nil, &out)
	return out.Items, err
}

// DeleteVolume deletes a standalone volume of the caller's team.
func (c *Client) DeleteVolume(ctx context.Context, name string) error {
	return c.do(ctx, http.MethodDelete, "/volumes/"+url.PathEscape(name), nil, nil, nil)
}
