package k8sworker

import (
	"crypto/sha256"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	virtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/cosmicac/cosmicac/internal/agent"
	"github.com/cosmicac/cosmicac/internal/agent/agentapi"
	"github.com/cosmicac/cosmicac/internal/config"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
)

// seededIdentity is a deterministic test identity.
func seededIdentity(name string) *fabric.Identity {
	seed := sha256.Sum256([]byte("cosmicac-test-" + name))
	id, err := fabric.IdentityFromSeed(seed[:])
	if err != nil {
		panic(err)
	}
	return id
}

// testPeers are the peers of the golden bootstraps: the rack's (directory,
// app-node, monitor) and the worker.
func testPeers() []Peer {
	return []Peer{
		{Role: agentapi.RoleDirectory, Key: seededIdentity("directory").PublicKey().String(), Addrs: []string{"10.0.0.5:7401"}},
		{Role: agentapi.RoleAppNode, Key: seededIdentity("app-node").PublicKey().String(), Addrs: []string{"10.0.0.5:7402"}},
		{Role: agentapi.RoleMonitor, Key: seededIdentity("monitor").PublicKey().String(), Addrs: []string{"10.0.0.5:7403"}},
		{Role: agentapi.RoleWorker, Key: seededIdentity("worker").PublicKey().String(), Addrs: []string{"10.0.0.5:7946"}},
	}
}

func seededBootstrap(n int) Bootstrap {
	b := Bootstrap{Peers: testPeers()}
	for i := range n {
		ai, err := NewAgentIdentity(seededIdentity("agent-vmi-" + string(rune('0'+i))))
		if err != nil {
			panic(err)
		}
		b.Agents = append(b.Agents, ai)
	}
	return b
}

// The agent loads what the worker writes: its identity, job and peers.
func TestAgentLoadsUserData(t *testing.T) {
	tc := buildCases()["container-8gpu"]
	g, err := BuildReplica(tc.cfg, tc.job, tc.res, tc.boot)
	if err != nil {
		t.Fatal(err)
	}
	s := g.Secrets[0]
	if got, want := s.Annotations[AnnotationAgentKey], tc.boot.Agents[0].PublicKey; got != want {
		t.Errorf("annotation %s = %q, want %q", AnnotationAgentKey, got, want)
	}
	file, err := AgentFile(s.Data[UserDataKey])
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "agent.yaml")
	if err := os.WriteFile(path, file, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := agent.LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.JobID != testJobID || cfg.Identity.PublicKey().String() != tc.boot.Agents[0].PublicKey {
		t.Errorf("loaded job %s key %s", cfg.JobID, cfg.Identity.PublicKey())
	}
	if len(cfg.Peers) != 4 || cfg.Peers[3].Role != agentapi.RoleWorker || cfg.Peers[3].Addrs[0] != "10.0.0.5:7946" {
		t.Errorf("peers %+v", cfg.Peers)
	}
	ac, err := AgentConfigOf(s.Data[UserDataKey])
	if err != nil || ac.Identity == nil || *ac.Identity != tc.boot.Agents[0] {
		t.Fatalf("AgentConfigOf: %+v, %v", ac.Identity, err)
	}
	id, err := ParseAgentIdentity(*ac.Identity)
	if err != nil || id.PublicKey().String() != tc.boot.Agents[0].PublicKey {
		t.Fatalf("Identity: %v", err)
	}
}

// An empty Bootstrap leaves identity, peers and the key annotation out.
func TestEmptyBootstrap(t *testing.T) {
	tc := buildCases()["container-1gpu"]
	g, err := BuildReplica(tc.cfg, tc.job, tc.res, Bootstrap{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := g.Secrets[0].Annotations[AnnotationAgentKey]; ok {
		t.Error("key annotation without an identity")
	}
	if ud := string(g.Secrets[0].Data[UserDataKey]); strings.Contains(ud, "identity") || strings.Contains(ud, "peers") {
		t.Errorf("user data names an identity or peers:\n%s", ud)
	}
}

func TestRackConfigPeers(t *testing.T) {
	c := DefaultRackConfig()
	c.Peers = []Peer{
		{Role: "directory", Key: seededIdentity("d").PublicKey().String(), Addrs: []string{"10.1.2.3:7401"}},
		{Role: "boss", Key: "nope", Addrs: []string{"x"}},
		{Role: "monitor", Key: seededIdentity("m").PublicKey().String(), Addrs: []string{"no port"}},
	}
	c.RequireAgent = []cosmic.JobType{"batch"}
	c.AgentTimeout = config.Duration(0)
	err := c.Validate()
	for _, f := range []string{"peers[1].role", "peers[1].key", "peers[2].addrs[0]", "requireAgent[0]", "agentTimeout"} {
		if err == nil || !strings.Contains(err.Error(), f) {
			t.Errorf("want an error on %s, got %v", f, err)
		}
	}
	if strings.Contains(err.Error(), "peers[0]") {
		t.Errorf("peers[0] is fine: %v", err)
	}
	d := DefaultRackConfig()
	if len(d.RequireAgent) != 2 || d.AgentTimeout.D() != DefaultAgentTimeout {
		t.Errorf("defaults %v %v", d.RequireAgent, d.AgentTimeout)
	}
}

// The agent gate: a Ready VMI waits for its agent, unless the replica was
// running already (an agent going silent does not take it back).
func TestReplicaStatusAgentGate(t *testing.T) {
	now := time.Now()
	dv := &cdiv1.DataVolume{Status: cdiv1.DataVolumeStatus{Phase: cdiv1.Succeeded}}
	vmi := &virtv1.VirtualMachineInstance{Status: virtv1.VirtualMachineInstanceStatus{Phase: virtv1.Running,
		Conditions: []virtv1.VirtualMachineInstanceCondition{{Type: virtv1.VirtualMachineInstanceReady, Status: corev1.ConditionTrue}}}}
	obs := ReplicaObservation{Nodes: []string{"n1"}, DataVolumes: []*cdiv1.DataVolume{dv}, VMIs: []*virtv1.VirtualMachineInstance{vmi}, Previous: cosmic.StateStarting}
	p := StatusPolicy{RequireAgent: true}
	r := ReplicaStatus(p, obs, now)
	if r.State != cosmic.StateStarting || r.Progress == nil || r.Progress.Step != StepAgent {
		t.Fatalf("without the agent: %+v", r)
	}
	obs.AgentReady = true
	if r := ReplicaStatus(p, obs, now); r.State != cosmic.StateRunning {
		t.Fatalf("agent ready: %+v", r)
	}
	obs.AgentReady, obs.Previous = false, cosmic.StateRunning
	if r := ReplicaStatus(p, obs, now); r.State != cosmic.StateRunning {
		t.Fatalf("running, agent silent: %+v (want running)", r)
	}
	if r := ReplicaStatus(StatusPolicy{}, ReplicaObservation{Nodes: obs.Nodes, DataVolumes: obs.DataVolumes, VMIs: obs.VMIs}, now); r.State != cosmic.StateRunning {
		t.Fatalf("gate off: %+v", r)
	}
}
