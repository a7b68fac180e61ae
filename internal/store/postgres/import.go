package postgres

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/store"
)

// Import writes tables (another store's Export, in an order that puts
// every referenced row first) into this database, in one transaction:
// all of them or, on any error, none. The database must be at exactly
// versions and hold no row in any of the tables (ErrConflict otherwise).
// Values are converted to the columns' types (SQLite's integers to
// boolean, text to jsonb and bytea); the triggers run as on every write
// (job_counts is derived, a claim past a node's CPU is refused); identity
// sequences are moved past the copied IDs.
func (s *Store) Import(ctx context.Context, versions []int, tables []store.Table) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("import: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	vrows, err := tx.Query(ctx, "SELECT version FROM schema_migrations ORDER BY version")
	if err != nil {
		return fmt.Errorf("import: %w", err)
	}
	have, err := pgx.CollectRows(vrows, pgx.RowTo[int])
	if err != nil {
		return fmt.Errorf("import: %w", err)
	}
	if !slices.Equal(have, versions) {
		return fmt.Errorf("import: the target's schema versions are %v, the source's %v: open both with one binary first: %w", have, versions, cosmic.ErrConflict)
	}
	for _, t := range tables {
		var any bool
		if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM "+pgx.Identifier{t.Name}.Sanitize()+")").Scan(&any); err != nil {
			return fmt.Errorf("import: %s: %w", t.Name, err)
		}
		if any {
			return fmt.Errorf("import: the target's %s is not empty: copy only into a new database: %w", t.Name, cosmic.ErrConflict)
		}
	}
	for _, t := range tables {
		types := map[string]string{}
		rows, err := tx.Query(ctx, "SELECT column_name, data_type FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = $1", t.Name)
		if err != nil {
			return fmt.Errorf("import: %s: %w", t.Name, err)
		}
		for rows.Next() {
			var c, ty string
			if err := rows.Scan(&c, &ty); err != nil {
				rows.Close()
				return fmt.Errorf("import: %s: %w", t.Name, err)
			}
			types[c] = ty
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("import: %s: %w", t.Name, err)
		}
		for _, c := range t.Columns {
			if types[c] == "" {
				return fmt.Errorf("import: %s.%s: no such column in the target: %w", t.Name, c, cosmic.ErrInvalid)
			}
		}
		conv := make([][]any, len(t.Rows))
		for i, r := range t.Rows {
			conv[i] = make([]any, len(r))
			for j, v := range r {
				if conv[i][j], err = convert(v, types[t.Columns[j]]); err != nil {
					return fmt.Errorf("import: %s.%s: %w", t.Name, t.Columns[j], err)
				}
			}
		}
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{t.Name}, t.Columns, pgx.CopyFromRows(conv)); err != nil {
			return fmt.Errorf("import: %s: %w", t.Name, wrap(err))
		}
	}
	// Identity columns (audit.id) go on after the copied IDs.
	if _, err := tx.Exec(ctx, `SELECT setval(pg_get_serial_sequence('audit', 'id'), m) FROM (SELECT max(id) AS m FROM audit) a WHERE m IS NOT NULL`); err != nil {
		return fmt.Errorf("import: audit ids: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("import: commit: %w", err)
	}
	return nil
}

// convert makes a value SQLite's driver gave fit a PostgreSQL column of
// type ty.
func convert(v any, ty string) (any, error) {
	if v == nil {
		return nil, nil
	}
	switch ty {
	case "boolean":
		if n, ok := v.(int64); ok {
			return n != 0, nil
		}
	case "jsonb", "text":
		switch x := v.(type) {
		case string:
			return x, nil
		case []byte:
			return string(x), nil
		}
	case "bytea":
		switch x := v.(type) {
		case []byte:
			return x, nil
		case string:
			return []byte(x), nil
		}
	case "bigint", "integer", "smallint":
		if n, ok := v.(int64); ok {
			return n, nil
		}
	case "double precision", "real":
		switch x := v.(type) {
		case float64:
			return x, nil
		case int64:
			return float64(x), nil
		}
	}
	return nil, fmt.Errorf("a %T for a column of type %s: %w", v, ty, cosmic.ErrInvalid)
}
