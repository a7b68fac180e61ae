package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/store"
)

var _ store.APIKeys = (*Store)(nil)

// CreateAPIKey implements store.APIKeys.
func (s *Store) CreateAPIKey(ctx context.Context, k store.APIKey) error {
	if k.ID == "" || k.Name == "" || len(k.Hash) == 0 {
		return fmt.Errorf("create API key %q: needs an ID, a name and a hash: %w", k.ID, cosmic.ErrInvalid)
	}
	return s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "INSERT INTO api_keys (id, name, team, created_by, prefix, hash, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
			k.ID, k.Name, k.Team, k.CreatedBy, k.Prefix, k.Hash, nanos(k.CreatedAt))
		switch {
		case isUnique(err):
			return fmt.Errorf("create API key %s: its ID or secret already exists: %w", k.ID, cosmic.ErrConflict)
		case isForeignKey(err):
			return fmt.Errorf("create API key %s: team %q does not exist: %w", k.ID, k.Team, cosmic.ErrInvalid)
		case err != nil:
			return fmt.Errorf("create API key %s: %w", k.ID, err)
		}
		return nil
	})
}

const apiKeyColumns = "id, name, team, created_by, prefix, hash, created_at"

func scanAPIKey(sc interface{ Scan(...any) error }) (store.APIKey, error) {
	var k store.APIKey
	var created int64
	err := sc.Scan(&k.ID, &k.Name, &k.Team, &k.CreatedBy, &k.Prefix, &k.Hash, &created)
	k.CreatedAt = fromNanos(created)
	return k, err
}

// ListAPIKeys implements store.APIKeys.
func (s *Store) ListAPIKeys(ctx context.Context, team string) ([]store.APIKey, error) {
	q := "SELECT " + apiKeyColumns + " FROM api_keys ORDER BY created_at, id"
	args := []any{}
	if team != "" {
		q = "SELECT " + apiKeyColumns + " FROM api_keys WHERE team = ? ORDER BY created_at, id"
		args = append(args, team)
	}
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list API keys: %w", err)
	}
	defer rows.Close()
	out := []store.APIKey{}
	for rows.Next() {
		k, err := scanAPIKey(rows)
		if err != nil {
			return nil, fmt.Errorf("list API keys: %w", err)
		}
		out = append(out, k)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list API keys: %w", err)
	}
	return out, nil
}

// GetAPIKey implements store.APIKeys.
func (s *Store) GetAPIKey(ctx context.Context, id string) (store.APIKey, error) {
	k, err := scanAPIKey(s.r.QueryRowContext(ctx, "SELECT "+apiKeyColumns+" FROM api_keys WHERE id = ?", id))
	if errors.Is(err, sql.ErrNoRows) {
		return store.APIKey{}, fmt.Errorf("API key %s: %w", id, cosmic.ErrNotFound)
	}
	if err != nil {
		return store.APIKey{}, fmt.Errorf("get API key %s: %w", id, err)
	}
	return k, nil
}

// APIKeyByHash implements store.APIKeys.
func (s *Store) APIKeyByHash(ctx context.Context, hash []byte) (store.APIKey, error) {
	k, err := scanAPIKey(s.r.QueryRowContext(ctx, "SELECT "+apiKeyColumns+" FROM api_keys WHERE hash = ?", hash))
	if errors.Is(err, sql.ErrNoRows) {
		return store.APIKey{}, fmt.Errorf("API key: %w", cosmic.ErrNotFound)
	}
	if err != nil {
		return store.APIKey{}, fmt.Errorf("API key by hash: %w", err)
	}
	return k, nil
}

// DeleteAPIKey implements store.APIKeys.
func (s *Store) DeleteAPIKey(ctx context.Context, id string) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, "DELETE FROM api_keys WHERE id = ?", id)
		if err != nil {
			return fmt.Errorf("delete API key %s: %w", id, err)
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return errors.Join(fmt.Errorf("API key %s: %w", id, cosmic.ErrNotFound), err)
		}
		return nil
	})
}
