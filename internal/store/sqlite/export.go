package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/cosmicac/cosmicac/internal/store"
)

// Export reads the whole database in one snapshot: the schema versions
// applied and every table (but SQLite's own and schema_migrations) with
// all its rows, held in memory (a `cosmicac up` database, to copy to
// PostgreSQL).
func (s *Store) Export(ctx context.Context) (versions []int, tables []store.Table, err error) {
	tx, err := s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, nil, fmt.Errorf("export: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // read-only
	rows, err := tx.QueryContext(ctx, "SELECT version FROM schema_migrations ORDER BY version")
	if err != nil {
		return nil, nil, fmt.Errorf("export: %w", err)
	}
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			rows.Close()
			return nil, nil, fmt.Errorf("export: %w", err)
		}
		versions = append(versions, v)
	}
	rows.Close()
	var names []string
	rows, err = tx.QueryContext(ctx, "SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite%' AND name <> 'schema_migrations' ORDER BY name")
	if err != nil {
		return nil, nil, fmt.Errorf("export: %w", err)
	}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			rows.Close()
			return nil, nil, fmt.Errorf("export: %w", err)
		}
		names = append(names, n)
	}
	rows.Close()
	for _, n := range names {
		t, err := readTable(ctx, tx, n)
		if err != nil {
			return nil, nil, fmt.Errorf("export %s: %w", n, err)
		}
		tables = append(tables, t)
	}
	return versions, tables, nil
}

func readTable(ctx context.Context, tx *sql.Tx, name string) (store.Table, error) {
	t := store.Table{Name: name}
	rows, err := tx.QueryContext(ctx, `SELECT * FROM "`+name+`"`) // a name from sqlite_schema
	if err != nil {
		return t, err
	}
	defer rows.Close()
	if t.Columns, err = rows.Columns(); err != nil {
		return t, err
	}
	for rows.Next() {
		vals := make([]any, len(t.Columns))
		ptrs := make([]any, len(vals))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return t, err
		}
		t.Rows = append(t.Rows, vals)
	}
	return t, rows.Err()
}
