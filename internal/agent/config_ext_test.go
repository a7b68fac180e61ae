package agent_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/cosmicac/cosmicac/internal/agent"
	"github.com/cosmicac/cosmicac/internal/agent/agentapi"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/k8sworker"
)

// An external test package: k8sworker imports agent, so a test of package
// agent cannot import k8sworker.

func newID(t *testing.T) *fabric.Identity {
	t.Helper()
	id, err := fabric.GenerateIdentity()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// The file the Kubernetes worker writes into a VMI is the file the agent
// reads: build the user data with a bootstrap and load its agent.yaml and
// env file.
func TestLoadConfigFromWorkerUserData(t *testing.T) {
	id := newID(t)
	pem, err := id.MarshalPEM()
	if err != nil {
		t.Fatal(err)
	}
	ork, app := newID(t).PublicKey().String(), newID(t).PublicKey().String()
	job := cosmic.Job{ID: "0b7c54a8-5f0e-4c1e-9d3a-2f6b8e1c4d70", Team: "ml", Spec: cosmic.Spec{
		Type: cosmic.TypeGPUContainer, Command: []string{"python", "train.py"},
		EnvVars: []cosmic.EnvVar{{Name: "LR", Value: "it's 0.1"}, {Name: "MULTI", Value: "a\nb"}},
		Volumes: []cosmic.Volume{
			{MountPath: "/data", Source: cosmic.VolumeSource{DataStore: &cosmic.DataStoreSource{Alias: "s3", Container: "b"}}},
			{MountPath: "/scratch", Source: cosmic.VolumeSource{Standalone: &cosmic.StandaloneSource{Name: "tmp"}}},
			{MountPath: "/out", Permission: "RWD", Source: cosmic.VolumeSource{DataStore: &cosmic.DataStoreSource{Alias: "s3", Container: "b", Prefix: "o"}}},
			{MountPath: "/src", Source: cosmic.VolumeSource{PublicGit: &cosmic.PublicGitSource{URL: "https://git.example/r.git"}}},
		},
	}}
	boot := k8sworker.Bootstrap{
		Agents: []k8sworker.AgentIdentity{{PrivateKeyPEM: string(pem), PublicKey: id.PublicKey().String()}},
		Peers: []k8sworker.Peer{{Role: agentapi.RoleDirectory, Key: ork, Addrs: []string{"10.0.0.1:7420"}},
			{Role: agentapi.RoleAppNode, Key: app, Addrs: []string{"10.0.0.2:7421"}}},
	}
	ud, err := k8sworker.UserData(k8sworker.DefaultRackConfig(), job, 0, 0, 1, 1, nil, boot)
	if err != nil {
		t.Fatal(err)
	}
	var cc struct {
		WriteFiles []struct{ Path, Content string } `json:"write_files"`
	}
	if err := yaml.Unmarshal(ud, &cc); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	files := map[string]string{}
	for _, f := range cc.WriteFiles {
		files[f.Path] = f.Content
	}
	envPath := filepath.Join(dir, "env")
	if err := os.WriteFile(envPath, []byte(files[k8sworker.EnvFilePath]), 0o600); err != nil {
		t.Fatal(err)
	}
	agentYAML := strings.ReplaceAll(files[k8sworker.AgentConfigPath], k8sworker.EnvFilePath, envPath)
	cfgPath := filepath.Join(dir, "agent.yaml")
	if err := os.WriteFile(cfgPath, []byte(agentYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := agent.LoadConfig(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.JobID != job.ID || cfg.Team != "ml" || cfg.Identity.PublicKey() != id.PublicKey() ||
		!slices.Equal(cfg.Command, job.Spec.Command) || len(cfg.Peers) != 2 ||
		cfg.Peers[0].Role != agentapi.RoleDirectory || cfg.Peers[0].Key.String() != ork || cfg.Peers[1].Addrs[0] != "10.0.0.2:7421" {
		t.Fatalf("config %+v", cfg)
	}
	// The volumes the agent fills or mounts, at their mount paths in the
	// VM: the datastore and Git ones, and the standalone one on its disk.
	wantVols := []agent.Volume{{Index: 0, MountPath: "/data", Dir: "/data"},
		{Index: 1, MountPath: "/scratch", Dir: "/scratch", Standalone: "tmp", Disk: "cosmicac-vol1", ReadOnly: true},
		{Index: 2, MountPath: "/out", Dir: "/out", Push: true, Delete: true},
		{Index: 3, MountPath: "/src", Dir: "/src", Git: "https://git.example/r.git"}}
	if !slices.Equal(cfg.Volumes, wantVols) {
		t.Fatalf("volumes %+v, want %+v", cfg.Volumes, wantVols)
	}
	want := []string{"COSMICAC_JOB_ID=" + job.ID, "COSMICAC_REPLICA=0", "COSMICAC_VMI_INDEX=0", "LR=it's 0.1", "MULTI=a\nb"}
	if !slices.Equal(cfg.Env, want) {
		t.Fatalf("env %q, want %q", cfg.Env, want)
	}
}
