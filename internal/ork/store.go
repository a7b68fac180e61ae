package ork

import (
	"context"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/store"
)

// Store is what the ork needs of the database (internal/store; the SQLite
// implementation satisfies it). The ork is the only writer of jobs,
// reservations and racks.
type Store interface {
	GetJob(ctx context.Context, id string) (cosmic.Job, error)
	ListJobs(ctx context.Context, q store.ListJobsQuery) ([]cosmic.Job, int, error)
	Reservations(ctx context.Context) ([]cosmic.Reservation, error)
	Racks(ctx context.Context) ([]store.Rack, error)
	// Update runs fn in one transaction: all its writes land, or none.
	Update(ctx context.Context, fn func(tx store.Tx) error) error
	// ListQuotas is store.Quotas' read; the ork writes quotas in Update
	// (Tx.PutQuota, Tx.DeleteQuota), fenced by its lease as every write.
	ListQuotas(ctx context.Context, team string) ([]store.Quota, error)
}

// Tx is the store's transaction.
type Tx = store.Tx

// StoredRack is a registered rack as the store keeps it.
type StoredRack = store.Rack

// listAll pages through every job matching q.
func listAll(ctx context.Context, st Store, q store.ListJobsQuery) ([]cosmic.Job, error) {
	q.Size = store.MaxPageSize
	var out []cosmic.Job
	for q.Page = 0; ; q.Page++ {
		jobs, total, err := st.ListJobs(ctx, q)
		if err != nil {
			return nil, err
		}
		out = append(out, jobs...)
		if len(jobs) == 0 || len(out) >= total {
			return out, nil
		}
	}
}
