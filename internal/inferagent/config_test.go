package inferagent

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cosmicac/cosmicac/internal/agent"
	"github.com/cosmicac/cosmicac/internal/agent/agentapi"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
)

// The inference agent reads the bootstrap's shared fields (agent.FileBootstrap)
// under the same names as the instance agent, and its own beside them.
func TestLoadConfig(t *testing.T) {
	id, _ := fabric.GenerateIdentity()
	idFile := filepath.Join(t.TempDir(), "agent.key")
	if err := fabric.WriteIdentityFile(idFile, id); err != nil {
		t.Fatal(err)
	}
	envFile := filepath.Join(t.TempDir(), "env")
	if err := os.WriteFile(envFile, []byte("A='x y'\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	proxy, _ := fabric.GenerateIdentity()
	path := filepath.Join(t.TempDir(), "agent.yaml")
	yaml := "jobId: j1\nteam: ml\nreplica: 2\nvmiIndex: 1\nvmiCount: 2\ngpus: 4\nhosts: [h0, h1]\n" +
		"identityFile: " + idFile + "\nenvFile: " + envFile + "\nlisten: 127.0.0.1:0\nport: 9000\n" +
		"peers:\n- {role: proxy-inference, key: " + proxy.PublicKey().String() + ", addrs: ['10.0.0.1:7420']}\n" +
		"inference: {runtime: vllm, model: Qwen/Qwen3-8B}\n"
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	want := Placement{VMIIndex: 1, VMICount: 2, GPUs: 4, Hosts: []string{"h0", "h1"}, Port: 9000}
	if cfg.JobID != "j1" || cfg.Team != "ml" || cfg.Replica != 2 || cfg.Listen != "127.0.0.1:0" ||
		cfg.Placement.VMIIndex != want.VMIIndex || cfg.Placement.VMICount != want.VMICount || cfg.Placement.GPUs != want.GPUs ||
		!slices.Equal(cfg.Placement.Hosts, want.Hosts) || cfg.Placement.Port != want.Port ||
		cfg.Identity.PublicKey() != id.PublicKey() || cfg.Inference.Runtime != cosmic.RuntimeVLLM ||
		!slices.Equal(cfg.Env, []string{"A=x y"}) || len(cfg.Peers) != 1 ||
		cfg.Peers[0].Role != agentapi.RoleProxy || cfg.Peers[0].Key != proxy.PublicKey() {
		t.Fatalf("config %+v", cfg)
	}
}

// Every problem of a bootstrap is reported at once.
func TestConfigErrors(t *testing.T) {
	fc := FileConfig{FileBootstrap: agent.FileBootstrap{Peers: []agent.FilePeer{{Key: "nope"}}}}
	_, err := fc.Parse()
	for _, want := range []string{"jobId", "inference", "identity", "peers[0].key"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
}
