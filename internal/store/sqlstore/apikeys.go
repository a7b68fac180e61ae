package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/store"
)

// CreateAPIKey implements store.APIKeys.
func (s *Store) CreateAPIKey(ctx context.Context, k store.APIKey) error {
	if k.ID == "" || k.Name == "" || len(k.Hash) == 0 || k.TokensPerMinute < 0 {
		return fmt.Errorf("create API key %q: needs an ID, a name and a hash, and no negative limit: %w", k.ID, cosmic.ErrInvalid)
	}
	models, err := modelsJSON(k.Models)
	if err != nil {
		return fmt.Errorf("create API key %s: %w", k.ID, err)
	}
	return s.c.Write(ctx, func(tx *Tx) error {
		if err := tx.hashTaken(ctx, k.Hash); err != nil {
			return fmt.Errorf("create API key %s: %w", k.ID, err)
		}
		_, err := tx.q.Exec(ctx, "INSERT INTO api_keys (id, name, team, created_by, prefix, hash, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7)",
			k.ID, k.Name, k.Team, k.CreatedBy, k.Prefix, k.Hash, Nanos(k.CreatedAt))
		if err == nil {
			_, err = tx.q.Exec(ctx, "INSERT INTO api_key_limits (id, models, expires_at, tokens_per_minute) VALUES ($1, $2, $3, $4)",
				k.ID, models, Nanos(k.ExpiresAt), k.TokensPerMinute)
		}
		switch {
		case s.d.IsUnique(err):
			return fmt.Errorf("create API key %s: its ID or secret already exists: %w", k.ID, cosmic.ErrConflict)
		case s.d.IsForeignKey(err):
			return fmt.Errorf("create API key %s: team %q does not exist: %w", k.ID, k.Team, cosmic.ErrInvalid)
		case err != nil:
			return fmt.Errorf("create API key %s: %w", k.ID, s.d.wrap(err))
		}
		return nil
	})
}

// hashTaken refuses a hash that is another key's previous secret: it is as
// taken as a current one (each unique index covers one column).
func (tx *Tx) hashTaken(ctx context.Context, hash []byte) error {
	var taken bool
	if err := tx.q.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM api_key_limits WHERE previous_hash = $1)", hash).Scan(&taken); err != nil {
		return err
	}
	if taken {
		return fmt.Errorf("the secret already exists: %w", cosmic.ErrConflict)
	}
	return nil
}

// modelsJSON is the models column: a JSON array, [] for none.
func modelsJSON(models []string) (string, error) {
	if len(models) == 0 {
		return "[]", nil
	}
	b, err := json.Marshal(models)
	return string(b), err
}

// selectAPIKeys reads keys with their limits (a key without a limits row
// has none: coalesce).
const selectAPIKeys = `SELECT k.id, k.name, k.team, k.created_by, k.prefix, k.hash, k.created_at,
	coalesce(l.models, '[]'), coalesce(l.expires_at, 0), l.previous_hash, coalesce(l.previous_expires_at, 0),
	coalesce(l.rotated_at, 0), coalesce(l.last_used_at, 0), coalesce(l.tokens_per_minute, 0)
	FROM api_keys k LEFT JOIN api_key_limits l ON l.id = k.id `

func scanAPIKey(sc Row) (store.APIKey, error) {
	var k store.APIKey
	var created, expires, prevExpires, rotated, used int64
	var models string
	err := sc.Scan(&k.ID, &k.Name, &k.Team, &k.CreatedBy, &k.Prefix, &k.Hash, &created, &models, &expires, &k.PreviousHash, &prevExpires, &rotated, &used,
		&k.TokensPerMinute)
	if err != nil {
		return store.APIKey{}, err
	}
	if models != "" && models != "[]" {
		if err := json.Unmarshal([]byte(models), &k.Models); err != nil {
			return store.APIKey{}, fmt.Errorf("API key %s: models: %w", k.ID, err)
		}
	}
	k.CreatedAt, k.ExpiresAt, k.PreviousExpiresAt = FromNanos(created), FromNanos(expires), FromNanos(prevExpires)
	k.RotatedAt, k.LastUsedAt = FromNanos(rotated), FromNanos(used)
	return k, nil
}

// ListAPIKeys implements store.APIKeys.
func (s *Store) ListAPIKeys(ctx context.Context, team string) ([]store.APIKey, error) {
	q := selectAPIKeys + "ORDER BY k.created_at, k.id"
	var args []any
	if team != "" {
		q = selectAPIKeys + "WHERE k.team = $1 ORDER BY k.created_at, k.id"
		args = append(args, team)
	}
	return query(ctx, s.read.q, s.d, "list API keys", q, args, func(rows Rows) (store.APIKey, error) { return scanAPIKey(rows) })
}

// GetAPIKey implements store.APIKeys.
func (s *Store) GetAPIKey(ctx context.Context, id string) (store.APIKey, error) {
	return s.read.getAPIKey(ctx, id)
}

func (t *Tx) getAPIKey(ctx context.Context, id string) (store.APIKey, error) {
	k, err := scanAPIKey(t.q.QueryRow(ctx, selectAPIKeys+"WHERE k.id = $1", id))
	if errors.Is(err, sql.ErrNoRows) || t.d.unstorable(err) {
		return store.APIKey{}, fmt.Errorf("API key %s: %w", id, cosmic.ErrNotFound)
	}
	if err != nil {
		return store.APIKey{}, fmt.Errorf("get API key %s: %w", id, err)
	}
	return k, nil
}

// APIKeyByHash implements store.APIKeys.
func (s *Store) APIKeyByHash(ctx context.Context, hash []byte) (store.APIKey, error) {
	// Two lookups, each on its own unique index; the current hash first.
	k, err := scanAPIKey(s.read.q.QueryRow(ctx, selectAPIKeys+"WHERE k.hash = $1", hash))
	if errors.Is(err, sql.ErrNoRows) {
		k, err = scanAPIKey(s.read.q.QueryRow(ctx, selectAPIKeys+"WHERE l.previous_hash = $1", hash))
	}
	if errors.Is(err, sql.ErrNoRows) {
		return store.APIKey{}, fmt.Errorf("API key: %w", cosmic.ErrNotFound)
	}
	if err != nil {
		return store.APIKey{}, fmt.Errorf("API key by hash: %w", err)
	}
	return k, nil
}

// RotateAPIKey implements store.APIKeys.
func (s *Store) RotateAPIKey(ctx context.Context, id string, r store.APIKeyRotation) (store.APIKey, error) {
	if len(r.Hash) == 0 {
		return store.APIKey{}, fmt.Errorf("rotate API key %s: needs a hash: %w", id, cosmic.ErrInvalid)
	}
	var out store.APIKey
	err := s.c.Write(ctx, func(tx *Tx) error {
		old, err := tx.getAPIKey(ctx, id)
		if err != nil {
			return err
		}
		if err := tx.hashTaken(ctx, r.Hash); err != nil {
			return fmt.Errorf("rotate API key %s: %w", id, err)
		}
		_, err = tx.q.Exec(ctx, "UPDATE api_keys SET hash = $1, prefix = $2 WHERE id = $3", r.Hash, r.Prefix, id)
		if err == nil {
			_, err = tx.q.Exec(ctx, `INSERT INTO api_key_limits (id, previous_hash, previous_expires_at, rotated_at) VALUES ($1, $2, $3, $4)
				ON CONFLICT (id) DO UPDATE SET previous_hash = excluded.previous_hash,
					previous_expires_at = excluded.previous_expires_at, rotated_at = excluded.rotated_at`,
				id, old.Hash, Nanos(r.PreviousExpiresAt), Nanos(r.At))
		}
		if s.d.IsUnique(err) {
			return fmt.Errorf("rotate API key %s: the new secret already exists: %w", id, cosmic.ErrConflict)
		}
		if err != nil {
			return fmt.Errorf("rotate API key %s: %w", id, s.d.wrap(err))
		}
		out, err = tx.getAPIKey(ctx, id)
		return err
	})
	return out, err
}

// TouchAPIKey implements store.APIKeys.
func (s *Store) TouchAPIKey(ctx context.Context, id string, at time.Time) error {
	return s.c.Write(ctx, func(tx *Tx) error {
		if _, err := tx.q.Exec(ctx, `INSERT INTO api_key_limits (id, last_used_at) SELECT id, $1`+s.d.Bigint+` FROM api_keys WHERE id = $2
			ON CONFLICT (id) DO UPDATE SET last_used_at = excluded.last_used_at WHERE api_key_limits.last_used_at <= $3`+s.d.Bigint,
			Nanos(at), id, Nanos(at.Add(-store.TouchEvery))); err != nil && !s.d.unstorable(err) {
			return fmt.Errorf("touch API key %s: %w", id, err)
		}
		return nil
	})
}

// DeleteAPIKey implements store.APIKeys.
func (s *Store) DeleteAPIKey(ctx context.Context, id string) error {
	return s.c.Write(ctx, func(tx *Tx) error {
		res, err := tx.q.Exec(ctx, "DELETE FROM api_keys WHERE id = $1", id)
		if err != nil && !s.d.unstorable(err) {
			return fmt.Errorf("delete API key %s: %w", id, err)
		}
		missing := fmt.Errorf("API key %s: %w", id, cosmic.ErrNotFound)
		if err != nil {
			return missing
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return errors.Join(missing, err)
		}
		return nil
	})
}
