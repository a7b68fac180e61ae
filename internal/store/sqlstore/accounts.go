package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/store"
)

// CreateTeam implements store.Accounts.
func (s *Store) CreateTeam(ctx context.Context, t cosmic.Team) error {
	if !cosmic.ValidAccountName(t.Name) {
		return fmt.Errorf("create team %q: not a valid name: %w", t.Name, cosmic.ErrInvalid)
	}
	return s.c.Write(ctx, func(tx *Tx) error {
		_, err := tx.q.Exec(ctx, "INSERT INTO teams (name, created_at) VALUES ($1, $2)", t.Name, Nanos(t.CreatedAt))
		if s.d.IsUnique(err) {
			return fmt.Errorf("create team %s: already exists: %w", t.Name, cosmic.ErrConflict)
		}
		if err != nil {
			return fmt.Errorf("create team %s: %w", t.Name, s.d.wrap(err))
		}
		return nil
	})
}

// GetTeam implements store.Accounts.
func (s *Store) GetTeam(ctx context.Context, name string) (cosmic.Team, error) {
	var (
		t       cosmic.Team
		created int64
	)
	err := s.read.q.QueryRow(ctx, "SELECT name, created_at FROM teams WHERE name = $1", name).Scan(&t.Name, &created)
	if errors.Is(err, sql.ErrNoRows) || s.d.unstorable(err) {
		return cosmic.Team{}, notFound("team", name)
	}
	if err != nil {
		return cosmic.Team{}, fmt.Errorf("get team %s: %w", name, err)
	}
	t.CreatedAt = FromNanos(created)
	return t, nil
}

// ListTeams implements store.Accounts.
func (s *Store) ListTeams(ctx context.Context) ([]cosmic.Team, error) {
	return query(ctx, s.read.q, s.d, "list teams", "SELECT name, created_at FROM teams ORDER BY name", nil, func(rows Rows) (cosmic.Team, error) {
		var (
			t       cosmic.Team
			created int64
		)
		err := rows.Scan(&t.Name, &created)
		t.CreatedAt = FromNanos(created)
		return t, err
	})
}

// DeleteTeam implements store.Accounts.
func (s *Store) DeleteTeam(ctx context.Context, name string) error {
	return s.c.Write(ctx, func(tx *Tx) error {
		var has bool
		if err := tx.q.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM jobs WHERE team = $1)", name).Scan(&has); err != nil {
			return fmt.Errorf("delete team %s: %w", name, s.d.wrap(err))
		}
		if has {
			return fmt.Errorf("delete team %s: it still has jobs; delete them first: %w", name, cosmic.ErrConflict)
		}
		if _, err := tx.q.Exec(ctx, "DELETE FROM tokens WHERE team = $1", name); err != nil {
			return fmt.Errorf("delete team %s: %w", name, err)
		}
		res, err := tx.q.Exec(ctx, "DELETE FROM teams WHERE name = $1", name)
		return affected(res, err, "team", name, s.d)
	})
}

// CreateUser implements store.Accounts.
func (s *Store) CreateUser(ctx context.Context, u cosmic.User, passwordHash string) error {
	if !cosmic.ValidAccountName(u.Name) {
		return fmt.Errorf("create user %q: not a valid name: %w", u.Name, cosmic.ErrInvalid)
	}
	return s.c.Write(ctx, func(tx *Tx) error {
		_, err := tx.q.Exec(ctx, "INSERT INTO users (name, platform_admin, password, created_at) VALUES ($1, $2, $3, $4)",
			u.Name, u.PlatformAdmin, passwordHash, Nanos(u.CreatedAt))
		switch {
		case s.d.IsUnique(err):
			return fmt.Errorf("create user %s: already exists: %w", u.Name, cosmic.ErrConflict)
		case err != nil:
			return fmt.Errorf("create user %s: %w", u.Name, s.d.wrap(err))
		}
		return nil
	})
}

const userCols = "name, platform_admin, password <> '', created_at"

func scanUser(sc Row) (cosmic.User, error) {
	var (
		u       cosmic.User
		created int64
	)
	err := sc.Scan(&u.Name, &u.PlatformAdmin, &u.HasPassword, &created)
	u.CreatedAt = FromNanos(created)
	return u, err
}

// GetUser implements store.Accounts.
func (s *Store) GetUser(ctx context.Context, name string) (cosmic.User, error) {
	u, err := scanUser(s.read.q.QueryRow(ctx, "SELECT "+userCols+" FROM users WHERE name = $1", name))
	if errors.Is(err, sql.ErrNoRows) || s.d.unstorable(err) {
		return cosmic.User{}, notFound("user", name)
	}
	if err != nil {
		return cosmic.User{}, fmt.Errorf("get user %s: %w", name, err)
	}
	return u, nil
}

// ListUsers implements store.Accounts.
func (s *Store) ListUsers(ctx context.Context) ([]cosmic.User, error) {
	return query(ctx, s.read.q, s.d, "list users", "SELECT "+userCols+" FROM users ORDER BY name", nil, func(rows Rows) (cosmic.User, error) {
		return scanUser(rows)
	})
}

// DeleteUser implements store.Accounts.
func (s *Store) DeleteUser(ctx context.Context, name string) error {
	return s.c.Write(ctx, func(tx *Tx) error {
		res, err := tx.q.Exec(ctx, "DELETE FROM users WHERE name = $1", name)
		return affected(res, err, "user", name, s.d)
	})
}

// SetPlatformAdmin implements store.Accounts. Two transactions taking the
// flag from the last two admins at once cannot both commit (SQLite's single
// writer, PostgreSQL's SERIALIZABLE).
func (s *Store) SetPlatformAdmin(ctx context.Context, name string, admin bool) error {
	return s.c.Write(ctx, func(tx *Tx) error {
		if !admin {
			var others int
			if err := tx.q.QueryRow(ctx, "SELECT count(*) FROM users WHERE platform_admin AND name <> $1", name).Scan(&others); err != nil {
				return fmt.Errorf("set platform admin %s: %w", name, s.d.wrap(err))
			}
			if others == 0 {
				var is bool
				err := tx.q.QueryRow(ctx, "SELECT platform_admin FROM users WHERE name = $1", name).Scan(&is)
				if err == nil && is {
					return fmt.Errorf("user %s is the last platform admin: make another first: %w", name, cosmic.ErrConflict)
				}
			}
		}
		res, err := tx.q.Exec(ctx, "UPDATE users SET platform_admin = $1 WHERE name = $2", admin, name)
		return affected(res, err, "user", name, s.d)
	})
}

// PasswordHash implements store.Accounts.
func (s *Store) PasswordHash(ctx context.Context, name string) (string, error) {
	var h string
	err := s.read.q.QueryRow(ctx, "SELECT password FROM users WHERE name = $1", name).Scan(&h)
	if errors.Is(err, sql.ErrNoRows) || s.d.unstorable(err) {
		return "", notFound("user", name)
	}
	if err != nil {
		return "", fmt.Errorf("password of %s: %w", name, err)
	}
	return h, nil
}

// SetPassword implements store.Accounts.
func (s *Store) SetPassword(ctx context.Context, name, hash string) error {
	return s.c.Write(ctx, func(tx *Tx) error {
		res, err := tx.q.Exec(ctx, "UPDATE users SET password = $1 WHERE name = $2", hash, name)
		if err := affected(res, err, "user", name, s.d); err != nil {
			return err
		}
		if _, err := tx.q.Exec(ctx, "DELETE FROM tokens WHERE user_name = $1 AND kind = $2", name, string(store.KindSession)); err != nil {
			return fmt.Errorf("end sessions of %s: %w", name, err)
		}
		return nil
	})
}

// PutMember implements store.Accounts.
func (s *Store) PutMember(ctx context.Context, m cosmic.Member) error {
	if !m.Role.Valid() {
		return fmt.Errorf("member %s of %s: role %q is not owner, admin, member or viewer: %w", m.User, m.Team, m.Role, cosmic.ErrInvalid)
	}
	return s.c.Write(ctx, func(tx *Tx) error {
		_, err := tx.q.Exec(ctx, `INSERT INTO members (team, user_name, role) VALUES ($1, $2, $3)
			ON CONFLICT (team, user_name) DO UPDATE SET role = excluded.role`, m.Team, m.User, string(m.Role))
		switch {
		case s.d.IsForeignKey(err):
			return fmt.Errorf("member %s of %s: no such user or team: %w", m.User, m.Team, cosmic.ErrInvalid)
		case err != nil:
			return fmt.Errorf("member %s of %s: %w", m.User, m.Team, s.d.wrap(err))
		}
		return nil
	})
}

// DeleteMember implements store.Accounts.
func (s *Store) DeleteMember(ctx context.Context, team, user string) error {
	return s.c.Write(ctx, func(tx *Tx) error {
		res, err := tx.q.Exec(ctx, "DELETE FROM members WHERE team = $1 AND user_name = $2", team, user)
		if err := affected(res, err, "member", user+" of team "+team, s.d); err != nil {
			return err
		}
		if _, err := tx.q.Exec(ctx, "DELETE FROM tokens WHERE team = $1 AND user_name = $2", team, user); err != nil {
			return fmt.Errorf("remove %s from %s: %w", user, team, err)
		}
		return nil
	})
}

func scanMember(rows Rows) (cosmic.Member, error) {
	var m cosmic.Member
	var role string
	err := rows.Scan(&m.Team, &m.User, &role)
	m.Role = cosmic.Role(role)
	return m, err
}

// Members implements store.Accounts.
func (s *Store) Members(ctx context.Context, team string) ([]cosmic.Member, error) {
	return query(ctx, s.read.q, s.d, "members of "+team, "SELECT team, user_name, role FROM members WHERE team = $1 ORDER BY user_name", []any{team}, scanMember)
}

// Memberships implements store.Accounts.
func (s *Store) Memberships(ctx context.Context, user string) ([]cosmic.Member, error) {
	return query(ctx, s.read.q, s.d, "teams of "+user, "SELECT team, user_name, role FROM members WHERE user_name = $1 ORDER BY team", []any{user}, scanMember)
}

// CreateToken implements store.Accounts.
func (s *Store) CreateToken(ctx context.Context, t store.Token) error {
	if t.ID == "" || len(t.Hash) == 0 {
		return fmt.Errorf("create token %q: needs an ID and a hash: %w", t.ID, cosmic.ErrInvalid)
	}
	if t.Kind == "" {
		t.Kind = store.KindToken
	}
	sel := ""
	if len(t.Selector) > 0 {
		b, err := json.Marshal(t.Selector)
		if err != nil {
			return fmt.Errorf("create token %s: %w", t.ID, err)
		}
		sel = string(b)
	}
	return s.c.Write(ctx, func(tx *Tx) error {
		_, err := tx.q.Exec(ctx, `INSERT INTO tokens (id, kind, name, user_name, hash, team, scope, selector, csrf, created_at, expires_at, last_used_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`,
			t.ID, string(t.Kind), t.Name, t.UserName, t.Hash, t.Team, t.Scope, sel, t.CSRF, Nanos(t.CreatedAt), Nanos(t.ExpiresAt), Nanos(t.LastUsedAt))
		switch {
		case s.d.IsUnique(err):
			return fmt.Errorf("create token %s: its ID or secret already exists: %w", t.ID, cosmic.ErrConflict)
		case s.d.IsForeignKey(err):
			return fmt.Errorf("create token %s: user %q does not exist: %w", t.ID, t.UserName, cosmic.ErrInvalid)
		case err != nil:
			return fmt.Errorf("create token %s: %w", t.ID, s.d.wrap(err))
		}
		return nil
	})
}

const tokenCols = "t.id, t.kind, t.name, t.user_name, t.hash, t.team, t.scope, t.selector, t.csrf, t.created_at, t.expires_at, t.last_used_at"

func scanToken(dst []any) (func() (store.Token, error), []any) {
	var (
		t                      store.Token
		kind, sel              string
		created, expires, used int64
	)
	ptrs := append([]any{&t.ID, &kind, &t.Name, &t.UserName, &t.Hash, &t.Team, &t.Scope, &sel, &t.CSRF, &created, &expires, &used}, dst...)
	return func() (store.Token, error) {
		t.Kind = store.TokenKind(kind)
		t.CreatedAt, t.ExpiresAt, t.LastUsedAt = FromNanos(created), FromNanos(expires), FromNanos(used)
		if sel != "" {
			if err := json.Unmarshal([]byte(sel), &t.Selector); err != nil {
				return store.Token{}, fmt.Errorf("token %s: selector: %w", t.ID, err)
			}
		}
		return t, nil
	}, ptrs
}

// TokenByHash implements store.Accounts.
func (s *Store) TokenByHash(ctx context.Context, hash []byte, now time.Time) (store.Token, cosmic.User, error) {
	t, u, _, err := s.Credential(ctx, hash, now)
	return t, u, err
}

// CredentialQuery reads a token, its user and the user's teams.
func (d *Dialect) CredentialQuery() string {
	return "SELECT " + tokenCols + ", u.name, u.platform_admin, u.password <> '', u.created_at, " +
		"(SELECT " + d.StringAgg + "(m.team || '=' || m.role, ',') FROM members m WHERE m.user_name = u.name) " +
		"FROM tokens t JOIN users u ON u.name = t.user_name WHERE t.hash = $1"
}

// Credential implements store.Accounts: one read, the memberships folded
// into the token's row (team and user names hold no ',' nor '=').
func (s *Store) Credential(ctx context.Context, hash []byte, now time.Time) (store.Token, cosmic.User, []cosmic.Member, error) {
	var (
		u       cosmic.User
		ucreate int64
		teams   *string
	)
	finish, ptrs := scanToken([]any{&u.Name, &u.PlatformAdmin, &u.HasPassword, &ucreate, &teams})
	var row Row
	if s.c.Credential != nil {
		row = s.c.Credential(ctx, hash)
	} else {
		row = s.read.q.QueryRow(ctx, s.d.CredentialQuery(), hash)
	}
	err := row.Scan(ptrs...)
	if errors.Is(err, sql.ErrNoRows) {
		return store.Token{}, cosmic.User{}, nil, fmt.Errorf("token: %w", cosmic.ErrNotFound)
	}
	if err != nil {
		return store.Token{}, cosmic.User{}, nil, fmt.Errorf("token by hash: %w", err)
	}
	t, err := finish()
	if err != nil {
		return store.Token{}, cosmic.User{}, nil, err
	}
	u.CreatedAt = FromNanos(ucreate)
	if !t.ExpiresAt.IsZero() && !now.Before(t.ExpiresAt) {
		return store.Token{}, cosmic.User{}, nil, fmt.Errorf("token %s expired: %w", t.ID, cosmic.ErrNotFound)
	}
	var ms []cosmic.Member
	if teams != nil && *teams != "" {
		for _, tr := range strings.Split(*teams, ",") {
			team, role, _ := strings.Cut(tr, "=")
			ms = append(ms, cosmic.Member{Team: team, User: u.Name, Role: cosmic.Role(role)})
		}
		slices.SortFunc(ms, func(a, b cosmic.Member) int { return strings.Compare(a.Team, b.Team) })
	}
	return t, u, ms, nil
}

// ListTokens implements store.Accounts.
func (s *Store) ListTokens(ctx context.Context, user string, kind store.TokenKind) ([]store.Token, error) {
	return query(ctx, s.read.q, s.d, "tokens of "+user, "SELECT "+tokenCols+" FROM tokens t WHERE t.user_name = $1 AND t.kind = $2 ORDER BY t.created_at, t.id",
		[]any{user, string(kind)}, func(rows Rows) (store.Token, error) {
			finish, ptrs := scanToken(nil)
			if err := rows.Scan(ptrs...); err != nil {
				return store.Token{}, err
			}
			return finish()
		})
}

// GetToken implements store.Accounts.
func (s *Store) GetToken(ctx context.Context, id string) (store.Token, error) {
	finish, ptrs := scanToken(nil)
	err := s.read.q.QueryRow(ctx, "SELECT "+tokenCols+" FROM tokens t WHERE t.id = $1", id).Scan(ptrs...)
	if errors.Is(err, sql.ErrNoRows) || s.d.unstorable(err) {
		return store.Token{}, notFound("token", id)
	}
	if err != nil {
		return store.Token{}, fmt.Errorf("get token %s: %w", id, err)
	}
	return finish()
}

// TouchToken implements store.Accounts.
func (s *Store) TouchToken(ctx context.Context, id string, t time.Time) error {
	return s.c.Write(ctx, func(tx *Tx) error {
		if _, err := tx.q.Exec(ctx, "UPDATE tokens SET last_used_at = $1 WHERE id = $2 AND last_used_at < $1", Nanos(t), id); err != nil {
			return fmt.Errorf("touch token %s: %w", id, s.d.wrap(err))
		}
		return nil
	})
}

// DeleteToken implements store.Accounts.
func (s *Store) DeleteToken(ctx context.Context, id string) error {
	return s.c.Write(ctx, func(tx *Tx) error {
		res, err := tx.q.Exec(ctx, "DELETE FROM tokens WHERE id = $1", id)
		return affected(res, err, "token", id, s.d)
	})
}

// AppendAudit implements store.Accounts.
func (s *Store) AppendAudit(ctx context.Context, r store.AuditRecord) error {
	return s.c.Write(ctx, func(tx *Tx) error {
		_, err := tx.q.Exec(ctx, "INSERT INTO audit (at, user_name, team, action, target, remote, status, detail) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
			Nanos(r.At), r.User, r.Team, r.Action, r.Target, r.Remote, r.Status, r.Detail)
		if err != nil {
			return fmt.Errorf("append audit: %w", s.d.wrap(err))
		}
		return nil
	})
}

// ListAudit implements store.Accounts.
func (s *Store) ListAudit(ctx context.Context, q store.AuditQuery) ([]store.AuditRecord, bool, error) {
	if q.Limit == 0 {
		q.Limit = store.DefaultAuditLimit
	}
	if q.Limit < 0 || q.Limit > store.MaxAuditLimit {
		return nil, false, fmt.Errorf("list audit: limit must be between 1 and %d: %w", store.MaxAuditLimit, cosmic.ErrInvalid)
	}
	var (
		where []string
		p     Params
	)
	if q.User != "" {
		where = append(where, "user_name = "+p.Add(q.User))
	}
	if q.Team != "" {
		where = append(where, "team = "+p.Add(q.Team))
	}
	if q.Action != "" {
		where = append(where, "action = "+p.Add(q.Action))
	}
	if !q.Since.IsZero() {
		where = append(where, "at >= "+p.Add(Nanos(q.Since)))
	}
	if !q.Until.IsZero() {
		where = append(where, "at < "+p.Add(Nanos(q.Until)))
	}
	if q.Before > 0 {
		where = append(where, "id < "+p.Add(q.Before))
	}
	sqlq := "SELECT id, at, user_name, team, action, target, remote, status, detail FROM audit"
	if len(where) > 0 {
		sqlq += " WHERE " + strings.Join(where, " AND ")
	}
	sqlq += " ORDER BY id DESC LIMIT " + p.Add(q.Limit+1)
	out, err := query(ctx, s.read.q, s.d, "list audit", sqlq, p, func(rows Rows) (store.AuditRecord, error) {
		var (
			r  store.AuditRecord
			at int64
		)
		err := rows.Scan(&r.ID, &at, &r.User, &r.Team, &r.Action, &r.Target, &r.Remote, &r.Status, &r.Detail)
		r.At = FromNanos(at)
		return r, err
	})
	if err != nil {
		return nil, false, err
	}
	more := len(out) > q.Limit
	if more {
		out = out[:q.Limit]
	}
	return out, more, nil
}

// PruneAudit implements store.Accounts.
func (s *Store) PruneAudit(ctx context.Context, before time.Time) (int, error) {
	var n int64
	err := s.c.Write(ctx, func(tx *Tx) error {
		res, err := tx.q.Exec(ctx, "DELETE FROM audit WHERE at < $1", Nanos(before))
		if err != nil {
			return fmt.Errorf("prune audit: %w", err)
		}
		n, err = res.RowsAffected()
		return err
	})
	return int(n), err
}
