package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/cosmicac/cosmicac/internal/store"
)

// pruneSignInsEvery is how many attempts a store takes between prunes of
// the keys whose bucket is full again.
const pruneSignInsEvery = 256

// TakeSignInAttempt implements store.SignInLimits in one write transaction
// (SQLite's single writer; PostgreSQL's SERIALIZABLE, retried as every
// write): two app-nodes taking the same key's last attempt at once cannot
// both have it.
func (s *Store) TakeSignInAttempt(ctx context.Context, key string, now time.Time, every time.Duration, burst int) (ok bool, wait time.Duration, err error) {
	n := Nanos(now)
	prune := s.signIns.Add(1)%pruneSignInsEvery == 0
	err = s.c.Write(ctx, func(tx *Tx) error {
		ok, wait = false, 0 // a retry starts over
		if prune {
			if _, err := tx.q.Exec(ctx, "DELETE FROM signin_limits WHERE tat < $1", n); err != nil {
				return fmt.Errorf("prune sign-in limits: %w", err)
			}
		}
		var tat int64
		switch err := tx.q.QueryRow(ctx, "SELECT tat FROM signin_limits WHERE key = $1", key).Scan(&tat); {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return fmt.Errorf("read sign-in limit: %w", s.d.wrap(err))
		}
		var next int64
		if next, ok, wait = store.SignInAttempt(tat, n, every, burst); !ok {
			return nil
		}
		if _, err := tx.q.Exec(ctx, "INSERT INTO signin_limits (key, tat) VALUES ($1, $2) ON CONFLICT (key) DO UPDATE SET tat = excluded.tat", key, next); err != nil {
			return fmt.Errorf("take sign-in attempt: %w", s.d.wrap(err))
		}
		return nil
	})
	if err != nil {
		return false, 0, err
	}
	return ok, wait, nil
}
