package database

import (
	"context"
	"fmt"
	"os"
	"slices"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/store"
	"github.com/cosmicac/cosmicac/internal/store/postgres"
	"github.com/cosmicac/cosmicac/internal/store/sqlite"
)

// copyOrder is every table Copy copies, each after those it refers to.
var copyOrder = []string{
	"racks", "rack_nodes", "rack_overheads",
	"jobs", "job_labels", "reservations", "reservation_gpus", "reservation_nodes",
	"teams", "users", "members", "tokens", "api_keys", "api_key_limits",
	"quotas", "audit", "signin_limits", "usage", "usage_batches", "datastores",
}

// derived are the tables Copy leaves out: job_counts, which the target's
// triggers fill as the others are copied, and leases, whose terms belong
// to the database they were taken on (the target's first ork takes a
// fresh one).
var derived = []string{"job_counts", "leases"}

// Copy copies every row of the SQLite database file from (a `cosmicac up`
// database, stopped) into the empty PostgreSQL database to, in one
// transaction. Both are first brought to this binary's schema, so they are
// at the same version; a target that holds any row is refused
// (cosmic.ErrConflict) and left as it was, as is the target on any error.
// A source table Copy does not know (a newer schema) is refused.
func Copy(ctx context.Context, from, to string) error {
	if IsPostgres(from) || !IsPostgres(to) {
		return fmt.Errorf("copy: from a SQLite file to a postgres:// database: %w", cosmic.ErrInvalid)
	}
	if err := Check(to); err != nil {
		return err
	}
	if _, err := os.Stat(from); err != nil {
		return fmt.Errorf("copy: %w", err)
	}
	src, err := sqlite.Open(from)
	if err != nil {
		return fmt.Errorf("copy: %w", err)
	}
	defer src.Close()
	dst, err := postgres.Open(ctx, to)
	if err != nil {
		return fmt.Errorf("copy: %w", err)
	}
	defer dst.Close()
	versions, tables, err := src.Export(ctx)
	if err != nil {
		return fmt.Errorf("copy: %w", err)
	}
	byName := map[string]store.Table{}
	for _, t := range tables {
		if !slices.Contains(copyOrder, t.Name) && !slices.Contains(derived, t.Name) {
			return fmt.Errorf("copy: table %s of %s is unknown to this copy: %w", t.Name, from, cosmic.ErrInvalid)
		}
		byName[t.Name] = t
	}
	var ordered []store.Table
	for _, n := range copyOrder {
		t, ok := byName[n]
		if !ok {
			return fmt.Errorf("copy: %s has no table %s: %w", from, n, cosmic.ErrInvalid)
		}
		ordered = append(ordered, t)
	}
	return dst.Import(ctx, versions, ordered)
}
