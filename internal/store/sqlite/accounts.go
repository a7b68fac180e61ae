package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/store"
)

// CreateTeam implements store.Accounts.
func (s *Store) CreateTeam(ctx context.Context, t cosmic.Team) error {
	if t.Name == "" {
		return fmt.Errorf("create team: empty name: %w", cosmic.ErrInvalid)
	}
	return s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "INSERT INTO teams (name) VALUES (?)", t.Name)
		if isUnique(err) {
			return fmt.Errorf("create team %s: already exists: %w", t.Name, cosmic.ErrConflict)
		}
		if err != nil {
			return fmt.Errorf("create team %s: %w", t.Name, err)
		}
		return nil
	})
}

// ListTeams implements store.Accounts.
func (s *Store) ListTeams(ctx context.Context) ([]cosmic.Team, error) {
	rows, err := s.r.QueryContext(ctx, "SELECT name FROM teams ORDER BY name")
	if err != nil {
		return nil, fmt.Errorf("list teams: %w", err)
	}
	defer rows.Close()
	out := []cosmic.Team{}
	for rows.Next() {
		var t cosmic.Team
		if err := rows.Scan(&t.Name); err != nil {
			return nil, fmt.Errorf("list teams: %w", err)
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list teams: %w", err)
	}
	return out, nil
}

// CreateUser implements store.Accounts.
func (s *Store) CreateUser(ctx context.Context, u cosmic.User) error {
	if u.Name == "" || !u.Role.Valid() {
		return fmt.Errorf("create user %q: needs a name and a role (admin, member, viewer), got role %q: %w", u.Name, u.Role, cosmic.ErrInvalid)
	}
	return s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "INSERT INTO users (name, team, role) VALUES (?, ?, ?)", u.Name, u.Team, string(u.Role))
		switch {
		case isUnique(err):
			return fmt.Errorf("create user %s: already exists: %w", u.Name, cosmic.ErrConflict)
		case isForeignKey(err):
			return fmt.Errorf("create user %s: team %q does not exist: %w", u.Name, u.Team, cosmic.ErrInvalid)
		case err != nil:
			return fmt.Errorf("create user %s: %w", u.Name, err)
		}
		return nil
	})
}

// GetUser implements store.Accounts.
func (s *Store) GetUser(ctx context.Context, name string) (cosmic.User, error) {
	var u cosmic.User
	err := s.r.QueryRowContext(ctx, "SELECT name, team, role FROM users WHERE name = ?", name).Scan(&u.Name, &u.Team, &u.Role)
	if errors.Is(err, sql.ErrNoRows) {
		return cosmic.User{}, fmt.Errorf("user %s: %w", name, cosmic.ErrNotFound)
	}
	if err != nil {
		return cosmic.User{}, fmt.Errorf("get user %s: %w", name, err)
	}
	return u, nil
}

// ListUsers implements store.Accounts.
func (s *Store) ListUsers(ctx context.Context) ([]cosmic.User, error) {
	rows, err := s.r.QueryContext(ctx, "SELECT name, team, role FROM users ORDER BY name")
	if err != nil {
		return nil, fmt.Errorf("list users: %w", err)
	}
	defer rows.Close()
	out := []cosmic.User{}
	for rows.Next() {
		var u cosmic.User
		if err := rows.Scan(&u.Name, &u.Team, &u.Role); err != nil {
			return nil, fmt.Errorf("list users: %w", err)
		}
		out = append(out, u)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list users: %w", err)
	}
	return out, nil
}

// CreateToken implements store.Accounts.
func (s *Store) CreateToken(ctx context.Context, t store.Token) error {
	if t.ID == "" || len(t.Hash) == 0 {
		return fmt.Errorf("create token %q: needs an ID and a hash: %w", t.ID, cosmic.ErrInvalid)
	}
	return s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "INSERT INTO tokens (id, name, user_name, hash, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?)",
			t.ID, t.Name, t.UserName, t.Hash, nanos(t.CreatedAt), nanos(t.ExpiresAt))
		switch {
		case isUnique(err):
			return fmt.Errorf("create token %s: its ID or secret already exists: %w", t.ID, cosmic.ErrConflict)
		case isForeignKey(err):
			return fmt.Errorf("create token %s: user %q does not exist: %w", t.ID, t.UserName, cosmic.ErrInvalid)
		case err != nil:
			return fmt.Errorf("create token %s: %w", t.ID, err)
		}
		return nil
	})
}

// UserByTokenHash implements store.Accounts.
func (s *Store) UserByTokenHash(ctx context.Context, hash []byte) (cosmic.User, store.Token, error) {
	var (
		u                cosmic.User
		t                store.Token
		created, expires int64
	)
	err := s.r.QueryRowContext(ctx, `SELECT u.name, u.team, u.role, t.id, t.name, t.user_name, t.hash, t.created_at, t.expires_at
		FROM tokens t JOIN users u ON u.name = t.user_name WHERE t.hash = ?`, hash).
		Scan(&u.Name, &u.Team, &u.Role, &t.ID, &t.Name, &t.UserName, &t.Hash, &created, &expires)
	if errors.Is(err, sql.ErrNoRows) {
		return cosmic.User{}, store.Token{}, fmt.Errorf("token: %w", cosmic.ErrNotFound)
	}
	if err != nil {
		return cosmic.User{}, store.Token{}, fmt.Errorf("user by token: %w", err)
	}
	t.CreatedAt, t.ExpiresAt = fromNanos(created), fromNanos(expires)
	if !t.ExpiresAt.IsZero() && !time.Now().Before(t.ExpiresAt) {
		return cosmic.User{}, store.Token{}, fmt.Errorf("token %s expired: %w", t.ID, cosmic.ErrNotFound)
	}
	return u, t, nil
}

// DeleteToken implements store.Accounts.
func (s *Store) DeleteToken(ctx context.Context, id string) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, "DELETE FROM tokens WHERE id = ?", id)
		if err != nil {
			return fmt.Errorf("delete token %s: %w", id, err)
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return errors.Join(fmt.Errorf("token %s: %w", id, cosmic.ErrNotFound), err)
		}
		return nil
	})
}
