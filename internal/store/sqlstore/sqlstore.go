// Package sqlstore is the store logic that the SQLite and the PostgreSQL
// stores share: every statement of store.Tx, store.Accounts, store.APIKeys,
// store.Quotas, store.Leases and store.SignInLimits, written once over a
// small Querier that each store adapts its driver to (database/sql, pgx),
// and a Dialect that holds what differs: the error codes, a few bits of
// syntax, how JSON is passed.
//
// Queries are written with PostgreSQL's numbered placeholders ($1, $2, …),
// which SQLite also takes (a "$N" parameter binds the Nth argument in
// modernc.org/sqlite), so no query is rewritten at run time.
//
// What stays in each store is its own: opening, migrations, the
// transactions (SQLite's single writer beginning IMMEDIATE; PostgreSQL's
// SERIALIZABLE with its retries and the recorder of serialization
// failures), backup, export and import.
//
// Importers: internal/store/sqlite and internal/store/postgres only.
package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/cosmicac/cosmicac/internal/cosmic"
)

// Querier runs statements: a transaction, or a pool where each statement
// is a transaction of its own.
type Querier interface {
	Exec(ctx context.Context, query string, args ...any) (Result, error)
	Query(ctx context.Context, query string, args ...any) (Rows, error)
	QueryRow(ctx context.Context, query string, args ...any) Row
}

// Result is what a statement changed.
type Result interface {
	RowsAffected() (int64, error)
}

// Rows is the result of a query, read row by row.
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close()
}

// Row is the result of a query of one row; Scan's error wraps
// sql.ErrNoRows (pgx.ErrNoRows does) when there is none.
type Row interface {
	Scan(dest ...any) error
}

// Dialect is what differs between the databases beyond the driver.
type Dialect struct {
	// IsUnique reports a UNIQUE or PRIMARY KEY violation, IsForeignKey a
	// FOREIGN KEY one.
	IsUnique, IsForeignKey func(error) bool
	// Unstorable reports text the database refuses to hold (PostgreSQL:
	// a NUL byte, bytes that are not UTF-8): the caller's ErrInvalid, and
	// a key no row can have. Nil where every value is stored.
	Unstorable func(error) bool
	// Raised reports an error that a trigger raised (the claim triggers of
	// migration 0007); nil: any error may be.
	Raised func(error) bool
	// JSON is a JSON document as the database takes it: SQLite's bytes,
	// PostgreSQL's text.
	JSON func([]byte) any
	// StringAgg is the aggregate that joins strings with a separator:
	// group_concat, string_agg.
	StringAgg string
	// ForShare and ForUpdate lock the rows a query reads (" FOR SHARE");
	// empty where the single writer makes locks moot.
	ForShare, ForUpdate string
	// Bigint casts a parameter whose type the database cannot infer to a
	// 64-bit integer ("::bigint"), or is empty.
	Bigint string
	// NowSQL is the database server's clock in Unix nanoseconds, which the
	// leases go by; empty: this process's clock.
	NowSQL string
	// Listing is how ListJobs filters by labels and states.
	Listing ListingDialect
}

// wrap adds ErrInvalid to an error of text the database cannot store.
func (d *Dialect) wrap(err error) error {
	if d.unstorable(err) {
		return fmt.Errorf("%w: %w", err, cosmic.ErrInvalid)
	}
	return err
}

func (d *Dialect) unstorable(err error) bool {
	return err != nil && d.Unstorable != nil && d.Unstorable(err)
}

// now is the clock the leases go by.
func (d *Dialect) now(ctx context.Context, q Querier) (time.Time, error) {
	if d.NowSQL == "" {
		return time.Now(), nil
	}
	var now int64
	if err := q.QueryRow(ctx, "SELECT "+d.NowSQL).Scan(&now); err != nil {
		return time.Time{}, err
	}
	return FromNanos(now), nil
}

// Params collects the arguments of a query built piece by piece; Add
// returns the placeholder of the one it appends.
type Params []any

// Add appends v and returns its placeholder, $N.
func (p *Params) Add(v any) string {
	*p = append(*p, v)
	return "$" + strconv.Itoa(len(*p))
}

// Nanos and FromNanos store times as Unix nanoseconds, the zero time as 0.
func Nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// FromNanos is the time Nanos stored, in UTC.
func FromNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

// affected fails with notFound when res changed no row.
func affected(res Result, err error, what, name string, d *Dialect) error {
	if err != nil {
		return fmt.Errorf("%s %s: %w", what, name, d.wrap(err))
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return errors.Join(notFound(what, name), err)
	}
	return nil
}

// notFound reports a missing row of what, named name.
func notFound(what, name string) error {
	return fmt.Errorf("%s %s: %w", what, name, cosmic.ErrNotFound)
}

// query runs a read and scans every row with scan. Text the database
// cannot hold matches no row.
func query[T any](ctx context.Context, q Querier, d *Dialect, what, sql string, args []any, scan func(Rows) (T, error)) ([]T, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	defer rows.Close()
	out := []T{}
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		if d.unstorable(err) {
			return []T{}, nil
		}
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return out, nil
}
