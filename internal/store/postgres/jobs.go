package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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

// listing is a ListJobs query made SQL, with SQLite's plan: the total
// from job_counts when the filter allows (countable), so that a page past
// the end costs no query and a page in the back half is read from the
// end; the page's IDs from indexes, then only its rows.
type listing struct {
	q       store.ListJobsQuery
	from    string // " FROM jobs … WHERE …" of the matches
	args    params // from's
	order   string
	reverse string
	offset  int
	counted bool
}

func newListing(q store.ListJobsQuery) (listing, error) {
	q, err := q.Normalize()
	if err != nil {
		return listing{}, fmt.Errorf("list jobs: %w", err)
	}
	var (
		where []string
		p     params
	)
	// Labels are one containment test on the spec's labels, which the GIN
	// index jobs_labels (migration 0008) answers; job_labels, SQLite's
	// way, is kept in step but a join there is a hash join over every job
	// of a common label (docs/benchmarks.md).
	if len(q.Labels) > 0 {
		b, err := json.Marshal(q.Labels)
		if err != nil {
			return listing{}, fmt.Errorf("list jobs: labels: %w", err)
		}
		where = append(where, "jobs.spec->'labels' @> "+p.add(string(b))+"::jsonb")
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
	orderBy := func(dir string) string {
		return " ORDER BY jobs." + sortColumns[q.Sort] + " " + dir + ", jobs.id " + dir
	}
	l := listing{q: q, from: " FROM jobs" + cond, args: p, offset: q.Page * q.Size, counted: countable(q)}
	l.order, l.reverse = orderBy("DESC"), orderBy("ASC")
	if q.Order == store.OrderAsc {
		l.order, l.reverse = l.reverse, l.order
	}
	return l, nil
}

// countSQL counts the matches: a sum over job_counts when counted (the
// counters that triggers keep per team, user and state, migration 0002),
// else a COUNT(*).
func (l listing) countSQL() (string, []any) {
	if !l.counted {
		return "SELECT count(*)" + l.from, l.args
	}
	var (
		where []string
		p     params
	)
	if l.q.Team != "" {
		where = append(where, "team = "+p.add(l.q.Team))
	}
	if l.q.User != "" {
		where = append(where, "user_name = "+p.add(l.q.User))
	}
	if len(l.q.States) > 0 {
		where = append(where, "state = ANY("+p.add(statesArg(l.q.States))+"::text[])")
	}
	cond := ""
	if len(where) > 0 {
		cond = " WHERE " + strings.Join(where, " AND ")
	}
	return "SELECT coalesce(sum(n), 0)::bigint FROM job_counts" + cond, p
}

// pageSQL reads the page. For a counted listing, total is known: a page
// past the end is none (empty), and one in the back half is read from the
// end in reverse order, so the skipped entries are never more than half.
func (l listing) pageSQL(total int64) (sql string, args []any, empty bool) {
	limit, skip, inner := l.q.Size, l.offset, l.order
	if l.counted {
		if int64(l.offset) >= total {
			return "", nil, true
		}
		end := min(int64(l.offset+l.q.Size), total)
		if back := total - end; back < int64(l.offset) {
			limit, skip, inner = int(end)-l.offset, int(back), l.reverse
		}
	}
	if l.merged() {
		sql, args := l.mergedSQL(limit, skip, inner == l.reverse)
		return sql, args, false
	}
	p := append(params(nil), l.args...)
	return "SELECT " + jobColumns + " FROM jobs WHERE id IN (SELECT jobs.id" + l.from + inner +
		" LIMIT " + p.add(limit) + " OFFSET " + p.add(skip) + ")" + l.order, p, false
}

// merged says whether the page is read as a merge of one ordered scan per
// state: a list by createdAt of several states, and perhaps a team, which
// the (team, state, created_at, id) and (state, created_at, id) indexes
// give state by state in order. PostgreSQL reads "state = ANY(…)" there
// whole and sorts it (O(matches)); the merge of per-state scans with
// LIMIT stops each after offset + size entries (what SQLite's planner
// does by itself).
func (l listing) merged() bool {
	q := l.q
	return len(q.States) >= 2 && q.Sort == store.SortCreatedAt && q.User == "" && q.Name == "" &&
		len(q.Labels) == 0 && q.UpdatedAfter.IsZero() && q.UpdatedBefore.IsZero()
}

// mergedSQL is the page of a merged listing, and its arguments: skip and
// limit over the merge of each state's first skip + limit, in the list's
// order (reversed: the other way).
func (l listing) mergedSQL(limit, skip int, reversed bool) (string, []any) {
	dir := "DESC"
	if (l.q.Order == store.OrderAsc) != reversed {
		dir = "ASC"
	}
	order := " ORDER BY created_at " + dir + ", id " + dir
	var p params
	team := ""
	if l.q.Team != "" {
		team = "team = " + p.add(l.q.Team) + " AND "
	}
	n := p.add(limit + skip)
	seen := map[cosmic.State]bool{}
	var branches []string
	for _, st := range l.q.States {
		if seen[st] {
			continue
		}
		seen[st] = true
		branches = append(branches, "(SELECT id, created_at FROM jobs WHERE "+team+"state = "+p.add(string(st))+order+" LIMIT "+n+")")
	}
	return "SELECT " + jobColumns + " FROM jobs WHERE id IN (SELECT id FROM (" + strings.Join(branches, " UNION ALL ") + ") m" +
		order + " LIMIT " + p.add(limit) + " OFFSET " + p.add(skip) + ")" + l.order, p
}

// total is the total of an uncounted listing whose page holds n jobs, when
// the page says it: a short, non-empty page (or an empty first page) ends
// the list.
func (l listing) total(n int) (int, bool) {
	if (n > 0 || l.offset == 0) && n < l.q.Size {
		return l.offset + n, true
	}
	return 0, false
}

func collectJobs(rows pgx.Rows) ([]cosmic.Job, error) {
	jobs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (cosmic.Job, error) { return scanJob(r) })
	if jobs == nil {
		jobs = []cosmic.Job{}
	}
	return jobs, err
}

// ListJobs implements store.Tx, statement after statement in the
// transaction (Store.ListJobs batches the same statements).
func (t *txn) ListJobs(ctx context.Context, q store.ListJobsQuery) ([]cosmic.Job, int, error) {
	l, err := newListing(q)
	if err != nil {
		return nil, 0, err
	}
	var total int64
	if l.counted {
		sql, args := l.countSQL()
		if err := t.q.QueryRow(ctx, sql, args...).Scan(&total); err != nil {
			return nil, 0, fmt.Errorf("list jobs: count: %w", wrap(err))
		}
	}
	sql, args, empty := l.pageSQL(total)
	if empty {
		return []cosmic.Job{}, int(total), nil
	}
	rows, err := t.q.Query(ctx, sql, args...)
	if err != nil {
		return nil, 0, fmt.Errorf("list jobs: %w", wrap(err))
	}
	jobs, err := collectJobs(rows)
	if err != nil {
		return nil, 0, fmt.Errorf("list jobs: %w", wrap(err))
	}
	if l.counted {
		return jobs, int(total), nil
	}
	if n, ok := l.total(len(jobs)); ok {
		return jobs, n, nil
	}
	sql, args = l.countSQL()
	if err := t.q.QueryRow(ctx, sql, args...).Scan(&total); err != nil {
		return nil, 0, fmt.Errorf("list jobs: count: %w", wrap(err))
	}
	return jobs, int(total), nil
}

// countable says whether the total of q can come from the counters:
// whether it filters only by team, user and states.
func countable(q store.ListJobsQuery) bool {
	return len(q.Labels) == 0 && q.Name == "" && q.UpdatedAfter.IsZero() && q.UpdatedBefore.IsZero()
}

func statesArg(states []cosmic.State) []string {
	out := make([]string, len(states))
	for i, s := range states {
		out[i] = string(s)
	}
	return out
}
