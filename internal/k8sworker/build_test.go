package k8sworker

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/vmboot"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/golden")

const (
	testJobID  = "0b7c54a8-5f0e-4c1e-9d3a-2f6b8e1c4d70"
	testRootID = "5d0f3c8e-1a2b-4c3d-8e9f-0a1b2c3d4e5f"
	testKeyA   = "1f3e5d7c9b0a2f4e6d8c0b1a3f5e7d9c2b4a6f8e0d1c3b5a7f9e2d4c6b8a0f1e"
	testKeyB   = "a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b1"
	testOrkKey = "9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f1e0d9c8b7a6f5e4d3c2b1a0f9e8d"
)

var testTime = time.Date(2026, 5, 4, 12, 0, 0, 0, time.UTC)

func testJob(team string, s cosmic.Spec) cosmic.Job {
	s.Default()
	j := cosmic.NewJob(testJobID, "ada@example.com", team, s, testTime)
	return j
}

// testBootstrap is a bootstrap of n VMIs with deterministic (seeded)
// agent identities and peers (agents_test.go).
func testBootstrap(n int) Bootstrap { return seededBootstrap(n) }

func multiNodeConfig() RackConfig {
	c := DefaultRackConfig()
	c.Namespace = "gpu-jobs"
	c.StorageClassName = "local-nvme"
	c.Networks = Networks{InfiniBand: []string{"ib-rail-0", "ib-rail-1"}, Overlay: "kube-system/cosmicac-overlay"}
	c.Tolerations = []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
	c.Firmware = Firmware{SecureBoot: true, PCIHole64GiB: 2048, HookSidecarImage: "quay.io/kubevirt/sidecar-shim:v1.9.0"}
	return c
}

type buildCase struct {
	cfg  RackConfig
	job  cosmic.Job
	res  cosmic.Reservation
	boot Bootstrap
}

func buildCases() map[string]buildCase {
	def := DefaultRackConfig()
	return map[string]buildCase{
		"container-1gpu": {
			cfg:  def,
			job:  testJob("ml", cosmic.Spec{Type: cosmic.TypeGPUContainer, Location: "us", Image: "docker.io/cosmicac/ubuntu-cuda:24.04"}),
			res:  cosmic.Reservation{JobID: testJobID, Rack: def.Rack, Nodes: []cosmic.NodeAlloc{{Node: "gpu-node-1", GPUs: []int{3}}}},
			boot: testBootstrap(1),
		},
		// Datastore and Git volumes: the agent's bootstrap lists them
		// (the user data), and a job with an RW one gives its VMI the time
		// to push it as it powers off (terminationGracePeriodSeconds).
		"container-volumes": {
			cfg: def,
			job: testJob("ml", cosmic.Spec{Type: cosmic.TypeGPUContainer, Location: "us", Image: "docker.io/cosmicac/ubuntu-cuda:24.04",
				Volumes: []cosmic.Volume{
					{MountPath: "/data", Permission: "RO", Source: cosmic.VolumeSource{DataStore: &cosmic.DataStoreSource{Alias: "s3", Container: "datasets", Prefix: "train"}}},
					{MountPath: "/out", Permission: "RW", Source: cosmic.VolumeSource{DataStore: &cosmic.DataStoreSource{Alias: "s3", Container: "results"}}},
					{MountPath: "/src", Source: cosmic.VolumeSource{PublicGit: &cosmic.PublicGitSource{URL: "https://git.example/tools.git"}}},
				}}),
			res:  cosmic.Reservation{JobID: testJobID, Rack: def.Rack, Nodes: []cosmic.NodeAlloc{{Node: "gpu-node-1", GPUs: []int{0}}}},
			boot: testBootstrap(1),
		},
		// Standalone volumes, one RW and one RO: a blank DataVolume each,
		// the team's (no owner, no job label), and a virtio disk each on
		// the VMI with the serial the agent finds it by.
		"container-standalone": {
			cfg: func() RackConfig {
				c := DefaultRackConfig()
				c.StorageClassName = "local-nvme"
				return c
			}(),
			job: testJob("ML Research", cosmic.Spec{Type: cosmic.TypeGPUContainer, Location: "us", Image: "docker.io/cosmicac/ubuntu-cuda:24.04",
				Volumes: []cosmic.Volume{
					{MountPath: "/data", Source: cosmic.VolumeSource{DataStore: &cosmic.DataStoreSource{Alias: "s3", Container: "datasets"}}},
					{MountPath: "/scratch", Source: cosmic.VolumeSource{Standalone: &cosmic.StandaloneSource{Name: "scratch"}}},
					{MountPath: "/ref", Permission: "RO", Source: cosmic.VolumeSource{Standalone: &cosmic.StandaloneSource{Name: "Ref_Data.v2"}}},
				}}),
			res:  cosmic.Reservation{JobID: testJobID, Rack: def.Rack, Nodes: []cosmic.NodeAlloc{{Node: "gpu-node-1", GPUs: []int{0}}}},
			boot: testBootstrap(1),
		},
		"container-8gpu": {
			cfg: func() RackConfig {
				c := DefaultRackConfig()
				c.Firmware.PCIHole64GiB = 1024 // 8 H100s: 640 GiB of BARs
				return c
			}(),
			job: testJob("ML Research", cosmic.Spec{
				Type: cosmic.TypeGPUContainer, Name: "fine-tune llama", Location: "us",
				Image: "nvcr.io/nvidia/pytorch-vm:25.01", DiskGB: 500,
				Command:         []string{"python", "train.py", "--epochs", "3"},
				EnvVars:         []cosmic.EnvVar{{Name: "WANDB_PROJECT", Value: "llama"}, {Name: "GREETING", Value: "it's \"quoted\""}},
				Resources:       cosmic.Resources{GPU: 8, GPUModel: "GH100_H100_SXM5_80GB", CPU: 96, Memory: 1024},
				SSHPublicKeys:   []string{"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGx0ZXN0a2V5MQ ada@laptop", "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQ bob@desk"},
				DefaultHTTPPort: 8888,
			}),
			res:  cosmic.Reservation{JobID: testJobID, Rack: def.Rack, Nodes: []cosmic.NodeAlloc{{Node: "gpu-node-2", GPUs: []int{0, 1, 2, 3, 4, 5, 6, 7}}}},
			boot: testBootstrap(1),
		},
		"vllm-4gpu": {
			cfg: def,
			job: testJob("ml", cosmic.Spec{Type: cosmic.TypeManagedInference, Location: "us",
				Inference: &cosmic.InferenceSpec{Model: "Qwen/Qwen3-32B", Replicas: 2, GPUsPerReplica: 4, Args: map[string]string{"max-model-len": "32768", "dtype": "bfloat16"}}}),
			res:  cosmic.Reservation{JobID: testJobID, Replica: 1, Rack: def.Rack, Nodes: []cosmic.NodeAlloc{{Node: "gpu-node-1", GPUs: []int{4, 5, 6, 7}}}},
			boot: testBootstrap(1),
		},
		"vllm-16gpu-2nodes": {
			cfg: multiNodeConfig(),
			job: testJob("ml", cosmic.Spec{Type: cosmic.TypeManagedInference, Location: "us",
				Inference: &cosmic.InferenceSpec{Model: "deepseek-ai/DeepSeek-V3", GPUsPerReplica: 16}}),
			res: cosmic.Reservation{JobID: testJobID, Rack: def.Rack, Nodes: []cosmic.NodeAlloc{
				{Node: "gpu-node-1", GPUs: []int{0, 1, 2, 3, 4, 5, 6, 7}},
				{Node: "gpu-node-2", GPUs: []int{0, 1, 2, 3, 4, 5, 6, 7}},
			}},
			boot: testBootstrap(2),
		},
		"parakeet": {
			cfg: func() RackConfig {
				c := DefaultRackConfig()
				c.AgentDelivery = vmboot.DeliveryImage // an image that carries the agent
				return c
			}(),
			job: testJob("speech", cosmic.Spec{Type: cosmic.TypeManagedInference, Location: "us",
				Inference: &cosmic.InferenceSpec{Runtime: cosmic.RuntimeParakeet}}),
			res:  cosmic.Reservation{JobID: testJobID, Rack: def.Rack, Nodes: []cosmic.NodeAlloc{{Node: "gpu-node-3", GPUs: []int{2}}}},
			boot: testBootstrap(1),
		},
		"llama-cpp": {
			cfg: func() RackConfig {
				c := DefaultRackConfig()
				c.Images.LlamaCPP = "docker://ghcr.io/cosmicac/vm-base:debian-12"
				c.Images.EngineDisk = "ghcr.io/cosmicac/cosmicac-engine-disk:test-models"
				return c
			}(),
			job: testJob("ml", cosmic.Spec{Type: cosmic.TypeManagedInference, Location: "us",
				Inference: &cosmic.InferenceSpec{Runtime: cosmic.RuntimeLlamaCPP, Model: "cosmicac/test-chat", ServedModelName: "tiny",
					Args: map[string]string{"ctx-size": "2048", "parallel": "4"}}}),
			res:  cosmic.Reservation{JobID: testJobID, Rack: def.Rack, Nodes: []cosmic.NodeAlloc{{Node: "gpu-node-1", GPUs: []int{0}}}},
			boot: testBootstrap(1),
		},
		"parakeet-ngc-key": {
			cfg: func() RackConfig {
				c := DefaultRackConfig()
				c.NGCKeySecret = "nvaie-ngc"
				return c
			}(),
			job: testJob("speech", cosmic.Spec{Type: cosmic.TypeManagedInference, Location: "us",
				Inference: &cosmic.InferenceSpec{Runtime: cosmic.RuntimeParakeet}}),
			res:  cosmic.Reservation{JobID: testJobID, Rack: def.Rack, Nodes: []cosmic.NodeAlloc{{Node: "gpu-node-3", GPUs: []int{2}}}},
			boot: testBootstrap(1),
		},
	}
}

// TestNGCKeyOnlyForParakeet: on a rack with an NGC key, only a parakeet
// job's VMIs get its disk (and the copy before the agent).
func TestNGCKeyOnlyForParakeet(t *testing.T) {
	for name, tc := range buildCases() {
		tc.cfg.NGCKeySecret = "nvaie-ngc"
		g, err := BuildReplica(tc.cfg, tc.job, tc.res, tc.boot)
		if err != nil {
			t.Fatal(err)
		}
		want := tc.job.Spec.Inference != nil && tc.job.Spec.Inference.Runtime == cosmic.RuntimeParakeet
		for _, vmi := range g.VMIs {
			got := false
			for _, v := range vmi.Spec.Volumes {
				if v.Secret != nil {
					got = v.Name == "ngckey" && v.Secret.SecretName == "nvaie-ngc" && v.Secret.VolumeLabel == vmboot.NGCKeyLabel
				}
			}
			if got != want {
				t.Errorf("%s: NGC key disk %v, want %v", name, got, want)
			}
		}
		for _, s := range g.Secrets {
			if got := bytes.Contains(s.Data[UserDataKey], []byte(vmboot.NGCKeyScriptPath)); got != want {
				t.Errorf("%s: user data copies the NGC key: %v, want %v", name, got, want)
			}
		}
	}
}

// kubectlYAML renders objects as `kubectl get -o yaml` would: one document
// each, without the (empty) status and null creationTimestamp of unsaved
// objects.
func kubectlYAML(t *testing.T, objs []Object) []byte {
	t.Helper()
	var b bytes.Buffer
	for _, o := range objs {
		if o.GetObjectKind().GroupVersionKind().Kind == "" {
			t.Fatalf("%s has no kind", o.GetName())
		}
		data, err := json.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(data, &m); err != nil {
			t.Fatal(err)
		}
		if md, ok := m["metadata"].(map[string]any); ok && md["creationTimestamp"] == nil {
			delete(md, "creationTimestamp")
		}
		delete(m, "status") // built objects have none (a Service's is an empty loadBalancer)
		out, err := yaml.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString("---\n")
		b.Write(out)
	}
	return b.Bytes()
}

func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./internal/k8sworker -run Golden -update)", err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("%s differs (-want +got; -update rewrites it):\n%s", path, diff)
	}
}

func TestBuildReplicaGolden(t *testing.T) {
	for name, tc := range buildCases() {
		t.Run(name, func(t *testing.T) {
			g, err := BuildReplica(tc.cfg, tc.job, tc.res, tc.boot)
			if err != nil {
				t.Fatalf("BuildReplica: %v", err)
			}
			root := g.Root.DeepCopy()
			root.UID = testRootID
			g.SetOwner(root)
			objs := g.Objects()
			for _, dv := range g.Standalone {
				objs = append(objs, dv) // the team's, after the job's
			}
			checkGolden(t, name+".yaml", kubectlYAML(t, objs))

			var ud bytes.Buffer
			for _, s := range g.Secrets {
				fmt.Fprintf(&ud, "# %s/%s key %s\n", s.Namespace, s.Name, UserDataKey)
				ud.Write(s.Data[UserDataKey])
			}
			checkGolden(t, name+".userdata.yaml", ud.Bytes())

			// Twice the same input, the same output.
			again, err := BuildReplica(tc.cfg, tc.job, tc.res, tc.boot)
			if err != nil {
				t.Fatal(err)
			}
			again.SetOwner(root)
			if !bytes.Equal(kubectlYAML(t, g.Objects()), kubectlYAML(t, again.Objects())) {
				t.Error("BuildReplica is not deterministic")
			}
		})
	}
}

// The user data of every VMI is vmboot's for the same VM, byte for byte:
// what a QEMU rack, which calls vmboot too, boots with.
func TestUserDataIsVMBoot(t *testing.T) {
	for name, tc := range buildCases() {
		t.Run(name, func(t *testing.T) {
			g, err := BuildReplica(tc.cfg, tc.job, tc.res, tc.boot)
			if err != nil {
				t.Fatal(err)
			}
			for i, s := range g.Secrets {
				var hosts []string
				if len(tc.res.Nodes) > 1 {
					for j := range tc.res.Nodes {
						hosts = append(hosts, fmt.Sprintf("%s.%s.%s.svc", VMIName(tc.job.ID, tc.res.Replica, j), ReplicaName(tc.job.ID, tc.res.Replica), tc.cfg.Namespace))
					}
				}
				want, err := vmboot.UserData(vmboot.VM{
					Job: tc.job, Replica: tc.res.Replica, Index: i, Count: len(tc.res.Nodes), GPUs: len(tc.res.Nodes[i].GPUs),
					Hosts: hosts, Boot: tc.boot, Agent: vmboot.Agent{Delivery: tc.cfg.AgentDelivery, Path: tc.cfg.AgentPath},
					NGCKey: tc.cfg.NGCKeySecret != "",      // only parakeet cases set it
					Engine: tc.cfg.Images.EngineDisk != "", // only the llama.cpp case sets it
				})
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(string(want), string(s.Data[UserDataKey])); diff != "" {
					t.Errorf("VMI %d: user data is not vmboot's (-vmboot +worker):\n%s", i, diff)
				}
			}
		})
	}
}

// Every VMI boots UEFI (Secure Boot, with SMM, only when the rack says),
// has the agent disk with DeliveryDisk, and the MMIO hook when the rack
// sizes the window; the hook script is in the root ConfigMap it names.
func TestBuildReplicaBoot(t *testing.T) {
	for name, tc := range buildCases() {
		t.Run(name, func(t *testing.T) {
			g, err := BuildReplica(tc.cfg, tc.job, tc.res, tc.boot)
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range g.VMIs {
				d := v.Spec.Domain
				efi := d.Firmware.Bootloader.EFI
				if efi == nil || efi.SecureBoot == nil || *efi.SecureBoot != tc.cfg.Firmware.SecureBoot {
					t.Errorf("%s: EFI %+v", v.Name, efi)
				}
				smm := d.Features != nil && d.Features.SMM != nil && *d.Features.SMM.Enabled
				if smm != tc.cfg.Firmware.SecureBoot {
					t.Errorf("%s: SMM %v with secure boot %v", v.Name, smm, tc.cfg.Firmware.SecureBoot)
				}
				var cd bool
				for _, disk := range d.Devices.Disks {
					if disk.Name == agentDisk {
						cd = disk.CDRom != nil && disk.CDRom.Bus == "sata" && *disk.CDRom.ReadOnly
					}
				}
				var img string
				for _, vol := range v.Spec.Volumes {
					if vol.Name == agentDisk && vol.ContainerDisk != nil {
						img = vol.ContainerDisk.Image
					}
				}
				disk := tc.cfg.AgentDelivery == vmboot.DeliveryDisk
				if cd != disk || (disk && img != tc.cfg.Images.AgentDisk) || (!disk && img != "") {
					t.Errorf("%s: agent CD-ROM %v image %q, delivery %s", v.Name, cd, img, tc.cfg.AgentDelivery)
				}
				hooks, ok := v.Annotations[AnnotationHookSidecars]
				if ok != (tc.cfg.Firmware.PCIHole64GiB > 0) {
					t.Errorf("%s: hook annotation %q", v.Name, hooks)
				}
				if !ok {
					continue
				}
				var list []hookSidecar
				if err := json.Unmarshal([]byte(hooks), &list); err != nil || len(list) != 1 || list[0].ConfigMap.Name != g.Root.Name ||
					list[0].Image != tc.cfg.Firmware.HookSidecarImage || g.Root.Data[list[0].ConfigMap.Key] != PCIHole64Hook(tc.cfg.Firmware.PCIHole64GiB) {
					t.Errorf("%s: hook %s, %v", v.Name, hooks, err)
				}
			}
		})
	}
}

func TestBuildReplicaInvariants(t *testing.T) {
	for name, tc := range buildCases() {
		t.Run(name, func(t *testing.T) {
			g, err := BuildReplica(tc.cfg, tc.job, tc.res, tc.boot)
			if err != nil {
				t.Fatal(err)
			}
			if len(g.VMIs) != len(tc.res.Nodes) || len(g.DataVolumes) != len(g.VMIs) || len(g.Secrets) != len(g.VMIs) {
				t.Fatalf("%d VMIs, %d DataVolumes, %d Secrets for %d nodes", len(g.VMIs), len(g.DataVolumes), len(g.Secrets), len(tc.res.Nodes))
			}
			root := g.Root.DeepCopy()
			root.UID = testRootID
			g.SetOwner(root)
			gpus := 0
			for _, o := range g.Objects() {
				kind := o.GetObjectKind().GroupVersionKind().Kind
				if msgs := validation.IsDNS1123Label(o.GetName()); len(msgs) > 0 {
					t.Errorf("%s %s: name %v", kind, o.GetName(), msgs)
				}
				if o.GetNamespace() != tc.cfg.Namespace {
					t.Errorf("%s %s: namespace %q", kind, o.GetName(), o.GetNamespace())
				}
				l := o.GetLabels()
				if l[LabelJob] != tc.job.ID || l[LabelManagedBy] != ManagedBy || l[LabelTeam] == "" {
					t.Errorf("%s %s: labels %v", kind, o.GetName(), l)
				}
				for k, v := range l {
					if msgs := validation.IsValidLabelValue(v); len(msgs) > 0 {
						t.Errorf("%s %s: label %s=%q: %v", kind, o.GetName(), k, v, msgs)
					}
				}
				if kind == "ConfigMap" {
					continue
				}
				if l[LabelReplica] != fmt.Sprint(tc.res.Replica) {
					t.Errorf("%s %s: replica label %q", kind, o.GetName(), l[LabelReplica])
				}
				if refs := o.GetOwnerReferences(); len(refs) != 1 || refs[0].UID != testRootID || refs[0].Name != RootName(tc.job.ID) {
					t.Errorf("%s %s: owners %+v", kind, o.GetName(), refs)
				}
			}
			for i, v := range g.VMIs {
				gpus += len(v.Spec.Domain.Devices.GPUs)
				if got := v.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchFields[0].Values[0]; got != tc.res.Nodes[i].Node {
					t.Errorf("VMI %d pinned to %s, want %s", i, got, tc.res.Nodes[i].Node)
				}
				if v.Labels[LabelVMIIndex] != fmt.Sprint(i) {
					t.Errorf("VMI %d: vmi-index %q", i, v.Labels[LabelVMIIndex])
				}
			}
			if gpus != tc.job.Spec.GPUsPerReplica() {
				t.Errorf("VMIs pass through %d GPUs, want %d", gpus, tc.job.Spec.GPUsPerReplica())
			}
		})
	}
}

func TestBuildReplicaErrors(t *testing.T) {
	def := DefaultRackConfig()
	container := testJob("ml", cosmic.Spec{Type: cosmic.TypeGPUContainer, Location: "us", Image: "img", Resources: cosmic.Resources{GPU: 2}})
	vllm := testJob("ml", cosmic.Spec{Type: cosmic.TypeManagedInference, Location: "us", Inference: &cosmic.InferenceSpec{Model: "m", GPUsPerReplica: 16}})
	two := []cosmic.NodeAlloc{{Node: "a", GPUs: []int{0, 1, 2, 3, 4, 5, 6, 7}}, {Node: "b", GPUs: []int{0, 1, 2, 3, 4, 5, 6, 7}}}
	tests := map[string]struct {
		cfg    RackConfig
		job    cosmic.Job
		res    cosmic.Reservation
		fields []string
	}{
		"no nodes": {def, container, cosmic.Reservation{}, []string{"reservation.nodes", "reservation.nodes"}},
		"container on two nodes": {def, container, cosmic.Reservation{Nodes: []cosmic.NodeAlloc{{Node: "a", GPUs: []int{0}}, {Node: "b", GPUs: []int{0}}}},
			[]string{"reservation.nodes", "reservation.nodes"}},
		"wrong GPU count": {def, container, cosmic.Reservation{Nodes: []cosmic.NodeAlloc{{Node: "a", GPUs: []int{0, 1, 2}}}}, []string{"reservation.nodes"}},
		"other job and rack, bad replica": {def, container, cosmic.Reservation{JobID: "x", Rack: "other", Replica: 3, Nodes: []cosmic.NodeAlloc{{Node: "a", GPUs: []int{0, 1}}}},
			[]string{"reservation.jobId", "reservation.rack", "reservation.replica"}},
		"bad and repeated nodes":      {def, container, cosmic.Reservation{Nodes: []cosmic.NodeAlloc{{Node: "A B", GPUs: []int{0, 1}}}}, []string{"reservation.nodes[0].node"}},
		"multi-node without networks": {def, vllm, cosmic.Reservation{Nodes: two}, []string{"reservation.nodes"}},
		"uneven nodes": {multiNodeConfig(), vllm, cosmic.Reservation{Nodes: []cosmic.NodeAlloc{{Node: "a", GPUs: []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}}, {Node: "a", GPUs: []int{0, 1, 2, 3}}}},
			[]string{"reservation.nodes[1].node", "reservation.nodes[1].gpus"}},
		"unmapped GPU model": {func() RackConfig {
			c := DefaultRackConfig()
			c.GPUModel = "L40S"
			c.GPUResources = []GPUResource{{Resource: "nvidia.com/AD102GL_L40S", Model: "L40S"}}
			return c
		}(), testJob("ml", cosmic.Spec{Type: cosmic.TypeGPUContainer, Location: "us", Image: "img", Resources: cosmic.Resources{GPU: 1, GPUModel: "GH100_H100_SXM5_80GB"}}),
			cosmic.Reservation{Nodes: []cosmic.NodeAlloc{{Node: "a", GPUs: []int{0}}}}, []string{"spec.resources.gpuModel"}},
		"no image": {def, testJob("ml", cosmic.Spec{Type: cosmic.TypeGPUContainer, Location: "us"}),
			cosmic.Reservation{Nodes: []cosmic.NodeAlloc{{Node: "a", GPUs: []int{0}}}}, []string{"spec.image"}},
		"job ID unfit for names": {def, func() cosmic.Job { j := container; j.ID = "Not_A_UUID"; return j }(),
			cosmic.Reservation{Nodes: []cosmic.NodeAlloc{{Node: "a", GPUs: []int{0, 1}}}}, []string{"id"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := BuildReplica(tc.cfg, tc.job, tc.res, Bootstrap{})
			if err == nil {
				t.Fatal("BuildReplica succeeded")
			}
			var got []string
			for _, fe := range cosmic.FieldErrors(err) {
				got = append(got, fe.Field)
			}
			if diff := cmp.Diff(tc.fields, got); diff != "" {
				t.Errorf("fields (-want +got):\n%s\n%v", diff, err)
			}
		})
	}
}

func TestNames(t *testing.T) {
	longest := SecretName(testJobID, 999, 9999)
	if len(longest) > 63 || len(testJobID) > maxJobIDLen {
		t.Errorf("%s: %d characters", longest, len(longest))
	}
	if got := VMIName(testJobID, 1, 0); got != "cj-"+testJobID+"-r1-0" {
		t.Errorf("VMIName = %s", got)
	}
	if l, ok := teamLabel("ML Research"); ok || !strings.HasPrefix(l, "h-") || len(validation.IsValidLabelValue(l)) > 0 {
		t.Errorf("teamLabel(ML Research) = %q, %v", l, ok)
	}
}
