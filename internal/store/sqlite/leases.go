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

// The leases are real in SQLite too: a write transaction begins IMMEDIATE,
// so CheckLease and a takeover never interleave, also between processes
// sharing the file. The clock is this process's.

var _ store.Leases = (*Store)(nil)

// AcquireLease implements store.Leases.
func (s *Store) AcquireLease(ctx context.Context, name, holder string, ttl time.Duration) (store.Lease, error) {
	if err := store.ValidLease(name, holder, ttl); err != nil {
		return store.Lease{}, fmt.Errorf("acquire lease: %w", err)
	}
	var out store.Lease
	err := s.write(ctx, func(tx *sql.Tx) error {
		cur, err := getLease(ctx, tx, name)
		if err != nil && !errors.Is(err, cosmic.ErrNotFound) {
			return err
		}
		var curp *store.Lease
		if err == nil {
			curp = &cur
		}
		next, err := store.NextTerm(curp, name, holder, time.Now(), ttl)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO leases (name, holder, epoch, expires_at) VALUES (?, ?, ?, ?)
			ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, epoch = excluded.epoch, expires_at = excluded.expires_at`,
			name, holder, next.Epoch, nanos(next.ExpiresAt)); err != nil {
			return fmt.Errorf("acquire lease %s: %w", name, err)
		}
		out = next
		return nil
	})
	return out, err
}

// RenewLease implements store.Leases.
func (s *Store) RenewLease(ctx context.Context, name, holder string, epoch int64, ttl time.Duration) (store.Lease, error) {
	if err := store.ValidLease(name, holder, ttl); err != nil {
		return store.Lease{}, fmt.Errorf("renew lease: %w", err)
	}
	out := store.Lease{Name: name, Holder: holder, Epoch: epoch, ExpiresAt: time.Now().Add(ttl).UTC()}
	err := s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, "UPDATE leases SET expires_at = ? WHERE name = ? AND holder = ? AND epoch = ? AND expires_at <> 0",
			nanos(out.ExpiresAt), name, holder, epoch)
		if err != nil {
			return fmt.Errorf("renew lease %s: %w", name, err)
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return errors.Join(fmt.Errorf("renew lease %s: %s no longer holds epoch %d: %w", name, holder, epoch, store.ErrNotLeader), err)
		}
		return nil
	})
	return out, err
}

// ReleaseLease implements store.Leases.
func (s *Store) ReleaseLease(ctx context.Context, name, holder string, epoch int64) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, "UPDATE leases SET expires_at = 0 WHERE name = ? AND holder = ? AND epoch = ?", name, holder, epoch); err != nil {
			return fmt.Errorf("release lease %s: %w", name, err)
		}
		return nil
	})
}

// GetLease implements store.Leases.
func (s *Store) GetLease(ctx context.Context, name string) (store.Lease, error) {
	return getLease(ctx, s.r, name)
}

// CheckLease implements store.Tx.
func (s *Store) CheckLease(ctx context.Context, name string, epoch int64) error {
	return s.read().CheckLease(ctx, name, epoch)
}

// CheckLease implements store.Tx.
func (t *txn) CheckLease(ctx context.Context, name string, epoch int64) error {
	var cur int64
	err := t.q.QueryRowContext(ctx, "SELECT epoch FROM leases WHERE name = ?", name).Scan(&cur)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("lease %s was never taken: %w", name, store.ErrNotLeader)
	case err != nil:
		return fmt.Errorf("check lease %s: %w", name, err)
	case cur != epoch:
		return fmt.Errorf("lease %s is at epoch %d, not %d: %w", name, cur, epoch, store.ErrNotLeader)
	}
	return nil
}

func getLease(ctx context.Context, q querier, name string) (store.Lease, error) {
	l := store.Lease{Name: name}
	var exp int64
	err := q.QueryRowContext(ctx, "SELECT holder, epoch, expires_at FROM leases WHERE name = ?", name).Scan(&l.Holder, &l.Epoch, &exp)
	if errors.Is(err, sql.ErrNoRows) {
		return l, fmt.Errorf("lease %s: %w", name, cosmic.ErrNotFound)
	}
	if err != nil {
		return l, fmt.Errorf("get lease %s: %w", name, err)
	}
	l.ExpiresAt = fromNanos(exp)
	return l, nil
}
