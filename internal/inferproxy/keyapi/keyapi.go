// Package keyapi is the contract of the inference API keys between their
// keeper, the app-node, and their user, proxy-inference: a key's format
// (its secret, prefix and stored hash) and the app-node's fabric method
// that resolves a key by the hash of its secret (ByHash), with its server
// (Serve) and its params and reply.
//
// Importers: internal/appnode (makes keys), internal/inferproxy (resolves
// them), the wiring that serves ByHash on the app-node's node. It imports
// the domain, the store's types and the fabric only.
package keyapi

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/store"
)

// KeyPrefix starts every API key secret.
const KeyPrefix = "sk-cac-"

// NewAPIKey makes a key of team named name: the record to store and the
// secret to show once.
func NewAPIKey(name, team, createdBy string, now time.Time) (store.APIKey, string, error) {
	secret, err := NewSecret()
	if err != nil {
		return store.APIKey{}, "", err
	}
	id := make([]byte, 8)
	if _, err := rand.Read(id); err != nil {
		return store.APIKey{}, "", fmt.Errorf("read random: %w", err)
	}
	return store.APIKey{ID: "key_" + hex.EncodeToString(id), Name: name, Team: team, CreatedBy: createdBy,
		Prefix: SecretPrefix(secret), Hash: HashKey(secret), CreatedAt: now.UTC()}, secret, nil
}

// NewSecret makes a key's secret: KeyPrefix and 32 random bytes.
func NewSecret() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("read random: %w", err)
	}
	return KeyPrefix + base64.RawURLEncoding.EncodeToString(b), nil
}

// SecretPrefix is the start of a secret that a list shows.
func SecretPrefix(secret string) string { return secret[:len(KeyPrefix)+4] }

// HashKey is the hash under which a key's secret is stored (sha256).
func HashKey(secret string) []byte {
	h := sha256.Sum256([]byte(secret))
	return h[:]
}

// ByHash is the app-node's fabric call (read-only; the trust graph lets
// only proxy-inference and operators call it) that finds an inference API
// key by the hash of its secret: how a standalone proxy-inference checks
// keys without opening the accounts database.
var ByHash = fabric.Method[ByHashParams, ByHashReply]{Name: "inference.apiKeyByHash"}

// ByHashParams asks for the key whose secret hashes to Hash (sha256, 32
// bytes; base64 in JSON).
type ByHashParams struct {
	Hash []byte `json:"hash"`
}

// ByHashReply is the key, without its hashes; Found false when no key has
// that hash (an unknown or revoked key). An answer, not an error, so that
// a peer without the method (not_found) is never taken for "no such key".
// Previous says the hash is the key's previous secret, which works until
// PreviousExpiresAt; the proxy checks the times at each use.
type ByHashReply struct {
	Found             bool      `json:"found"`
	ID                string    `json:"id,omitempty"`
	Name              string    `json:"name,omitempty"`
	Team              string    `json:"team,omitempty"`
	CreatedBy         string    `json:"createdBy,omitempty"`
	Prefix            string    `json:"prefix,omitempty"`
	CreatedAt         time.Time `json:"createdAt,omitzero"`
	Models            []string  `json:"models,omitempty"`
	ExpiresAt         time.Time `json:"expiresAt,omitzero"`
	Previous          bool      `json:"previous,omitempty"`
	PreviousExpiresAt time.Time `json:"previousExpiresAt,omitzero"`
}

// Store finds keys by the hash of their secret (store.APIKeys does).
type Store interface {
	APIKeyByHash(ctx context.Context, hash []byte) (store.APIKey, error)
}

// toucher records a key's use (store.APIKeys does).
type toucher interface {
	TouchAPIKey(ctx context.Context, id string, at time.Time) error
}

// Serve registers ByHash on r, answering from keys (the app-node's
// store). A proxy asks only for keys in use, so an answer records the
// key's use (lastUsedAt, once a minute) when keys can.
func Serve(r fabric.Registrar, keys Store) {
	ByHash.Handle(r, func(ctx context.Context, _ fabric.PublicKey, q ByHashParams) (ByHashReply, error) {
		if len(q.Hash) != 32 {
			return ByHashReply{}, fabric.Errorf(fabric.CodeBadRequest, "hash: want 32 bytes (sha256), got %d", len(q.Hash))
		}
		k, err := keys.APIKeyByHash(ctx, q.Hash)
		switch {
		case errors.Is(err, cosmic.ErrNotFound):
			return ByHashReply{}, nil
		case err != nil:
			return ByHashReply{}, err
		}
		if t, ok := keys.(toucher); ok && time.Since(k.LastUsedAt) >= store.TouchEvery {
			_ = t.TouchAPIKey(ctx, k.ID, time.Now()) // best effort: the answer matters more
		}
		return ByHashReply{Found: true, ID: k.ID, Name: k.Name, Team: k.Team, CreatedBy: k.CreatedBy,
			Prefix: k.Prefix, CreatedAt: k.CreatedAt, Models: k.Models, ExpiresAt: k.ExpiresAt,
			Previous: !bytes.Equal(q.Hash, k.Hash), PreviousExpiresAt: k.PreviousExpiresAt}, nil
	})
}
