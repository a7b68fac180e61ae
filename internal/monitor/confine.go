package monitor

import (
	"context"

	"github.com/cosmicac/cosmicac/internal/joblog"
	"github.com/cosmicac/cosmicac/internal/trust"
)

// Placements says which racks a job is placed on, as the ork lists it
// (*trust.Keyring, following the ork).
type Placements interface {
	OnRack(jobID, rack string) bool
	// Sync reads the ork's list again before a record is refused.
	Sync(ctx context.Context) error
}

// confine keeps the records the caller of ctx may write (docs/security.md):
// the ork writes system records of any job, marked as its own; a rack's worker writes the records of jobs placed on its rack; a job's
// agent writes its own job's records only, under its binding's team and
// replica, and its system records are marked with its role (a VM cannot
// write lines that read as the platform's); operators, and calls from no
// trust policy, write anything. It returns the records kept and how many
// were refused.
func confine(ctx context.Context, recs []joblog.Record, where Placements) ([]joblog.Record, int) {
	caller, ok := trust.CallerOf(ctx)
	if !ok || caller.Role == trust.Operator {
		return recs, 0
	}
	keep := recs[:0:0]
	switch {
	case caller.Role == trust.Ork:
		// The ork writes the platform's decisions about a job (its
		// autoscaler's): system records, under its own name.
		for _, r := range recs {
			r.Source, r.Stream = joblog.SourceSystem, string(trust.Ork)
			keep = append(keep, r)
		}
	case caller.Role == trust.Worker:
		synced := false
		for _, r := range recs {
			on := where != nil && where.OnRack(r.JobID, caller.Rack)
			if !on && where != nil && !synced {
				// The ork may have placed the job a moment ago.
				synced = true
				if where.Sync(ctx) == nil {
					on = where.OnRack(r.JobID, caller.Rack)
				}
			}
			if on {
				keep = append(keep, r)
			}
		}
	case caller.Role.IsAgent():
		for _, r := range recs {
			if r.JobID != caller.Job {
				continue
			}
			r.Team, r.Replica = caller.Team, caller.Replica
			if r.Source == joblog.SourceSystem {
				r.Stream = string(caller.Role)
			}
			keep = append(keep, r)
		}
	}
	return keep, len(recs) - len(keep)
}
