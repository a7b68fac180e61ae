package database

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/store/postgres"
	"github.com/cosmicac/cosmicac/internal/store/postgres/pgtest"
	"github.com/cosmicac/cosmicac/internal/store/sqlite"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

func TestIsPostgres(t *testing.T) {
	for v, want := range map[string]bool{
		"postgres://u@h/db":      true,
		"postgresql://h/db":      true,
		"POSTGRES://h/db":        true,
		"/var/lib/cosmicac/o.db": false,
		"ork.db":                 false,
		"postgres.db":            false,
		"mysql://h/db":           false,
		"":                       false,
	} {
		if got := IsPostgres(v); got != want {
			t.Errorf("IsPostgres(%q) = %v, want %v", v, got, want)
		}
	}
}

// TestOpen: a file path opens SQLite, a postgres:// URL PostgreSQL; a
// value that is neither, or a URL that does not parse, is ErrInvalid and
// shows no password.
func TestOpen(t *testing.T) {
	ctx := context.Background()
	db, err := Open(ctx, filepath.Join(t.TempDir(), "x.db"))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := db.(*sqlite.Store); !ok {
		t.Errorf("Open(path) = %T, want *sqlite.Store", db)
	}
	db.Close()

	db, err = Open(ctx, pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := db.(*postgres.Store); !ok {
		t.Errorf("Open(postgres://) = %T, want *postgres.Store", db)
	}
	db.Close()

	for _, v := range []string{"", "mysql://u:hunter2@h/db", "postgres://u:hunter2@h:port/db"} {
		_, err := Open(ctx, v)
		if !errors.Is(err, cosmic.ErrInvalid) {
			t.Errorf("Open(%q) = %v, want ErrInvalid", v, err)
		}
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("Open(%q) shows the password: %v", v, err)
		}
	}
}
