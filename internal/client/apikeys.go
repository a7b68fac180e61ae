package client

import (
	"context"
	"net/http"
	"net/url"
	"time"
)

// APIKey is an inference API key as the API lists it (never its secret).
// The app-node serves these routes (see docs/inference.md, "API keys"):
//
//	POST   /api/v1/api-keys       {"name", "team"?} → 201 CreatedAPIKey (the key, once)
//	GET    /api/v1/api-keys       → 200 {"items": [APIKey], "total"}
//	DELETE /api/v1/api-keys/{id}  → 204
type APIKey struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	Team      string    `json:"team"`
	CreatedBy string    `json:"createdBy"`
	Prefix    string    `json:"prefix"` // the start of the secret, to recognise it
	CreatedAt time.Time `json:"createdAt"`
}

// CreateAPIKeyRequest is the body of POST /api/v1/api-keys. Team defaults
// to the caller's; only admins may name another.
type CreateAPIKeyRequest struct {
	Name string `json:"name"`
	Team string `json:"team,omitempty"`
}

// CreatedAPIKey is the answer of POST /api/v1/api-keys: the key and its
// secret, which is shown this once.
type CreatedAPIKey struct {
	APIKey
	Key string `json:"key"`
}

// APIKeyList is the answer of GET /api/v1/api-keys.
type APIKeyList struct {
	Items []APIKey `json:"items"`
	Total int      `json:"total"`
}

// CreateAPIKey makes an inference API key of the caller's team (or team).
func (c *Client) CreateAPIKey(ctx context.Context, name, team string) (CreatedAPIKey, error) {
	var out CreatedAPIKey
	err := c.do(ctx, http.MethodPost, "/api-keys", nil, CreateAPIKeyRequest{Name: name, Team: team}, &out)
	return out, err
}

// ListAPIKeys lists the caller's team's API keys.
func (c *Client) ListAPIKeys(ctx context.Context) ([]APIKey, error) {
	var out APIKeyList
	err := c.do(ctx, http.MethodGet, "/api-keys", nil, nil, &out)
	return out.Items, err
}

// RevokeAPIKey revokes an API key by ID.
func (c *Client) RevokeAPIKey(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/api-keys/"+url.PathEscape(id), nil, nil, nil)
}
