package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/config"
	"github.com/cosmicac/cosmicac/internal/cosmictest"
	"github.com/cosmicac/cosmicac/internal/platform"
	"github.com/cosmicac/cosmicac/internal/waittest"
)

// startCLI runs the CLI in the background until ctx ends; the returned
// channel gets its exit code.
func startCLI(ctx context.Context, env map[string]string, out, errs *lockedBuffer, args ...string) <-chan int {
	a := &App{Stdin: strings.NewReader(""), Stdout: out, Stderr: errs, Getenv: func(k string) string { return env[k] }}
	code := make(chan int, 1)
	go func() { code <- a.Run(ctx, args) }()
	return code
}

// `jobs get NAME -w` prints a line per status change until the job is
// deleted, and `jobs list -w` prints the list again as it changes: both
// against the platform, whose API holds each request until the jobs
// change.
func TestWatchOnThePlatform(t *testing.T) {
	e := cosmictest.NewEnv(t, func(c *platform.Config) { c.Sim.Step = config.Duration(50 * time.Millisecond) })
	tok, err := e.P.AdminToken()
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"COSMICAC_URL": e.P.URL, "COSMICAC_TOKEN": tok, "HOME": t.TempDir()}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var listOut, listErr lockedBuffer
	listDone := startCLI(ctx, env, &listOut, &listErr, "jobs", "list", "--watch")
	waittest.Until(t, func() bool { return strings.Contains(listOut.String(), "no jobs") }, "the empty list; stderr %s", listErr.String())

	j := e.Create(cosmictest.Container("watched", 1))
	var getOut, getErr lockedBuffer
	getDone := startCLI(ctx, env, &getOut, &getErr, "jobs", "get", "watched", "-w")
	waittest.Until(t, func() bool { return strings.Contains(getOut.String(), "  running\n") }, "get -w to show running: %s %s", getOut.String(), getErr.String())
	waittest.Until(t, func() bool {
		return strings.Contains(listOut.String(), j.ID) && strings.Contains(listOut.String(), "running")
	}, "list -w to show the job running: %s", listOut.String())

	if _, err := e.Client.KillJob(e.Ctx, j.ID); err != nil {
		t.Fatal(err)
	}
	waittest.Until(t, func() bool { return strings.Contains(getOut.String(), "  stopped") }, "get -w to show stopped: %s", getOut.String())
	if _, err := e.Client.DeleteJob(e.Ctx, j.ID, false); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-getDone:
		if code != 0 || !strings.Contains(getErr.String(), "job "+j.ID+" deleted") {
			t.Fatalf("get -w after the delete: exit %d, %s", code, getErr.String())
		}
	case <-time.After(waittest.Timeout):
		t.Fatalf("get -w did not end with the job's delete: %s", getOut.String())
	}
	// Each line is a change: no state twice in a row.
	var states []string
	for l := range strings.Lines(strings.TrimSpace(getOut.String())) {
		f := strings.Fields(l)
		states = append(states, strings.TrimSuffix(f[1], ":"))
	}
	for i := 1; i < len(states); i++ {
		if states[i] == states[i-1] && !strings.Contains(getOut.String(), "%") {
			t.Errorf("get -w printed %s twice in a row: %s", states[i], getOut.String())
		}
	}
	waittest.Until(t, func() bool { return strings.HasSuffix(listOut.String(), "no jobs\n") }, "list -w to show the job gone: %s", listOut.String())

	cancel()
	if code := <-listDone; code != ExitInterrupted {
		t.Fatalf("list -w after Ctrl-C: exit %d, %s", code, listErr.String())
	}
}
