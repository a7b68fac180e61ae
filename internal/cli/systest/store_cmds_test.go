package systest

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/apiv1"
	"github.com/cosmicac/cosmicac/internal/cli"
	"github.com/cosmicac/cosmicac/internal/client"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/store/postgres/pgtest"
	"github.com/cosmicac/cosmicac/internal/store/sqlite"
)

// TestUpBackupThenCopyToPostgres: `cosmicac backup` copies the database
// of a running `cosmicac up`; after up stops, `cosmicac store copy` moves
// its SQLite file into PostgreSQL, and up started on PostgreSQL has the
// job running, the user signs in with their password, and the admin token
// and the API key work. A second copy into it is refused.
func TestUpBackupThenCopyToPostgres(t *testing.T) {
	home, dataDir := t.TempDir(), t.TempDir()
	up := startUp(t, home, dataDir)
	tok, err := os.ReadFile(filepath.Join(dataDir, "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	token := strings.TrimSpace(string(tok))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := client.New(up.url, token)
	j, err := c.CreateJob(ctx, cosmic.Spec{Type: cosmic.TypeGPUContainer, Name: "moved", Location: "us", Image: "ubuntu:24.04", Resources: cosmic.Resources{GPU: 2}})
	if err != nil {
		t.Fatal(err)
	}
	if j, err = c.WaitJob(ctx, j.ID, client.Settled, nil); err != nil || j.Status.State != cosmic.StateRunning {
		t.Fatalf("job: %s (%v)", j.Status.State, err)
	}
	if _, err := c.CreateUser(ctx, apiv1.CreateUser{Name: "ana", Password: "correct horse battery"}); err != nil {
		t.Fatal(err)
	}
	key, err := c.CreateAPIKey(ctx, "k", "default")
	if err != nil {
		t.Fatal(err)
	}

	db := filepath.Join(dataDir, "cosmicac.db")
	backup := filepath.Join(t.TempDir(), "backup.db")
	if code, _, errs := runCLI(t, nil, "backup", "--database", db, "--out", backup); code != 0 {
		t.Fatalf("backup of the running up: exit %d: %s", code, errs)
	}
	if code, _, errs := runCLI(t, nil, "backup", "--database", db, "--out", backup); code == 0 || !strings.Contains(errs, "exists") {
		t.Errorf("backup onto an existing file: exit %d, %q", code, errs)
	}
	b, err := sqlite.Open(backup)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := b.GetJob(ctx, j.ID); err != nil || got.Spec.Name != "moved" {
		t.Errorf("the job in the backup: %+v, %v", got, err)
	}
	b.Close()

	up.cmd.Process.Signal(os.Interrupt)
	up.cmd.Wait()
	dsn := pgtest.DSN(t)
	if code, out, errs := runCLI(t, nil, "store", "copy", "--from", db, "--to", dsn); code != 0 {
		t.Fatalf("store copy: exit %d: %s%s", code, out, errs)
	}
	if code, _, errs := runCLI(t, nil, "store", "copy", "--from", db, "--to", dsn); code == 0 || !strings.Contains(errs, "not empty") {
		t.Errorf("a second copy: exit %d, %q; want refused, not empty", code, errs)
	}
	os.Rename(db, db+".moved") // up on PostgreSQL must not need it

	up2 := startUp(t, home, dataDir, "--database", dsn)
	c2 := client.New(up2.url, token)
	if got, err := c2.WaitJob(ctx, j.ID, client.Settled, nil); err != nil || got.Status.State != cosmic.StateRunning {
		t.Fatalf("the job on PostgreSQL: %s (%v)", got.Status.State, err)
	}
	if _, err := client.New(up2.url, "").Login(ctx, apiv1.Login{User: "ana", Password: "correct horse battery"}); err != nil {
		t.Errorf("ana's password on PostgreSQL: %v", err)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, up2.url+"/inference/v1/models", nil)
	req.Header.Set("Authorization", "Bearer "+key.Key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("the API key on PostgreSQL: GET /inference/v1/models = %d", resp.StatusCode)
	}
}

// TestStoreCommandsRefuseBadUsage: missing or wrong flags are usage
// errors (exit 2) and write nothing.
func TestStoreCommandsRefuseBadUsage(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"backup"},
		{"backup", "--database", filepath.Join(dir, "a.db")},
		{"backup", "--database", "postgres://u@h/db", "--out", filepath.Join(dir, "b.db")},
		{"backup", "--database", filepath.Join(dir, "a?.db"), "--out", filepath.Join(dir, "b.db")},
		{"store", "copy", "--from", filepath.Join(dir, "a.db")},
		{"store", "copy", "--from", "postgres://u@h/db", "--to", "postgres://u@h/db"},
		{"store", "copy", "--from", filepath.Join(dir, "a.db"), "--to", filepath.Join(dir, "b.db")},
		{"store", "copy", "--from", filepath.Join(dir, "a.db"), "--to", "postgres://u:hunter2@h:port/db"},
	} {
		code, _, errs := runCLI(t, nil, args...)
		if code != cli.ExitUsage || strings.Contains(errs, "hunter2") {
			t.Errorf("%v: exit %d, %q; want a usage error", args, code, errs)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("files written: %v", ents)
	}
}
