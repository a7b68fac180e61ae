package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/store"
)

// PutQuota implements store.Quotas in a transaction of its own.
func (s *Store) PutQuota(ctx context.Context, q store.Quota) error {
	return s.Update(ctx, func(tx store.Tx) error { return tx.PutQuota(ctx, q) })
}

// DeleteQuota implements store.Quotas in a transaction of its own.
func (s *Store) DeleteQuota(ctx context.Context, team, location, gpuModel string) error {
	return s.Update(ctx, func(tx store.Tx) error { return tx.DeleteQuota(ctx, team, location, gpuModel) })
}

// PutQuota implements store.Tx.
func (t *txn) PutQuota(ctx context.Context, q store.Quota) error {
	if err := q.Validate(); err != nil {
		return fmt.Errorf("put quota: %w", err)
	}
	_, err := t.q.Exec(ctx, `INSERT INTO quotas (team, location, gpu_model, gpus, updated_at, updated_by) VALUES ($1, $2, $3, $4, $5, $6)
		ON CONFLICT (team, location, gpu_model) DO UPDATE SET gpus = excluded.gpus, updated_at = excluded.updated_at, updated_by = excluded.updated_by`,
		q.Team, q.Location, q.GPUModel, q.GPUs, nanos(q.UpdatedAt), q.UpdatedBy)
	if err != nil {
		return fmt.Errorf("put quota of team %s in %s: %w", q.Team, q.Location, wrap(err))
	}
	return nil
}

// DeleteQuota implements store.Tx.
func (t *txn) DeleteQuota(ctx context.Context, team, location, gpuModel string) error {
	tag, err := t.q.Exec(ctx, "DELETE FROM quotas WHERE team = $1 AND location = $2 AND gpu_model = $3", team, location, gpuModel)
	if err != nil && !unstorable(err) {
		return fmt.Errorf("delete quota of team %s in %s: %w", team, location, err)
	}
	if err != nil || tag.RowsAffected() == 0 {
		return fmt.Errorf("quota of team %s in %s (model %q): %w", team, location, gpuModel, cosmic.ErrNotFound)
	}
	return nil
}

// ListQuotas implements store.Quotas.
func (s *Store) ListQuotas(ctx context.Context, team string) ([]store.Quota, error) {
	q := "SELECT team, location, gpu_model, gpus, updated_at, updated_by FROM quotas"
	var args []any
	if team != "" {
		q += " WHERE team = $1"
		args = append(args, team)
	}
	return query(ctx, s.pool, "list quotas", q+" ORDER BY team, location, gpu_model", args, func(rows pgx.Rows) (store.Quota, error) {
		var (
			qt      store.Quota
			updated int64
		)
		err := rows.Scan(&qt.Team, &qt.Location, &qt.GPUModel, &qt.GPUs, &updated, &qt.UpdatedBy)
		qt.UpdatedAt = fromNanos(updated)
		return qt, err
	})
}
