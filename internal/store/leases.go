package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cosmicac/cosmicac/internal/cosmic"
)

// ErrNotLeader: the lease is held by another holder, or its epoch is no
// longer the one the caller holds (another took it over since). A write
// fenced by CheckLease fails with it and commits nothing.
var ErrNotLeader = errors.New("not the leader")

// Lease is a named lease as the database holds it. Epoch grows by one each
// time the lease passes to another holder (or to the same holder after it
// was released), so that an epoch names one term of one holder.
type Lease struct {
	Name   string
	Holder string
	Epoch  int64
	// ExpiresAt is when the lease lapses unless renewed, by the database's
	// clock (UTC).
	ExpiresAt time.Time
}

// Leases keeps leases that elect one leader among processes sharing the
// database (the orks). Expiry is measured by the database's clock, so
// the holders' clocks need not agree.
type Leases interface {
	// AcquireLease takes the lease name for holder for ttl: it succeeds
	// when the lease is free (never held, released, or expired), keeping
	// the epoch when holder already holds it and bumping it otherwise. A
	// lease held by another and not expired is ErrNotLeader.
	AcquireLease(ctx context.Context, name, holder string, ttl time.Duration) (Lease, error)
	// RenewLease extends holder's term epoch by ttl from now. A lease
	// another holds, or whose epoch moved on, is ErrNotLeader. A term that
	// expired but that nobody took over is renewed: its epoch still fences.
	RenewLease(ctx context.Context, name, holder string, epoch int64, ttl time.Duration) (Lease, error)
	// ReleaseLease ends holder's term epoch at once, so that another may
	// acquire it without waiting for the TTL. Releasing a term no longer
	// held is not an error.
	ReleaseLease(ctx context.Context, name, holder string, epoch int64) error
	// GetLease returns the lease's row, or ErrNotFound when never taken.
	GetLease(ctx context.Context, name string) (Lease, error)
}

// NextTerm is the term holder gets when it acquires lease name at now for
// ttl, given the lease's row (nil when never taken): the same epoch when
// holder holds it and has not released it, the next one when it is free,
// ErrNotLeader (naming the holder) while another holds it. The
// implementations run it on the row they read in the acquiring
// transaction.
func NextTerm(cur *Lease, name, holder string, now time.Time, ttl time.Duration) (Lease, error) {
	next := Lease{Name: name, Holder: holder, Epoch: 1, ExpiresAt: now.Add(ttl).UTC()}
	switch {
	case cur == nil:
	case cur.Holder == holder && !cur.ExpiresAt.IsZero():
		next.Epoch = cur.Epoch
	case cur.ExpiresAt.After(now):
		return Lease{}, fmt.Errorf("lease %s is held by %s until %s: %w", name, cur.Holder, cur.ExpiresAt.Format(time.RFC3339Nano), ErrNotLeader)
	default:
		next.Epoch = cur.Epoch + 1
	}
	return next, nil
}

// ValidLease checks the arguments of AcquireLease and RenewLease.
func ValidLease(name, holder string, ttl time.Duration) error {
	var errs []error
	if name == "" {
		errs = append(errs, &cosmic.FieldError{Field: "name", Message: "is required"})
	}
	if holder == "" {
		errs = append(errs, &cosmic.FieldError{Field: "holder", Message: "is required"})
	}
	if ttl <= 0 {
		errs = append(errs, &cosmic.FieldError{Field: "ttl", Message: "must be positive"})
	}
	return errors.Join(errs...)
}
