package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/store"
)

const jobColumns = "id, team, user_name, created_at, updated_at, spec, status"

// params collects the arguments of a query built piece by piece; add
// returns the placeholder of the one it appends.
type params []any

func (p *params) add(v any) string {
	*p = append(*p, v)
	return "$" + strconv.Itoa(len(*p))
}

// CreateJob implements store.Tx.
func (t *txn) CreateJob(ctx context.Context, j cosmic.Job) error {
	if j.ID == "" {
		return fmt.Errorf("create job: empty ID: %w", cosmic.ErrInvalid)
	}
	spec, status, err := encodeJob(j)
	if err != nil {
		return fmt.Errorf("create job %s: %w", j.ID, err)
	}
	return t.savepoint(ctx, func() error {
		_, err := t.q.Exec(ctx, `INSERT INTO jobs (id, team, user_name, name, state, created_at, updated_at, spec, status)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
			j.ID, j.Team, j.User, j.Spec.Name, string(j.Status.State), nanos(j.CreatedAt), nanos(j.UpdatedAt), spec, status)
		if isUnique(err) {
			return fmt.Errorf("create job %s: already exists: %w", j.ID, cosmic.ErrConflict)
		}
		if err != nil {
			return fmt.Errorf("create job %s: %w", j.ID, wrap(err))
		}
		return t.insertLabels(ctx, j)
	})
}

// PutJob implements store.Tx.
func (t *txn) PutJob(ctx context.Context, j cosmic.Job) error {
	spec, status, err := encodeJob(j)
	if err != nil {
		return fmt.Errorf("put job %s: %w", j.ID, err)
	}
	return t.savepoint(ctx, func() error {
		tag, err := t.q.Exec(ctx, `UPDATE jobs SET team = $1, user_name = $2, name = $3, state = $4, created_at = $5,
			updated_at = $6, spec = $7, status = $8 WHERE id = $9`,
			j.Team, j.User, j.Spec.Name, string(j.Status.State), nanos(j.CreatedAt), nanos(j.UpdatedAt), spec, status, j.ID)
		if err != nil {
			return fmt.Errorf("put job %s: %w", j.ID, wrap(err))
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("put job %s: %w", j.ID, cosmic.ErrNotFound)
		}
		if _, err := t.q.Exec(ctx, "DELETE FROM job_labels WHERE job_id = $1", j.ID); err != nil {
			return fmt.Errorf("put job %s: labels: %w", j.ID, err)
		}
		return t.insertLabels(ctx, j)
	})
}

func (t *txn) insertLabels(ctx context.Context, j cosmic.Job) error {
	if len(j.Spec.Labels) == 0 {
		return nil
	}
	var b strings.Builder
	p := make(params, 0, 3*len(j.Spec.Labels))
	b.WriteString("INSERT INTO job_labels (job_id, key, value) VALUES ")
	i := 0
	for k, v := range j.Spec.Labels {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "(%s, %s, %s)", p.add(j.ID), p.add(k), p.add(v))
		i++
	}
	if _, err := t.q.Exec(ctx, b.String(), p...); err != nil {
		return fmt.Errorf("job %s: labels: %w", j.ID, wrap(err))
	}
	return nil
}

func encodeJob(j cosmic.Job) (spec, status string, err error) {
	b, err := json.Marshal(j.Spec)
	if err != nil {
		return "", "", fmt.Errorf("encode spec: %w", err)
	}
	spec = string(b)
	if b, err = json.Marshal(j.Status); err != nil {
		return "", "", fmt.Errorf("encode status: %w", err)
	}
	return spec, string(b), nil
}

type scanner interface{ Scan(dest ...any) error }

func scanJob(s scanner) (cosmic.Job, error) {
	var (
		j                cosmic.Job
		created, updated int64
		spec, status     []byte
	)
	if err := s.Scan(&j.ID, &j.Team, &j.User, &created, &updated, &spec, &status); err != nil {
		return cosmic.Job{}, err
	}
	j.CreatedAt, j.UpdatedAt = fromNanos(created), fromNanos(updated)
	if err := json.Unmarshal(spec, &j.Spec); err != nil {
		return cosmic.Job{}, fmt.Errorf("job %s: decode spec: %w", j.ID, err)
	}
	if err := json.Unmarshal(status, &j.Status); err != nil {
		return cosmic.Job{}, fmt.Errorf("job %s: decode status: %w", j.ID, err)
	}
	return j, nil
}

// GetJob implements store.Tx.
func (t *txn) GetJob(ctx context.Context, id string) (cosmic.Job, error) {
	j, err := scanJob(t.q.QueryRow(ctx, "SELECT "+jobColumns+" FROM jobs WHERE id = $1", id))
	if errors.Is(err, pgx.ErrNoRows) || unstorable(err) {
		return cosmic.Job{}, fmt.Errorf("job %s: %w", id, cosmic.ErrNotFound)
	}
	if err != nil {
		return cosmic.Job{}, fmt.Errorf("get job %s: %w", id, err)
	}
	return j, nil
}

// DeleteJob implements store.Tx. Its reservations go with it (ON DELETE
// CASCADE).
func (t *txn) DeleteJob(ctx context.Context, id string) error {
	tag, err := t.q.Exec(ctx, "DELETE FROM jobs WHERE id = $1", id)
	if err != nil && !unstorable(err) {
		return fmt.Errorf("delete job %s: %w", id, err)
	}
	if err != nil || tag.RowsAffected() == 0 {
		return fmt.Errorf("job %s: %w", id, cosmic.ErrNotFound)
	}
	return nil
}

var sortColumns = map[string]string{
	store.SortCreatedAt: "created_at",
	store.SortUpdatedAt: "updated_at",
	store.SortName:      "name",
	store.SortState:     "state",
}

// ListJobs implements store.Tx, with SQLite's plan: the total from
// job_counts when the filter allows, the page's IDs from indexes, a page
// in the back half read from the end.
func (t *txn) ListJobs(ctx context.Context, q store.ListJobsQuery) ([]cosmic.Job, int, error) {
	q, err := q.Normalize()
	if err != nil {
		return nil, 0, fmt.Errorf("list jobs: %w", err)
	}
	var (
		where []string
		p     params
	)
	// Each label is a join on job_labels' primary key (job_id, key): at
	// most one row per job, so no duplicates.
	keys := make([]string, 0, len(q.Labels))
	for k := range q.Labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var joins strings.Builder
	for i, k := range keys {
		fmt.Fprintf(&joins, " JOIN job_labels l%d ON l%d.job_id = jobs.id AND l%d.key = %s AND l%d.value = %s", i, i, i, p.add(k), i, p.add(q.Labels[k]))
	}
	if q.Team != "" {
		where = append(where, "jobs.team = "+p.add(q.Team))
	}
	if q.User != "" {
		where = append(where, "jobs.user_name = "+p.add(q.User))
	}
	if q.Name != "" {
		where = append(where, "jobs.name = "+p.add(q.Name))
	}
	if len(q.States) > 0 {
		where = append(where, "jobs.state = ANY("+p.add(statesArg(q.States))+"::text[])")
	}
	if !q.UpdatedAfter.IsZero() {
		where = append(where, "jobs.updated_at > "+p.add(q.UpdatedAfter.UnixNano()))
	}
	if !q.UpdatedBefore.IsZero() {
		where = append(where, "jobs.updated_at < "+p.add(q.UpdatedBefore.UnixNano()))
	}
	cond := ""
	if len(where) > 0 {
		cond = " WHERE " + strings.Join(where, " AND ")
	}
	from := " FROM jobs" + joins.String() + cond
	orderBy := func(dir string) string {
		return " ORDER BY jobs." + sortColumns[q.Sort] + " " + dir + ", jobs.id " + dir
	}
	order, reverse := orderBy("DESC"), orderBy("ASC")
	if q.Order == store.OrderAsc {
		order, reverse = reverse, order
	}
	offset := q.Page * q.Size

	counted := countable(q)
	total, limit, skip, inner := 0, q.Size, offset, order
	if counted {
		if total, err = t.countJobs(ctx, q); err != nil {
			return nil, 0, fmt.Errorf("list jobs: count: %w", err)
		}
		if offset >= total {
			return []cosmic.Job{}, total, nil
		}
		end := min(offset+q.Size, total)
		if back := total - end; back < offset {
			limit, skip, inner = end-offset, back, reverse
		}
	}
	filterArgs := append(params(nil), p...)
	page := "SELECT " + jobColumns + " FROM jobs WHERE id IN (SELECT jobs.id" + from + inner +
		" LIMIT " + p.add(limit) + " OFFSET " + p.add(skip) + ")" + order
	rows, err := t.q.Query(ctx, page, p...)
	if err != nil {
		return nil, 0, fmt.Errorf("list jobs: %w", err)
	}
	jobs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (cosmic.Job, error) { return scanJob(r) })
	if err != nil {
		if unstorable(err) {
			return []cosmic.Job{}, 0, nil // a filter of text no job can hold matches none
		}
		return nil, 0, fmt.Errorf("list jobs: %w", err)
	}
	if jobs == nil {
		jobs = []cosmic.Job{}
	}
	if counted {
		return jobs, total, nil
	}
	if (len(jobs) > 0 || offset == 0) && len(jobs) < q.Size {
		return jobs, offset + len(jobs), nil
	}
	if err := t.q.QueryRow(ctx, "SELECT count(*)"+from, filterArgs...).Scan(&total); err != nil {
		return nil, 0, fmt.Errorf("list jobs: count: %w", err)
	}
	return jobs, total, nil
}

func statesArg(states []cosmic.State) []string {
	out := make([]string, len(states))
	for i, s := range states {
		out[i] = string(s)
	}
	return out
}

// countable says whether the total of q can come from the counters:
// whether it filters only by team, user and states.
func countable(q store.ListJobsQuery) bool {
	return len(q.Labels) == 0 && q.Name == "" && q.UpdatedAfter.IsZero() && q.UpdatedBefore.IsZero()
}

// countJobs returns how many jobs match a countable q: the sum of the
// counters that triggers keep per (team, user, state) (migration 0002).
func (t *txn) countJobs(ctx context.Context, q store.ListJobsQuery) (int, error) {
	var (
		where []string
		p     params
	)
	if q.Team != "" {
		where = append(where, "team = "+p.add(q.Team))
	}
	if q.User != "" {
		where = append(where, "user_name = "+p.add(q.User))
	}
	if len(q.States) > 0 {
		where = append(where, "state = ANY("+p.add(statesArg(q.States))+"::text[])")
	}
	cond := ""
	if len(where) > 0 {
		cond = " WHERE " + strings.Join(where, " AND ")
	}
	var total int64
	err := t.q.QueryRow(ctx, "SELECT coalesce(sum(n), 0)::bigint FROM job_counts"+cond, p...).Scan(&total)
	if unstorable(err) {
		return 0, nil
	}
	return int(total), err
}
