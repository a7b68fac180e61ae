// Package database picks the store implementation that a --database value
// names and opens it: a postgres:// or postgresql:// URL is PostgreSQL
// (store/postgres), anything else the path of a SQLite file (store/sqlite,
// the default). It is the one place that knows both.
//
// Importers: the CLI wiring and internal/platform (`cosmicac up`); the
// components see only store.Store.
package database

import (
	"context"
	"fmt"
	"strings"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/store"
	"github.com/cosmicac/cosmicac/internal/store/postgres"
	"github.com/cosmicac/cosmicac/internal/store/sqlite"
)

// DB is what every implementation gives: the store, the inference API
// keys, the shared sign-in limits and the datastores.
type DB interface {
	store.Store
	store.APIKeys
	store.SignInLimits
	store.Datastores
}

var (
	_ DB = (*sqlite.Store)(nil)
	_ DB = (*postgres.Store)(nil)
)

// Observe wraps db, opened from value, so that its every operation is
// timed and its failures counted in m, labelled store="sqlite" or
// store="postgres" (store.Metrics).
func Observe(db DB, value string, m *store.Metrics) DB {
	name := "sqlite"
	if IsPostgres(value) {
		name = "postgres"
	}
	return store.Observe(db, name, m)
}

// IsPostgres reports whether value names a PostgreSQL database: a URL
// whose scheme is postgres or postgresql (any case).
func IsPostgres(value string) bool {
	scheme, _, ok := strings.Cut(value, "://")
	return ok && (strings.EqualFold(scheme, "postgres") || strings.EqualFold(scheme, "postgresql"))
}

// Open opens the database value names: PostgreSQL for a postgres:// URL,
// else the SQLite file at that path. A value Check refuses is ErrInvalid.
func Open(ctx context.Context, value string) (DB, error) {
	if err := Check(value); err != nil {
		return nil, err
	}
	if IsPostgres(value) {
		return postgres.Open(ctx, value)
	}
	return sqlite.Open(value)
}

// Check says, without opening anything, whether value can name a
// database: a postgres:// URL that parses, or a file path (not another
// URL, not empty). Its error wraps ErrInvalid and shows no password.
func Check(value string) error {
	if IsPostgres(value) {
		return postgres.ParseDSN(value)
	}
	if value == "" {
		return fmt.Errorf("database: empty: want a SQLite file path or a postgres:// URL: %w", cosmic.ErrInvalid)
	}
	if scheme, _, ok := strings.Cut(value, "://"); ok && !strings.ContainsAny(scheme, "/\\.") {
		return fmt.Errorf("database %q: %s:// is not a database (want a postgres:// URL or a SQLite file path): %w", redact(value), scheme, cosmic.ErrInvalid)
	}
	return nil
}

// Kind names the implementation value selects, for logs: "postgres" or
// "sqlite".
func Kind(value string) string {
	if IsPostgres(value) {
		return "postgres"
	}
	return "sqlite"
}

// redact drops the user information of a URL-like value.
func redact(value string) string {
	scheme, rest, _ := strings.Cut(value, "://")
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		if slash := strings.Index(rest, "/"); slash < 0 || at < slash {
			rest = "…@" + rest[at+1:]
		}
	}
	return scheme + "://" + rest
}
