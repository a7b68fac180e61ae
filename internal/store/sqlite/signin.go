package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/cosmicac/cosmicac/internal/store"
)

var _ store.SignInLimits = (*Store)(nil)

// pruneSignInsEvery is how many attempts a store takes between prunes of
// the keys whose bucket is full again.
const pruneSignInsEvery = 256

// TakeSignInAttempt implements store.SignInLimits, in one write
// transaction (SQLite's single writer makes it atomic).
func (s *Store) TakeSignInAttempt(ctx context.Context, key string, now time.Time, every time.Duration, burst int) (ok bool, wait time.Duration, err error) {
	n := nanos(now)
	prune := s.signIns.Add(1)%pruneSignInsEvery == 0
	err = s.write(ctx, func(tx *sql.Tx) error {
		if prune {
			if _, err := tx.ExecContext(ctx, "DELETE FROM signin_limits WHERE tat < ?", n); err != nil {
				return fmt.Errorf("prune sign-in limits: %w", err)
			}
		}
		var tat int64
		switch err := tx.QueryRowContext(ctx, "SELECT tat FROM signin_limits WHERE key = ?", key).Scan(&tat); {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return fmt.Errorf("read sign-in limit: %w", err)
		}
		var next int64
		if next, ok, wait = store.SignInAttempt(tat, n, every, burst); !ok {
			return nil
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO signin_limits (key, tat) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET tat = excluded.tat", key, next); err != nil {
			return fmt.Errorf("take sign-in attempt: %w", err)
		}
		return nil
	})
	if err != nil {
		return false, 0, err
	}
	return ok, wait, nil
}
