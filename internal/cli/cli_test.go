package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/store/postgres/pgtest"
	"github.com/cosmicac/cosmicac/internal/waittest"
)

// TestMain lets tests run this test binary as the cosmicac binary: with
// COSMICAC_TEST_MAIN=1 it is `cosmicac` itself (the user verbs alone; the
// component commands are internal/cli/components').
func TestMain(m *testing.M) {
	if os.Getenv("COSMICAC_TEST_MAIN") == "1" {
		os.Exit(Main(os.Args[1:]))
	}
	os.Exit(pgtest.Main(m)) // stops the PostgreSQL of the tests that start one
}

// runCLI runs the command line in-process and returns its exit code and
// output.
func runCLI(t *testing.T, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	a := &App{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb, Getenv: func(k string) string { return env[k] }}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	code := a.Run(ctx, args)
	return code, out.String(), errb.String()
}

func TestKeys(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "k.key")
	code, out, errs := runCLI(t, nil, "keys", "generate", "--out", key)
	if code != 0 {
		t.Fatalf("generate: exit %d: %s", code, errs)
	}
	pub := strings.TrimSpace(out)
	if _, err := fabric.ParsePublicKey(pub); err != nil {
		t.Fatalf("generate printed %q: %v", out, err)
	}
	if st, _ := os.Stat(key); st.Mode().Perm() != 0o600 {
		t.Fatalf("key mode %v", st.Mode().Perm())
	}
	if code, _, _ := runCLI(t, nil, "keys", "generate", "--out", key); code != ExitFailure {
		t.Fatalf("overwrite: exit %d, want %d", code, ExitFailure)
	}
	if code, out, _ := runCLI(t, nil, "keys", "show", "--key-file", key); code != 0 || strings.TrimSpace(out) != pub {
		t.Fatalf("show --key-file: %d %q", code, out)
	}
	dataDir := t.TempDir()
	id, err := fabric.LoadOrCreateIdentity(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	if code, out, _ := runCLI(t, nil, "keys", "show", "--data-dir", dataDir); code != 0 || strings.TrimSpace(out) != id.PublicKey().String() {
		t.Fatalf("show --data-dir: %d %q", code, out)
	}
	if code, _, _ := runCLI(t, nil, "keys", "show"); code != ExitUsage {
		t.Fatalf("show without args: exit %d, want %d", code, ExitUsage)
	}
}

func TestRPC(t *testing.T) {
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "cli.key")
	cliID, _ := fabric.GenerateIdentity()
	if err := fabric.WriteIdentityFile(keyFile, cliID); err != nil {
		t.Fatal(err)
	}
	srvID, _ := fabric.GenerateIdentity()
	allow := fabric.NewAllowList(cliID.PublicKey())
	n, err := fabric.New(fabric.Config{Component: "wrk-ork", Identity: srvID, Listen: "127.0.0.1:0", Policy: allow})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	n.Handle("fail", func(context.Context, *fabric.Request) (any, error) {
		return nil, fabric.Errorf("exceeds_node_gpus", "9 > 8")
	})
	peer := srvID.PublicKey().String() + "@" + n.Addr()

	code, out, errs := runCLI(t, nil, "rpc", "--peer", peer, "--method", "ping", "--key-file", keyFile)
	if code != 0 {
		t.Fatalf("ping: exit %d: %s", code, errs)
	}
	var pr fabric.PingReply
	if err := json.Unmarshal([]byte(out), &pr); err != nil || pr.Component != "wrk-ork" || pr.PublicKey != srvID.PublicKey().String() {
		t.Fatalf("ping printed %q (%v)", out, err)
	}
	code, _, errs = runCLI(t, nil, "rpc", "--peer", peer, "--method", "fail", "--key-file", keyFile)
	if code != ExitFailure || !strings.Contains(errs, "exceeds_node_gpus: 9 > 8") {
		t.Fatalf("failing method: exit %d, stderr %q", code, errs)
	}
	code, _, _ = runCLI(t, nil, "rpc", "--peer", peer, "--method", "ping", "--data", "{bad", "--key-file", keyFile)
	if code != ExitUsage {
		t.Fatalf("bad JSON: exit %d", code)
	}
	// A key not on the allow-list is refused.
	other := filepath.Join(dir, "other.key")
	runCLI(t, nil, "keys", "generate", "--out", other)
	code, _, errs = runCLI(t, nil, "rpc", "--peer", peer, "--method", "ping", "--key-file", other, "--timeout", "10s")
	if code != ExitFailure || !strings.Contains(errs, "refused") {
		t.Fatalf("unlisted key: exit %d, stderr %q", code, errs)
	}
}

func TestSilentErrorsAreNotPrinted(t *testing.T) {
	var errb bytes.Buffer
	a := &App{Stdin: strings.NewReader(""), Stdout: io.Discard, Stderr: &errb, Getenv: func(string) string { return "" }}
	// An exitError wrapping a silent error exits with its code and prints
	// nothing; any other error is printed.
	if got := a.report(context.Background(), &exitError{code: 9, err: silentExit{9}}); got != 9 || errb.Len() != 0 {
		t.Fatalf("silent: exit %d, stderr %q", got, errb.String())
	}
	if got := a.report(context.Background(), &exitError{code: 4, err: errors.New("boom")}); got != 4 || !strings.Contains(errb.String(), "error: boom") {
		t.Fatalf("loud: exit %d, stderr %q", got, errb.String())
	}
}

// lockedBuffer is a bytes.Buffer that a running command writes while the
// test reads it.
type lockedBuffer = waittest.Buffer
