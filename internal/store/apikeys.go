package store

import (
	"bytes"
	"context"
	"slices"
	"time"
)

// APIKey is an inference API key: it belongs to a team and reaches that
// team's models through proxy-inference. Only the hash of its secret is
// kept; the secret is shown once, when the key is made (or rotated).
type APIKey struct {
	ID        string
	Name      string
	Team      string
	CreatedBy string // the user who made it
	// Prefix is the start of the secret, to recognise a key in a list.
	Prefix    string
	Hash      []byte    // sha256 of the secret
	CreatedAt time.Time // returned in UTC

	// Models limits the key to these served model names; empty: every
	// model its team reaches.
	Models []string
	// ExpiresAt ends the key (zero: never).
	ExpiresAt time.Time
	// PreviousHash is the hash of the secret the last rotation replaced; it
	// still works until PreviousExpiresAt (the rotation's grace period).
	// Both are empty for a key never rotated.
	PreviousHash      []byte
	PreviousExpiresAt time.Time
	RotatedAt         time.Time // the last rotation (zero: never)
	// LastUsedAt is when the key was last seen at proxy-inference, to the
	// minute (zero: never).
	LastUsedAt time.Time
	// TokensPerMinute caps the prompt and completion tokens the key's
	// requests spend in a minute at each proxy-inference (0: no cap).
	TokensPerMinute int64
}

// ValidFor reports whether the secret that hashes to hash opens k at now:
// it is the key's secret, or the previous one within its grace period,
// and the key has not expired.
func (k APIKey) ValidFor(hash []byte, now time.Time) bool {
	if !k.ExpiresAt.IsZero() && !now.Before(k.ExpiresAt) {
		return false
	}
	if bytes.Equal(hash, k.Hash) {
		return true
	}
	return len(k.PreviousHash) > 0 && bytes.Equal(hash, k.PreviousHash) && now.Before(k.PreviousExpiresAt)
}

// Allows reports whether k may use the served model name.
func (k APIKey) Allows(model string) bool {
	return len(k.Models) == 0 || slices.Contains(k.Models, model)
}

// APIKeyRotation is a new secret for a key: Hash and Prefix replace the
// key's, whose old hash works until PreviousExpiresAt.
type APIKeyRotation struct {
	Hash              []byte
	Prefix            string
	PreviousExpiresAt time.Time
	At                time.Time
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
	// APIKeyByHash returns the key whose secret, or previous secret, hashes
	// to hash, or ErrNotFound. It does not check times: the caller asks
	// ValidFor at each use.
	APIKeyByHash(ctx context.Context, hash []byte) (APIKey, error)
	// RotateAPIKey gives key id a new secret in one transaction: its hash
	// becomes the previous one (replacing any earlier previous secret) and
	// r's hash the current one. It returns the key as written, ErrNotFound,
	// or ErrConflict when r's hash exists.
	RotateAPIKey(ctx context.Context, id string, r APIKeyRotation) (APIKey, error)
	// TouchAPIKey sets the key's LastUsedAt to at when it is a minute or
	// more older (so a busy key costs a write a minute at most). An
	// unknown key is not an error.
	TouchAPIKey(ctx context.Context, id string, at time.Time) error
	// DeleteAPIKey revokes a key, or returns ErrNotFound.
	DeleteAPIKey(ctx context.Context, id string) error
}

// TouchEvery is how stale LastUsedAt may be: TouchAPIKey writes only when
// it is older than that.
const TouchEvery = time.Minute
