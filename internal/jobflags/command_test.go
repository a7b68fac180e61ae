package jobflags

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/cosmicac/cosmicac/internal/cosmic"
)

func TestCommand(t *testing.T) {
	tests := []struct {
		name     string
		spec     cosmic.Spec
		wantLine string
		wantUn   []string
	}{
		{
			name: "container",
			spec: cosmic.Spec{
				Type: cosmic.TypeGPUContainer, Name: "my job", Labels: map[string]string{"z": "1", "a": "2"}, Location: "us",
				Image: "ubuntu:24.04", DiskGB: 100, Resources: cosmic.Resources{GPU: 8, GPUModel: "GH100_H100_SXM5_80GB", CPU: 64, Memory: 512},
				EnvVars:         []cosmic.EnvVar{{Name: "MSG", Value: "it's $HOME"}},
				SSHPublicKeys:   []string{"ssh-ed25519 AAAAC3 me@x"},
				DefaultHTTPPort: 8080, GRPCPort: 9090, UnsecureHTTP: true, Timeout: 60, TimeoutAutoRestart: true,
				Command: []string{"bash", "-c", "echo 'hi' && sleep 1"},
			},
			wantLine: `cosmicac jobs create --type gpu-container --name 'my job' --label a=2 --label z=1 --location us` +
				` --gpu-model GH100_H100_SXM5_80GB --gpus 8 --image ubuntu:24.04 --disk 100 --cpu 64 --memory 512` +
				` --env 'MSG=it'\''s $HOME' --ssh-key 'ssh-ed25519 AAAAC3 me@x' --http-port 8080 --grpc-port 9090 --unsecure-http` +
				` --timeout 60 --timeout-auto-restart -- bash -c 'echo '\''hi'\'' && sleep 1'`,
		},
		{
			name: "inference",
			spec: cosmic.Spec{
				Type: cosmic.TypeManagedInference, Location: "us", Resources: cosmic.Resources{GPU: 16},
				Inference: &cosmic.InferenceSpec{Runtime: cosmic.RuntimeVLLM, Model: "Qwen/Qwen3-32B", ServedModelName: "qwen", Replicas: 2,
					GPUsPerReplica: 16, RequireAuth: boolp(false), Args: map[string]string{"max-model-len": "8192", "dtype": "auto"},
					Routing: cosmic.RoutingLeastOutstanding},
			},
			wantLine: `cosmicac jobs create --type managed-inference --location us --runtime vllm --model Qwen/Qwen3-32B` +
				` --served-model-name qwen --replicas 2 --gpus-per-replica 16 --require-auth=false --arg dtype=auto --arg max-model-len=8192` +
				` --routing least-outstanding`,
		},
		{
			name: "unexpressed fields",
			spec: cosmic.Spec{Type: cosmic.TypeGPUContainer, Location: "us", Image: "i", Resources: cosmic.Resources{GPU: 1, GPUBrand: "nvidia", Flavor: "x"},
				Volumes: []cosmic.Volume{{MountPath: "/d"}}, ReadUser: "r", PartnerID: "p"},
			wantLine: `cosmicac jobs create --type gpu-container --location us --gpus 1 --image i`,
			wantUn:   []string{"resources.gpuBrand", "resources.flavor", "volumes", "readUser", "partnerId"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Command(tt.spec)
			if got.Line != tt.wantLine {
				t.Errorf("Line:\n got %s\nwant %s", got.Line, tt.wantLine)
			}
			if diff := cmp.Diff(tt.wantUn, got.Unexpressed); diff != "" {
				t.Errorf("Unexpressed (-want +got):\n%s", diff)
			}
			if got.Args[0] != "cosmicac" || len(got.Args) < 3 {
				t.Errorf("Args = %q", got.Args)
			}
		})
	}
}
