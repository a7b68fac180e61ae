package appnode

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/cosmicac/cosmicac/internal/apiv1"
	"github.com/cosmicac/cosmicac/internal/authz"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/inferproxy"
	"github.com/cosmicac/cosmicac/internal/store"
)

// APIKeyStore keeps the inference API keys (docs/inference.md, "API
// keys"); *sqlite.Store implements it. proxy-inference reads the same
// store.
type APIKeyStore interface {
	CreateAPIKey(ctx context.Context, k store.APIKey) error
	ListAPIKeys(ctx context.Context, team string) ([]store.APIKey, error)
	GetAPIKey(ctx context.Context, id string) (store.APIKey, error)
	DeleteAPIKey(ctx context.Context, id string) error
}

var _ APIKeyStore = store.APIKeys(nil)

// SetAPIKeys installs the API-key store (call it before serving). Without
// one the API-key routes answer 501.
func (s *Server) SetAPIKeys(k APIKeyStore) { s.apiKeys = k }

// maxKeyName bounds an API key's name.
const maxKeyName = 128

func keyOut(k store.APIKey) apiv1.APIKey {
	return apiv1.APIKey{ID: k.ID, Name: k.Name, Team: k.Team, CreatedBy: k.CreatedBy, Prefix: k.Prefix, CreatedAt: k.CreatedAt}
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
	switch {
	case in.Name == "":
		return nil, invalid(&cosmic.FieldError{Field: "name", Message: "is required"})
	case utf8.RuneCountInString(in.Name) > maxKeyName:
		return nil, invalid(&cosmic.FieldError{Field: "name", Message: fmt.Sprintf("at most %d characters", maxKeyName)})
	}
	team := c.team
	if in.Team != "" && in.Team != team {
		if !c.inTeam(in.Team) {
			return nil, teamNotFound(in.Team)
		}
		if !c.can(in.Team, authz.APIKeysManage) {
			return nil, forbidden(c, authz.APIKeysManage, in.Team)
		}
		team = in.Team
	}
	c.auditTeam = team
	k, secret, err := inferproxy.NewAPIKey(in.Name, team, c.user.Name, s.now())
	if err != nil {
		return nil, fmt.Errorf("make API key: %w", err)
	}
	if err := ks.CreateAPIKey(r.Context(), k); err != nil {
		return nil, err
	}
	c.auditTarget = k.ID
	s.log.Info("api key created", "id", k.ID, "team", team, "user", c.user.Name)
	return apiv1.CreatedAPIKey{APIKey: keyOut(k), Key: secret}, nil
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
	out := apiv1.APIKeyList{Items: make([]apiv1.APIKey, len(keys)), Total: len(keys)}
	for i, k := range keys {
		out.Items[i] = keyOut(k)
	}
	return out, nil
}

func (s *Server) revokeAPIKey(_ http.ResponseWriter, r *http.Request, c *caller) (any, error) {
	ks, err := s.keyStore()
	if err != nil {
		return nil, err
	}
	id := r.PathValue("id")
	k, err := ks.GetAPIKey(r.Context(), id)
	if err == nil && !c.can(k.Team, authz.APIKeysManage) {
		err = cosmic.ErrNotFound // another team's key: IDs do not leak
	}
	c.auditTeam, c.auditTarget = k.Team, id
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
