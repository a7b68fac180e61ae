package appnode

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/cosmicac/cosmicac/internal/apiv1"
	"github.com/cosmicac/cosmicac/internal/authz"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/inferproxy/keyapi"
	"github.com/cosmicac/cosmicac/internal/store"
)

// APIKeyStore keeps the inference API keys (docs/inference.md, "API
// keys"); *sqlite.Store implements it. proxy-inference reads the same
// store.
type APIKeyStore interface {
	CreateAPIKey(ctx context.Context, k store.APIKey) error
	ListAPIKeys(ctx context.Context, team string) ([]store.APIKey, error)
	GetAPIKey(ctx context.Context, id string) (store.APIKey, error)
	RotateAPIKey(ctx context.Context, id string, r store.APIKeyRotation) (store.APIKey, error)
	DeleteAPIKey(ctx context.Context, id string) error
	KeyStore // proxy-inference's lookups (Deps.Fabric)
}

var _ APIKeyStore = store.APIKeys(nil)

// maxModelName bounds a served model name a key is limited to (its own
// name is checked as a token's, checkName).
const maxModelName = 256

// keyOut is the key as the API shows it at now: a previous secret whose
// grace has ended is not shown.
func keyOut(k store.APIKey, now time.Time) apiv1.APIKey {
	out := apiv1.APIKey{ID: k.ID, Name: k.Name, Team: k.Team, CreatedBy: k.CreatedBy, Prefix: k.Prefix, CreatedAt: k.CreatedAt,
		Models: k.Models, ExpiresAt: k.ExpiresAt, RotatedAt: k.RotatedAt, LastUsedAt: k.LastUsedAt, TokensPerMinute: k.TokensPerMinute}
	if now.Before(k.PreviousExpiresAt) {
		out.PreviousExpiresAt = k.PreviousExpiresAt
	}
	return out
}

// keyModels checks the served model names a key is limited to, dropping
// repeats.
func keyModels(models []string) ([]string, error) {
	if len(models) > apiv1.MaxKeyModels {
		return nil, invalid(&cosmic.FieldError{Field: "models", Message: fmt.Sprintf("at most %d models", apiv1.MaxKeyModels)})
	}
	var out []string
	var errs []*cosmic.FieldError
	for i, m := range models {
		switch {
		case strings.TrimSpace(m) == "":
			errs = append(errs, &cosmic.FieldError{Field: fmt.Sprintf("models[%d]", i), Message: "must not be empty"})
		case len(m) > maxModelName:
			errs = append(errs, &cosmic.FieldError{Field: fmt.Sprintf("models[%d]", i), Message: fmt.Sprintf("at most %d bytes", maxModelName)})
		case !slices.Contains(out, m):
			out = append(out, m)
		}
	}
	if len(errs) > 0 {
		return nil, invalid(errs...)
	}
	return out, nil
}

// keyExpiry is when a key made at now ends: expiresAt or now+expiresIn
// (zero: never).
func keyExpiry(in apiv1.CreateAPIKey, now time.Time) (time.Time, error) {
	switch {
	case !in.ExpiresAt.IsZero() && in.ExpiresIn != "":
		return time.Time{}, invalid(&cosmic.FieldError{Field: "expiresIn", Message: "give expiresAt or expiresIn, not both"})
	case in.ExpiresIn != "":
		d, err := time.ParseDuration(in.ExpiresIn)
		if err != nil || d <= 0 {
			return time.Time{}, invalid(&cosmic.FieldError{Field: "expiresIn", Message: "want a positive duration such as 720h"})
		}
		return now.Add(d).UTC(), nil
	case !in.ExpiresAt.IsZero() && !in.ExpiresAt.After(now):
		return time.Time{}, invalid(&cosmic.FieldError{Field: "expiresAt", Message: "is not in the future"})
	}
	return in.ExpiresAt.UTC(), nil
}

func (s *Server) keyStore() (APIKeyStore, error) {
	if s.apiKeys == nil {
		return nil, errorf(http.StatusNotImplemented, apiv1.CodeNotImplemented, "this app-node keeps no inference API keys")
	}
	return s.apiKeys, nil
}

func (s *Server) createAPIKey(w http.ResponseWriter, r *http.Request, c *caller) (any, error) {
	ks, err := s.keyStore()
	if err != nil {
		return nil, err
	}
	raw, err := s.readBody(w, r)
	if err != nil {
		return nil, err
	}
	var in apiv1.CreateAPIKey
	if err := decodeStrict(raw, &in); err != nil {
		return nil, err
	}
	in.Name = strings.TrimSpace(in.Name)
	if fe := checkName("name", in.Name); fe != nil {
		return nil, invalid(fe)
	}
	models, err := keyModels(in.Models)
	if err != nil {
		return nil, err
	}
	if in.TokensPerMinute < 0 || in.TokensPerMinute > apiv1.MaxKeyTokensPerMinute {
		return nil, invalid(&cosmic.FieldError{Field: "tokensPerMinute", Message: fmt.Sprintf("%d: want 0 (no cap) to %d", in.TokensPerMinute, int64(apiv1.MaxKeyTokensPerMinute))})
	}
	now := s.now()
	expires, err := keyExpiry(in, now)
	if err != nil {
		return nil, err
	}
	team := c.team
	if in.Team != "" && in.Team != team {
		if !c.inTeam(in.Team) {
			return nil, teamNotFound(in.Team)
		}
		if !c.can(in.Team, authz.APIKeysCreate) {
			return nil, forbidden(c, authz.APIKeysCreate, in.Team)
		}
		team = in.Team
	}
	c.auditTeam = team
	k, secret, err := NewAPIKey(in.Name, team, c.user.Name, now)
	if err != nil {
		return nil, fmt.Errorf("make API key: %w", err)
	}
	k.Models, k.ExpiresAt, k.TokensPerMinute = models, expires, in.TokensPerMinute
	if err := ks.CreateAPIKey(r.Context(), k); err != nil {
		return nil, err
	}
	c.auditTarget = k.ID
	s.log.Info("api key created", "id", k.ID, "team", team, "user", c.user.Name, "models", len(models), "expires_at", expires)
	return apiv1.CreatedAPIKey{APIKey: keyOut(k, now), Key: secret}, nil
}

func (s *Server) listAPIKeys(_ http.ResponseWriter, r *http.Request, c *caller) (any, error) {
	ks, err := s.keyStore()
	if err != nil {
		return nil, err
	}
	keys, err := ks.ListAPIKeys(r.Context(), c.team)
	if err != nil {
		return nil, err
	}
	out := apiv1.APIKeyList{Items: []apiv1.APIKey{}}
	now := s.now()
	for _, k := range keys {
		if c.managesKey(k) {
			out.Items = append(out.Items, keyOut(k, now))
		}
	}
	out.Total = len(out.Items)
	return out, nil
}

// managesKey reports whether the caller may see, rotate and revoke k: a
// team admin every key of the team (apikeys.manage), a member the keys
// they made (apikeys.create; docs/permissions.md, "API keys").
func (c *caller) managesKey(k store.APIKey) bool {
	return c.can(k.Team, authz.APIKeysManage) || c.can(k.Team, authz.APIKeysCreate) && k.CreatedBy == c.user.Name
}

// visibleKey returns the key of the path's {id} if the caller may act on
// it (managesKey); any other is not found, so that IDs do not leak.
func (s *Server) visibleKey(r *http.Request, c *caller, ks APIKeyStore) (store.APIKey, error) {
	id := r.PathValue("id")
	k, err := ks.GetAPIKey(r.Context(), id)
	if err == nil && !c.managesKey(k) {
		err = cosmic.ErrNotFound // another team's key, or another's: IDs do not leak
	}
	c.auditTeam, c.auditTarget = k.Team, id
	if errors.Is(err, cosmic.ErrNotFound) {
		return store.APIKey{}, errorf(http.StatusNotFound, apiv1.CodeNotFound, "API key %s not found", id)
	}
	return k, err
}

func (s *Server) rotateAPIKey(w http.ResponseWriter, r *http.Request, c *caller) (any, error) {
	ks, err := s.keyStore()
	if err != nil {
		return nil, err
	}
	raw, err := s.readBody(w, r)
	if err != nil {
		return nil, err
	}
	var in apiv1.RotateAPIKey
	if len(bytes.TrimSpace(raw)) > 0 {
		if err := decodeStrict(raw, &in); err != nil {
			return nil, err
		}
	}
	grace := apiv1.DefaultKeyGrace
	if in.Grace != "" {
		d, err := time.ParseDuration(in.Grace)
		if err != nil || d < 0 || d > apiv1.MaxKeyGrace {
			return nil, invalid(&cosmic.FieldError{Field: "grace", Message: fmt.Sprintf("want a duration from 0s to %v", apiv1.MaxKeyGrace)})
		}
		grace = d
	}
	k, err := s.visibleKey(r, c, ks)
	if err != nil {
		return nil, err
	}
	now := s.now()
	if !k.ExpiresAt.IsZero() && !now.Before(k.ExpiresAt) {
		return nil, errorf(http.StatusConflict, apiv1.CodeConflict, "API key %s expired at %s: make a new one", k.ID, k.ExpiresAt.Format(time.RFC3339))
	}
	secret, err := keyapi.NewSecret()
	if err != nil {
		return nil, fmt.Errorf("make API key secret: %w", err)
	}
	k, err = ks.RotateAPIKey(r.Context(), k.ID, store.APIKeyRotation{Hash: keyapi.HashKey(secret), Prefix: keyapi.SecretPrefix(secret),
		PreviousExpiresAt: now.Add(grace).UTC(), At: now.UTC()})
	if err != nil {
		return nil, err
	}
	s.log.Info("api key rotated", "id", k.ID, "team", k.Team, "user", c.user.Name, "grace_s", grace.Seconds())
	return apiv1.CreatedAPIKey{APIKey: keyOut(k, now), Key: secret}, nil
}

func (s *Server) revokeAPIKey(_ http.ResponseWriter, r *http.Request, c *caller) (any, error) {
	ks, err := s.keyStore()
	if err != nil {
		return nil, err
	}
	id := r.PathValue("id")
	k, err := s.visibleKey(r, c, ks)
	if err == nil {
		err = ks.DeleteAPIKey(r.Context(), id)
	}
	if err != nil {
		if errors.Is(err, cosmic.ErrNotFound) {
			return nil, errorf(http.StatusNotFound, apiv1.CodeNotFound, "API key %s not found", id)
		}
		return nil, err
	}
	s.log.Info("api key revoked", "id", id, "team", k.Team, "user", c.user.Name)
	return nil, nil
}
