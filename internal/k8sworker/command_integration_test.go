package k8sworker

// Integration tests of the job's command on Kubernetes against a real
// kube-apiserver: the instance agent (run in process from the Secret's
// agent.yaml, playing the VM) runs the spec's command and reports its
// exit; the worker stops the replica (exit 0) or fails it (any other
// code), keeps the outcome on the carrier across a restart, and catches an
// exit whose event it missed by calling agent.status.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	virtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/cosmicac/cosmicac/internal/agent"
	"github.com/cosmicac/cosmicac/internal/config"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/k8stest"
	"github.com/cosmicac/cosmicac/internal/worker"
)

// commandRig starts a worker serving agents and applies a 1-GPU container
// job with command argv, its VMI Ready (the agent not yet run).
func commandRig(t *testing.T, argv ...string) (*harness, *agentRig, cosmic.Job) {
	t.Helper()
	h := newHarness(t, k8stest.Shared(t), func(c *RackConfig) {
		c.AgentTimeout = config.Duration(10 * time.Second)
	})
	node := h.nodeName(0)
	h.addNode(node, 8)
	rig := newAgentRig(t)
	h.startWithAgents(rig)
	job := containerJob("team-a")
	job.Spec.Command = argv
	h.apply(job, h.reservation(job, 0, cosmic.NodeAlloc{Node: node, GPUs: []int{0}}))
	name := VMIName(job.ID, 0, 0)
	h.setDV(name, cdiv1.Succeeded, "100.0%", 0)
	h.setVMI(name, running(node))
	h.waitReport(job.ID, 0, cosmic.StateStarting, progressIs(StepAgent, 0))
	return h, rig, job
}

func exitCodeIs(code int) func(worker.ReplicaReport) error {
	return func(r worker.ReplicaReport) error {
		if r.ExitCode == nil || *r.ExitCode != code {
			return fmt.Errorf("exit code %v, want %d (%+v)", r.ExitCode, code, r)
		}
		return nil
	}
}

// ranBefore checks that the ork was told running before the command's end
// (it honours a stopped report with an exit code only then).
func ranBefore(t *testing.T, h *harness, job string, end cosmic.State) {
	t.Helper()
	hist := states(h.rep.History(job, 0))
	r, e := slices.Index(hist, cosmic.StateRunning), slices.Index(hist, end)
	if r < 0 || e < r {
		t.Fatalf("states %v: want running before %s", hist, end)
	}
}

// vmiGoneDiskKept waits for the replica's VMI to be deleted and checks that
// its DataVolume and Secret are kept.
func vmiGoneDiskKept(t *testing.T, h *harness, job string) {
	t.Helper()
	name := VMIName(job, 0, 0)
	h.eventually(15*time.Second, "VMI deleted", func() error {
		var v virtv1.VirtualMachineInstance
		if err := h.c.Get(h.ctx, h.key(name), &v); !isNotFound(err) {
			return fmt.Errorf("VMI still there (%v)", err)
		}
		return nil
	})
	objs := h.objectsOf(job)
	if len(objs["DataVolume"]) != 1 || len(objs["Secret"]) != 1 {
		t.Fatalf("objects left %v: want the DataVolume and Secret kept", objs)
	}
}

// exitHandledSince waits until the worker has taken a report from the
// agent of replica 0's VMI 0 since the time given, and has no exit of its
// command left to act on: its agent loop has acted on the exit reported.
func (h *harness) exitHandledSince(job string, since time.Time) {
	h.t.Helper()
	slot, hub := agentSlot{replicaKey: replicaKey{job: job}}, h.w.agents
	h.eventually(15*time.Second, "a report of the agent taken and acted on", func() error {
		hub.mu.Lock()
		defer hub.mu.Unlock()
		if s, ok := hub.seen[slot]; !ok || !s.at.After(since) {
			return errors.New("no report taken since")
		}
		if _, ok := hub.exits[slot]; ok {
			return errors.New("an exit left to act on")
		}
		return nil
	})
}

// msgReportFailed is what an agent logs when a report to its worker fails.
const msgReportFailed = "report to worker failed"

// logCapture is a slog handler that keeps the messages logged, at every
// level.
type logCapture struct {
	mu   sync.Mutex
	msgs []string
}

func (c *logCapture) Enabled(context.Context, slog.Level) bool { return true }

func (c *logCapture) Handle(_ context.Context, r slog.Record) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.msgs = append(c.msgs, r.Message)
	return nil
}

func (c *logCapture) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c *logCapture) WithGroup(string) slog.Handler      { return c }

// count is how many messages msg were logged.
func (c *logCapture) count(msg string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, m := range c.msgs {
		if m == msg {
			n++
		}
	}
	return n
}

func (h *harness) carrier(job string) corev1.Secret {
	h.t.Helper()
	var s corev1.Secret
	if err := h.c.Get(h.ctx, h.key(SecretName(job, 0, 0)), &s); err != nil {
		h.t.Fatal(err)
	}
	return s
}

func TestIntegrationCommandExit0Stops(t *testing.T) {
	h, rig, job := commandRig(t, "sh", "-c", "echo done; exit 0")
	_, stop := h.runAgent(SecretName(job.ID, 0, 0))

	rep := h.waitReport(job.ID, 0, cosmic.StateStopped, exitCodeIs(0))
	if rep.Reason != nil {
		t.Fatalf("stopped by its command with reason %+v, want none (not a kill)", rep.Reason)
	}
	ranBefore(t, h, job.ID, cosmic.StateStopped)
	vmiGoneDiskKept(t, h, job.ID)
	if a := h.carrier(job.ID).Annotations; a[AnnotationDesired] != string(desiredStop) || a[AnnotationExitCode] != "0" {
		t.Fatalf("carrier annotations %v", a)
	}
	var rec bool
	for _, r := range h.logs.Job(job.ID) {
		if r.Step == "command" && strings.Contains(r.Line, "exit code 0") && r.OK != nil && *r.OK {
			rec = true
		}
	}
	if !rec {
		t.Errorf("no command record in %v", h.steps(job.ID))
	}

	// A restarted worker (the VM and its agent gone) keeps reporting the
	// outcome, from the carrier.
	stop()
	h.stop()
	n := len(h.rep.History(job.ID, 0))
	rig.newNode()
	h.startWithAgents(rig)
	h.eventually(10*time.Second, "report after the restart", func() error {
		if len(h.rep.History(job.ID, 0)) == n {
			return errors.New("no new report")
		}
		return nil
	})
	for _, r := range h.rep.History(job.ID, 0)[n:] {
		if r.State != cosmic.StateStopped || r.Reason != nil || exitCodeIs(0)(r) != nil {
			t.Fatalf("after the worker restart: %+v", r)
		}
	}

	// Applied again (the ork places it anew): it boots from its kept disk,
	// with no exit code left over.
	h.apply(job, h.reservation(job, 0, cosmic.NodeAlloc{Node: h.nodeName(0), GPUs: []int{0}}))
	h.setVMI(VMIName(job.ID, 0, 0), running(h.nodeName(0)))
	r := h.waitReport(job.ID, 0, cosmic.StateStarting, progressIs(StepAgent, 0))
	if r.ExitCode != nil {
		t.Fatalf("applied again: %+v", r)
	}
	c := h.carrier(job.ID)
	if st, _ := stateOf(&c); st.Desired != desiredRun || st.ExitCode != nil {
		t.Fatalf("applied again: state %+v", st)
	}
}

func TestIntegrationCommandExit5Fails(t *testing.T) {
	// The agent reports often, its command's exit with it (see below).
	old := agent.ReportInterval
	agent.ReportInterval = 500 * time.Millisecond
	t.Cleanup(func() { agent.ReportInterval = old })
	h, _, job := commandRig(t, "sh", "-c", "echo first; echo oops >&2; exit 5")
	h.runAgent(SecretName(job.ID, 0, 0))

	rep := h.waitReport(job.ID, 0, cosmic.StateFailed, func(r worker.ReplicaReport) error {
		if err := reasonIs(cosmic.ReasonCommandFailed)(r); err != nil {
			return err
		}
		return exitCodeIs(5)(r)
	})
	if m := rep.Reason.Message; !strings.Contains(m, "exit code 5") || !strings.Contains(m, "oops") {
		t.Fatalf("reason %q: want the code and the last lines", m)
	}
	vmiGoneDiskKept(t, h, job.ID)
	a := h.carrier(job.ID).Annotations
	if a[AnnotationDesired] != string(desiredFailed) || a[AnnotationExitCode] != "5" || !strings.Contains(a[AnnotationFailure], string(cosmic.ReasonCommandFailed)) {
		t.Fatalf("carrier annotations %v", a)
	}
	// The replica is not stopped or failed a second time: the agent goes
	// on reporting the exit; once the worker has taken such a report since
	// the failure and has no exit left to act on, the replica is judged
	// again.
	h.exitHandledSince(job.ID, time.Now())
	h.settle(job.ID, 0)
	if hist := states(h.rep.History(job.ID, 0)); hist[len(hist)-1] != cosmic.StateFailed || slices.Contains(hist, cosmic.StateStopped) {
		t.Fatalf("states %v", hist)
	}
}

// The command exits while the worker is down: its agent.report event is
// lost (and the agent's periodic report is far off); the restarted worker
// learns the exit by calling agent.status once the agent is connected again.
func TestIntegrationCommandExitMissedEventPolled(t *testing.T) {
	old := agent.ReportInterval
	agent.ReportInterval = time.Hour
	t.Cleanup(func() { agent.ReportInterval = old })
	flag := filepath.Join(t.TempDir(), "go")
	h, rig, job := commandRig(t, "sh", "-c", fmt.Sprintf("while [ ! -e %s ]; do sleep 0.1; done; echo bye; exit 0", flag))
	agentLog := &logCapture{}
	a, _ := h.runAgentLogging(SecretName(job.ID, 0, 0), slog.New(agentLog))
	h.waitReport(job.ID, 0, cosmic.StateRunning, nil)

	// The worker goes away; the command exits meanwhile.
	h.stop()
	addr := rig.node.Addr()
	rig.node.Close()
	failed := agentLog.count(msgReportFailed)
	if err := os.WriteFile(flag, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	select {
	case <-a.CommandDone():
	case <-time.After(10 * time.Second):
		t.Fatal("the command did not exit")
	}
	// The agent's report of the exit, sent as the command ended, fails
	// (the only report since the worker went: its periodic one is far off).
	h.eventually(15*time.Second, "the agent's report of the exit failed", func() error {
		if agentLog.count(msgReportFailed) == failed {
			return errors.New("not yet")
		}
		return nil
	})

	// Back on the same address (the one in the agent's bootstrap).
	rig.freshKeys()
	n, err := fabric.New(fabric.Config{Component: "wrk-server-k8s-nvidia", Identity: rig.id, Listen: addr, Policy: rig.pol})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	rig.node = n
	h.startWithAgents(rig)
	h.eventually(20*time.Second, "stopped by the command after the restart", func() error {
		r, ok := h.rep.Last(job.ID, 0)
		if !ok || r.State != cosmic.StateStopped {
			return fmt.Errorf("report %+v", r)
		}
		return exitCodeIs(0)(r)
	})
	key, _ := fabric.ParsePublicKey(h.carrier(job.ID).Annotations[AnnotationAgentKey])
	hub := h.w.agents
	hub.mu.Lock()
	_, polled := hub.polled[key]
	hub.mu.Unlock()
	if !polled {
		t.Error("the restarted worker never called agent.status")
	}
	vmiGoneDiskKept(t, h, job.ID)
}
