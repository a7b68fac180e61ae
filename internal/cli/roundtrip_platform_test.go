package cli

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/cosmictest"
)

// Every job `jobs get -o yaml` (or json) prints is created again by `jobs
// create -f -` with the same spec, as kubectl creates from its own output:
// a job's ID, status and times are the platform's and are left out.
func TestGetOutputCreatesTheSameJob(t *testing.T) {
	e := cosmictest.NewEnv(t)
	tok, err := e.P.AdminToken()
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"COSMICAC_URL": e.P.URL, "COSMICAC_TOKEN": tok, "HOME": t.TempDir()}
	no := false
	specs := []cosmic.Spec{
		{Type: cosmic.TypeGPUContainer, Name: "everything", Location: "us", Image: "ubuntu:24.04", DiskGB: 50,
			Command: []string{"python", "train.py", "--epochs", "3"}, Labels: map[string]string{"team": "ml", "env": "dev"},
			EnvVars:         []cosmic.EnvVar{{Name: "EPOCHS", Value: "3"}, {Name: "EMPTY", Value: ""}},
			Resources:       cosmic.Resources{GPU: 2, GPUModel: "GH100_H100_SXM5_80GB", CPU: 16, Memory: 128},
			SSHPublicKeys:   []string{"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIMe2iAeQn1c+M7cVv+oCkHDbcjL+4fAxzYFpdBGqUTEM test"},
			DefaultHTTPPort: 8888, Timeout: 3600, TimeoutAutoRestart: true},
		cosmictest.Container("plain", 1),
		{Type: cosmic.TypeManagedInference, Name: "llm", Location: "us", Inference: &cosmic.InferenceSpec{
			Runtime: cosmic.RuntimeVLLM, Model: "Qwen/Qwen3-8B", ServedModelName: "qwen", Replicas: 2, GPUsPerReplica: 2,
			RequireAuth: &no, Args: map[string]string{"max-model-len": "8192", "enable-prefix-caching": "true"}}},
		{Type: cosmic.TypeManagedInference, Name: "asr", Location: "us", Inference: &cosmic.InferenceSpec{
			Runtime: cosmic.RuntimeParakeet, Model: cosmic.ParakeetModel}},
	}
	for _, format := range []string{"yaml", "json"} {
		for _, spec := range specs {
			j := e.Create(spec)
			code, out, errs := runCLI(t, env, "jobs", "get", j.ID, "-o", format)
			if code != 0 {
				t.Fatalf("get %s -o %s: exit %d, %s", spec.Name, format, code, errs)
			}
			// Names are unique within a team: the job goes first.
			if _, err := e.Client.DeleteJob(e.Ctx, j.ID, true); err != nil {
				t.Fatal(err)
			}
			e.WaitGone(j.ID)
			code, created, errs := runCLIIn(t, env, out, "jobs", "create", "-f", "-", "-o", "yaml")
			if code != 0 {
				t.Fatalf("create -f - from get -o %s of %s: exit %d, %s\n%s", format, spec.Name, code, errs, out)
			}
			var again cosmic.Job
			if err := yaml.Unmarshal([]byte(created), &again); err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(j.Spec, again.Spec); d != "" || again.ID == j.ID {
				t.Errorf("%s via -o %s: spec (-first +again):\n%s", spec.Name, format, d)
			}
			if _, err := e.Client.DeleteJob(e.Ctx, again.ID, true); err != nil {
				t.Fatal(err)
			}
			e.WaitGone(again.ID)
		}
	}
}
