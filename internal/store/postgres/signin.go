package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cosmicac/cosmicac/internal/store"
)

var _ store.SignInLimits = (*Store)(nil)

// pruneSignInsEvery is how many attempts a store takes between prunes of
// the keys whose bucket is full again.
const pruneSignInsEvery = 256

// TakeSignInAttempt implements store.SignInLimits in one SERIALIZABLE
// transaction, retried as every write: two app-nodes taking the same key's
// last attempt at once cannot both have it.
func (s *Store) TakeSignInAttempt(ctx context.Context, key string, now time.Time, every time.Duration, burst int) (ok bool, wait time.Duration, err error) {
	n := nanos(now)
	prune := s.signIns.Add(1)%pruneSignInsEvery == 0
	err = s.write(ctx, func(tx querier) error {
		ok, wait = false, 0 // a retry starts over
		if prune {
			if _, err := tx.Exec(ctx, "DELETE FROM signin_limits WHERE tat < $1", n); err != nil {
				return fmt.Errorf("prune sign-in limits: %w", err)
			}
		}
		var tat int64
		switch err := tx.QueryRow(ctx, "SELECT tat FROM signin_limits WHERE key = $1", key).Scan(&tat); {
		case errors.Is(err, pgx.ErrNoRows):
		case err != nil:
			return fmt.Errorf("read sign-in limit: %w", wrap(err))
		}
		var next int64
		if next, ok, wait = store.SignInAttempt(tat, n, every, burst); !ok {
			return nil
		}
		if _, err := tx.Exec(ctx, "INSERT INTO signin_limits (key, tat) VALUES ($1, $2) ON CONFLICT (key) DO UPDATE SET tat = excluded.tat", key, next); err != nil {
			return fmt.Errorf("take sign-in attempt: %w", wrap(err))
		}
		return nil
	})
	if err != nil {
		return false, 0, err
	}
	return ok, wait, nil
}
