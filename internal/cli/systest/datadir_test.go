package systest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/cosmicac/cosmicac/internal/cli"
	"github.com/cosmicac/cosmicac/internal/client"
	"github.com/cosmicac/cosmicac/internal/cosmic"
)

// TestSecondUpOnTheSameDataDirRefuses: a second `cosmicac up` on the data
// dir of a running one exits non-zero at once, naming the first's pid and
// address, and leaves the first's jobs as they were: still running, their
// status history without a new entry (such as a restart_requested).
func TestSecondUpOnTheSameDataDirRefuses(t *testing.T) {
	home, dataDir := t.TempDir(), t.TempDir()
	up := startUp(t, home, dataDir)
	tok, err := os.ReadFile(filepath.Join(dataDir, "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	c := client.New(up.url, strings.TrimSpace(string(tok)))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	j, err := c.CreateJob(ctx, cosmic.Spec{Type: cosmic.TypeGPUContainer, Name: "keep", Location: "us",
		Image: "ubuntu:24.04", Resources: cosmic.Resources{GPU: 2}})
	if err != nil {
		t.Fatal(err)
	}
	if j, err = c.WaitJob(ctx, j.ID, client.Settled, nil); err != nil || j.Status.State != cosmic.StateRunning {
		t.Fatalf("job: %s (%v)", j.Status.State, err)
	}

	second := exec.CommandContext(ctx, os.Args[0], "up", "--data-dir", dataDir, "--listen", freePort(t),
		"--sim-step", "5ms", "--heartbeat", "50ms")
	second.Env = append(os.Environ(), "COSMICAC_TEST_MAIN=1", "HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"))
	var stdout, stderr bytes.Buffer
	second.Stdout, second.Stderr = &stdout, &stderr
	err = second.Run()
	if code := second.ProcessState.ExitCode(); err == nil || code != cli.ExitFailure {
		t.Fatalf("second up: exit %d (%v), want %d; stdout %q, stderr %q", code, err, cli.ExitFailure, stdout.String(), stderr.String())
	}
	want := fmt.Sprintf("data dir %s is in use by cosmicac up (pid %d, %s), started ", dataDir, up.cmd.Process.Pid, up.url)
	if !strings.Contains(stderr.String(), want) {
		t.Errorf("second up's stderr %q: want %q", stderr.String(), want)
	}
	if strings.Contains(stdout.String(), "is up") {
		t.Errorf("second up printed %q", stdout.String())
	}

	// The first goes on, its job untouched.
	after, err := c.GetJob(ctx, j.ID)
	if err != nil {
		t.Fatalf("first up after the second's refusal: %v", err)
	}
	if after.Status.State != cosmic.StateRunning {
		t.Errorf("job is %s after the second up, want running", after.Status.State)
	}
	if diff := cmp.Diff(j.Status.History, after.Status.History); diff != "" {
		t.Errorf("the job's history changed (-before +after):\n%s", diff)
	}
	list, err := c.ListJobs(ctx, client.ListOptions{})
	if err != nil || list.Total != 1 {
		t.Errorf("jobs after the second up: %+v (%v), want the one", list, err)
	}
}

// TestSecondComponentOnTheSameDataDirRefuses: the standalone components
// lock their data dir too; a second one names the first's pid and fabric
// address, and once the first is gone the dir can be used again.
func TestSecondComponentOnTheSameDataDirRefuses(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	first, out := componentCmd(t, []string{"fabric"}, "wrk-ork", "--data-dir", dir, "--listen", "127.0.0.1:0")
	addr := out["fabric"][strings.Index(out["fabric"], "@")+1:]
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("data dir 0755 after wrk-ork started: %v (%v), want 0700", fi.Mode().Perm(), err)
	}
	for _, args := range [][]string{
		{"wrk-ork", "--data-dir", dir, "--listen", "127.0.0.1:0"},
		{"wrk-monitor", "--data-dir", dir, "--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0", "--app-node-url", "http://127.0.0.1:1", "--ork", out["fabric"]},
		{"wrk-server-sim", "--data-dir", dir, "--listen", "127.0.0.1:0", "--ork", out["fabric"]},
	} {
		code, _, errs := runCLI(t, nil, args...)
		want := fmt.Sprintf("data dir %s is in use by wrk-ork (pid %d, %s)", dir, first.Process.Pid, addr)
		if code != cli.ExitFailure || !strings.Contains(errs, want) {
			t.Errorf("%s on a locked dir: exit %d, stderr %q; want exit %d and %q", args[0], code, errs, cli.ExitFailure, want)
		}
	}
	first.Process.Signal(os.Interrupt)
	first.Wait()
	componentCmd(t, []string{"fabric"}, "wrk-ork", "--data-dir", dir, "--listen", "127.0.0.1:0")
}
