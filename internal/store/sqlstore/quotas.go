package sqlstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/store"
)

// PutQuota implements store.Tx.
func (t *Tx) PutQuota(ctx context.Context, q store.Quota) error {
	if err := q.Validate(); err != nil {
		return fmt.Errorf("put quota: %w", err)
	}
	_, err := t.q.Exec(ctx, `INSERT INTO quotas (team, location, gpu_model, gpus, updated_at, updated_by) VALUES ($1, $2, $3, $4, $5, $6)
		ON CONFLICT (team, location, gpu_model) DO UPDATE SET gpus = excluded.gpus, updated_at = excluded.updated_at, updated_by = excluded.updated_by`,
		q.Team, q.Location, q.GPUModel, q.GPUs, Nanos(q.UpdatedAt), q.UpdatedBy)
	if err != nil {
		return fmt.Errorf("put quota of team %s in %s: %w", q.Team, q.Location, t.d.wrap(err))
	}
	return nil
}

// DeleteQuota implements store.Tx.
func (t *Tx) DeleteQuota(ctx context.Context, team, location, gpuModel string) error {
	res, err := t.q.Exec(ctx, "DELETE FROM quotas WHERE team = $1 AND location = $2 AND gpu_model = $3", team, location, gpuModel)
	if err != nil && !t.d.unstorable(err) {
		return fmt.Errorf("delete quota of team %s in %s: %w", team, location, err)
	}
	missing := fmt.Errorf("quota of team %s in %s (model %q): %w", team, location, gpuModel, cosmic.ErrNotFound)
	if err != nil {
		return missing
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return errors.Join(missing, err)
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
	return query(ctx, s.read.q, s.d, "list quotas", q+" ORDER BY team, location, gpu_model", args, func(rows Rows) (store.Quota, error) {
		var (
			qt      store.Quota
			updated int64
		)
		err := rows.Scan(&qt.Team, &qt.Location, &qt.GPUModel, &qt.GPUs, &updated, &qt.UpdatedBy)
		qt.UpdatedAt = FromNanos(updated)
		return qt, err
	})
}
