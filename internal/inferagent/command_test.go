package inferagent

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cosmicac/cosmicac/internal/cosmic"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// TestCommandGolden checks the runtime command line of every VMI built from
// a spec and a placement against testdata/commands.golden (go test -update
// rewrites it).
func TestCommandGolden(t *testing.T) {
	off := false
	cases := []struct {
		name string
		in   cosmic.InferenceSpec
		p    Placement
	}{
		{"vllm 1 GPU, defaults", cosmic.InferenceSpec{Runtime: cosmic.RuntimeVLLM, Model: "Qwen/Qwen3-8B"}, Placement{VMICount: 1, GPUs: 1}},
		{"vllm 4 GPUs on one node, served name and args", cosmic.InferenceSpec{Runtime: cosmic.RuntimeVLLM, Model: "Qwen/Qwen3-32B",
			ServedModelName: "qwen3", RequireAuth: &off, Args: map[string]string{
				"max-model-len": "32768", "dtype": "bfloat16", "enable-prefix-caching": "false", "trust-remote-code": "true",
				"enforce-eager": "false", "gpu-memory-utilization": "0.9", "tool-call-parser": "hermes", "enable-auto-tool-choice": "true"}},
			Placement{VMICount: 1, GPUs: 4}},
		{"vllm 8 GPUs, port", cosmic.InferenceSpec{Runtime: cosmic.RuntimeVLLM, Model: "meta-llama/Llama-3.3-70B-Instruct",
			Args: map[string]string{"quantization": "fp8", "max-num-seqs": "256"}}, Placement{VMICount: 1, GPUs: 8, Port: 8100}},
	}
	hosts := []string{"r0-0.job-r0.cosmicac.svc", "r0-1.job-r0.cosmicac.svc"}
	for i := range 2 {
		cases = append(cases, struct {
			name string
			in   cosmic.InferenceSpec
			p    Placement
		}{
			name: "vllm 2 nodes × 8 GPUs, VMI " + string(rune('0'+i)),
			in:   cosmic.InferenceSpec{Runtime: cosmic.RuntimeVLLM, Model: "deepseek-ai/DeepSeek-V3", Args: map[string]string{"max-model-len": "65536", "enable-chunked-prefill": "true"}},
			p:    Placement{VMIIndex: i, VMICount: 2, GPUs: 8, Hosts: hosts},
		})
	}
	cases = append(cases, struct {
		name string
		in   cosmic.InferenceSpec
		p    Placement
	}{"parakeet", cosmic.InferenceSpec{Runtime: cosmic.RuntimeParakeet, Model: cosmic.ParakeetModel}, Placement{VMICount: 1, GPUs: 1}})

	var b strings.Builder
	for _, c := range cases {
		cmd, err := BuildCommand(c.in, c.p)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		b.WriteString("# " + c.name + " (role " + c.p.Role() + ")\n" + cmd.String() + "\n\n")
	}
	path := filepath.Join("testdata", "commands.golden")
	if *update {
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -run TestCommandGolden -update)", err)
	}
	if got := b.String(); got != string(want) {
		t.Errorf("command lines differ from %s (go test -update to accept):\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

func TestCommandErrors(t *testing.T) {
	for name, c := range map[string]struct {
		in cosmic.InferenceSpec
		p  Placement
	}{
		"no model":            {cosmic.InferenceSpec{Runtime: cosmic.RuntimeVLLM}, Placement{GPUs: 1}},
		"arg not allowed":     {cosmic.InferenceSpec{Runtime: cosmic.RuntimeVLLM, Model: "a/b", Args: map[string]string{"tensor-parallel-size": "4"}}, Placement{GPUs: 1}},
		"bad boolean":         {cosmic.InferenceSpec{Runtime: cosmic.RuntimeVLLM, Model: "a/b", Args: map[string]string{"enforce-eager": "yes"}}, Placement{GPUs: 1}},
		"multi-node no hosts": {cosmic.InferenceSpec{Runtime: cosmic.RuntimeVLLM, Model: "a/b"}, Placement{VMICount: 2, GPUs: 8}},
		"parakeet multi-node": {cosmic.InferenceSpec{Runtime: cosmic.RuntimeParakeet, Model: cosmic.ParakeetModel}, Placement{VMICount: 2, GPUs: 1, Hosts: []string{"a", "b"}}},
	} {
		if _, err := BuildCommand(c.in, c.p); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
