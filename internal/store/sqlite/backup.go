package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/cosmicac/cosmicac/internal/cosmic"
)

// Backup copies the database file at path, which a running platform may be
// writing, to a new file out: one consistent snapshot (SQLite's VACUUM
// INTO, a read transaction: writers go on meanwhile, and out holds every
// transaction committed before it began and none after). out must not
// exist; it is made private (0600) and checked (integrity_check) before
// Backup returns. Nothing is left at out when Backup fails. path must be a
// CosmicAC database; it is not migrated.
func Backup(ctx context.Context, path, out string) (err error) {
	for _, p := range []string{path, out} {
		if p == "" || strings.ContainsAny(p, "?#") {
			return fmt.Errorf("backup: %q: want a file name without ? or #: %w", p, cosmic.ErrInvalid)
		}
	}
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	f, err := os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	f.Close()
	defer func() {
		if err != nil {
			os.Remove(out)
		}
	}()
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", busyTimeout.Milliseconds()))
	db, err := sql.Open("sqlite", path+"?"+q.Encode())
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM schema_migrations").Scan(&n); err != nil || n == 0 {
		return errors.Join(fmt.Errorf("backup: %s is not a CosmicAC database", path), err)
	}
	if _, err := db.ExecContext(ctx, "VACUUM INTO ?", out); err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	if err := checkFile(ctx, out); err != nil {
		return fmt.Errorf("backup: %s: %w", out, err)
	}
	return nil
}

// checkFile runs integrity_check on the database file at path.
func checkFile(ctx context.Context, path string) error {
	db, err := sql.Open("sqlite", path+"?mode=ro")
	if err != nil {
		return err
	}
	defer db.Close()
	var res string
	if err := db.QueryRowContext(ctx, "PRAGMA integrity_check").Scan(&res); err != nil {
		return err
	}
	if res != "ok" {
		return fmt.Errorf("integrity_check: %s", res)
	}
	return nil
}
