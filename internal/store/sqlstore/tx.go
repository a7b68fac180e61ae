package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/store"
)

// Tx implements store.Tx on a Querier: a write transaction, a read
// snapshot, or a pool.
type Tx struct {
	q      Querier
	d      *Dialect
	writes int // rows of jobs and claims written
}

var _ store.Tx = (*Tx)(nil)

// NewTx is the Tx of q.
func NewTx(q Querier, d *Dialect) *Tx { return &Tx{q: q, d: d} }

// Writes says how many rows of jobs and claims the Tx wrote (SQLite
// refreshes the planner's statistics after a number of them).
func (t *Tx) Writes() int { return t.writes }

// savepoint runs fn so that its writes all happen or none does, also
// inside a larger transaction that goes on after fn fails (PostgreSQL
// aborts a transaction at its first error unless it rolls back to a
// savepoint).
func (t *Tx) savepoint(ctx context.Context, fn func() error) error {
	if _, err := t.q.Exec(ctx, "SAVEPOINT sp"); err != nil {
		return fmt.Errorf("savepoint: %w", err)
	}
	if err := fn(); err != nil {
		if _, rerr := t.q.Exec(ctx, "ROLLBACK TO SAVEPOINT sp; RELEASE SAVEPOINT sp"); rerr != nil {
			return errors.Join(err, fmt.Errorf("rollback to savepoint: %w", rerr))
		}
		return err
	}
	if _, err := t.q.Exec(ctx, "RELEASE SAVEPOINT sp"); err != nil {
		return fmt.Errorf("release savepoint: %w", err)
	}
	return nil
}

// Config is what a store gives the shared methods.
type Config struct {
	Dialect *Dialect
	// Read runs each statement in a transaction of its own.
	Read Querier
	// Write runs fn in one write transaction, as the store's Update.
	Write func(ctx context.Context, fn func(t *Tx) error) error
	// Snapshot runs fn in one read-only transaction: every read of it
	// sees one snapshot.
	Snapshot func(ctx context.Context, fn func(t *Tx) error) error
	// Credential, when set, reads Dialect.CredentialQuery's row for a hash
	// (a prepared statement); else Read runs the query.
	Credential func(ctx context.Context, hash []byte) Row
}

// Store implements store.Store but Close, and store.APIKeys and
// store.SignInLimits, on a Config. A store embeds it and keeps its own
// opening, transactions and closing.
type Store struct {
	c    Config
	d    *Dialect
	read *Tx
	// signIns counts TakeSignInAttempt's calls, to prune now and then.
	signIns atomic.Int64
}

// New is the Store of c.
func New(c Config) *Store {
	return &Store{c: c, d: c.Dialect, read: NewTx(c.Read, c.Dialect)}
}

// Update runs fn in one write transaction (store.Store).
func (s *Store) Update(ctx context.Context, fn func(tx store.Tx) error) error {
	return s.c.Write(ctx, func(t *Tx) error { return fn(t) })
}

// UpdateJob reads, changes and writes one job in one transaction.
func (s *Store) UpdateJob(ctx context.Context, id string, fn func(j *cosmic.Job) error) (cosmic.Job, error) {
	var out cosmic.Job
	err := s.c.Write(ctx, func(tx *Tx) error {
		j, err := tx.GetJob(ctx, id)
		if err != nil {
			return err
		}
		if err := fn(&j); err != nil {
			return err
		}
		if j.ID != id {
			return fmt.Errorf("update job %s: the function changed its ID to %q: %w", id, j.ID, cosmic.ErrInvalid)
		}
		if err := tx.PutJob(ctx, j); err != nil {
			return err
		}
		out = j
		return nil
	})
	return out, err
}

// CreateJob implements store.Tx in a transaction of its own.
func (s *Store) CreateJob(ctx context.Context, j cosmic.Job) error {
	return s.c.Write(ctx, func(t *Tx) error { return t.CreateJob(ctx, j) })
}

// GetJob implements store.Tx.
func (s *Store) GetJob(ctx context.Context, id string) (cosmic.Job, error) {
	return s.read.GetJob(ctx, id)
}

// PutJob implements store.Tx in a transaction of its own.
func (s *Store) PutJob(ctx context.Context, j cosmic.Job) error {
	return s.c.Write(ctx, func(t *Tx) error { return t.PutJob(ctx, j) })
}

// ListJobs implements store.Tx; the page and the total come from one
// snapshot.
func (s *Store) ListJobs(ctx context.Context, q store.ListJobsQuery) (jobs []cosmic.Job, total int, err error) {
	err = s.c.Snapshot(ctx, func(t *Tx) error {
		jobs, total, err = t.ListJobs(ctx, q)
		return err
	})
	return jobs, total, err
}

// DeleteJob implements store.Tx in a transaction of its own.
func (s *Store) DeleteJob(ctx context.Context, id string) error {
	return s.c.Write(ctx, func(t *Tx) error { return t.DeleteJob(ctx, id) })
}

// ClaimGPUs implements store.Tx in a transaction of its own.
func (s *Store) ClaimGPUs(ctx context.Context, r cosmic.Reservation) error {
	return s.c.Write(ctx, func(t *Tx) error { return t.ClaimGPUs(ctx, r) })
}

// Reservations implements store.Tx.
func (s *Store) Reservations(ctx context.Context) ([]cosmic.Reservation, error) {
	return s.read.Reservations(ctx)
}

// JobReservations implements store.Tx.
func (s *Store) JobReservations(ctx context.Context, jobID string) ([]cosmic.Reservation, error) {
	return s.read.JobReservations(ctx, jobID)
}

// ReleaseGPUs implements store.Tx in a transaction of its own.
func (s *Store) ReleaseGPUs(ctx context.Context, jobID string, replica int) error {
	return s.c.Write(ctx, func(t *Tx) error { return t.ReleaseGPUs(ctx, jobID, replica) })
}

// PutRack implements store.Tx in a transaction of its own.
func (s *Store) PutRack(ctx context.Context, r store.Rack) error {
	return s.c.Write(ctx, func(t *Tx) error { return t.PutRack(ctx, r) })
}

// GetRack implements store.Tx.
func (s *Store) GetRack(ctx context.Context, id string) (store.Rack, error) {
	return s.read.GetRack(ctx, id)
}

// Racks implements store.Tx.
func (s *Store) Racks(ctx context.Context) ([]store.Rack, error) { return s.read.Racks(ctx) }

// DeleteRack implements store.Tx in a transaction of its own.
func (s *Store) DeleteRack(ctx context.Context, id string) error {
	return s.c.Write(ctx, func(t *Tx) error { return t.DeleteRack(ctx, id) })
}

// PutQuota implements store.Quotas in a transaction of its own.
func (s *Store) PutQuota(ctx context.Context, q store.Quota) error {
	return s.c.Write(ctx, func(t *Tx) error { return t.PutQuota(ctx, q) })
}

// DeleteQuota implements store.Quotas in a transaction of its own.
func (s *Store) DeleteQuota(ctx context.Context, team, location, gpuModel string) error {
	return s.c.Write(ctx, func(t *Tx) error { return t.DeleteQuota(ctx, team, location, gpuModel) })
}

// CheckLease implements store.Tx.
func (s *Store) CheckLease(ctx context.Context, name string, epoch int64) error {
	return s.read.CheckLease(ctx, name, epoch)
}
