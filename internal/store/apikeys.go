package store

import (
	"context"
	"time"
)

// APIKey is an inference API key: it belongs to a team and reaches that
// team's models through proxy-inference. Only the hash of its secret is
// kept; the secret is shown once, when the key is made.
type APIKey struct {
	ID        string
	Name      string
	Team      string
	CreatedBy string // the user who made it
	// Prefix is the start of the secret, to recognise a key in a list.
	Prefix    string
	Hash      []byte    // sha256 of the secret
	CreatedAt time.Time // returned in UTC
}

// APIKeys keeps the inference API keys (the app-node writes them,
// proxy-inference reads them).
type APIKeys interface {
	// CreateAPIKey stores a key; an existing ID or hash is ErrConflict; an
	// empty ID, name or hash, or a team that does not exist, ErrInvalid.
	CreateAPIKey(ctx context.Context, k APIKey) error
	// ListAPIKeys lists a team's keys ("" lists every team's), oldest first.
	ListAPIKeys(ctx context.Context, team string) ([]APIKey, error)
	// GetAPIKey returns a key, or ErrNotFound.
	GetAPIKey(ctx context.Context, id string) (APIKey, error)
	// APIKeyByHash returns the key whose secret hashes to hash, or
	// ErrNotFound.
	APIKeyByHash(ctx context.Context, hash []byte) (APIKey, error)
	// DeleteAPIKey revokes a key, or returns ErrNotFound.
	DeleteAPIKey(ctx context.Context, id string) error
}
