package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/store"
)

// The leases go by Dialect.NowSQL, the database server's clock where
// there is one (PostgreSQL), so that the orks' clocks need not agree, else
// by this process's. CheckLease locks the lease row (Dialect.ForShare): a
// takeover's UPDATE of it waits for every fenced transaction holding the
// old epoch to end. Where there are no row locks (SQLite), a write
// transaction begins IMMEDIATE, so CheckLease and a takeover never
// interleave, also between processes sharing the file.

var _ store.Leases = (*Store)(nil)

// AcquireLease implements store.Leases.
func (s *Store) AcquireLease(ctx context.Context, name string, h store.Holder, ttl time.Duration) (store.Lease, error) {
	if err := store.ValidHolder(name, h, ttl); err != nil {
		return store.Lease{}, fmt.Errorf("acquire lease: %w", err)
	}
	var out store.Lease
	err := s.c.Write(ctx, func(tx *Tx) error {
		now, err := s.d.now(ctx, tx.q)
		if err != nil {
			return fmt.Errorf("acquire lease %s: read clock: %w", name, err)
		}
		cur, err := tx.getLease(ctx, name, s.d.ForUpdate)
		if err != nil && !errors.Is(err, cosmic.ErrNotFound) {
			return err
		}
		var curp *store.Lease
		if err == nil {
			curp = &cur
		}
		next, err := store.NextTerm(curp, name, h, now, ttl)
		if err != nil {
			return err
		}
		if _, err := tx.q.Exec(ctx, `INSERT INTO leases (name, holder, instance, epoch, expires_at) VALUES ($1, $2, $3, $4, $5)
			ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, instance = excluded.instance, epoch = excluded.epoch, expires_at = excluded.expires_at`,
			name, h.Name, h.Instance, next.Epoch, Nanos(next.ExpiresAt)); err != nil {
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
	// The new expiry: the server's clock plus ttl, or this process's.
	expires, arg := "$4", any(time.Now().Add(ttl).UnixNano())
	if s.d.NowSQL != "" {
		expires, arg = s.d.NowSQL+" + $4", ttl.Nanoseconds()
	}
	out := store.Lease{Name: name, Holder: holder, Epoch: epoch}
	err := s.c.Write(ctx, func(tx *Tx) error {
		var exp int64
		err := tx.q.QueryRow(ctx, "UPDATE leases SET expires_at = "+expires+" WHERE name = $1 AND holder = $2 AND epoch = $3 AND expires_at <> 0 RETURNING instance, expires_at",
			name, holder, epoch, arg).Scan(&out.Instance, &exp)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("renew lease %s: %s no longer holds epoch %d: %w", name, holder, epoch, store.ErrNotLeader)
		}
		if err != nil {
			return fmt.Errorf("renew lease %s: %w", name, err)
		}
		out.ExpiresAt = FromNanos(exp)
		return nil
	})
	return out, err
}

// ReleaseLease implements store.Leases.
func (s *Store) ReleaseLease(ctx context.Context, name, holder string, epoch int64) error {
	return s.c.Write(ctx, func(tx *Tx) error {
		if _, err := tx.q.Exec(ctx, "UPDATE leases SET expires_at = 0 WHERE name = $1 AND holder = $2 AND epoch = $3", name, holder, epoch); err != nil {
			return fmt.Errorf("release lease %s: %w", name, err)
		}
		return nil
	})
}

// GetLease implements store.Leases.
func (s *Store) GetLease(ctx context.Context, name string) (store.Lease, error) {
	return s.read.getLease(ctx, name, "")
}

// CheckLease implements store.Tx.
func (t *Tx) CheckLease(ctx context.Context, name string, epoch int64) error {
	var cur int64
	err := t.q.QueryRow(ctx, "SELECT epoch FROM leases WHERE name = $1"+t.d.ForShare, name).Scan(&cur)
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

// getLease reads the lease name, locked by lock (Dialect.ForUpdate) or not.
func (t *Tx) getLease(ctx context.Context, name, lock string) (store.Lease, error) {
	l := store.Lease{Name: name}
	var exp int64
	err := t.q.QueryRow(ctx, "SELECT holder, instance, epoch, expires_at FROM leases WHERE name = $1"+lock, name).Scan(&l.Holder, &l.Instance, &l.Epoch, &exp)
	if errors.Is(err, sql.ErrNoRows) {
		return l, fmt.Errorf("lease %s: %w", name, cosmic.ErrNotFound)
	}
	if err != nil {
		return l, fmt.Errorf("get lease %s: %w", name, t.d.wrap(err))
	}
	l.ExpiresAt = FromNanos(exp)
	return l, nil
}
