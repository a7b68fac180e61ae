package sqlstore

import (
	"context"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/cosmicac/cosmicac/internal/store"
)

// Migration is one schema migration, the file migrations/NNNN_name.sql.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// Migrations lists the migrations of fsys (a store's embedded
// migrations/*.sql), by version. Versions are unique but may have gaps
// while migrations written on parallel branches land (0005 before 0004):
// a store applies every one a database has not recorded, so one that lands
// later with a lower number is still applied. Each migration therefore
// stands on its own (IF NOT EXISTS, no dependence on a higher-numbered
// one).
func Migrations(fsys fs.FS) ([]Migration, error) {
	names, err := fs.Glob(fsys, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	var ms []Migration
	for _, n := range names {
		base := path.Base(n)
		num, name, ok := strings.Cut(strings.TrimSuffix(base, ".sql"), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("migration %s: name must be NNNN_name.sql", base)
		}
		b, err := fs.ReadFile(fsys, n)
		if err != nil {
			return nil, err
		}
		ms = append(ms, Migration{Version: v, Name: name, SQL: string(b)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].Version < ms[j].Version })
	for i := 1; i < len(ms); i++ {
		if ms[i].Version == ms[i-1].Version {
			return nil, fmt.Errorf("migration %d_%s: version %d is also %s's", ms[i].Version, ms[i].Name, ms[i].Version, ms[i-1].Name)
		}
	}
	return ms, nil
}

// Apply applies to the transaction q, in order, the migrations of ms that
// its schema_migrations table (which the store has made sure of) has not
// recorded, and records them. A database at a version higher than ms know
// is refused with store.ErrSchemaTooNew.
func Apply(ctx context.Context, q Querier, ms []Migration) error {
	latest := 0
	if len(ms) > 0 {
		latest = ms[len(ms)-1].Version
	}
	applied := map[int]bool{}
	cur := 0
	rows, err := q.Query(ctx, "SELECT version FROM schema_migrations")
	if err != nil {
		return err
	}
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			rows.Close()
			return err
		}
		applied[v] = true
		cur = max(cur, v)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	if cur > latest {
		return fmt.Errorf("database at version %d, this binary knows up to %d: %w", cur, latest, store.ErrSchemaTooNew)
	}
	for _, m := range ms {
		if applied[m.Version] {
			continue
		}
		if _, err := q.Exec(ctx, m.SQL); err != nil {
			return fmt.Errorf("apply %04d_%s: %w", m.Version, m.Name, err)
		}
		if _, err := q.Exec(ctx, "INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, $2, $3)",
			m.Version, m.Name, time.Now().UnixNano()); err != nil {
			return fmt.Errorf("record %04d_%s: %w", m.Version, m.Name, err)
		}
	}
	return nil
}
