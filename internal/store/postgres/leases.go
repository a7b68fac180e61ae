package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/store"
)

// Lease expiry is by the database server's clock, so that the orks' clocks
// need not agree. CheckLease locks the lease row FOR SHARE: a takeover's
// UPDATE of it waits for every fenced transaction holding the old epoch
// to end, and a fenced transaction whose snapshot predates a takeover's
// commit fails serialization and is retried, then sees the new epoch.

var _ store.Leases = (*Store)(nil)

// nowSQL is the server's clock in Unix nanoseconds.
const nowSQL = "(extract(epoch from clock_timestamp()) * 1000000000)::bigint"

// AcquireLease implements store.Leases.
func (s *Store) AcquireLease(ctx context.Context, name, holder string, ttl time.Duration) (store.Lease, error) {
	if err := store.ValidLease(name, holder, ttl); err != nil {
		return store.Lease{}, fmt.Errorf("acquire lease: %w", err)
	}
	var out store.Lease
	err := s.write(ctx, func(tx querier) error {
		var now int64
		if err := tx.QueryRow(ctx, "SELECT "+nowSQL).Scan(&now); err != nil {
			return fmt.Errorf("acquire lease %s: read clock: %w", name, err)
		}
		cur, err := getLease(ctx, tx, name, " FOR UPDATE")
		if err != nil && !errors.Is(err, cosmic.ErrNotFound) {
			return err
		}
		var curp *store.Lease
		if err == nil {
			curp = &cur
		}
		next, err := store.NextTerm(curp, name, holder, fromNanos(now), ttl)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO leases (name, holder, epoch, expires_at) VALUES ($1, $2, $3, $4)
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
	out := store.Lease{Name: name, Holder: holder, Epoch: epoch}
	err := s.write(ctx, func(tx querier) error {
		var exp int64
		err := tx.QueryRow(ctx, "UPDATE leases SET expires_at = "+nowSQL+" + $4 WHERE name = $1 AND holder = $2 AND epoch = $3 AND expires_at <> 0 RETURNING expires_at",
			name, holder, epoch, ttl.Nanoseconds()).Scan(&exp)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("renew lease %s: %s no longer holds epoch %d: %w", name, holder, epoch, store.ErrNotLeader)
		}
		if err != nil {
			return fmt.Errorf("renew lease %s: %w", name, err)
		}
		out.ExpiresAt = fromNanos(exp)
		return nil
	})
	return out, err
}

// ReleaseLease implements store.Leases.
func (s *Store) ReleaseLease(ctx context.Context, name, holder string, epoch int64) error {
	return s.write(ctx, func(tx querier) error {
		if _, err := tx.Exec(ctx, "UPDATE leases SET expires_at = 0 WHERE name = $1 AND holder = $2 AND epoch = $3", name, holder, epoch); err != nil {
			return fmt.Errorf("release lease %s: %w", name, err)
		}
		return nil
	})
}

// GetLease implements store.Leases.
func (s *Store) GetLease(ctx context.Context, name string) (store.Lease, error) {
	return getLease(ctx, s.read().q, name, "")
}

// CheckLease implements store.Tx.
func (s *Store) CheckLease(ctx context.Context, name string, epoch int64) error {
	return s.read().CheckLease(ctx, name, epoch)
}

// CheckLease implements store.Tx.
func (t *txn) CheckLease(ctx context.Context, name string, epoch int64) error {
	var cur int64
	err := t.q.QueryRow(ctx, "SELECT epoch FROM leases WHERE name = $1 FOR SHARE", name).Scan(&cur)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("lease %s was never taken: %w", name, store.ErrNotLeader)
	case err != nil:
		return fmt.Errorf("check lease %s: %w", name, err)
	case cur != epoch:
		return fmt.Errorf("lease %s is at epoch %d, not %d: %w", name, cur, epoch, store.ErrNotLeader)
	}
	return nil
}

func getLease(ctx context.Context, q querier, name, lock string) (store.Lease, error) {
	l := store.Lease{Name: name}
	var exp int64
	err := q.QueryRow(ctx, "SELECT holder, epoch, expires_at FROM leases WHERE name = $1"+lock, name).Scan(&l.Holder, &l.Epoch, &exp)
	if errors.Is(err, pgx.ErrNoRows) {
		return l, fmt.Errorf("lease %s: %w", name, cosmic.ErrNotFound)
	}
	if err != nil {
		return l, fmt.Errorf("get lease %s: %w", name, wrap(err))
	}
	l.ExpiresAt = fromNanos(exp)
	return l, nil
}
