package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/store"
)

const jobColumns = "id, team, user_name, created_at, updated_at, spec, status"

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
		_, err := t.q.ExecContext(ctx, `INSERT INTO jobs (id, team, user_name, name, state, created_at, updated_at, spec, status)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			j.ID, j.Team, j.User, j.Spec.Name, string(j.Status.State), nanos(j.CreatedAt), nanos(j.UpdatedAt), spec, status)
		if isUnique(err) {
			return fmt.Errorf("create job %s: already exists: %w", j.ID, cosmic.ErrConflict)
		}
		if err != nil {
			return fmt.Errorf("create job %s: %w", j.ID, err)
		}
		t.writes++
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
		res, err := t.q.ExecContext(ctx, `UPDATE jobs SET team = ?, user_name = ?, name = ?, state = ?, created_at = ?,
			updated_at = ?, spec = ?, status = ? WHERE id = ?`,
			j.Team, j.User, j.Spec.Name, string(j.Status.State), nanos(j.CreatedAt), nanos(j.UpdatedAt), spec, status, j.ID)
		if err != nil {
			return fmt.Errorf("put job %s: %w", j.ID, err)
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return errors.Join(fmt.Errorf("put job %s: %w", j.ID, cosmic.ErrNotFound), err)
		}
		t.writes++
		if _, err := t.q.ExecContext(ctx, "DELETE FROM job_labels WHERE job_id = ?", j.ID); err != nil {
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
	args := make([]any, 0, 3*len(j.Spec.Labels))
	b.WriteString("INSERT INTO job_labels (job_id, key, value) VALUES ")
	i := 0
	for k, v := range j.Spec.Labels {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("(?, ?, ?)")
		args = append(args, j.ID, k, v)
		i++
	}
	if _, err := t.q.ExecContext(ctx, b.String(), args...); err != nil {
		return fmt.Errorf("job %s: labels: %w", j.ID, err)
	}
	return nil
}

func encodeJob(j cosmic.Job) (spec, status []byte, err error) {
	if spec, err = json.Marshal(j.Spec); err != nil {
		return nil, nil, fmt.Errorf("encode spec: %w", err)
	}
	if status, err = json.Marshal(j.Status); err != nil {
		return nil, nil, fmt.Errorf("encode status: %w", err)
	}
	return spec, status, nil
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
	j, err := scanJob(t.q.QueryRowContext(ctx, "SELECT "+jobColumns+" FROM jobs WHERE id = ?", id))
	if errors.Is(err, sql.ErrNoRows) {
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
	res, err := t.q.ExecContext(ctx, "DELETE FROM jobs WHERE id = ?", id)
	if err != nil {
		return fmt.Errorf("delete job %s: %w", id, err)
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return errors.Join(fmt.Errorf("job %s: %w", id, cosmic.ErrNotFound), err)
	}
	return nil
}

var sortColumns = map[string]string{
	store.SortCreatedAt: "created_at",
	store.SortUpdatedAt: "updated_at",
	store.SortName:      "name",
	store.SortState:     "state",
}

// ListJobs implements store.Tx.
func (t *txn) ListJobs(ctx context.Context, q store.ListJobsQuery) ([]cosmic.Job, int, error) {
	q, err := q.Normalize()
	if err != nil {
		return nil, 0, fmt.Errorf("list jobs: %w", err)
	}
	var (
		where []string
		args  []any
	)
	if q.Team != "" {
		where = append(where, "jobs.team = ?")
		args = append(args, q.Team)
	}
	if q.User != "" {
		where = append(where, "jobs.user_name = ?")
		args = append(args, q.User)
	}
	if q.Name != "" {
		where = append(where, "jobs.name = ?")
		args = append(args, q.Name)
	}
	if len(q.States) > 0 {
		where = append(where, "jobs.state IN (?"+strings.Repeat(", ?", len(q.States)-1)+")")
		for _, s := range q.States {
			args = append(args, string(s))
		}
	}
	if !q.UpdatedAfter.IsZero() {
		where = append(where, "jobs.updated_at > ?")
		args = append(args, q.UpdatedAfter.UnixNano())
	}
	if !q.UpdatedBefore.IsZero() {
		where = append(where, "jobs.updated_at < ?")
		args = append(args, q.UpdatedBefore.UnixNano())
	}
	// Each label is a join on job_labels' primary key (job_id, key): at
	// most one row per job, so no duplicates; the planner starts from the
	// label's (key, value) index or from the jobs' when that is narrower.
	keys := make([]string, 0, len(q.Labels))
	for k := range q.Labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var joins strings.Builder
	var joinArgs []any
	for i, k := range keys {
		fmt.Fprintf(&joins, " JOIN job_labels l%d ON l%d.job_id = jobs.id AND l%d.key = ? AND l%d.value = ?", i, i, i, i)
		joinArgs = append(joinArgs, k, q.Labels[k])
	}
	args = append(joinArgs, args...)
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

	// A list filtered only by team, user and states knows its total first,
	// from the counters (countable). A page then past the end needs no
	// query, and a page in the back half of the list is read from the end,
	// in the reverse order: the skipped entries (OFFSET) are never more than
	// half the matches.
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
	// The page's IDs come from indexes alone; only its rows are read.
	rows, err := t.q.QueryContext(ctx, "SELECT "+jobColumns+" FROM jobs WHERE id IN (SELECT jobs.id"+from+inner+
		" LIMIT ? OFFSET ?)"+order, append(args, limit, skip)...)
	if err != nil {
		return nil, 0, fmt.Errorf("list jobs: %w", err)
	}
	defer rows.Close()
	jobs := []cosmic.Job{}
	for rows.Next() {
		j, err := scanJob(rows)
		if err != nil {
			return nil, 0, fmt.Errorf("list jobs: %w", err)
		}
		jobs = append(jobs, j)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, fmt.Errorf("list jobs: %w", err)
	}
	if counted {
		return jobs, total, nil
	}
	// A short, non-empty page (or an empty first page) ends the list: its
	// total needs no count.
	if (len(jobs) > 0 || offset == 0) && len(jobs) < q.Size {
		return jobs, offset + len(jobs), nil
	}
	if err := t.q.QueryRowContext(ctx, "SELECT count(*)"+from, args...).Scan(&total); err != nil {
		return nil, 0, fmt.Errorf("list jobs: count: %w", err)
	}
	return jobs, total, nil
}

// countable says whether the total of q can come from the counters:
// whether it filters only by team, user and states.
func countable(q store.ListJobsQuery) bool {
	return len(q.Labels) == 0 && q.Name == "" && q.UpdatedAfter.IsZero() && q.UpdatedBefore.IsZero()
}

// countJobs returns how many jobs match a countable q: the sum of the
// counters that triggers keep per (team, user, state) (migration 0002), a
// few rows instead of every matching job.
func (t *txn) countJobs(ctx context.Context, q store.ListJobsQuery) (int, error) {
	var total int
	var (
		where []string
		cargs []any
	)
	if q.Team != "" {
		where = append(where, "team = ?")
		cargs = append(cargs, q.Team)
	}
	if q.User != "" {
		where = append(where, "user_name = ?")
		cargs = append(cargs, q.User)
	}
	if len(q.States) > 0 {
		where = append(where, "state IN (?"+strings.Repeat(", ?", len(q.States)-1)+")")
		for _, s := range q.States {
			cargs = append(cargs, string(s))
		}
	}
	cond := ""
	if len(where) > 0 {
		cond = " WHERE " + strings.Join(where, " AND ")
	}
	err := t.q.QueryRowContext(ctx, "SELECT coalesce(sum(n), 0) FROM job_counts"+cond, cargs...).Scan(&total)
	return total, err
}
