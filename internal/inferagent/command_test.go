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
	cases = append(cases, []struct {
		name string
		in   cosmic.InferenceSpec
		p    Placement
	}{
		{"llama.cpp, defaults", cosmic.InferenceSpec{Runtime: cosmic.RuntimeLlamaCPP, Model: "cosmicac/test-chat"}, Placement{VMICount: 1, GPUs: 1}},
		{"llama.cpp embeddings, served name, args, the node's engine and models", cosmic.InferenceSpec{Runtime: cosmic.RuntimeLlamaCPP, Model: "test-embed",
			ServedModelName: "embed", Args: map[string]string{"embeddings": "true", "pooling": "mean", "ctx-size": "512", "cont-batching": "false", "jinja": "true", "parallel": "4"}},
			Placement{VMICount: 1, GPUs: 1, Port: 8100, LlamaServer: "/opt/llama/bin/llama-server", ModelDir: "/srv/models"}},
		{"llama.cpp on a unix socket", cosmic.InferenceSpec{Runtime: cosmic.RuntimeLlamaCPP, Model: "cosmicac/test-chat"},
			Placement{VMICount: 1, GPUs: 1, Socket: "/run/cosmicac-llama-1/runtime.sock"}},
		{"llama.cpp with two LoRA adapters", cosmic.InferenceSpec{Runtime: cosmic.RuntimeLlamaCPP, Model: "cosmicac/test-chat",
			Adapters: []cosmic.Adapter{{Name: "pirate", Source: "cosmicac/test-chat-lora"}, {Name: "legal", Source: "acme/legal-lora"}}},
			Placement{VMICount: 1, GPUs: 1, ModelDir: "/srv/models"}},
		{"vllm with two LoRA adapters", cosmic.InferenceSpec{Runtime: cosmic.RuntimeVLLM, Model: "meta-llama/Llama-3.1-8B-Instruct",
			Adapters: []cosmic.Adapter{{Name: "sql", Source: "acme/llama-3.1-8b-sql-lora"}, {Name: "legal", Source: "acme/legal-lora"}}},
			Placement{VMICount: 1, GPUs: 1}},
	}...)

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
		"no model":             {cosmic.InferenceSpec{Runtime: cosmic.RuntimeVLLM}, Placement{GPUs: 1}},
		"arg not allowed":      {cosmic.InferenceSpec{Runtime: cosmic.RuntimeVLLM, Model: "a/b", Args: map[string]string{"tensor-parallel-size": "4"}}, Placement{GPUs: 1}},
		"bad boolean":          {cosmic.InferenceSpec{Runtime: cosmic.RuntimeVLLM, Model: "a/b", Args: map[string]string{"enforce-eager": "yes"}}, Placement{GPUs: 1}},
		"multi-node no hosts":  {cosmic.InferenceSpec{Runtime: cosmic.RuntimeVLLM, Model: "a/b"}, Placement{VMICount: 2, GPUs: 8}},
		"parakeet multi-node":  {cosmic.InferenceSpec{Runtime: cosmic.RuntimeParakeet, Model: cosmic.ParakeetModel}, Placement{VMICount: 2, GPUs: 1, Hosts: []string{"a", "b"}}},
		"llama.cpp multi-node": {cosmic.InferenceSpec{Runtime: cosmic.RuntimeLlamaCPP, Model: "m"}, Placement{VMICount: 2, GPUs: 1, Hosts: []string{"a", "b"}}},
		"llama.cpp vLLM arg":   {cosmic.InferenceSpec{Runtime: cosmic.RuntimeLlamaCPP, Model: "m", Args: map[string]string{"max-model-len": "8"}}, Placement{GPUs: 1}},
		"llama.cpp bad bool":   {cosmic.InferenceSpec{Runtime: cosmic.RuntimeLlamaCPP, Model: "m", Args: map[string]string{"embeddings": "1"}}, Placement{GPUs: 1}},
		"llama.cpp socket":     {cosmic.InferenceSpec{Runtime: cosmic.RuntimeLlamaCPP, Model: "m"}, Placement{GPUs: 1, Socket: "relative.sock"}},
	} {
		if _, err := BuildCommand(c.in, c.p); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// vllmFlagsFile is the list of `vllm serve` flags of the vLLM version
// CosmicAC targets (docs/inference.md, "The target vLLM version").
const vllmFlagsFile = "vllm-serve-flags-v0.24.0.txt"

// vllmServeFlags reads testdata/vllmFlagsFile.
func vllmServeFlags(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", vllmFlagsFile))
	if err != nil {
		t.Fatal(err)
	}
	flags := map[string]bool{}
	for line := range strings.Lines(string(b)) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if !strings.HasPrefix(line, "--") || strings.ContainsAny(line, " \t") {
			t.Fatalf("%s: %q is not a long flag", vllmFlagsFile, line)
		}
		flags[line] = true
	}
	return flags
}

// vllmArgSamples are values cosmic.Validate accepts for each of
// cosmic.VLLMArgs; booleans are tried both ways.
var vllmArgSamples = map[string][]string{
	"block-size": {"16"}, "dtype": {"bfloat16"}, "gpu-memory-utilization": {"0.9"}, "kv-cache-dtype": {"fp8"},
	"max-model-len": {"32768"}, "max-num-batched-tokens": {"8192"}, "max-num-seqs": {"256"}, "quantization": {"fp8"},
	"reasoning-parser": {"deepseek_r1"}, "revision": {"main"}, "seed": {"0"}, "tokenizer": {"Qwen/Qwen3-8B"},
	"tool-call-parser": {"hermes"}, "runner": {"pooling"}, "convert": {"embed"},
	"enable-auto-tool-choice": {"true", "false"}, "enable-chunked-prefill": {"true", "false"},
	"enable-prefix-caching": {"true", "false"}, "enforce-eager": {"true", "false"}, "trust-remote-code": {"true", "false"},
}

// TestCommandFlagsKnownToTargetVLLM: every flag BuildCommand can emit, for
// every serving option (each of cosmic.VLLMArgs, each way) and for a
// single-node replica and both roles of a multi-node one, is a flag of the
// targeted `vllm serve` (testdata/vllmFlagsFile): a job whose command line
// has one it does not know would exit at start with "unrecognized arguments".
func TestCommandFlagsKnownToTargetVLLM(t *testing.T) {
	known := vllmServeFlags(t)
	if known["--swap-space"] {
		t.Errorf("%s lists --swap-space, which vLLM PR #36216 removed", vllmFlagsFile)
	}
	hosts := []string{"r0-0.job-r0.cosmicac.svc", "r0-1.job-r0.cosmicac.svc"}
	placements := map[string]Placement{
		"1 node, 1 GPU":          {VMICount: 1, GPUs: 1},
		"1 node, 8 GPUs":         {VMICount: 1, GPUs: 8},
		"2 nodes × 8, head":      {VMIIndex: 0, VMICount: 2, GPUs: 8, Hosts: hosts},
		"2 nodes × 8, worker":    {VMIIndex: 1, VMICount: 2, GPUs: 8, Hosts: hosts},
		"4 nodes × 8, last rank": {VMIIndex: 3, VMICount: 4, GPUs: 8, Hosts: append(hosts, "r0-2", "r0-3")},
	}
	for _, k := range cosmic.VLLMArgs {
		if len(vllmArgSamples[k]) == 0 {
			t.Fatalf("cosmic.VLLMArgs has %q and this test has no sample value for it: add one", k)
		}
	}
	specs := []cosmic.InferenceSpec{{Runtime: cosmic.RuntimeVLLM, Model: "Qwen/Qwen3-8B", ServedModelName: "qwen3"}}
	for _, k := range cosmic.VLLMArgs {
		for _, v := range vllmArgSamples[k] {
			specs = append(specs, cosmic.InferenceSpec{Runtime: cosmic.RuntimeVLLM, Model: "Qwen/Qwen3-8B", Args: map[string]string{k: v}})
		}
	}
	all := map[string]string{}
	for _, k := range cosmic.VLLMArgs {
		all[k] = vllmArgSamples[k][0]
	}
	specs = append(specs, cosmic.InferenceSpec{Runtime: cosmic.RuntimeVLLM, Model: "Qwen/Qwen3-8B", Args: all},
		cosmic.InferenceSpec{Runtime: cosmic.RuntimeVLLM, Model: "Qwen/Qwen3-8B", Adapters: []cosmic.Adapter{{Name: "sql", Source: "acme/qwen3-sql-lora"}}})
	emitted := 0
	for pname, p := range placements {
		for _, in := range specs {
			spec := cosmic.Spec{Type: cosmic.TypeManagedInference, Inference: &in}
			if err := spec.Validate(); err != nil && len(in.Args) > 0 {
				for _, fe := range cosmic.FieldErrors(err) {
					if strings.HasPrefix(fe.Field, "inference.args") {
						t.Fatalf("sample args %v are refused: %v", in.Args, fe)
					}
				}
			}
			cmd, err := BuildCommand(in, p)
			if err != nil {
				t.Fatalf("%s, args %v: %v", pname, in.Args, err)
			}
			if cmd.Path != "vllm" || len(cmd.Args) < 2 || cmd.Args[0] != "serve" {
				t.Fatalf("%s: command %s is not vllm serve MODEL …", pname, cmd)
			}
			for _, a := range cmd.Args[2:] {
				if !strings.HasPrefix(a, "--") {
					continue // a value
				}
				emitted++
				if !known[a] {
					t.Errorf("%s, args %v: %s is not a flag of the targeted vllm serve (%s)", pname, in.Args, a, vllmFlagsFile)
				}
			}
		}
	}
	if emitted == 0 {
		t.Fatal("no flag was checked")
	}
}

// llamaHelpFile is `llama-server --help` of the llama.cpp CosmicAC builds
// (hack/build-llama.sh: node-llama-cpp 3.21.1's release, commit 80fb11a).
const llamaHelpFile = "llama-server-help-80fb11a.txt"

// llamaServerFlags reads the long flags (and their --no- forms) of
// testdata/llamaHelpFile: each option line starts with its spellings,
// comma-separated, before the description.
func llamaServerFlags(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", llamaHelpFile))
	if err != nil {
		t.Fatal(err)
	}
	flags := map[string]bool{}
	for line := range strings.Lines(string(b)) {
		if !strings.HasPrefix(line, "-") || strings.HasPrefix(line, "-----") {
			continue
		}
		// "-c,    --ctx-size N    size of the prompt context (default: 0, …)":
		// comma-separated spellings, each maybe with its argument, then
		// the description after a run of spaces.
		for _, f := range strings.Split(line, ",") {
			f = strings.TrimSpace(f)
			if !strings.HasPrefix(f, "-") {
				break
			}
			if name := strings.Fields(f)[0]; strings.HasPrefix(name, "--") {
				flags[name] = true
			}
			if strings.Contains(f, "  ") {
				break // the description has begun
			}
		}
	}
	if len(flags) < 100 {
		t.Fatalf("%s: read only %d flags", llamaHelpFile, len(flags))
	}
	return flags
}

// TestLlamaFlagsAreTheServers: every flag BuildCommand can emit for the
// llama.cpp runtime, for every serving option (each of cosmic.LlamaCPPArgs,
// booleans both ways), is a flag of the llama-server CosmicAC builds
// (testdata/llamaHelpFile): one it does not know stops it at start.
func TestLlamaFlagsAreTheServers(t *testing.T) {
	known := llamaServerFlags(t)
	samples := map[string][]string{"batch-size": {"512"}, "cache-ram": {"64"}, "cache-reuse": {"256"}, "ctx-size": {"2048"}, "flash-attn": {"auto"},
		"n-predict": {"128"}, "parallel": {"4"}, "pooling": {"mean"}, "seed": {"7"}, "threads": {"2"}, "threads-batch": {"2"}, "ubatch-size": {"256"}}
	for _, k := range cosmic.LlamaCPPBoolArgs {
		samples[k] = []string{"true", "false"}
	}
	for _, k := range cosmic.LlamaCPPArgs {
		vs, ok := samples[k]
		if !ok {
			t.Errorf("no sample value for cosmic.LlamaCPPArgs %q", k)
			continue
		}
		for _, v := range vs {
			in := cosmic.InferenceSpec{Runtime: cosmic.RuntimeLlamaCPP, Model: "cosmicac/test-chat", Args: map[string]string{k: v}}
			s := cosmic.Spec{Type: cosmic.TypeManagedInference, Location: "us", Inference: &in}
			s.Default()
			if err := s.Validate(); err != nil {
				t.Errorf("%s=%s: the spec is refused: %v", k, v, err)
				continue
			}
			cmd, err := BuildCommand(in, Placement{VMICount: 1, GPUs: 1})
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range cmd.Args {
				if strings.HasPrefix(a, "--") && !known[a] {
					t.Errorf("%s=%s: %s is not a flag of llama-server (%s)", k, v, a, llamaHelpFile)
				}
			}
		}
	}
	lora, err := BuildCommand(cosmic.InferenceSpec{Runtime: cosmic.RuntimeLlamaCPP, Model: "cosmicac/test-chat",
		Adapters: []cosmic.Adapter{{Name: "a", Source: "cosmicac/test-chat-lora"}}}, Placement{VMICount: 1, GPUs: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range lora.Args {
		if strings.HasPrefix(a, "--") && !known[a] {
			t.Errorf("adapters: %s is not a flag of llama-server (%s)", a, llamaHelpFile)
		}
	}
	for _, f := range []string{"--ctx-size", "--no-cont-batching", "--no-jinja", "--embeddings", "--alias", "--no-webui", "--metrics", "--slots", "--lora-scaled"} {
		if !known[f] {
			t.Errorf("the reading of %s misses %s", llamaHelpFile, f)
		}
	}
	if known["--no-such-flag"] || known["--ctx"] {
		t.Error("the reading of the help file invents flags")
	}
}
