package components

import (
	"context"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/cli"
)

// TestUpBannerSaysWhatTheSimulatedRackIs: the banner of `cosmicac up` on
// the simulated rack says that no VM runs and a job's shell is a shell on
// this machine as the user running up, which someone trying CosmicAC must
// know before opening one.
func TestUpBannerSaysWhatTheSimulatedRackIs(t *testing.T) {
	home := t.TempDir()
	env := map[string]string{"HOME": home, "XDG_CONFIG_HOME": filepath.Join(home, ".config")}
	var stdout, stderr lockedBuffer
	a := &cli.App{Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr, Getenv: func(k string) string { return env[k] }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- a.Run(ctx, []string{"up", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
			"--sim-step", "5ms"})
	}()
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(stdout.String(), "Ctrl-C to stop") {
		select {
		case code := <-done:
			cancel()
			t.Fatalf("up exited %d before its banner: %s\n%s", code, stdout.String(), stderr.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("no banner: %s", stdout.String())
		}
	}
	cancel()
	if code := <-done; code != 0 {
		t.Errorf("up after Ctrl-C: exit %d: %s", code, stderr.String())
	}
	banner := strings.Join(strings.Fields(stdout.String()), " ")
	who := "this process's user"
	if u, err := user.Current(); err == nil && u.Username != "" {
		who = "user " + u.Username
	}
	for _, want := range []string{
		"(simulated, 5ms a step)",
		"The simulated rack runs no VM and pulls no image",
		"`cosmicac jobs shell` opens a shell on this machine as " + who + ", not in a VM",
		"`cosmicac jobs ssh` reaches CosmicAC's simulated SSH server (simsshd)",
		"docs/simulated-rack.md",
	} {
		if !strings.Contains(banner, want) {
			t.Errorf("banner lacks %q:\n%s", want, stdout.String())
		}
	}
}

// TestUpRackKinds: `up --rack` takes every kind of the platform's
// registry; a kind's flags without it, two racks at once, or an unknown
// kind are usage errors (exit 2) naming what to give, and nothing starts.
func TestUpRackKinds(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--rack", "nope"}, "want one of sim, qemu, k8s"},
		{[]string{"--rack", "k8s"}, "--rack k8s: give the cluster's --kubeconfig"},
		{[]string{"--rack", "qemu", "--kubeconfig", "/nonexistent"}, "--rack qemu and --kubeconfig are two racks"},
		{[]string{"--rack", "sim", "--kubeconfig", "/nonexistent"}, "--rack sim and --kubeconfig are two racks"},
		{[]string{"--rack-config", "x.yaml"}, "go with --rack k8s"},
		{[]string{"--image", "u=/nonexistent"}, "go with --rack qemu"},
	} {
		args := append([]string{"up", "--data-dir", dir, "--listen", "127.0.0.1:0"}, tc.args...)
		code, _, errs := runCLI(t, nil, args...)
		if code != cli.ExitUsage || !strings.Contains(errs, tc.want) {
			t.Errorf("%v: exit %d, %q; want %d and %q", tc.args, code, errs, cli.ExitUsage, tc.want)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) > 0 {
		t.Errorf("a refused up left %d files in its data directory", len(entries))
	}
}
