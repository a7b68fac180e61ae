package sqlstore

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/store"
)

// usageBatchKeep is how long a recorded batch's ID is kept against a
// retried delivery.
const usageBatchKeep = 24 * time.Hour

// RecordUsage implements store.Usage, in one transaction: the batch's ID
// first (a batch already recorded changes nothing), then each row added to
// its minute's.
func (s *Store) RecordUsage(ctx context.Context, batch string, rows []store.UsageRow) error {
	if err := store.CheckUsageRows(batch, rows); err != nil {
		return fmt.Errorf("record usage: %w", err)
	}
	now := time.Now()
	return s.c.Write(ctx, func(t *Tx) error {
		res, err := t.q.Exec(ctx, "INSERT INTO usage_batches (id, at) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING", batch, now.Unix())
		if err != nil {
			return fmt.Errorf("record usage batch %s: %w", batch, t.d.wrap(err))
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return err // recorded before
		}
		for _, r := range rows {
			_, err := t.q.Exec(ctx, `INSERT INTO usage (minute, team, key_id, job_id, model, requests, prompt_tokens, completion_tokens, gpu_seconds)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
				ON CONFLICT (minute, team, key_id, job_id, model) DO UPDATE SET requests = usage.requests + excluded.requests,
					prompt_tokens = usage.prompt_tokens + excluded.prompt_tokens, completion_tokens = usage.completion_tokens + excluded.completion_tokens,
					gpu_seconds = usage.gpu_seconds + excluded.gpu_seconds`,
				r.Start.Truncate(time.Minute).Unix(), r.Team, r.KeyID, r.JobID, r.Model, r.Requests, r.PromptTokens, r.CompletionTokens, r.GPUSeconds)
			if err != nil {
				return fmt.Errorf("record usage of team %s: %w", r.Team, t.d.wrap(err))
			}
		}
		_, err = t.q.Exec(ctx, "DELETE FROM usage_batches WHERE at < $1", now.Add(-usageBatchKeep).Unix())
		return err
	})
}

// ListUsage implements store.Usage.
func (s *Store) ListUsage(ctx context.Context, q store.UsageQuery) ([]store.UsageRow, error) {
	if err := q.Validate(); err != nil {
		return nil, fmt.Errorf("list usage: %w: %w", err, cosmic.ErrInvalid)
	}
	var cols []string
	for _, g := range store.UsageGroups { // in the order rows sort by
		if !slices.Contains(q.GroupBy, g) {
			continue
		}
		cols = append(cols, map[store.UsageGroup]string{store.GroupHour: "(minute / 3600) * 3600", store.GroupDay: "(minute / 86400) * 86400",
			store.GroupTeam: "team", store.GroupKey: "key_id", store.GroupModel: "model", store.GroupJob: "job_id"}[g])
	}
	var p Params
	where := "minute >= " + p.Add(q.From.Truncate(time.Minute).Unix()) + " AND minute < " + p.Add(q.To.Unix())
	if q.Team != "" {
		where += " AND team = " + p.Add(q.Team)
	}
	sel := append(append([]string{}, cols...), "SUM(requests)"+s.d.Bigint, "SUM(prompt_tokens)"+s.d.Bigint, "SUM(completion_tokens)"+s.d.Bigint, "SUM(gpu_seconds)"+s.d.Bigint)
	sql := "SELECT " + strings.Join(sel, ", ") + " FROM usage WHERE " + where
	if len(cols) > 0 {
		sql += " GROUP BY " + strings.Join(cols, ", ") + " ORDER BY " + strings.Join(cols, ", ")
	} else {
		sql += " HAVING COUNT(*) > 0"
	}
	return query(ctx, s.read.q, s.d, "list usage", sql, p, func(rows Rows) (store.UsageRow, error) {
		var (
			r     store.UsageRow
			start int64
			dest  []any
		)
		for _, g := range store.UsageGroups {
			if !slices.Contains(q.GroupBy, g) {
				continue
			}
			switch g {
			case store.GroupHour, store.GroupDay:
				dest = append(dest, &start)
			case store.GroupTeam:
				dest = append(dest, &r.Team)
			case store.GroupKey:
				dest = append(dest, &r.KeyID)
			case store.GroupModel:
				dest = append(dest, &r.Model)
			case store.GroupJob:
				dest = append(dest, &r.JobID)
			}
		}
		err := rows.Scan(append(dest, &r.Requests, &r.PromptTokens, &r.CompletionTokens, &r.GPUSeconds)...)
		if start != 0 {
			r.Start = time.Unix(start, 0).UTC()
		}
		return r, err
	})
}
