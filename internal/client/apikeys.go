package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/cosmicac/cosmicac/internal/apiv1"
)

// The app-node serves the API-key routes (apiv1.OpCreateAPIKey, …; see
// docs/inference.md, "API keys"):
//
//	POST   /api/v1/api-keys              {"name", "team"?, "models"?, "expiresAt"? | "expiresIn"?} → 201 apiv1.CreatedAPIKey (the key, once)
//	GET    /api/v1/api-keys              → 200 apiv1.APIKeyList
//	POST   /api/v1/api-keys/{id}/rotate  {"grace"?} → 200 apiv1.CreatedAPIKey (the new key, once)
//	DELETE /api/v1/api-keys/{id}         → 204

// CreateAPIKey makes an inference API key of the caller's team (or team).
func (c *Client) CreateAPIKey(ctx context.Context, name, team string) (apiv1.CreatedAPIKey, error) {
	return c.CreateAPIKeyWith(ctx, apiv1.CreateAPIKey{Name: name, Team: team})
}

// CreateAPIKeyWith makes an inference API key as in describes (its
// models, its expiry).
func (c *Client) CreateAPIKeyWith(ctx context.Context, in apiv1.CreateAPIKey) (apiv1.CreatedAPIKey, error) {
	var out apiv1.CreatedAPIKey
	err := c.do(ctx, http.MethodPost, "/api-keys", nil, in, &out)
	return out, err
}

// RotateAPIKey gives key id a new secret; the old one works for grace
// ("": the server's default, 24h).
func (c *Client) RotateAPIKey(ctx context.Context, id, grace string) (apiv1.CreatedAPIKey, error) {
	var out apiv1.CreatedAPIKey
	err := c.do(ctx, http.MethodPost, "/api-keys/"+url.PathEscape(id)+"/rotate", nil, apiv1.RotateAPIKey{Grace: grace}, &out)
	return out, err
}

// ListAPIKeys lists the caller's team's API keys.
func (c *Client) ListAPIKeys(ctx context.Context) ([]apiv1.APIKey, error) {
	var out apiv1.APIKeyList
	err := c.do(ctx, http.MethodGet, "/api-keys", nil, nil, &out)
	return out.Items, err
}

// RevokeAPIKey revokes an API key by ID.
func (c *Client) RevokeAPIKey(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/api-keys/"+url.PathEscape(id), nil, nil, nil)
}
