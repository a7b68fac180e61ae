package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/store"
)

// JobColumns are the columns ScanJob reads.
const JobColumns = "id, team, user_name, created_at, updated_at, spec, status, schema_version"

// CreateJob implements store.Tx.
func (t *Tx) CreateJob(ctx context.Context, j cosmic.Job) error {
	if j.ID == "" {
		return fmt.Errorf("create job: empty ID: %w", cosmic.ErrInvalid)
	}
	spec, status, err := encodeJob(j)
	if err != nil {
		return fmt.Errorf("create job %s: %w", j.ID, err)
	}
	return t.savepoint(ctx, func() error {
		_, err := t.q.Exec(ctx, `INSERT INTO jobs (id, team, user_name, name, state, created_at, updated_at, spec, status, schema_version)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
			j.ID, j.Team, j.User, j.Spec.Name, string(j.Status.State), Nanos(j.CreatedAt), Nanos(j.UpdatedAt), t.d.JSON(spec), t.d.JSON(status), cosmic.JobSchemaVersion)
		if t.d.IsUnique(err) {
			return fmt.Errorf("create job %s: already exists: %w", j.ID, cosmic.ErrConflict)
		}
		if err != nil {
			return fmt.Errorf("create job %s: %w", j.ID, t.d.wrap(err))
		}
		t.writes++
		return t.insertLabels(ctx, j)
	})
}

// PutJob implements store.Tx.
func (t *Tx) PutJob(ctx context.Context, j cosmic.Job) error {
	spec, status, err := encodeJob(j)
	if err != nil {
		return fmt.Errorf("put job %s: %w", j.ID, err)
	}
	return t.savepoint(ctx, func() error {
		res, err := t.q.Exec(ctx, `UPDATE jobs SET team = $1, user_name = $2, name = $3, state = $4, created_at = $5,
			updated_at = $6, spec = $7, status = $8, schema_version = $9 WHERE id = $10`,
			j.Team, j.User, j.Spec.Name, string(j.Status.State), Nanos(j.CreatedAt), Nanos(j.UpdatedAt), t.d.JSON(spec), t.d.JSON(status), cosmic.JobSchemaVersion, j.ID)
		if err != nil {
			return fmt.Errorf("put job %s: %w", j.ID, t.d.wrap(err))
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return errors.Join(fmt.Errorf("put job %s: %w", j.ID, cosmic.ErrNotFound), err)
		}
		t.writes++
		if _, err := t.q.Exec(ctx, "DELETE FROM job_labels WHERE job_id = $1", j.ID); err != nil {
			return fmt.Errorf("put job %s: labels: %w", j.ID, err)
		}
		return t.insertLabels(ctx, j)
	})
}

func (t *Tx) insertLabels(ctx context.Context, j cosmic.Job) error {
	if len(j.Spec.Labels) == 0 {
		return nil
	}
	var b strings.Builder
	p := make(Params, 0, 3*len(j.Spec.Labels))
	b.WriteString("INSERT INTO job_labels (job_id, key, value) VALUES ")
	i := 0
	for k, v := range j.Spec.Labels {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "(%s, %s, %s)", p.Add(j.ID), p.Add(k), p.Add(v))
		i++
	}
	if _, err := t.q.Exec(ctx, b.String(), p...); err != nil {
		return fmt.Errorf("job %s: labels: %w", j.ID, t.d.wrap(err))
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

// ScanJob reads a job of JobColumns, its JSON brought to the current
// schema version (cosmic.UpgradeJobJSON); a row of a newer version is
// refused (cosmic.ErrNewerJobSchema).
func ScanJob(s Row) (cosmic.Job, error) {
	var (
		j                cosmic.Job
		created, updated int64
		spec, status     []byte
		version          int
	)
	if err := s.Scan(&j.ID, &j.Team, &j.User, &created, &updated, &spec, &status, &version); err != nil {
		return cosmic.Job{}, err
	}
	j.CreatedAt, j.UpdatedAt = FromNanos(created), FromNanos(updated)
	spec, status, err := cosmic.UpgradeJobJSON(version, spec, status)
	if err != nil {
		return cosmic.Job{}, fmt.Errorf("job %s: %w", j.ID, err)
	}
	if err := json.Unmarshal(spec, &j.Spec); err != nil {
		return cosmic.Job{}, fmt.Errorf("job %s: decode spec: %w", j.ID, err)
	}
	if err := json.Unmarshal(status, &j.Status); err != nil {
		return cosmic.Job{}, fmt.Errorf("job %s: decode status: %w", j.ID, err)
	}
	return j, nil
}

// GetJob implements store.Tx.
func (t *Tx) GetJob(ctx context.Context, id string) (cosmic.Job, error) {
	j, err := ScanJob(t.q.QueryRow(ctx, "SELECT "+JobColumns+" FROM jobs WHERE id = $1", id))
	if errors.Is(err, sql.ErrNoRows) || t.d.unstorable(err) {
		return cosmic.Job{}, fmt.Errorf("job %s: %w", id, cosmic.ErrNotFound)
	}
	if err != nil {
		return cosmic.Job{}, fmt.Errorf("get job %s: %w", id, err)
	}
	return j, nil
}

// DeleteJob implements store.Tx. Its reservations go with it (ON DELETE
// CASCADE).
func (t *Tx) DeleteJob(ctx context.Context, id string) error {
	res, err := t.q.Exec(ctx, "DELETE FROM jobs WHERE id = $1", id)
	if err != nil && !t.d.unstorable(err) {
		return fmt.Errorf("delete job %s: %w", id, err)
	}
	if err != nil {
		return fmt.Errorf("job %s: %w", id, cosmic.ErrNotFound)
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return errors.Join(fmt.Errorf("job %s: %w", id, cosmic.ErrNotFound), err)
	}
	return nil
}

// ListJobs implements store.Tx, statement after statement in the
// transaction.
func (t *Tx) ListJobs(ctx context.Context, q store.ListJobsQuery) ([]cosmic.Job, int, error) {
	l, err := NewListing(t.d, q)
	if err != nil {
		return nil, 0, err
	}
	var total int64
	if l.Counted() {
		sql, args := l.CountSQL()
		if err := t.q.QueryRow(ctx, sql, args...).Scan(&total); err != nil {
			return nil, 0, fmt.Errorf("list jobs: count: %w", t.d.wrap(err))
		}
	}
	sql, args, empty := l.PageSQL(total)
	if empty {
		return []cosmic.Job{}, int(total), nil
	}
	jobs, err := t.jobs(ctx, sql, args)
	if err != nil {
		return nil, 0, fmt.Errorf("list jobs: %w", t.d.wrap(err))
	}
	if l.Counted() {
		return jobs, int(total), nil
	}
	if n, ok := l.Total(len(jobs)); ok {
		return jobs, n, nil
	}
	sql, args = l.CountSQL()
	if err := t.q.QueryRow(ctx, sql, args...).Scan(&total); err != nil {
		return nil, 0, fmt.Errorf("list jobs: count: %w", t.d.wrap(err))
	}
	return jobs, int(total), nil
}

// jobs reads the jobs of a query of JobColumns.
func (t *Tx) jobs(ctx context.Context, sql string, args []any) ([]cosmic.Job, error) {
	rows, err := t.q.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	jobs := []cosmic.Job{}
	for rows.Next() {
		j, err := ScanJob(rows)
		if err != nil {
			return nil, err
		}
		jobs = append(jobs, j)
	}
	return jobs, rows.Err()
}
