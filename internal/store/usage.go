package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/cosmicac/cosmicac/internal/cosmic"
)

// UsageRow is what one caller sent one job's model in one span of time:
// requests and the tokens the engine counted (the answers' usage). A row
// of ListUsage is a sum over the rows its grouping joins: a field not
// grouped by is empty (Start zero when not grouped by time).
type UsageRow struct {
	// Start is the minute (RecordUsage), or the hour or day (ListUsage
	// grouped so) the row begins, in UTC.
	Start time.Time
	// Team pays: the team of the API key that sent the requests; for
	// requests without a key (an open model's), the model's own team.
	Team string
	// KeyID is the API key ("": none).
	KeyID string
	// JobID and Model are the job that answered and its model's full
	// name (@TEAM/NAME, cosmic's served name with its team).
	JobID, Model string

	Requests, PromptTokens, CompletionTokens int64
	// GPUSeconds are what the job held (the ork samples its reservations:
	// GPUs × seconds), on the row of the job's team, no key, and its
	// model (a GPU Container Job: none).
	GPUSeconds int64
}

// UsageGroup is a field ListUsage may group by.
type UsageGroup string

// The groupings of ListUsage: by time (at most one of hour and day), and
// by any of team, key, model and job.
const (
	GroupHour  UsageGroup = "hour"
	GroupDay   UsageGroup = "day"
	GroupTeam  UsageGroup = "team"
	GroupKey   UsageGroup = "key"
	GroupModel UsageGroup = "model"
	GroupJob   UsageGroup = "job"
)

// UsageGroups are every UsageGroup, in the order a grouped row sorts by.
var UsageGroups = []UsageGroup{GroupHour, GroupDay, GroupTeam, GroupKey, GroupModel, GroupJob}

// MaxUsageRows bounds the rows of one RecordUsage.
const MaxUsageRows = 10000

// UsageQuery selects and groups usage: the rows of [From, To) (whole
// minutes), of Team ("": every team's), summed by GroupBy.
type UsageQuery struct {
	From, To time.Time
	Team     string
	GroupBy  []UsageGroup
}

// Validate reports every problem of q.
func (q UsageQuery) Validate() error {
	var errs []error
	if q.From.IsZero() || q.To.IsZero() || !q.From.Before(q.To) {
		errs = append(errs, &cosmic.FieldError{Field: "from", Message: "must be before to, both given"})
	}
	seen := map[UsageGroup]bool{}
	for _, g := range q.GroupBy {
		if !slices.Contains(UsageGroups, g) {
			errs = append(errs, &cosmic.FieldError{Field: "groupBy", Message: fmt.Sprintf("%q is not one of hour, day, team, key, model, job", g)})
		}
		seen[g] = true
	}
	if seen[GroupHour] && seen[GroupDay] {
		errs = append(errs, &cosmic.FieldError{Field: "groupBy", Message: "is by hour or by day, not both"})
	}
	return errors.Join(errs...)
}

// Usage keeps the inference usage that proxy-inference measures
// (docs/inference.md, "Metering"), summed by the minute.
type Usage interface {
	// RecordUsage adds rows (each of one minute) to the usage, once for
	// each batch: a batch already recorded (a delivery retried after its
	// answer was lost) changes nothing. An empty batch ID, a row without
	// a team, job or model, negative counts or more than MaxUsageRows rows
	// are ErrInvalid.
	RecordUsage(ctx context.Context, batch string, rows []UsageRow) error
	// ListUsage sums the usage that q selects by q's grouping, sorted by
	// the groups (time first). An invalid q (Validate) is ErrInvalid.
	ListUsage(ctx context.Context, q UsageQuery) ([]UsageRow, error)
}

// CheckUsageRows reports the first invalid row of a RecordUsage.
func CheckUsageRows(batch string, rows []UsageRow) error {
	if batch == "" || len(batch) > 128 {
		return fmt.Errorf("usage batch %q: want 1 to 128 bytes: %w", batch, cosmic.ErrInvalid)
	}
	if len(rows) > MaxUsageRows {
		return fmt.Errorf("usage batch of %d rows, more than %d: %w", len(rows), MaxUsageRows, cosmic.ErrInvalid)
	}
	for i, r := range rows {
		if r.Team == "" || r.JobID == "" || r.Start.IsZero() || r.Model == "" && r.Requests > 0 {
			return fmt.Errorf("usage row %d: team, job and start are required, and a model with requests: %w", i, cosmic.ErrInvalid)
		}
		if r.Requests < 0 || r.PromptTokens < 0 || r.CompletionTokens < 0 || r.GPUSeconds < 0 {
			return fmt.Errorf("usage row %d: negative counts: %w", i, cosmic.ErrInvalid)
		}
	}
	return nil
}
