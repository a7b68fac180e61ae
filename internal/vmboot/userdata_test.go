package vmboot

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	"github.com/cosmicac/cosmicac/internal/cosmic"
)

const testJobID = "0b7c54a8-5f0e-4c1e-9d3a-2f6b8e1c4d70"

func testVM(delivery Delivery) VM {
	return VM{
		Job: cosmic.Job{ID: testJobID, Team: "ml", Spec: cosmic.Spec{
			Type:          cosmic.TypeGPUContainer,
			Command:       []string{"python", "train.py"},
			EnvVars:       []cosmic.EnvVar{{Name: "LR", Value: "it's 0.1"}},
			SSHPublicKeys: []string{"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGx0ZXN0a2V5MQ ada@laptop"},
		}},
		Count: 1,
		GPUs:  1,
		Boot: Bootstrap{
			Agents: []AgentIdentity{{PrivateKeyPEM: "PEM", PublicKey: "57bc"}},
			Peers:  []Peer{{Role: "directory", Key: "d821", Addrs: []string{"10.0.0.5:7401"}}, {Role: "proxy-inference", Key: "aa", Addrs: []string{"10.0.0.9:7425"}}},
		},
		Agent: Agent{Delivery: delivery},
	}
}

// files is the write_files of user data, by path.
func files(t *testing.T, ud []byte) map[string]cloudFile {
	t.Helper()
	if !bytes.HasPrefix(ud, []byte("#cloud-config\n")) {
		t.Fatalf("user data does not start with #cloud-config:\n%s", ud)
	}
	var cc cloudConfig
	if err := yaml.UnmarshalStrict(ud, &cc); err != nil {
		t.Fatal(err)
	}
	out := map[string]cloudFile{}
	for _, f := range cc.WriteFiles {
		out[f.Path] = f
	}
	if cc.ManageEtcHosts != "localhost" {
		t.Errorf("manage_etc_hosts %q: want localhost, or the VM's hostname does not resolve (sudo: unable to resolve host)", cc.ManageEtcHosts)
	}
	if diff := cmp.Diff([][]string{{"systemctl", "daemon-reload"}, {"systemctl", "enable", "--now", AgentUnitName}}, cc.RunCmd); diff != "" {
		t.Errorf("runcmd (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([][]string{EarlyStart()}, cc.BootCmd); diff != "" {
		t.Errorf("bootcmd (-want +got):\n%s", diff)
	}
	return out
}

// With the agent disk (the default), the unit mounts the disk and runs the
// agent from it; with the image's agent, it runs that one and writes no
// mount script.
func TestUserDataDelivery(t *testing.T) {
	for _, tc := range []struct {
		delivery Delivery
		exec     string
		mount    bool
	}{
		{"", "/run/cosmicac/cosmicac agent instance --config /etc/cosmicac/agent.yaml", true},
		{DeliveryDisk, "/run/cosmicac/cosmicac agent instance --config /etc/cosmicac/agent.yaml", true},
		{DeliveryImage, "/usr/local/bin/cosmicac agent instance --config /etc/cosmicac/agent.yaml", false},
	} {
		t.Run(string(tc.delivery), func(t *testing.T) {
			ud, err := UserData(testVM(tc.delivery))
			if err != nil {
				t.Fatal(err)
			}
			fs := files(t, ud)
			unit := fs[AgentUnitPath].Content
			announce := `ExecStartPost=-/bin/sh -c 'echo "` + AgentStartedLine + `" >/dev/kmsg'` + "\n"
			for _, want := range []string{"ExecStart=" + tc.exec + "\n", announce, "Restart=always\n", "RestartSec=2\n", "StartLimitIntervalSec=0\n", "WantedBy=multi-user.target\n"} {
				if !strings.Contains(unit, want) {
					t.Errorf("unit lacks %q:\n%s", want, unit)
				}
			}
			if got := strings.Contains(unit, "ExecStartPre="+MountScriptPath+"\n"); got != tc.mount {
				t.Errorf("unit mounts the disk: %v, want %v:\n%s", got, tc.mount, unit)
			}
			script, ok := fs[MountScriptPath]
			if ok != tc.mount || (ok && (script.Permissions != "0755" || script.Content != MountScript())) {
				t.Errorf("mount script %+v, want present: %v", script, tc.mount)
			}
			for _, p := range []string{AgentConfigPath, EnvFilePath} {
				if fs[p].Permissions != "0600" || fs[p].Owner != "root:root" {
					t.Errorf("%s: %+v", p, fs[p])
				}
			}
			again, _ := UserData(testVM(tc.delivery))
			if !bytes.Equal(ud, again) {
				t.Error("UserData is not deterministic")
			}
		})
	}
}

func TestUserDataInference(t *testing.T) {
	vm := testVM(DeliveryDisk)
	vm.Job.Spec = cosmic.Spec{Type: cosmic.TypeManagedInference, Inference: &cosmic.InferenceSpec{Model: "Qwen/Qwen3-32B"}}
	ud, err := UserData(vm)
	if err != nil {
		t.Fatal(err)
	}
	if unit := files(t, ud)[AgentUnitPath].Content; !strings.Contains(unit, "ExecStart=/run/cosmicac/cosmicac agent inference --config") {
		t.Errorf("unit:\n%s", unit)
	}
	ac, err := AgentConfigOf(ud)
	if err != nil {
		t.Fatal(err)
	}
	if ac.Inference == nil || ac.Inference.Model != "Qwen/Qwen3-32B" || len(ac.Peers) != 2 {
		t.Errorf("agent config %+v", ac)
	}
}

// The agent config read back is Config's; a container agent is not told
// about proxy-inference.
func TestAgentConfigRoundTrip(t *testing.T) {
	vm := testVM(DeliveryDisk)
	ud, err := UserData(vm)
	if err != nil {
		t.Fatal(err)
	}
	ac, err := AgentConfigOf(ud)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(Config(vm), ac); diff != "" {
		t.Errorf("AgentConfigOf (-want +got):\n%s", diff)
	}
	if len(ac.Peers) != 1 || ac.Peers[0].Role != "directory" || ac.Identity == nil || ac.Identity.PublicKey != "57bc" {
		t.Errorf("peers %+v identity %+v", ac.Peers, ac.Identity)
	}
	env, err := File(ud, EnvFilePath)
	if err != nil {
		t.Fatal(err)
	}
	want := "COSMICAC_JOB_ID='" + testJobID + "'\nCOSMICAC_REPLICA='0'\nCOSMICAC_VMI_INDEX='0'\nLR='it'\\''s 0.1'\n"
	if string(env) != want {
		t.Errorf("env file %q, want %q", env, want)
	}
}

func TestProxyPeerOnlyForInference(t *testing.T) {
	peers := testVM("").Boot.Peers
	for _, typ := range []cosmic.JobType{cosmic.TypeGPUContainer, cosmic.TypeManagedInference} {
		got := PeersFor(typ, peers)
		has := slices.ContainsFunc(got, func(p Peer) bool { return p.Role == "proxy-inference" })
		if has != (typ == cosmic.TypeManagedInference) || len(got) < 1 {
			t.Errorf("%s: peers %+v", typ, got)
		}
	}
	if len(peers) != 2 {
		t.Error("PeersFor changed its argument")
	}
}

func TestAgentCheck(t *testing.T) {
	for name, tc := range map[string]struct {
		a      Agent
		fields []string
	}{
		"default":       {Agent{}, nil},
		"image":         {Agent{Delivery: DeliveryImage, Path: "/opt/cosmicac/bin/cosmicac"}, nil},
		"bad delivery":  {Agent{Delivery: "http"}, []string{"agentDelivery"}},
		"relative path": {Agent{Delivery: DeliveryImage, Path: "cosmicac"}, []string{"agentPath"}},
		"specifier":     {Agent{Delivery: DeliveryImage, Path: "/bin/%n"}, []string{"agentPath"}},
	} {
		t.Run(name, func(t *testing.T) {
			var got []string
			for _, fe := range cosmic.FieldErrors(tc.a.Check()) {
				got = append(got, fe.Field)
			}
			if diff := cmp.Diff(tc.fields, got); diff != "" {
				t.Errorf("fields (-want +got):\n%s", diff)
			}
		})
	}
	if _, err := UserData(VM{Agent: Agent{Delivery: "http"}}); err == nil {
		t.Error("UserData took a bad delivery")
	}
}

// The mount script is valid sh, waits for the disk and gives up with a
// message naming it.
func TestMountScript(t *testing.T) {
	s := MountScript()
	for _, want := range []string{"/dev/disk/by-label/COSMICAC", "dir=/run/cosmicac", `mount -o ro "$dev" "$dir"`, `mountpoint -q "$dir"`} {
		if !strings.Contains(s, want) {
			t.Errorf("mount script lacks %q:\n%s", want, s)
		}
	}
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Fatalf("sh is not on PATH: %v", err)
	}
	path := filepath.Join(t.TempDir(), "mount-agent-disk")
	if err := os.WriteFile(path, []byte(s), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(sh, "-n", path).CombinedOutput(); err != nil {
		t.Fatalf("sh -n: %v\n%s", err, out)
	}
}

func TestDisks(t *testing.T) {
	if AgentDisk.Label != "COSMICAC" || AgentDisk.File() != "cosmicac" || AgentDisk.MountPoint != "/run/cosmicac" {
		t.Errorf("AgentDisk %+v", AgentDisk)
	}
	if got := (Agent{}).Binary(); got != "/run/cosmicac/cosmicac" {
		t.Errorf("Binary = %s", got)
	}
	want := []string{"-quiet", "-output", "seed.iso", "-volid", "cidata", "-joliet", "-rock", "dir"}
	if diff := cmp.Diff(want, Seed.GenisoimageArgs("seed.iso", "dir")); diff != "" {
		t.Errorf("seed args (-want +got):\n%s", diff)
	}
	var md map[string]string
	if err := yaml.UnmarshalStrict(MetaData("cj-1-r0-0", "cj-1-r0-0"), &md); err != nil || md["instance-id"] != "cj-1-r0-0" || md["local-hostname"] != "cj-1-r0-0" {
		t.Errorf("meta-data %v, %v", md, err)
	}
}

// TestNGCKey: a VM given the rack's NGC key disk copies the key before the
// agent starts (after the agent disk is mounted), and the agent is told
// where; without it, none of that is there. The script is valid sh and
// keeps the key on /run, root only.
func TestNGCKey(t *testing.T) {
	for _, ngc := range []bool{false, true} {
		vm := testVM(DeliveryDisk)
		vm.NGCKey = ngc
		ud, err := UserData(vm)
		if err != nil {
			t.Fatal(err)
		}
		fs := files(t, ud)
		unit := fs[AgentUnitPath].Content
		pre := strings.Index(unit, "ExecStartPre="+NGCKeyScriptPath+"\n")
		if (pre >= 0) != ngc || ngc && pre < strings.Index(unit, "ExecStartPre="+MountScriptPath+"\n") {
			t.Errorf("NGCKey %v: unit\n%s", ngc, unit)
		}
		script, ok := fs[NGCKeyScriptPath]
		if ok != ngc || ok && (script.Permissions != "0755" || script.Content != NGCKeyScript()) {
			t.Errorf("NGCKey %v: script %+v", ngc, script)
		}
		var ac AgentConfig
		if err := yaml.Unmarshal([]byte(fs[AgentConfigPath].Content), &ac); err != nil {
			t.Fatal(err)
		}
		if want := map[bool]string{true: NGCKeyFile}[ngc]; ac.NGCKeyFile != want {
			t.Errorf("NGCKey %v: agent ngcKeyFile %q, want %q", ngc, ac.NGCKeyFile, want)
		}
	}
	s := NGCKeyScript()
	for _, want := range []string{"/dev/disk/by-label/CACNGC", "umask 077", "chmod 0700 /run/cosmicac-ngc", `mount -o ro "$dev" "$m"`,
		`cp "$m/ngc-api-key" /run/cosmicac-ngc/ngc-api-key.new`, "mv /run/cosmicac-ngc/ngc-api-key.new /run/cosmicac-ngc/ngc-api-key"} {
		if !strings.Contains(s, want) {
			t.Errorf("NGC key script lacks %q:\n%s", want, s)
		}
	}
	path := filepath.Join(t.TempDir(), "copy-ngc-key")
	if err := os.WriteFile(path, []byte(s), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("sh", "-n", path).CombinedOutput(); err != nil {
		t.Fatalf("sh -n: %v\n%s", err, out)
	}
}

// TestEngineDisk: a VM given the engine disk (a llama.cpp replica on the
// QEMU rack) mounts it before the agent starts, after the agent disk, and
// the agent is told where llama-server and the models are; without it,
// none of that is there. The script is valid sh.
func TestEngineDisk(t *testing.T) {
	for _, engine := range []bool{false, true} {
		vm := testVM(DeliveryDisk)
		vm.Engine = engine
		ud, err := UserData(vm)
		if err != nil {
			t.Fatal(err)
		}
		fs := files(t, ud)
		unit := fs[AgentUnitPath].Content
		pre := strings.Index(unit, "ExecStartPre="+EngineScriptPath+"\n")
		if (pre >= 0) != engine || engine && pre < strings.Index(unit, "ExecStartPre="+MountScriptPath+"\n") {
			t.Errorf("Engine %v: unit\n%s", engine, unit)
		}
		script, ok := fs[EngineScriptPath]
		if ok != engine || ok && (script.Permissions != "0755" || script.Content != EngineScript()) {
			t.Errorf("Engine %v: script %+v", engine, script)
		}
		var ac AgentConfig
		if err := yaml.Unmarshal([]byte(fs[AgentConfigPath].Content), &ac); err != nil {
			t.Fatal(err)
		}
		wantServer, wantDir := "", ""
		if engine {
			wantServer, wantDir = "/run/cosmicac-engine/llama-server", "/run/cosmicac-engine/models"
		}
		if ac.LlamaServer != wantServer || ac.ModelDir != wantDir {
			t.Errorf("Engine %v: agent llamaServer %q modelDir %q", engine, ac.LlamaServer, ac.ModelDir)
		}
	}
	s := EngineScript()
	for _, want := range []string{"/dev/disk/by-label/CACENGINE", "dir=/run/cosmicac-engine", `mount -o ro "$dev" "$dir"`} {
		if !strings.Contains(s, want) {
			t.Errorf("engine script lacks %q:\n%s", want, s)
		}
	}
	path := filepath.Join(t.TempDir(), "mount-engine-disk")
	if err := os.WriteFile(path, []byte(s), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("sh", "-n", path).CombinedOutput(); err != nil {
		t.Fatalf("sh -n: %v\n%s", err, out)
	}
}
