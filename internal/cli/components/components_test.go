package components

import (
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cosmicac/cosmicac/internal/cli"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/trust"
	"github.com/spf13/cobra"
)

// TestDatabaseFlagRefusesBadValues: a --database that names no database
// (a URL of another scheme, a postgres:// URL that does not parse) is a
// usage error of every command that takes one, and the password of a URL
// is not repeated.
func TestDatabaseFlagRefusesBadValues(t *testing.T) {
	for _, cmd := range [][]string{
		{"wrk-ork", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0"},
		{"app-node", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--ork", fabric.PublicKey{}.String() + "@127.0.0.1:1", "--api-listen", "127.0.0.1:0"},
		{"up", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--metrics-listen", ""},
	} {
		for _, db := range []string{"mysql://u:hunter2@h/db", "postgres://u:hunter2@h:port/db"} {
			code, _, errs := runCLI(t, map[string]string{"HOME": t.TempDir()}, append(cmd, "--database", db)...)
			if code != cli.ExitUsage || !strings.Contains(errs, "--database") || strings.Contains(errs, "hunter2") {
				t.Errorf("%s --database %s: exit %d, %q; want a usage error without the password", cmd[0], db, code, errs)
			}
		}
	}
}

func TestConfigFileAndFlags(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "ork.yaml")
	os.WriteFile(cfgPath, []byte("dataDir: "+dir+"\nlisten: 127.0.0.1:1\nbogus: 1\n"), 0o600)
	code, _, errs := runCLI(t, nil, "wrk-ork", "--config", cfgPath)
	if code != cli.ExitUsage || !strings.Contains(errs, "bogus") {
		t.Fatalf("unknown config field: exit %d, %q", code, errs)
	}
	if code, _, errs := runCLI(t, nil, "app-node", "--data-dir", dir); code != cli.ExitUsage || !strings.Contains(errs, "--ork") {
		t.Fatalf("app-node without --ork: exit %d, %q", code, errs)
	}
}

func TestFlagsOverrideConfigFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "c.yaml")
	os.WriteFile(path, []byte("dataDir: /from/file\nlisten: 1.1.1.1:1\noperators: [a, b]\nappNodeKeys: [d]\n"), 0o600)
	var cfg componentFlags
	cmd := &cobra.Command{Use: "x", RunE: func(cmd *cobra.Command, _ []string) error { return loadConfigFile(cmd, path, &cfg) }}
	cfg.bind(cmd.Flags(), "0.0.0.0:9", trust.Ork)
	cmd.SetArgs([]string{"--listen", "127.0.0.1:2", "--operator", "c"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if cfg.DataDir != "/from/file" || cfg.Listen != "127.0.0.1:2" || !slices.Equal(cfg.Operators, []string{"c"}) || !slices.Equal(cfg.AppNodeKeys, []string{"d"}) {
		t.Fatalf("cfg = %+v: want dataDir and the app-node's key from the file, listen and operators from flags", cfg)
	}
}

// A component whose --metrics-listen port is taken fails at start with the
// reason, rather than running without its metrics.
func TestTakenMetricsPortFailsAtStart(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	orkID, _ := fabric.GenerateIdentity()
	ork := orkID.PublicKey().String() + "@127.0.0.1:1"
	for _, args := range [][]string{
		{"wrk-ork", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0"},
		{"app-node", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--ork", ork, "--api-listen", "127.0.0.1:0"},
		{"wrk-directory", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--ork", ork},
	} {
		code, _, errs := runCLI(t, nil, append(args, "--metrics-listen", taken.Addr().String())...)
		if code == 0 || !strings.Contains(errs, "--metrics-listen") || !strings.Contains(errs, "address already in use") {
			t.Errorf("%s with a taken metrics port: exit %d, %q", args[0], code, errs)
		}
	}
}

// A component's wrong command line exits 2 and says what would be right.
func TestComponentUsageErrors(t *testing.T) {
	code, out, errs := runCLI(t, nil, "wrk-ork", "--data-dir", t.TempDir(), "--lease-ttl", "2s", "--lease-renew", "1500ms")
	if want := "must be positive and at most half the ttl 2s"; code != cli.ExitUsage || !strings.Contains(errs, want) || out != "" {
		t.Errorf("wrk-ork: exit %d, stdout %q, stderr %q; want exit 2 and %q", code, out, errs, want)
	}
}
