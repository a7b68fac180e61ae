package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cosmicac/cosmicac/internal/cosmic"
)

// Quota caps the GPUs a team's jobs may hold at once in one location, of
// one GPU model or, with GPUModel empty, of every model of the location
// together. A team may have both: a job is admitted only while every quota
// that covers it has room (docs/scheduling.md). A team without a quota
// that covers a job is not capped there.
//
// Quotas name a team by its name and hold no reference to the teams'
// table: the app-node deletes a deleted team's quotas.
type Quota struct {
	Team     string
	Location string
	// GPUModel is the model the quota caps; "" caps all GPUs of the
	// location, whatever their model.
	GPUModel string
	// GPUs is the most the team's jobs may hold; 0 admits none.
	GPUs      int
	UpdatedAt time.Time // returned in UTC
	UpdatedBy string    // who set it (a user name, or "" for the system)
}

// Validate reports every problem of q.
func (q Quota) Validate() error {
	var errs []error
	if q.Team == "" {
		errs = append(errs, &cosmic.FieldError{Field: "team", Message: "is required"})
	}
	if q.Location == "" {
		errs = append(errs, &cosmic.FieldError{Field: "location", Message: "is required"})
	}
	if q.GPUs < 0 {
		errs = append(errs, &cosmic.FieldError{Field: "gpus", Message: fmt.Sprintf("is %d; a quota is 0 or more GPUs", q.GPUs)})
	}
	return errors.Join(errs...)
}

// Quotas keeps the teams' GPU quotas (the ork writes and reads them).
type Quotas interface {
	// PutQuota sets the quota of (team, location, GPU model), replacing
	// one already set. An invalid quota (Validate) is ErrInvalid.
	PutQuota(ctx context.Context, q Quota) error
	// DeleteQuota removes the quota of (team, location, GPU model), or
	// returns ErrNotFound.
	DeleteQuota(ctx context.Context, team, location, gpuModel string) error
	// ListQuotas lists a team's quotas ("" lists every team's), by team,
	// location and GPU model.
	ListQuotas(ctx context.Context, team string) ([]Quota, error)
}
