package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/apiv1"
	"github.com/cosmicac/cosmicac/internal/appnode"
	"github.com/cosmicac/cosmicac/internal/appnode/appnodetest"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/ork/orkapi"
)

// waitWorker plays a worker for `jobs create --wait`, standing as the
// CLI's stderr: each status line the CLI prints for the state the job is
// in moves it to the next of states. So the job changes only once --wait
// has seen the state before, and every state shows, however the polls fall.
type waitWorker struct {
	t      *testing.T
	ork    *appnodetest.Ork
	states []cosmic.State // still to move the job to
	reason *cosmic.Reason // given with StateFailed

	mu   sync.Mutex
	out  bytes.Buffer // all the CLI wrote
	line []byte       // the line it has not finished
	id   string       // the job, once it has been created
	at   cosmic.State // the job's state, as last set
}

func newWaitWorker(t *testing.T, e *appnodetest.Env, states []cosmic.State, reason *cosmic.Reason) *waitWorker {
	return &waitWorker{t: t, ork: e.Ork, states: states, reason: reason, at: cosmic.StateQueued}
}

func (w *waitWorker) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.out.Write(p)
	w.line = append(w.line, p...)
	for {
		i := bytes.IndexByte(w.line, '\n')
		if i < 0 {
			return len(p), nil
		}
		w.printed(string(w.line[:i]))
		w.line = w.line[i+1:]
	}
}

// printed moves the job on if line is the status line of its state.
func (w *waitWorker) printed(line string) {
	// The line is "[ELAPSED] STATE…" (waitLines).
	if f := strings.Fields(elapsedPrefix.ReplaceAllString(line, "")); len(w.states) == 0 || len(f) == 0 || cosmic.State(f[0]) != w.at {
		return
	}
	if w.id == "" {
		// The CLI prints the first status line from the create's answer:
		// the job is in the ork, the only queued one.
		l, err := w.ork.ListJobs(context.Background(), orkapi.ListJobsParams{States: []cosmic.State{cosmic.StateQueued}})
		if err != nil || len(l.Jobs) != 1 {
			w.t.Errorf("the queued jobs: %+v, %v", l.Jobs, err)
			return
		}
		w.id = l.Jobs[0].ID
	}
	s := w.states[0]
	var r *cosmic.Reason
	if s == cosmic.StateFailed {
		r = w.reason
	}
	if err := w.ork.SetState(w.id, s, r); err != nil {
		w.t.Errorf("move job %s to %s: %v", w.id, s, err)
		return
	}
	w.states, w.at = w.states[1:], s
}

// run runs the CLI with w as its stderr, and fails t if w did not move the
// job through every state.
func (w *waitWorker) run(env map[string]string, args ...string) (code int, stdout, stderr string) {
	w.t.Helper()
	var out bytes.Buffer
	a := &App{Stdin: strings.NewReader(""), Stdout: &out, Stderr: w, Getenv: func(k string) string { return env[k] }}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	code = a.Run(ctx, args)
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.states) > 0 {
		w.t.Errorf("the job was left %s, not moved on to %v", w.at, w.states)
	}
	return code, out.String(), w.out.String()
}

// TestAgainstAppNode runs the user commands against the real app-node
// handler (with a fake ork), logged in with the bootstrap admin token.
func TestAgainstAppNode(t *testing.T) {
	e := appnodetest.NewEnv(t)
	home := t.TempDir()
	env := map[string]string{"HOME": home}

	code, out, errs := runCLI(t, env, "login", "--url", e.URL(), "--token-file", filepath.Join(e.DataDir, appnode.AdminTokenFile))
	if code != 0 || !strings.Contains(out, "Logged in to "+e.URL()) {
		t.Fatalf("login: exit %d, %q %s", code, out, errs)
	}

	key := strings.Repeat("0a", 32)
	if code, _, errs := runCLI(t, env, "racks", "register", "--id", "r1", "--location", "us", "--gpu-model", "GH100_H100_SXM5_80GB", "--worker-key", key); code != 0 {
		t.Fatalf("racks register: exit %d, %s", code, errs)
	}
	code, out, _ = runCLI(t, env, "racks", "list")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); code != 0 || len(lines) != 2 || strings.Fields(lines[1])[0] != "r1" {
		t.Errorf("racks list: exit %d\n%s", code, out)
	}

	// Create and wait: every state shows, exit 0 when running.
	w := newWaitWorker(t, e, []cosmic.State{cosmic.StatePending, cosmic.StateStarting, cosmic.StateRunning}, nil)
	code, out, errs = w.run(env, "jobs", "create", "--location", "us", "--image", "ubuntu", "--gpus", "8", "--name", "train",
		"--label", "team=ml", "--wait", "--poll-interval", "2ms", "-o", "json", "--", "sleep", "infinity")
	if code != 0 {
		t.Fatalf("create --wait: exit %d: %s", code, errs)
	}
	lines := waitLines(errs)
	if got := strings.Join(lines[1:], ","); got != "queued,pending,starting,running" {
		t.Errorf("--wait printed %q", errs)
	}
	var running cosmic.Job
	if err := json.Unmarshal([]byte(out), &running); err != nil || running.Status.State != cosmic.StateRunning || running.Spec.Labels["team"] != "ml" {
		t.Fatalf("create -o json: %q (%v)", out, err)
	}

	// A job that fails: exit 3 with reason and fix.
	reason := cosmic.NewReason(cosmic.ReasonExceedsNodeGPUs, "9 GPUs asked, nodes of us hold 8")
	w = newWaitWorker(t, e, []cosmic.State{cosmic.StateFailed}, &reason)
	code, _, errs = w.run(env, "jobs", "create", "--location", "us", "--image", "ubuntu", "--gpus", "9", "--wait", "--poll-interval", "2ms")
	if code != ExitJobFailed || !strings.Contains(errs, "exceeds_node_gpus: "+reason.Message) || !strings.Contains(errs, "fix: "+reason.Fix) {
		t.Errorf("failed job: exit %d, %s", code, errs)
	}

	// API validation errors: exit 1 with code, message and each field.
	code, _, errs = runCLI(t, env, "jobs", "create", "--location", "eu", "--image", "ubuntu")
	if code != ExitFailure || strings.Count(errs, "no rack in location \"eu\"") != 1 || !strings.Contains(errs, "error: invalid: location: no rack in location \"eu\"") {
		t.Errorf("API 400: exit %d, %s", code, errs)
	}

	// List, filters, get by prefix.
	code, out, _ = runCLI(t, env, "jobs", "list", "--state", "failed", "-o", "json")
	var l apiv1.JobList
	if err := json.Unmarshal([]byte(out), &l); code != 0 || err != nil || l.Total != 1 || l.Items[0].Status.State != cosmic.StateFailed {
		t.Errorf("list --state failed: exit %d, %q", code, out)
	}
	code, out, _ = runCLI(t, env, "jobs", "list", "--label", "team=ml")
	if rows := strings.Split(strings.TrimSpace(out), "\n"); code != 0 || len(rows) != 2 || !strings.HasPrefix(rows[1], running.ID) {
		t.Errorf("list --label: exit %d\n%s", code, out)
	}
	code, out, errs = runCLI(t, env, "jobs", "get", running.ID[:8])
	if code != 0 || !strings.Contains(out, "train") || !strings.Contains(out, "History:") {
		t.Errorf("get: exit %d, %q %s", code, out, errs)
	}

	// Actions.
	for _, c := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"label", running.ID, "stage=dev"}, 0, "label stage=dev"},
		{[]string{"delete", running.ID}, ExitFailure, "conflict"},
		{[]string{"restart", running.ID}, 0, "(restarting)"},
		{[]string{"kill", running.ID}, 0, "(stopped)"},
		{[]string{"restart", running.ID}, 0, "(queued)"},
		{[]string{"delete", running.ID, "--force"}, 0, running.ID},
		{[]string{"get", running.ID}, ExitFailure, "not_found"},
	} {
		code, out, errs := runCLI(t, env, append([]string{"jobs"}, c.args...)...)
		if code != c.code || !strings.Contains(out+errs, c.msg) {
			t.Errorf("%v: exit %d (want %d), %q %s", c.args, code, c.code, out, errs)
		}
	}

	// jobs command round trip through the API.
	code, out, errs = runCLI(t, env, "jobs", "command", "--location", "us", "--image", "ubuntu", "--gpus", "2")
	if code != 0 || !strings.HasPrefix(out, "cosmicac jobs create ") || !strings.Contains(out, "--gpus 2") {
		t.Errorf("jobs command: exit %d, %q %s", code, out, errs)
	}

	// A viewer may not create jobs; a bad token is told to log in.
	viewer := e.AddUser(t, "val", "default", cosmic.RoleViewer)
	code, _, errs = runCLI(t, map[string]string{envURL: e.URL(), envToken: viewer}, "jobs", "create", "--location", "us", "--image", "ubuntu")
	if code != ExitFailure || !strings.Contains(errs, "forbidden") {
		t.Errorf("viewer create: exit %d, %s", code, errs)
	}
	code, _, errs = runCLI(t, map[string]string{envURL: e.URL(), envToken: "nope"}, "jobs", "list")
	if code != ExitFailure || !strings.Contains(errs, "not logged in or token invalid: run `cosmicac login`") {
		t.Errorf("bad token: exit %d, %s", code, errs)
	}
}
