package database

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/store/postgres"
	"github.com/cosmicac/cosmicac/internal/store/postgres/pgtest"
	"github.com/cosmicac/cosmicac/internal/store/sqlite"
	"github.com/cosmicac/cosmicac/internal/store/storetest"
)

// TestCopySQLiteToPostgres: every row of a SQLite database reaches an
// empty PostgreSQL database, which then takes writes as the source does; a
// second copy into it (no longer empty) is refused and changes nothing;
// a missing source file is refused without creating it.
func TestCopySQLiteToPostgres(t *testing.T) {
	ctx := context.Background()
	file := filepath.Join(t.TempDir(), "cosmicac.db")
	src, err := sqlite.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	storetest.Fill(t, src, 30)
	if _, _, err := src.TakeSignInAttempt(ctx, "user:x", storetest.Base(), 1, 5); err != nil {
		t.Fatal(err)
	}
	src.Close()

	dsn := pgtest.DSN(t)
	if err := Copy(ctx, file, dsn); err != nil {
		t.Fatal(err)
	}
	a, err := sqlite.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := postgres.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	storetest.Same(t, a, b)
	before := storetest.Read(t, b)
	if err := Copy(ctx, file, dsn); !errors.Is(err, cosmic.ErrConflict) {
		t.Errorf("a copy into a database that holds rows = %v, want ErrConflict", err)
	}
	if diff := cmp.Diff(before, storetest.Read(t, b), cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("the refused copy changed the target (-before +after):\n%s", diff)
	}
	storetest.Writable(t, a, b)

	missing := filepath.Join(t.TempDir(), "nope.db")
	if err := Copy(ctx, missing, pgtest.DSN(t)); err == nil {
		t.Error("a copy of a missing file succeeded")
	}
	if err := Copy(ctx, dsn, dsn); !errors.Is(err, cosmic.ErrInvalid) {
		t.Errorf("a copy from postgres = %v, want ErrInvalid", err)
	}
}
