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

// ErrHolderInUse: the lease is held, unexpired, under the caller's own
// holder name by another process (another Instance). Two processes given
// one holder name (a copied config) would otherwise both lead; the second
// is refused like any other follower (the error wraps ErrNotLeader too) and
// says why.
var ErrHolderInUse = errors.New("another live process holds the lease under this holder name")

// Lease is a named lease as the database holds it. Epoch grows by one each
// time the lease passes to another process (another holder, or another
// start of the same one), so that an epoch names one term of one process.
type Lease struct {
	Name   string
	Holder string
	// Instance names the process start that holds the term (Holder.Instance).
	Instance string
	Epoch    int64
	// ExpiresAt is when the lease lapses unless renewed, by the database's
	// clock (UTC).
	ExpiresAt time.Time
}

// Holder is who takes a lease: a name that stays the same across the
// process's restarts (an ork's host and data dir), and the instance of this
// start of it.
type Holder struct {
	Name string
	// Instance is unique to one start of the process (random).
	Instance string
	// Succeeds, when set, is the instance this start replaces and knows
	// to be dead (an ork's data dir is locked by one process at a time,
	// and the instance before it wrote its name there): a term that
	// instance holds under Name is taken at once, without waiting for its
	// expiry.
	Succeeds string
}

// Leases keeps leases that elect one leader among processes sharing the
// database (the orks). Expiry is measured by the database's clock, so
// the holders' clocks need not agree.
type Leases interface {
	// AcquireLease takes the lease name for h for ttl: it succeeds when
	// the lease is free (never held, released, or expired) or held by the
	// instance h succeeds, with the next epoch, and keeps the epoch when
	// h's own instance already holds it. A lease another process holds and
	// has not let expire is ErrNotLeader (and ErrHolderInUse when that
	// process has h's name).
	AcquireLease(ctx context.Context, name string, h Holder, ttl time.Duration) (Lease, error)
	// RenewLease extends holder's term epoch by ttl from now (an epoch
	// names one instance's term). A lease another holds, or whose epoch
	// moved on, is ErrNotLeader. A term that
	// expired but that nobody took over is renewed: its epoch still fences.
	RenewLease(ctx context.Context, name, holder string, epoch int64, ttl time.Duration) (Lease, error)
	// ReleaseLease ends holder's term epoch at once, so that another may
	// acquire it without waiting for the TTL. Releasing a term no longer
	// held is not an error.
	ReleaseLease(ctx context.Context, name, holder string, epoch int64) error
	// GetLease returns the lease's row, or ErrNotFound when never taken.
	GetLease(ctx context.Context, name string) (Lease, error)
}

// NextTerm is the term h gets when it acquires lease name at now for ttl,
// given the lease's row (nil when never taken): the same epoch when h's
// instance holds it and has not released it, the next one when it is free
// or held by the instance h succeeds, ErrNotLeader (naming the holder)
// while another process holds it. A new start of a process always gets a
// new epoch: a term belongs to one process. The implementations run it on
// the row they read in the acquiring transaction.
func NextTerm(cur *Lease, name string, h Holder, now time.Time, ttl time.Duration) (Lease, error) {
	next := Lease{Name: name, Holder: h.Name, Instance: h.Instance, Epoch: 1, ExpiresAt: now.Add(ttl).UTC()}
	if cur == nil {
		return next, nil
	}
	mine := cur.Holder == h.Name && cur.Instance == h.Instance
	succeeded := cur.Holder == h.Name && h.Succeeds != "" && cur.Instance == h.Succeeds
	switch {
	case mine && !cur.ExpiresAt.IsZero():
		next.Epoch = cur.Epoch
	case cur.ExpiresAt.After(now) && !mine && !succeeded:
		until := cur.ExpiresAt.Format(time.RFC3339Nano)
		if cur.Holder == h.Name {
			return Lease{}, fmt.Errorf("lease %s is held by %s (instance %s, not this one, %s) until %s: %w: %w",
				name, cur.Holder, cur.Instance, h.Instance, until, ErrHolderInUse, ErrNotLeader)
		}
		return Lease{}, fmt.Errorf("lease %s is held by %s until %s: %w", name, cur.Holder, until, ErrNotLeader)
	default:
		next.Epoch = cur.Epoch + 1
	}
	return next, nil
}

// ValidHolder checks the arguments of AcquireLease.
func ValidHolder(name string, h Holder, ttl time.Duration) error {
	err := ValidLease(name, h.Name, ttl)
	if h.Instance == "" {
		err = errors.Join(err, &cosmic.FieldError{Field: "instance", Message: "is required"})
	}
	return err
}

// ValidLease checks the arguments of RenewLease.
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
