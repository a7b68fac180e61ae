// Package store is CosmicAC's database, behind the Store interface: jobs,
// GPU reservations, racks, and the accounts (teams, users, API tokens) of
// the app-node.
//
// The embedded implementation is SQLite (package store/sqlite, no server to
// install); PostgreSQL (package store/postgres, for state several processes
// share) is the other, passing the same conformance suite (package
// store/storetest); package store/database picks one from a --database
// value, so no caller changes.
//
// Importers: internal/ork (jobs, reservations, racks), internal/appnode
// (accounts) and the CLI wiring, which opens the implementation. It imports
// only the domain.
package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cosmicac/cosmicac/internal/cosmic"
)

// Errors beyond the domain's sentinels. Methods report a missing record
// with an error wrapping cosmic.ErrNotFound, a duplicate (or a GPU claimed
// twice) with cosmic.ErrConflict, and bad arguments with cosmic.ErrInvalid.
var (
	// ErrSchemaTooNew: the database was migrated by a newer CosmicAC than
	// this one; it is not opened, so that old code never writes a schema it
	// does not know.
	ErrSchemaTooNew = errors.New("database schema is newer than this binary")
)

// Store is the database. Each method of Tx called on the Store runs in a
// transaction of its own; Update runs several in one.
//
// A Store is safe for concurrent use. Do not call the Store from inside an
// Update function: use its Tx (the embedded implementation has a single
// writer, so a nested write would wait for itself).
type Store interface {
	Tx

	// Update runs fn in one write transaction: it commits when fn returns
	// nil and rolls back every change when fn returns an error (which Update
	// returns) or panics. The Tx must not be used after fn returns.
	// fn may run more than once (PostgreSQL retries a transaction that a
	// concurrent one made unserializable): it must compute only from what
	// it reads through tx, and reset whatever it sets outside before it
	// returns.
	Update(ctx context.Context, fn func(tx Tx) error) error

	// UpdateJob reads job id, lets fn change it and writes it back, in one
	// transaction, and returns the job as written. fn's error aborts the
	// update and is returned. fn may not change the job's ID. The store
	// does not touch UpdatedAt: the domain (Job.SetState) or fn sets it.
	UpdateJob(ctx context.Context, id string, fn func(j *cosmic.Job) error) (cosmic.Job, error)

	Accounts
	Quotas
	Leases
	Usage

	// Close releases the database. Calls after Close fail.
	Close() error
}

// Tx is what a transaction can read and write: jobs, GPU reservations and
// racks.
type Tx interface {
	// CreateJob inserts a new job. An existing ID is ErrConflict; an empty
	// ID is ErrInvalid. The spec is stored as given (validation is the
	// domain's).
	CreateJob(ctx context.Context, j cosmic.Job) error
	// GetJob returns a job, or ErrNotFound.
	GetJob(ctx context.Context, id string) (cosmic.Job, error)
	// PutJob replaces an existing job (every field), or returns ErrNotFound.
	PutJob(ctx context.Context, j cosmic.Job) error
	// ListJobs returns one page of the jobs that match q and how many match
	// in all. An invalid q (unknown sort or order, negative page or size,
	// size over MaxPageSize) is ErrInvalid.
	ListJobs(ctx context.Context, q ListJobsQuery) (jobs []cosmic.Job, total int, err error)
	// DeleteJob removes a job and releases every GPU it holds, or returns
	// ErrNotFound.
	DeleteJob(ctx context.Context, id string) error

	// ClaimGPUs records a reservation: every GPU of it is claimed for the
	// job's replica, or none is. A GPU already claimed (by anyone, or twice
	// within r), or a replica that already holds a reservation, is
	// ErrConflict. An unknown job is ErrNotFound; an unknown rack, a
	// reservation without GPUs or a negative index is ErrInvalid.
	ClaimGPUs(ctx context.Context, r cosmic.Reservation) error
	// Reservations lists every reservation, ordered by job ID and replica;
	// each node's GPU indices ascending, nodes in the order claimed.
	Reservations(ctx context.Context) ([]cosmic.Reservation, error)
	// JobReservations lists one job's reservations, by replica (none for an
	// unknown job).
	JobReservations(ctx context.Context, jobID string) ([]cosmic.Reservation, error)
	// ReleaseGPUs releases the GPUs of one replica of a job, or of all its
	// replicas when replica is AllReplicas. Releasing what is not held is
	// not an error.
	ReleaseGPUs(ctx context.Context, jobID string, replica int) error

	// PutRack inserts a rack or replaces it, keeping CreatedAt of an
	// existing one. An empty ID is ErrInvalid.
	PutRack(ctx context.Context, r Rack) error
	// GetRack returns a rack, or ErrNotFound.
	GetRack(ctx context.Context, id string) (Rack, error)
	// Racks lists the racks by ID.
	Racks(ctx context.Context) ([]Rack, error)
	// DeleteRack removes a rack, or returns ErrNotFound. A rack on which
	// GPUs are still claimed is ErrConflict: release them first (in the
	// same transaction, to force).
	DeleteRack(ctx context.Context, id string) error

	// PutQuota and DeleteQuota are Quotas' writes within the transaction,
	// so that a fenced ork's quota changes are fenced too (CheckLease).
	PutQuota(ctx context.Context, q Quota) error
	DeleteQuota(ctx context.Context, team, location, gpuModel string) error

	// CheckLease fails with ErrNotLeader unless lease name's epoch is
	// epoch (a lease never taken fails too). Called first in a write
	// transaction, it fences the transaction: a deposed leader's writes
	// never commit after its successor's term began (docs/store.md).
	CheckLease(ctx context.Context, name string, epoch int64) error
}

// Rack is a registered rack as the ork keeps it: the registration, where
// to dial its worker, and the nodes the worker last reported, so that
// capacity shows at startup before the worker answers.
type Rack struct {
	cosmic.Rack
	WorkerAddrs []string
	Nodes       []cosmic.Node
	// Overhead is the VM overhead the rack's worker last reported.
	Overhead cosmic.VMOverhead
}

// AllReplicas makes ReleaseGPUs release every replica of a job.
const AllReplicas = -1

// Sort keys and orders of ListJobsQuery (the same strings as the API's).
const (
	SortCreatedAt = "createdAt"
	SortUpdatedAt = "updatedAt"
	SortName      = "name"
	SortState     = "state"

	OrderAsc  = "asc"
	OrderDesc = "desc"
)

// Page sizes of ListJobsQuery.
const (
	DefaultPageSize = 50
	MaxPageSize     = 1000
)

// Filter limits of ListJobsQuery. Each label is a join in SQL (SQLite
// allows at most 64 tables in one); the API refuses more before a query
// is made (apiv1.MaxLabelSelectorTerms, apiv1.MaxStatusStates).
const (
	MaxLabelFilters = 16
	MaxStateFilters = 32
)

// ListJobsQuery filters, sorts and pages a job list. Zero values mean no
// filter. Its fields are those of orkapi.ListJobsParams, so that one
// converts to the other.
type ListJobsQuery struct {
	Team string
	User string
	// Name keeps the jobs of that name (spec.name, exactly).
	Name   string
	States []cosmic.State    // any of; at most MaxStateFilters
	Labels map[string]string // all must match exactly; at most MaxLabelFilters
	// UpdatedAfter and UpdatedBefore bound UpdatedAt, both exclusive.
	UpdatedAfter  time.Time
	UpdatedBefore time.Time
	Sort          string // a Sort* key; "" is SortCreatedAt. Ties are broken by ID, in the same order.
	Order         string // OrderAsc or OrderDesc; "" is OrderDesc
	Page          int    // 0-based
	Size          int    // 0 is DefaultPageSize; at most MaxPageSize
}

// Normalize fills in the defaults of q and checks it; an invalid query is
// ErrInvalid. Implementations call it first.
func (q ListJobsQuery) Normalize() (ListJobsQuery, error) {
	if q.Sort == "" {
		q.Sort = SortCreatedAt
	}
	if q.Order == "" {
		q.Order = OrderDesc
	}
	if q.Size == 0 {
		q.Size = DefaultPageSize
	}
	var errs []error
	switch q.Sort {
	case SortCreatedAt, SortUpdatedAt, SortName, SortState:
	default:
		errs = append(errs, &cosmic.FieldError{Field: "sort", Message: fmt.Sprintf("%q is not a sort key (createdAt, updatedAt, name, state)", q.Sort)})
	}
	if q.Order != OrderAsc && q.Order != OrderDesc {
		errs = append(errs, &cosmic.FieldError{Field: "order", Message: fmt.Sprintf("%q is not an order (asc, desc)", q.Order)})
	}
	if q.Page < 0 {
		errs = append(errs, &cosmic.FieldError{Field: "page", Message: "must not be negative"})
	}
	if q.Size < 0 || q.Size > MaxPageSize {
		errs = append(errs, &cosmic.FieldError{Field: "size", Message: fmt.Sprintf("must be between 1 and %d", MaxPageSize)})
	}
	if len(q.Labels) > MaxLabelFilters {
		errs = append(errs, &cosmic.FieldError{Field: "labels", Message: fmt.Sprintf("has %d labels, more than %d", len(q.Labels), MaxLabelFilters)})
	}
	for k, v := range q.Labels {
		if len(k) > cosmic.MaxLabelKeyLen || len(v) > cosmic.MaxLabelValueLen {
			errs = append(errs, &cosmic.FieldError{Field: "labels", Message: fmt.Sprintf("a key is longer than %d bytes or a value longer than %d", cosmic.MaxLabelKeyLen, cosmic.MaxLabelValueLen)})
			break
		}
	}
	if len(q.States) > MaxStateFilters {
		errs = append(errs, &cosmic.FieldError{Field: "states", Message: fmt.Sprintf("has %d states, more than %d", len(q.States), MaxStateFilters)})
	}
	return q, errors.Join(errs...)
}
