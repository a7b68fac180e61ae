package components

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cosmicac/cosmicac/internal/apiv1"
	"github.com/cosmicac/cosmicac/internal/appnode"
	"github.com/cosmicac/cosmicac/internal/appnode/appnodetest"
	"github.com/cosmicac/cosmicac/internal/cli"
	"github.com/cosmicac/cosmicac/internal/store/sqlite"
)

// TestAdminTokenIsTheWayBackIn: with the bootstrap admin's only token gone
// (no password, and a restart mints none once users exist), `cosmicac
// admin token --data-dir` mints a platform admin's token in the database,
// which the app-node then takes, and the audit log says so; bad flags are
// usage errors that create nothing (issue 32, item 2).
func TestAdminTokenIsTheWayBackIn(t *testing.T) {
	ctx := context.Background()
	dataDir := t.TempDir()
	db := filepath.Join(dataDir, "app.db")
	st, err := sqlite.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	if _, created, err := appnode.Bootstrap(ctx, st, dataDir); err != nil || !created {
		t.Fatalf("bootstrap: %v %v", created, err)
	}
	if err := st.DeleteToken(ctx, "bootstrap-admin"); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	for _, args := range [][]string{
		{"admin", "token"},
		{"admin", "token", "--data-dir", t.TempDir()},
		{"admin", "token", "--data-dir", dataDir, "--user", "nobody"},
		{"admin", "token", "--data-dir", dataDir, "--expires-in", "1s"},
	} {
		if code, out, errs := runCLI(t, nil, args...); code != cli.ExitUsage || out != "" || errs == "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want a usage error", args, code, out, errs)
		}
	}

	code, out, errs := runCLI(t, nil, "admin", "token", "--data-dir", dataDir)
	if code != 0 {
		t.Fatalf("admin token: exit %d: %s", code, errs)
	}
	secret := strings.TrimSpace(out)
	if !strings.HasPrefix(secret, appnode.TokenPrefix) || !strings.Contains(errs, "audit log") {
		t.Fatalf("admin token printed %q, %q", out, errs)
	}

	st, err = sqlite.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	cfg := appnode.DefaultConfig()
	cfg.DataDir = dataDir
	app, err := appnode.New(cfg, appnode.Deps{Ork: appnodetest.NewOrk(), Accounts: st, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	get := func(path string, v any) {
		t.Helper()
		r := httptest.NewRequest("GET", path, nil)
		r.Header.Set("Authorization", "Bearer "+secret)
		rec := httptest.NewRecorder()
		app.Handler().ServeHTTP(rec, r)
		if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), v) != nil {
			t.Fatalf("GET %s with the minted token: %d %s", path, rec.Code, rec.Body)
		}
	}
	var me apiv1.WhoAmI
	get("/api/v1/whoami", &me)
	if me.User != appnode.BootstrapUser || !me.PlatformAdmin {
		t.Errorf("the minted token is %+v, want the platform admin %s", me, appnode.BootstrapUser)
	}
	var log apiv1.AuditList
	get("/api/v1/audit?team=*&action="+appnode.AuditAdminToken, &log)
	if len(log.Items) != 1 || log.Items[0].User != appnode.BootstrapUser || log.Items[0].Remote != "host" {
		t.Errorf("the audit log of admin.token: %+v", log.Items)
	}
}
