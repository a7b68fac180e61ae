package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/cobra"

	"github.com/cosmicac/cosmicac/internal/cosmic"
)

// parseSpecArgs parses `jobs create` arguments (without "cosmicac jobs
// create") into a spec, as the command does.
func parseSpecArgs(t *testing.T, stdin string, args ...string) (cosmic.Spec, error) {
	t.Helper()
	var f specFlags
	cmd := &cobra.Command{Use: "create"}
	f.add(cmd)
	if err := cmd.Flags().Parse(args); err != nil {
		return cosmic.Spec{}, err
	}
	return f.spec(cmd, cmd.Flags().Args(), strings.NewReader(stdin))
}

func ptr[T any](v T) *T { return &v }

func TestSpecFlagsAliases(t *testing.T) {
	keyFile := filepath.Join(t.TempDir(), "keys")
	os.WriteFile(keyFile, []byte("# mine\nssh-ed25519 AAAA a@b\n\nssh-rsa BBBB c@d\n"), 0o600)
	got, err := parseSpecArgs(t, "", "--tags", "a=1,b=2", "--label", "c=3", "--region", "eu", "--model", "org/m",
		"--no-auth", "--ssh-key", "@"+keyFile, "--timeout", "2h", "--arg", "--seed=1")
	if err != nil {
		t.Fatal(err)
	}
	want := cosmic.Spec{Type: cosmic.TypeManagedInference, Labels: map[string]string{"a": "1", "b": "2", "c": "3"}, Location: "eu",
		SSHPublicKeys: []string{"ssh-ed25519 AAAA a@b", "ssh-rsa BBBB c@d"}, Timeout: 7200,
		Inference: &cosmic.InferenceSpec{Model: "org/m", RequireAuth: ptr(false), Args: map[string]string{"seed": "1"}}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
	for name, args := range map[string][]string{
		"region disagrees": {"--location", "us", "--region", "eu"},
		"bad label":        {"--label", "nokey"},
		"bad env":          {"--env", "=x"},
		"bad timeout":      {"--timeout", "soon"},
		"arg before dash":  {"python", "--", "x"},
		"arg without dash": {"python"},
		"missing key file": {"--ssh-key", "@/nonexistent"},
	} {
		if _, err := parseSpecArgs(t, "", args...); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// TestSpecFile: -f reads YAML or JSON (or stdin); flags override its fields.
func TestSpecFile(t *testing.T) {
	dir := t.TempDir()
	yamlSpec := "type: gpu-container\nname: from-file\nregion: us\nimage: ubuntu\nlabels:\n  a: \"1\"\nresources:\n  gpu: 2\ncommand: [sleep, \"10\"]\n"
	jsonSpec := `{"type":"gpu-container","name":"from-file","location":"us","image":"ubuntu","labels":{"a":"1"},"resources":{"gpu":2},"command":["sleep","10"]}`
	os.WriteFile(filepath.Join(dir, "s.yaml"), []byte(yamlSpec), 0o600)
	os.WriteFile(filepath.Join(dir, "s.json"), []byte(jsonSpec), 0o600)
	want := cosmic.Spec{Type: cosmic.TypeGPUContainer, Name: "from-file", Location: "us", Image: "ubuntu",
		Labels: map[string]string{"a": "1"}, Resources: cosmic.Resources{GPU: 2}, Command: []string{"sleep", "10"}}
	for name, args := range map[string][]string{
		"yaml":  {"-f", filepath.Join(dir, "s.yaml")},
		"json":  {"-f", filepath.Join(dir, "s.json")},
		"stdin": {"-f", "-"},
	} {
		got, err := parseSpecArgs(t, yamlSpec, args...)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("%s (-want +got):\n%s", name, d)
		}
	}
	got, err := parseSpecArgs(t, "", "-f", filepath.Join(dir, "s.yaml"), "--gpus", "4", "--label", "b=2", "--name", "flag", "--", "true")
	if err != nil {
		t.Fatal(err)
	}
	want.Resources.GPU, want.Name, want.Labels["b"], want.Command = 4, "flag", "2", []string{"true"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("override (-want +got):\n%s", d)
	}
	os.WriteFile(filepath.Join(dir, "bad.yaml"), []byte("type: gpu-container\ngpus: 3\n"), 0o600)
	if _, err := parseSpecArgs(t, "", "-f", filepath.Join(dir, "bad.yaml")); err == nil || !strings.Contains(err.Error(), "gpus") {
		t.Errorf("unknown field: %v", err)
	}
}

// A mistyped --type is told alone: not with the side errors a known type
// would not have had (issue 32).
func TestJobsCreateUnknownTypeAlone(t *testing.T) {
	code, out, errs := runCLI(t, nil, "jobs", "create", "--type", "managed", "--runtime", "vllm", "--model", "Qwen/Qwen3-8B",
		"--replicas", "2", "--gpus", "2", "--name", "qwen", "--location", "us")
	if code != ExitUsage || out != "" {
		t.Fatalf("exit %d, stdout %q: %s", code, out, errs)
	}
	if !strings.Contains(errs, `type: unknown job type "managed" (want gpu-container or managed-inference)`) {
		t.Errorf("stderr does not name the type:\n%s", errs)
	}
	if n := strings.Count(errs, "\n  "); n != 1 {
		t.Errorf("stderr tells %d problems, want the type's alone:\n%s", n, errs)
	}
}
