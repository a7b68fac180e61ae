package components

import (
	"context"

	"github.com/cosmicac/cosmicac/internal/cli"
	"github.com/cosmicac/cosmicac/internal/store"
	"github.com/cosmicac/cosmicac/internal/store/database"
)

// openDatabase opens the --database of a component that holds state: a
// postgres:// (or postgresql://) URL selects PostgreSQL, anything else is
// a SQLite file, def when the flag is empty. A value that cannot name a
// database is a usage error (exit 2).
//
// Its operations are observed in m (register m on the component's
// /metrics).
func openDatabase(ctx context.Context, flag, def string, m *store.Metrics) (database.DB, error) {
	if flag == "" {
		flag = def
	}
	if err := database.Check(flag); err != nil {
		return nil, cli.UsageErrorf("--database: %v", err)
	}
	db, err := database.Open(ctx, flag)
	if err != nil {
		return nil, err
	}
	return database.Observe(db, flag, m), nil
}
