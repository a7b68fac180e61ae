package k8sworker

// Integration test of the in-VM agents' bootstrap against a real
// kube-apiserver (internal/k8stest): the worker issues each VMI an agent
// identity in its cloud-init Secret, reports the public key, and a replica
// whose VMI is Ready stays starting until that agent (run here in process
// from the Secret's agent.yaml, playing the VM) connects to the worker and
// reports ready.

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
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/cosmicac/cosmicac/internal/agent"
	"github.com/cosmicac/cosmicac/internal/agent/agentapi"
	"github.com/cosmicac/cosmicac/internal/config"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/k8stest"
	"github.com/cosmicac/cosmicac/internal/trust"
	"github.com/cosmicac/cosmicac/internal/worker"
)

// agentRig is the worker's fabric side in a test: its node and the
// keyring of the node's trust policy.
type agentRig struct {
	t    *testing.T
	id   *fabric.Identity
	node *fabric.Node
	keys *trust.Keyring
	pol  *trust.Policy
}

// freshKeys gives the rig an empty keyring, as a restarted worker has.
func (r *agentRig) freshKeys() {
	r.keys = trust.NewKeyring()
	r.pol = trust.NewPolicy(trust.Worker, r.keys)
}

func newAgentRig(t *testing.T) *agentRig {
	t.Helper()
	id, err := fabric.GenerateIdentity()
	if err != nil {
		t.Fatal(err)
	}
	r := &agentRig{t: t, id: id}
	r.newNode()
	return r
}

// newNode gives the worker a fresh fabric node (a restarted worker's),
// with the same key and an empty keyring.
func (r *agentRig) newNode() {
	r.t.Helper()
	if r.node != nil {
		r.node.Close()
	}
	r.freshKeys()
	n, err := fabric.New(fabric.Config{Component: "wrk-server-k8s-nvidia", Identity: r.id, Listen: "127.0.0.1:0", Policy: r.pol})
	if err != nil {
		r.t.Fatal(err)
	}
	r.node = n
	r.t.Cleanup(func() { n.Close() })
}

// startWithAgents is harness.start with the worker serving agents on rig.
func (h *harness) startWithAgents(rig *agentRig) {
	h.t.Helper()
	h.run(rig)
}

// runAgent runs the agent of a VMI from its Secret's agent.yaml, as the VM
// would; the returned func stops it and waits for it.
func (h *harness) runAgent(secret string) (*agent.Agent, func()) {
	h.t.Helper()
	return h.runAgentLogging(secret, nil)
}

// runAgentLogging is runAgent with the agent logging to log (nil: nowhere).
func (h *harness) runAgentLogging(secret string, log *slog.Logger) (*agent.Agent, func()) {
	h.t.Helper()
	var s corev1.Secret
	if err := h.c.Get(h.ctx, h.key(secret), &s); err != nil {
		h.t.Fatal(err)
	}
	file, err := AgentFile(s.Data[UserDataKey])
	if err != nil {
		h.t.Fatal(err)
	}
	path := filepath.Join(h.t.TempDir(), "agent.yaml")
	if err := os.WriteFile(path, file, 0o600); err != nil {
		h.t.Fatal(err)
	}
	cfg, err := agent.LoadConfig(path)
	if err != nil {
		h.t.Fatal(err)
	}
	cfg.WorkDir = h.t.TempDir()
	a := agent.New(cfg, log)
	ctx, cancel := context.WithCancel(h.ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				h.t.Errorf("agent: %v", err)
			}
		})
	}
	h.t.Cleanup(stop)
	return a, stop
}

func TestIntegrationAgentGatesRunning(t *testing.T) {
	h := newHarness(t, k8stest.Shared(t), func(c *RackConfig) {
		c.AgentTimeout = config.Duration(2 * time.Second)
		c.Peers = []Peer{{Role: agentapi.RoleMonitor, Key: seededIdentity("monitor").PublicKey().String()}}
	})
	node := h.nodeName(0)
	h.addNode(node, 8)
	rig := newAgentRig(t)
	h.startWithAgents(rig)

	job := containerJob("team-a")
	res := h.reservation(job, 0, cosmic.NodeAlloc{Node: node, GPUs: []int{1}})
	h.apply(job, res)

	// The Secret carries the agent's key pair and the peers: the rack's,
	// then the worker itself.
	secret := SecretName(job.ID, 0, 0)
	var s corev1.Secret
	if err := h.c.Get(h.ctx, h.key(secret), &s); err != nil {
		t.Fatal(err)
	}
	ac, err := AgentConfigOf(s.Data[UserDataKey])
	if err != nil || ac.Identity == nil {
		t.Fatalf("agent config %+v: %v", ac, err)
	}
	id, err := ParseAgentIdentity(*ac.Identity)
	if err != nil {
		t.Fatal(err)
	}
	key := id.PublicKey()
	if s.Annotations[AnnotationAgentKey] != key.String() || ac.Identity.PublicKey != key.String() {
		t.Fatalf("annotation %q, config %q, private key's %s", s.Annotations[AnnotationAgentKey], ac.Identity.PublicKey, key)
	}
	wantPeers := []Peer{h.cfg.Peers[0], {Role: agentapi.RoleWorker, Key: rig.node.PublicKey().String(), Addrs: []string{rig.node.Addr()}}}
	if !slices.EqualFunc(ac.Peers, wantPeers, func(a, b Peer) bool {
		return a.Role == b.Role && a.Key == b.Key && slices.Equal(a.Addrs, b.Addrs)
	}) {
		t.Fatalf("peers %+v, want %+v", ac.Peers, wantPeers)
	}
	// A second Apply keeps the identity.
	h.apply(job, res)
	var again corev1.Secret
	if err := h.c.Get(h.ctx, h.key(secret), &again); err != nil {
		t.Fatal(err)
	}
	if again.Annotations[AnnotationAgentKey] != key.String() {
		t.Fatalf("a second Apply issued a new key: %s, was %s", again.Annotations[AnnotationAgentKey], key)
	}

	// The ork learns the key from the reports; the worker binds it to the
	// job's replica and VMI, and admits it.
	h.eventually(10*time.Second, "agent key reported and admitted", func() error {
		r, ok := h.rep.Last(job.ID, 0)
		if !ok || !slices.Equal(r.AgentKeys, []string{key.String()}) {
			return fmt.Errorf("report %+v", r)
		}
		if a := rig.pol.Access(key); a != fabric.AccessFull {
			return fmt.Errorf("agent key access %s", a)
		}
		if !rig.keys.IsAgent(key, job.ID, 0, 0) {
			return errors.New("agent key not bound to its VMI")
		}
		return nil
	})

	// The VMI is Ready, the agent has not reported: starting.
	name := VMIName(job.ID, 0, 0)
	h.setDV(name, cdiv1.Succeeded, "100.0%", 0)
	h.setVMI(name, running(node))
	h.waitReport(job.ID, 0, cosmic.StateStarting, progressIs(StepAgent, 0))
	h.settle(job.ID, 0) // judged again, still without a word from the agent
	if r, _ := h.rep.Last(job.ID, 0); r.State != cosmic.StateStarting {
		t.Fatalf("running without its agent: %+v", r)
	}

	// The agent, playing the VM, connects and reports ready: running.
	old := agent.ReportInterval
	agent.ReportInterval = 500 * time.Millisecond
	t.Cleanup(func() { agent.ReportInterval = old })
	a, stop := h.runAgent(secret)
	select {
	case <-a.Ready():
	case <-time.After(15 * time.Second):
		t.Fatal("the agent never became ready")
	}
	h.waitReport(job.ID, 0, cosmic.StateRunning, nil)
	if !slices.Contains(h.steps(job.ID), "agent") {
		t.Errorf("no agent record in %v", h.steps(job.ID))
	}
	h.eventually(10*time.Second, "agent-ready recorded on the carrier", func() error {
		var c corev1.Secret
		if err := h.c.Get(h.ctx, h.key(secret), &c); err != nil {
			return err
		}
		v := h.vmi(name)
		if c.Annotations[AnnotationAgentReady] != string(v.UID) {
			return fmt.Errorf("annotation %q, VMI %s", c.Annotations[AnnotationAgentReady], v.UID)
		}
		return nil
	})

	// The agent goes silent: the replica stays running, and the log says so.
	stop()
	silent := func() int {
		n := 0
		for _, r := range h.logs.Job(job.ID) {
			if r.Step == "agent" && strings.Contains(r.Line, "has not reported") {
				n++
			}
		}
		return n
	}
	h.eventually(10*time.Second, "silent agent recorded", func() error {
		if silent() == 0 {
			return errors.New("no record")
		}
		return nil
	})
	if r, _ := h.rep.Last(job.ID, 0); r.State != cosmic.StateRunning {
		t.Fatalf("silent agent: %+v, want running", r)
	}

	// A restarted worker, not having heard from the agent, keeps it
	// running, also once the agent has been silent for AgentTimeout since
	// the restart (the restarted worker records it).
	h.stop()
	n, silentBefore := len(h.rep.History(job.ID, 0)), silent()
	rig.newNode()
	h.startWithAgents(rig)
	h.eventually(10*time.Second, "report after the restart", func() error {
		if len(h.rep.History(job.ID, 0)) == n {
			return errors.New("no new report")
		}
		return nil
	})
	h.eventually(10*time.Second, "the restarted worker records the agent silent", func() error {
		if silent() == silentBefore {
			return errors.New("no record")
		}
		return nil
	})
	h.settle(job.ID, 0)
	for _, r := range h.rep.History(job.ID, 0)[n:] {
		if r.State != cosmic.StateRunning {
			t.Fatalf("after the worker restart: %+v", r)
		}
	}

	// Deleted: the key is no longer admitted.
	if err := h.w.Delete(h.ctx, worker.DeleteParams{JobID: job.ID, Replica: worker.AllReplicas}); err != nil {
		t.Fatal(err)
	}
	h.eventually(15*time.Second, "agent key removed", func() error {
		if a := rig.pol.Access(key); a != fabric.AccessNone {
			return fmt.Errorf("access %s", a)
		}
		return nil
	})
}
