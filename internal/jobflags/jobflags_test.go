package jobflags

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"

	"github.com/cosmicac/cosmicac/internal/cosmic"
)

// parse reads `jobs create` flags (without "cosmicac jobs create") into a
// spec, the command after "--" included, as the CLI does.
func parse(t *testing.T, args ...string) (cosmic.Spec, error) {
	t.Helper()
	var f Flags
	fs := pflag.NewFlagSet("create", pflag.ContinueOnError)
	f.Add(fs)
	if err := fs.Parse(args); err != nil {
		return cosmic.Spec{}, err
	}
	var s cosmic.Spec
	err := f.Apply(fs, &s, false)
	if n := fs.ArgsLenAtDash(); n >= 0 {
		s.Command = append([]string(nil), fs.Args()[n:]...)
	}
	return s, err
}

func ptr[T any](v T) *T { return &v }

func boolp(b bool) *bool { return &b }

// roundTripSpecs are defaulted specs that use every flag.
func roundTripSpecs() map[string]cosmic.Spec {
	return map[string]cosmic.Spec{
		"minimal container": {Type: cosmic.TypeGPUContainer, Location: "us", Image: "ubuntu:24.04"},
		"full container": {
			Type: cosmic.TypeGPUContainer, Name: "train it's", Labels: map[string]string{"team": "ml", "env": "dev", "empty": ""},
			Location: "us-east", Image: "docker.io/library/ubuntu:24.04", DiskGB: 500,
			Command:         []string{"python", "-c", "print('hi there')", "--", "$HOME"},
			EnvVars:         []cosmic.EnvVar{{Name: "B", Value: "x=y"}, {Name: "A", Value: ""}, {Name: "C", Value: "with space"}},
			Resources:       cosmic.Resources{GPU: 8, GPUModel: "GH100_H100_SXM5_80GB", CPU: 32, Memory: 256},
			SSHPublicKeys:   []string{"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB me@host", "ssh-rsa AAAAB3 other"},
			DefaultHTTPPort: 8888, GRPCPort: 9000, UnsecureHTTP: true, Timeout: 7200, TimeoutAutoRestart: true,
		},
		"vllm": {
			Type: cosmic.TypeManagedInference, Name: "llama", Location: "us", Resources: cosmic.Resources{GPU: 16},
			Inference: &cosmic.InferenceSpec{Runtime: cosmic.RuntimeVLLM, Model: "meta-llama/Llama-3.1-70B-Instruct", ServedModelName: "llama",
				Replicas: 2, GPUsPerReplica: 16, RequireAuth: ptr(false), Args: map[string]string{"max-model-len": "8192", "dtype": "bfloat16"},
				Routing: cosmic.RoutingLeastOutstanding, Adapters: []cosmic.Adapter{{Name: "sql", Source: "acme/sql-lora"}, {Name: "legal", Source: "acme/legal-lora"}}},
		},
		"autoscaled llama.cpp": {
			Type: cosmic.TypeManagedInference, Name: "tiny", Location: "eu",
			Inference: &cosmic.InferenceSpec{Runtime: cosmic.RuntimeLlamaCPP, Model: "cosmicac/test-chat", Replicas: 2,
				Autoscaling: &cosmic.Autoscaling{MinReplicas: 0, MaxReplicas: 3, TargetInFlight: 2, ScaleDownDelay: 60}},
		},
		"autoscaled with defaults": {
			Type: cosmic.TypeManagedInference, Location: "eu",
			Inference: &cosmic.InferenceSpec{Runtime: cosmic.RuntimeVLLM, Model: "Qwen/Qwen3-8B", Autoscaling: &cosmic.Autoscaling{MinReplicas: 1, MaxReplicas: 4}},
		},
		"parakeet": {
			Type: cosmic.TypeManagedInference, Location: "eu", Image: "registry.local/parakeet:1",
			Inference: &cosmic.InferenceSpec{Runtime: cosmic.RuntimeParakeet},
		},
	}
}

// TestRoundTrip: the line Command prints parses back (Flags) into the
// same spec.
func TestRoundTrip(t *testing.T) {
	for name, want := range roundTripSpecs() {
		t.Run(name, func(t *testing.T) {
			want.Default()
			c := Command(want)
			if len(c.Unexpressed) > 0 {
				t.Fatalf("unexpressed %v", c.Unexpressed)
			}
			got, err := parse(t, c.Args[3:]...)
			if err != nil {
				t.Fatalf("parse %s: %v", c.Line, err)
			}
			got.Default()
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("%s\n(-want +got):\n%s", c.Line, d)
			}
		})
	}
}

// TestBadAdapterFlag: an --adapter that is not NAME=SOURCE is an error
// naming the flag, and sets no adapter.
func TestBadAdapterFlag(t *testing.T) {
	for _, arg := range []string{"nosep", "=src", "name="} {
		s, err := parse(t, "--runtime", "llama.cpp", "--model", "m", "--adapter", arg)
		if err == nil || !strings.Contains(err.Error(), "--adapter") || len(s.Inference.Adapters) != 0 {
			t.Errorf("--adapter %q: %v, adapters %v", arg, err, s.Inference.Adapters)
		}
	}
}

// TestAutoscalingFlags: --scale-down-delay takes seconds or a duration,
// and a bad autoscaling flag names itself.
func TestAutoscalingFlags(t *testing.T) {
	s, err := parse(t, "--model", "m", "--max-replicas", "3", "--scale-down-delay", "2m")
	if err != nil || s.Inference.Autoscaling == nil || s.Inference.Autoscaling.MaxReplicas != 3 || s.Inference.Autoscaling.ScaleDownDelay != 120 {
		t.Fatalf("parse: %+v, %v", s.Inference, err)
	}
	for _, args := range [][]string{{"--max-replicas", "0"}, {"--target-in-flight", "-1"}, {"--scale-down-delay", "soon"}} {
		if _, err := parse(t, append([]string{"--model", "m"}, args...)...); err == nil || !strings.Contains(err.Error(), args[0]) {
			t.Errorf("%v: %v, want an error naming %s", args, err, args[0])
		}
	}
}
