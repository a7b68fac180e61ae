package cosmictest

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/agent/agentapi"
	"github.com/cosmicac/cosmicac/internal/agent/shellproto"
	"github.com/cosmicac/cosmicac/internal/appnode"
	"github.com/cosmicac/cosmicac/internal/client"
	"github.com/cosmicac/cosmicac/internal/config"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/platform"
	"github.com/cosmicac/cosmicac/internal/waittest"
	"github.com/cosmicac/cosmicac/internal/worker"
)

// shell runs argv in the job's VM through the platform's API, as `cosmicac
// jobs shell JOB -- ARGV` does (pipe mode), and returns the remote exit
// code and output.
func (e *Env) shell(token, jobID, stdin string, argv ...string) (code int, stdout, stderr string, err error) {
	e.T.Helper()
	d := agentapi.HTTPShellDialer{BaseURL: e.P.URL, Token: token}
	c, _, err := d.DialShell(e.Ctx, jobID, shellproto.OpenParams{Argv: argv})
	if err != nil {
		return 0, "", "", err
	}
	var out, errb bytes.Buffer
	st, err := agentapi.RunSession(e.Ctx, c, agentapi.SessionIO{Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &errb})
	return st.Code, out.String(), errb.String(), err
}

// records reads the job's log records until have says they are all there;
// the test fails, printing the last records read, if they never are.
func (e *Env) records(id string, have func([]client.LogRecord) bool) []client.LogRecord {
	e.T.Helper()
	var recs []client.LogRecord
	waittest.NoError(e.T, func() error {
		recs = recs[:0]
		err := e.Client.JobLogs(e.Ctx, id, client.LogOptions{}, func(ev client.LogEvent) error {
			if ev.Record != nil {
				recs = append(recs, *ev.Record)
			}
			return nil
		})
		if err != nil {
			e.T.Fatal(err)
		}
		if !have(recs) {
			return fmt.Errorf("not all there; the job's log:\n%s", dump(recs))
		}
		return nil
	}, "the log records of job %s", id)
	return recs
}

// dump is records one a line, with their source and stream.
func dump(recs []client.LogRecord) string {
	var b strings.Builder
	for _, r := range recs {
		fmt.Fprintf(&b, "%s/%s: %s\n", r.Source, r.Stream, r.Line)
	}
	return b.String()
}

// indexOf is the index of the first record whose line contains s, or -1.
func indexOf(recs []client.LogRecord, s string) int {
	return slices.IndexFunc(recs, func(r client.LogRecord) bool { return strings.Contains(r.Line, s) })
}

func lines(recs []client.LogRecord, source string) []string {
	var out []string
	for _, r := range recs {
		if r.Source == source {
			out = append(out, r.Line)
		}
	}
	return out
}

// TestContainerJobRunsWhenItsAgentIsReady: the simulated rack starts the
// replica's instance agent when its VMI boots and reports it running only
// once the agent is ready; the agent runs while the job does.
func TestContainerJobRunsWhenItsAgentIsReady(t *testing.T) {
	e := NewEnv(t)
	j := e.Create(Container("workstation", 1))
	j = e.WaitState(j.ID, cosmic.StateRunning)
	if _, ok := e.P.AgentKey(j.ID, 0); !ok {
		t.Fatal("the running job has no agent")
	}
	recs := e.records(j.ID, func(r []client.LogRecord) bool { return indexOf(r, "replica 0 running") >= 0 })
	started, ready, running := indexOf(recs, "instance agent of replica 0 started"), indexOf(recs, "instance agent of replica 0 ready"), indexOf(recs, "replica 0 running")
	if started < 0 || ready < started || running < ready {
		t.Fatalf("want agent started < agent ready < running, got %d %d %d; system log:\n%s", started, ready, running, strings.Join(lines(recs, "system"), "\n"))
	}
	// Killing the job stops its agent.
	if _, err := e.Client.KillJob(e.Ctx, j.ID); err != nil {
		t.Fatal(err)
	}
	waittest.Until(t, func() bool { _, ok := e.P.AgentKey(j.ID, 0); return !ok }, "the killed job's agent to stop")
}

// TestJobsShellThroughThePlatform: `jobs shell` reaches the job's agent
// through the app-node: output and exit codes, stdin, who may open one,
// sessions recorded, and the job keeps running after its shells close.
func TestJobsShellThroughThePlatform(t *testing.T) {
	e := NewEnv(t)
	j := e.Create(Container("workstation", 1))
	e.WaitState(j.ID, cosmic.StateRunning)
	admin, err := e.P.AdminToken()
	if err != nil {
		t.Fatal(err)
	}

	code, out, _, err := e.shell(admin, j.ID, "", "echo", "hi")
	if err != nil || code != 0 || out != "hi\n" {
		t.Fatalf("echo hi: code %d, out %q, err %v", code, out, err)
	}
	if code, _, _, err := e.shell(admin, j.ID, "", "sh", "-c", "exit 3"); err != nil || code != 3 {
		t.Fatalf("exit 3: code %d, err %v", code, err)
	}
	if code, out, _, err := e.shell(admin, j.ID, "a\nb\n", "wc", "-l"); err != nil || code != 0 || strings.TrimSpace(out) != "2" {
		t.Fatalf("stdin: code %d, out %q, err %v", code, out, err)
	}

	// A member of the job's team may; a viewer may not; another team's
	// user does not see the job.
	member := e.AddUser("bob", appnode.BootstrapTeam, cosmic.RoleMember)
	if code, out, _, err := e.shell(member, j.ID, "", "echo", "bob"); err != nil || code != 0 || out != "bob\n" {
		t.Fatalf("member: code %d, out %q, err %v", code, out, err)
	}
	viewer := e.AddUser("vera", appnode.BootstrapTeam, cosmic.RoleViewer)
	var he *agentapi.HTTPError
	if _, _, _, err := e.shell(viewer, j.ID, "", "true"); !errors.As(err, &he) || he.Status != http.StatusForbidden {
		t.Fatalf("viewer: %v, want 403", err)
	}
	other := e.AddUser("olga", "other-team", cosmic.RoleMember)
	if _, _, _, err := e.shell(other, j.ID, "", "true"); !errors.As(err, &he) || he.Status != http.StatusNotFound {
		t.Fatalf("another team's user: %v, want 404", err)
	}
	if _, _, _, err := e.shell("", j.ID, "", "true"); !errors.As(err, &he) || he.Status != http.StatusUnauthorized {
		t.Fatalf("no token: %v, want 401", err)
	}

	// The four shells are closed: the agent has recorded each end. A job
	// placed after that runs only once the rack's report of it reached the
	// ork, and a report carries every change the rack made before (one the
	// closes would have caused too), so the job's state is then final: it
	// runs on, and takes more.
	e.records(j.ID, func(r []client.LogRecord) bool {
		return strings.Count(strings.Join(lines(r, "system"), "\n"), "closed after") >= 4
	})
	later := e.Create(Container("later", 1))
	e.WaitState(later.ID, cosmic.StateRunning)
	if got, err := e.Client.GetJob(e.Ctx, j.ID); err != nil || got.Status.State != cosmic.StateRunning {
		t.Fatalf("after the shells: %v %v", got.Status.State, err)
	}
	if code, out, _, err := e.shell(admin, j.ID, "", "echo", "again"); err != nil || code != 0 || out != "again\n" {
		t.Fatalf("again: code %d, out %q, err %v", code, out, err)
	}

	// Every session is in the job's system log: who, and how long.
	recs := e.records(j.ID, func(r []client.LogRecord) bool {
		return indexOf(r, "opened by bob") >= 0 && strings.Count(strings.Join(lines(r, "system"), "\n"), "closed after") >= 5
	})
	sys := strings.Join(lines(recs, "system"), "\n")
	if !strings.Contains(sys, "opened by admin") || !strings.Contains(sys, "opened by bob") || strings.Count(sys, "closed after") < 5 {
		t.Fatalf("sessions not recorded; system log:\n%s", sys)
	}

	// Only a running gpu-container job has a shell.
	if _, err := e.Client.KillJob(e.Ctx, j.ID); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := e.shell(admin, j.ID, "", "true"); !errors.As(err, &he) || he.Status != http.StatusConflict {
		t.Fatalf("killed job: %v, want 409", err)
	}
	inf := e.Create(VLLM("llm", 1, 1))
	if _, _, _, err := e.shell(admin, inf.ID, "", "true"); !errors.As(err, &he) || he.Status != http.StatusConflict {
		t.Fatalf("inference job: %v, want 409", err)
	}

	// The routes are in the OpenAPI document.
	doc, err := e.Client.OpenAPI(e.Ctx)
	if err != nil || !bytes.Contains(doc, []byte(`"/api/v1/jobs/{id}/shell"`)) || !bytes.Contains(doc, []byte(`"/api/v1/jobs/{id}/ssh"`)) {
		t.Fatalf("OpenAPI document lacks the shell and ssh routes (err %v)", err)
	}
}

// TestCommandExitZeroStopsTheJob: a job's command that exits 0 ends the
// job stopped with exit code 0 and its GPUs free; its output is in the
// job's application log, in order.
func TestCommandExitZeroStopsTheJob(t *testing.T) {
	e := NewEnv(t)
	spec := Container("batch", 8)
	spec.Command = []string{"sh", "-c", "echo out; echo $GREETING; exit 0"}
	spec.EnvVars = []cosmic.EnvVar{{Name: "GREETING", Value: "hello"}}
	j := e.Create(spec)
	j = e.WaitState(j.ID, cosmic.StateStopped, cosmic.StateFailed)
	if j.Status.State != cosmic.StateStopped || j.Status.ExitCode == nil || *j.Status.ExitCode != 0 {
		t.Fatalf("state %s, exit code %v, reason %+v: want stopped with exit code 0", j.Status.State, j.Status.ExitCode, j.Status.Reason)
	}
	if h := History(j); !slices.Contains(h, cosmic.StateRunning) {
		t.Fatalf("history %v: want running before stopped", h)
	}
	if free := e.FreeGPUs(); free != 16 {
		t.Fatalf("free GPUs %d, want 16", free)
	}
	recs := e.records(j.ID, func(r []client.LogRecord) bool { return len(lines(r, "application")) >= 2 })
	if app := lines(recs, "application"); !slices.Equal(app, []string{"out", "hello"}) {
		t.Fatalf("application log %q, want [out hello]", app)
	}
	// A stopped job runs again on restart.
	if _, err := e.Client.RestartJob(e.Ctx, j.ID); err != nil {
		t.Fatal(err)
	}
	j = e.WaitState(j.ID, cosmic.StateRunning, cosmic.StateStopped)
	e.WaitState(j.ID, cosmic.StateStopped)
}

// TestCommandFailureFailsTheJob: a non-zero exit fails the job with
// command_failed, the code and the last lines of output.
func TestCommandFailureFailsTheJob(t *testing.T) {
	e := NewEnv(t)
	spec := Container("broken", 1)
	spec.Command = []string{"sh", "-c", "echo starting; echo 'no such dataset' >&2; exit 4"}
	j := e.Create(spec)
	j = e.WaitState(j.ID, cosmic.StateFailed, cosmic.StateStopped)
	if j.Status.State != cosmic.StateFailed || j.Status.Reason == nil || j.Status.Reason.Code != cosmic.ReasonCommandFailed {
		t.Fatalf("state %s, reason %+v: want failed with command_failed", j.Status.State, j.Status.Reason)
	}
	if j.Status.ExitCode == nil || *j.Status.ExitCode != 4 {
		t.Fatalf("exit code %v, want 4", j.Status.ExitCode)
	}
	if msg := j.Status.Reason.Message; !strings.Contains(msg, "exit code 4") || !strings.Contains(msg, "no such dataset") {
		t.Fatalf("reason %q: want the code and the last lines", msg)
	}
	if free := e.FreeGPUs(); free != 16 {
		t.Fatalf("free GPUs %d, want 16", free)
	}
}

// TestLateCommandEndIsIgnored: a report of a command's end is honoured only
// for a replica the ork sees running: not after a kill (the agent's
// SIGTERM is no exit of the job), not once the job is placed again.
func TestLateCommandEndIsIgnored(t *testing.T) {
	e := NewEnv(t, func(c *platform.Config) { c.Sim.Step = config.Duration(100 * time.Millisecond) })
	spec := Container("long", 1)
	spec.Command = []string{"sleep", "600"}
	j := e.Create(spec)
	e.WaitState(j.ID, cosmic.StateRunning)
	j, err := e.Client.KillJob(e.Ctx, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	zero := 0
	late := worker.Report{Rack: e.Config.Sim.Rack, Jobs: []worker.JobReport{{JobID: j.ID,
		Replicas: []worker.ReplicaReport{{Replica: 0, State: cosmic.StateStopped, ExitCode: &zero}}}}}
	simKey := e.P.Sim.Node().PublicKey()
	if err := e.P.Ork.ReceiveReport(e.Ctx, simKey, late); err != nil {
		t.Fatal(err)
	}
	// The kill stopped the agent, and its command with SIGTERM: once the
	// agent is gone it has handed the command's end to the rack, which must
	// take it for no exit of the job.
	e.records(j.ID, func(r []client.LogRecord) bool {
		return slices.ContainsFunc(r, func(r client.LogRecord) bool { return r.Step == "command_exit" })
	})
	waittest.Until(t, func() bool { _, ok := e.P.AgentKey(j.ID, 0); return !ok }, "the killed job's agent to stop")
	got, _ := e.Client.GetJob(e.Ctx, j.ID)
	if got.Status.State != cosmic.StateStopped || got.Status.Reason == nil || got.Status.Reason.Code != cosmic.ReasonKilled || got.Status.ExitCode != nil {
		t.Fatalf("killed job: state %s, reason %+v, exit code %v: want stopped, killed, no exit code", got.Status.State, got.Status.Reason, got.Status.ExitCode)
	}
	// Placed again: pending, then starting; the late end is ignored.
	if _, err := e.Client.RestartJob(e.Ctx, j.ID); err != nil {
		t.Fatal(err)
	}
	e.WaitState(j.ID, cosmic.StatePending, cosmic.StateStarting)
	if err := e.P.Ork.ReceiveReport(e.Ctx, simKey, late); err != nil {
		t.Fatal(err)
	}
	got = e.WaitState(j.ID, cosmic.StateRunning, cosmic.StateStopped)
	if got.Status.State != cosmic.StateRunning {
		t.Fatalf("restarted job %s after a late report of the previous end, want running; history %v", got.Status.State, History(got))
	}
}
