package postgres

import (
	"context"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/cosmicac/cosmicac/internal/store/postgres/pgtest"
	"github.com/cosmicac/cosmicac/internal/store/storetest"
)

// TestDumpRestore: a database dumped with pg_dump -Fc and restored with
// pg_restore into a fresh database opens at the same schema version, holds
// the same rows, and takes new writes (a job, a claim, a sign-in attempt)
// as the original did: sequences and triggers came along.
func TestDumpRestore(t *testing.T) {
	ctx := context.Background()
	srv := pgtest.Get(t)
	src := srv.NewDatabase(t)
	a, err := Open(ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	storetest.Fill(t, a, 50)

	dump := filepath.Join(t.TempDir(), "cosmicac.dump")
	if out, err := exec.Command(srv.Tool(t, "pg_dump"), "-Fc", "-f", dump, "-d", src).CombinedOutput(); err != nil {
		t.Fatalf("pg_dump: %v\n%s", err, out)
	}
	dst := srv.NewDatabase(t)
	if out, err := exec.Command(srv.Tool(t, "pg_restore"), "--no-owner", "--exit-on-error", "-d", dst, dump).CombinedOutput(); err != nil {
		t.Fatalf("pg_restore: %v\n%s", err, out)
	}
	b, err := Open(ctx, dst)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var va, vb int
	if err := a.pool.QueryRow(ctx, "SELECT max(version) FROM schema_migrations").Scan(&va); err != nil {
		t.Fatal(err)
	}
	if err := b.pool.QueryRow(ctx, "SELECT max(version) FROM schema_migrations").Scan(&vb); err != nil || va != vb {
		t.Fatalf("restored at version %d (%v), want %d", vb, err, va)
	}
	storetest.Same(t, a, b)
	storetest.Writable(t, a, b)
}
