package appnode

// The inference API keys' fabric side: how a key is made, and the lookup
// proxy-inference calls (keyapi.ByHash).

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/inferproxy/keyapi"
	"github.com/cosmicac/cosmicac/internal/inferproxy/usageapi"
	"github.com/cosmicac/cosmicac/internal/store"
)

// NewAPIKey makes a key of team named name: the record to store and the
// secret to show once.
func NewAPIKey(name, team, createdBy string, now time.Time) (store.APIKey, string, error) {
	secret, err := keyapi.NewSecret()
	if err != nil {
		return store.APIKey{}, "", err
	}
	id := make([]byte, 8)
	if _, err := rand.Read(id); err != nil {
		return store.APIKey{}, "", fmt.Errorf("read random: %w", err)
	}
	return store.APIKey{ID: "key_" + hex.EncodeToString(id), Name: name, Team: team, CreatedBy: createdBy,
		Prefix: keyapi.SecretPrefix(secret), Hash: keyapi.HashKey(secret), CreatedAt: now.UTC()}, secret, nil
}

// KeyStore finds keys by the hash of their secret (store.APIKeys does).
type KeyStore interface {
	APIKeyByHash(ctx context.Context, hash []byte) (store.APIKey, error)
}

// toucher records a key's use (store.APIKeys does).
type toucher interface {
	TouchAPIKey(ctx context.Context, id string, at time.Time) error
}

// ServeKeyLookup registers keyapi.ByHash on r, answering from keys (the app-node's
// store). A proxy asks only for keys in use, so an answer records the
// key's use (lastUsedAt, once a minute) when keys can.
func ServeKeyLookup(r fabric.Registrar, keys KeyStore) {
	keyapi.ByHash.Handle(r, func(ctx context.Context, _ fabric.PublicKey, q keyapi.ByHashParams) (keyapi.ByHashReply, error) {
		if len(q.Hash) != 32 {
			return keyapi.ByHashReply{}, fabric.Errorf(fabric.CodeBadRequest, "hash: want 32 bytes (sha256), got %d", len(q.Hash))
		}
		k, err := keys.APIKeyByHash(ctx, q.Hash)
		switch {
		case errors.Is(err, cosmic.ErrNotFound):
			return keyapi.ByHashReply{}, nil
		case err != nil:
			return keyapi.ByHashReply{}, err
		}
		if t, ok := keys.(toucher); ok && time.Since(k.LastUsedAt) >= store.TouchEvery {
			_ = t.TouchAPIKey(ctx, k.ID, time.Now()) // best effort: the answer matters more
		}
		return keyapi.ByHashReply{Found: true, ID: k.ID, Name: k.Name, Team: k.Team, CreatedBy: k.CreatedBy,
			Prefix: k.Prefix, CreatedAt: k.CreatedAt, Models: k.Models, ExpiresAt: k.ExpiresAt,
			Previous: !bytes.Equal(q.Hash, k.Hash), PreviousExpiresAt: k.PreviousExpiresAt, TokensPerMinute: k.TokensPerMinute}, nil
	})
}

// ServeUsage registers usageapi.Record on r: each batch of usage a
// standalone proxy-inference measured goes into the store, once per batch
// ID. A bad batch (store.CheckUsageRows) is bad_request.
func ServeUsage(r fabric.Registrar, usage store.Usage) {
	usageapi.Record.Handle(r, func(ctx context.Context, _ fabric.PublicKey, p usageapi.RecordParams) (struct{}, error) {
		rows := make([]store.UsageRow, len(p.Rows))
		for i, r := range p.Rows {
			rows[i] = store.UsageRow{Start: r.Minute, Team: r.Team, KeyID: r.KeyID, JobID: r.JobID, Model: r.Model,
				Requests: r.Requests, PromptTokens: r.PromptTokens, CompletionTokens: r.CompletionTokens}
		}
		if err := usage.RecordUsage(ctx, p.Batch, rows); err != nil {
			if errors.Is(err, cosmic.ErrInvalid) {
				return struct{}{}, fabric.Errorf(fabric.CodeBadRequest, "%v", err)
			}
			return struct{}{}, err
		}
		return struct{}{}, nil
	})
}
