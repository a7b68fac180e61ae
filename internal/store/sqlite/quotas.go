package sqlite

import (
	"context"
	"errors"
	"fmt"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/store"
)

var _ store.Quotas = (*Store)(nil)

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
	_, err := t.q.ExecContext(ctx, `INSERT INTO quotas (team, location, gpu_model, gpus, updated_at, updated_by) VALUES (?, ?, ?, ?, ?, ?)
		ON CONFLICT (team, location, gpu_model) DO UPDATE SET gpus = excluded.gpus, updated_at = excluded.updated_at, updated_by = excluded.updated_by`,
		q.Team, q.Location, q.GPUModel, q.GPUs, nanos(q.UpdatedAt), q.UpdatedBy)
	if err != nil {
		return fmt.Errorf("put quota of team %s in %s: %w", q.Team, q.Location, err)
	}
	return nil
}

// DeleteQuota implements store.Tx.
func (t *txn) DeleteQuota(ctx context.Context, team, location, gpuModel string) error {
	res, err := t.q.ExecContext(ctx, "DELETE FROM quotas WHERE team = ? AND location = ? AND gpu_model = ?", team, location, gpuModel)
	if err != nil {
		return fmt.Errorf("delete quota of team %s in %s: %w", team, location, err)
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return errors.Join(fmt.Errorf("quota of team %s in %s (model %q): %w", team, location, gpuModel, cosmic.ErrNotFound), err)
	}
	return nil
}

// ListQuotas implements store.Quotas.
func (s *Store) ListQuotas(ctx context.Context, team string) ([]store.Quota, error) {
	q := "SELECT team, location, gpu_model, gpus, updated_at, updated_by FROM quotas"
	var args []any
	if team != "" {
		q += " WHERE team = ?"
		args = append(args, team)
	}
	rows, err := s.r.QueryContext(ctx, q+" ORDER BY team, location, gpu_model", args...)
	if err != nil {
		return nil, fmt.Errorf("list quotas: %w", err)
	}
	defer rows.Close()
	out := []store.Quota{}
	for rows.Next() {
		var (
			qt      store.Quota
			updated int64
		)
		if err := rows.Scan(&qt.Team, &qt.Location, &qt.GPUModel, &qt.GPUs, &updated, &qt.UpdatedBy); err != nil {
			return nil, fmt.Errorf("list quotas: %w", err)
		}
		qt.UpdatedAt = fromNanos(updated)
		out = append(out, qt)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list quotas: %w", err)
	}
	return out, nil
}
