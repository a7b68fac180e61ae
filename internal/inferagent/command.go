package inferagent

import (
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/cosmicac/cosmicac/internal/agent/agentapi"
	"github.com/cosmicac/cosmicac/internal/cosmic"
)

// DefaultPort is the port the runtime serves on inside the VMI (loopback
// only: the agent is its one client).
const DefaultPort = 8000

// The parakeet runtime is NVIDIA's ASR NIM (Riva ASR NIM) container
// serving Parakeet TDT 0.6B v3: the "parakeet-0.6b-tdt" NIM with the
// "type=multi" profile (docs.nvidia.com/nim/speech/latest/asr/deploy-asr-models/parakeet-tdt.html).
// The VMI's image must hold Docker and the NVIDIA Container Toolkit. See
// docs/inference.md, "Parakeet: NVIDIA's ASR NIM".
const (
	// ParakeetImage is the NIM's container image.
	ParakeetImage = "nvcr.io/nim/nvidia/parakeet-0.6b-tdt:latest"
	// ParakeetContainer is the container's name in the VMI: a container
	// left over from a killed agent is removed before the next start.
	ParakeetContainer = "cosmicac-nim-asr"
	// ParakeetTags is NIM_TAGS_SELECTOR: the multilingual (v3) profile.
	ParakeetTags = "type=multi"
	// ParakeetCache is the VMI's directory mounted at the NIM's cache
	// (NIM_CACHE_PATH, /opt/nim/.cache): a restart does not download the
	// model again.
	ParakeetCache = "/var/lib/cosmicac/nim-cache"
	// ParakeetEnvFile is the file (root, 0600) the job's environment
	// variables reach the NIM's container through (docker run --env-file):
	// the Docker client itself runs with the agent's environment and the
	// NGC key only, so that no variable of a spec (DOCKER_HOST, say) can
	// steer where the client sends the container's environment, key
	// included.
	ParakeetEnvFile = "/var/lib/cosmicac/nim.env"
	// ParakeetReadyPath is the NIM's readiness route (200 once the model
	// is loaded).
	ParakeetReadyPath = "/v1/health/ready"
	// ParakeetLanguage is the language the agent's probe asks for: "multi"
	// is Parakeet TDT v3's automatic language detection.
	ParakeetLanguage = "multi"
	// NGCAPIKeyEnv is the environment variable the NIM reads its NGC key
	// from. The agent sets it in the runtime's environment only (read from
	// Config.NGCKeyFile); the command line names it without its value.
	NGCAPIKeyEnv = "NGC_API_KEY"
)

// Placement is what the agent knows of where its replica runs, from the
// bootstrap.
type Placement struct {
	// VMIIndex is this VMI's index in the replica (0 is the head).
	VMIIndex int
	// VMICount is how many VMIs (nodes) the replica spans.
	VMICount int
	// GPUs is how many GPUs this VMI holds (every VMI of a replica holds as
	// many).
	GPUs int
	// Hosts are the DNS names of the replica's VMIs, by index (multi-node).
	Hosts []string
	// Port is the runtime's port (0: DefaultPort).
	Port int
	// LlamaServer is the node's llama-server (default "llama-server", on
	// PATH), and ModelDir its directory of GGUF models (default
	// DefaultModelDir): the llama.cpp runtime's.
	LlamaServer string
	ModelDir    string
	// ModelCache is the node's cache of models taken from datastores
	// (inference.modelSource; default DefaultModelCache), and ModelPath,
	// set once the model is there, its weights: the GGUF file for
	// llama.cpp, the directory for vLLM. Unset, the model comes from
	// ModelDir (llama.cpp) or by its name (vLLM).
	ModelCache string
	ModelPath  string
	// Socket, when set, is the path of a unix socket (ending in .sock)
	// the llama.cpp runtime serves on instead of Port: where the runtime
	// shares its host's loopback with others (the simulated rack runs it
	// on the platform's host), a socket in a directory of the agent's own
	// is reachable by no other user and no web page.
	Socket string
}

// DefaultModelDir is agentapi's: where a node keeps the GGUF models the
// llama.cpp runtime serves.
const DefaultModelDir = agentapi.DefaultModelDir

// DefaultModelCache is where a node keeps the models it took from
// datastores, by content (datasync.Fetch).
const DefaultModelCache = "/var/cache/cosmicac/models"

// ModelFile is agentapi.ModelFile: the GGUF file of model in dir.
func ModelFile(dir, model string) string { return agentapi.ModelFile(dir, model) }

// Role is the VMI's role: the lowest VMI index leads. The election needs no
// messages: every agent knows its index and the count from the bootstrap.
func (p Placement) Role() string {
	if p.VMIIndex == 0 {
		return agentapi.PlacementHead
	}
	return agentapi.PlacementWorker
}

// TensorParallel is the tensor-parallel size: the GPUs of one node.
func (p Placement) TensorParallel() int { return max(p.GPUs, 1) }

// PipelineParallel is the pipeline-parallel size: the nodes of the replica.
func (p Placement) PipelineParallel() int { return max(p.VMICount, 1) }

// Command is a program and its arguments.
type Command struct {
	Path string   `json:"path"`
	Args []string `json:"args"`
}

// Argv is Path followed by Args.
func (c Command) Argv() []string { return append([]string{c.Path}, c.Args...) }

// String is the command quoted for a POSIX shell.
func (c Command) String() string {
	parts := make([]string, 0, len(c.Args)+1)
	for _, a := range c.Argv() {
		parts = append(parts, shellQuote(a))
	}
	return strings.Join(parts, " ")
}

func shellQuote(s string) string {
	if s != "" && !strings.ContainsFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:,@%+", r))
	}) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// vLLM boolean flags that default to on: "false" turns them off with the
// --no- form. The others are off unless given.
var vllmOnByDefault = []string{"enable-chunked-prefill", "enable-prefix-caching"}

// vllmBoolFlags are the allowed flags that take no value.
var vllmBoolFlags = []string{"enable-auto-tool-choice", "enable-chunked-prefill", "enable-prefix-caching", "enforce-eager", "trust-remote-code"}

// BuildCommand is the runtime command line of one VMI of a replica.
//
// vLLM, one VMI: `vllm serve MODEL --served-model-name NAME --host 127.0.0.1
// --port PORT --tensor-parallel-size GPUS --pipeline-parallel-size 1
// [ARGS]`. Tensor parallelism spans the GPUs of a node (NVLink), pipeline
// parallelism the nodes (the slower link between them carries only the
// activations between stages).
//
// vLLM, k VMIs (multiprocessing backend, no Ray): every VMI runs the same
// `vllm serve` with --tensor-parallel-size GPUS --pipeline-parallel-size k
// --distributed-executor-backend mp --nnodes k --node-rank INDEX
// --master-addr HOSTS[0]; the workers (index > 0) add --headless and serve
// no API. The head's API server is the replica's endpoint.
//
// Parakeet: the ASR NIM's container (parakeetCommand).
//
// inference.args (already validated against cosmic.VLLMArgs) follow in key
// order as --KEY VALUE; a boolean flag is --KEY for "true", and for "false"
// nothing, or --no-KEY for the flags vLLM turns on by default.
func BuildCommand(in cosmic.InferenceSpec, p Placement) (Command, error) {
	port := p.Port
	if port == 0 {
		port = DefaultPort
	}
	name := in.ServedName()
	if in.Model == "" {
		return Command{}, errors.New("inference.model is empty")
	}
	switch in.Runtime {
	case cosmic.RuntimeParakeet:
		if p.VMICount > 1 {
			return Command{}, fmt.Errorf("the parakeet runtime runs on one VMI, not %d", p.VMICount)
		}
		return parakeetCommand(port), nil
	case cosmic.RuntimeLlamaCPP:
		if p.VMICount > 1 {
			return Command{}, fmt.Errorf("the llama.cpp runtime runs on one VMI, not %d", p.VMICount)
		}
		return llamaCommand(in, p, port)
	case cosmic.RuntimeVLLM, "":
	default:
		return Command{}, fmt.Errorf("unknown runtime %q", in.Runtime)
	}
	model := in.Model
	if p.ModelPath != "" {
		model = p.ModelPath
	}
	args := []string{"serve", model, "--served-model-name", name, "--host", "127.0.0.1", "--port", strconv.Itoa(port),
		"--tensor-parallel-size", strconv.Itoa(p.TensorParallel()), "--pipeline-parallel-size", strconv.Itoa(p.PipelineParallel())}
	if p.VMICount > 1 {
		if len(p.Hosts) != p.VMICount {
			return Command{}, fmt.Errorf("a %d-node replica needs %d hosts, the bootstrap has %d", p.VMICount, p.VMICount, len(p.Hosts))
		}
		if p.VMIIndex < 0 || p.VMIIndex >= p.VMICount {
			return Command{}, fmt.Errorf("VMI index %d is outside the replica's %d nodes", p.VMIIndex, p.VMICount)
		}
		args = append(args, "--distributed-executor-backend", "mp", "--nnodes", strconv.Itoa(p.VMICount),
			"--node-rank", strconv.Itoa(p.VMIIndex), "--master-addr", p.Hosts[0])
		if p.Role() == agentapi.PlacementWorker {
			args = append(args, "--headless")
		}
	}
	keys := make([]string, 0, len(in.Args))
	for k := range in.Args {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if !slices.Contains(cosmic.VLLMArgs, k) {
			return Command{}, fmt.Errorf("inference.args.%s is not an allowed vLLM argument", k)
		}
		v := in.Args[k]
		if slices.Contains(vllmBoolFlags, k) {
			switch {
			case v == "true":
				args = append(args, "--"+k)
			case v == "false" && slices.Contains(vllmOnByDefault, k):
				args = append(args, "--no-"+k)
			case v != "false":
				return Command{}, fmt.Errorf("inference.args.%s: %q is not true or false", k, v)
			}
			continue
		}
		args = append(args, "--"+k, v)
	}
	if len(in.Adapters) > 0 {
		// Each adapter is served as a model of its own name (vLLM's
		// --lora-modules NAME=SOURCE); the proxy asks for it by that name.
		args = append(args, "--enable-lora", "--max-loras", strconv.Itoa(len(in.Adapters)), "--lora-modules")
		for _, a := range in.Adapters {
			args = append(args, a.Name+"="+a.Source)
		}
	}
	return Command{Path: "vllm", Args: args}, nil
}

// llamaCommand is llama-server serving the model's GGUF under the served
// name, on the VMI's loopback (the agent is its one client): without its
// web UI, with its Prometheus /metrics and its /slots (the agent's and an
// operator's view of its load). inference.args (validated against
// cosmic.LlamaCPPArgs) follow in key order as in vLLM's: --KEY VALUE, a
// boolean --KEY, or --no-KEY for false where llama-server's default is on.
// Every flag it can emit is in the pinned llama-server's --help
// (TestLlamaFlagsAreTheServers).
func llamaCommand(in cosmic.InferenceSpec, p Placement, port int) (Command, error) {
	path := p.LlamaServer
	if path == "" {
		path = "llama-server"
	}
	listen := []string{"--host", "127.0.0.1", "--port", strconv.Itoa(port)}
	if p.Socket != "" {
		if !strings.HasSuffix(p.Socket, ".sock") || !filepath.IsAbs(p.Socket) {
			return Command{}, fmt.Errorf("the runtime's socket %q is not an absolute path ending in .sock", p.Socket)
		}
		listen = []string{"--host", p.Socket}
	}
	model := ModelFile(p.ModelDir, in.Model)
	if p.ModelPath != "" {
		model = p.ModelPath
	}
	args := append([]string{"--model", model, "--alias", in.ServedName()}, listen...)
	args = append(args, "--no-webui", "--metrics", "--slots")
	for _, k := range slices.Sorted(maps.Keys(in.Args)) {
		if !slices.Contains(cosmic.LlamaCPPArgs, k) {
			return Command{}, fmt.Errorf("inference.args.%s is not an allowed llama.cpp argument", k)
		}
		v := in.Args[k]
		if slices.Contains(cosmic.LlamaCPPBoolArgs, k) {
			switch {
			case v == "true":
				args = append(args, "--"+k)
			case v == "false" && slices.Contains(cosmic.LlamaCPPOnByDefault, k):
				args = append(args, "--no-"+k)
			case v != "false":
				return Command{}, fmt.Errorf("inference.args.%s: %q is not true or false", k, v)
			}
			continue
		}
		args = append(args, "--"+k, v)
	}
	if len(in.Adapters) > 0 {
		// Loaded at scale 0: a request without "lora" is the base model's,
		// and the proxy asks for adapter i with "lora": [{"id": i, "scale":
		// 1}] (llama-server's construct_lora_list). The list is
		// comma-separated, each FILE:SCALE: a file's path has neither
		// (validated names under the model directory).
		files := make([]string, len(in.Adapters))
		for i, a := range in.Adapters {
			f := ModelFile(p.ModelDir, a.Source)
			if strings.ContainsAny(f, ",:") {
				return Command{}, fmt.Errorf("the adapter file %q has a ',' or ':' llama-server's --lora-scaled cannot take", f)
			}
			files[i] = f + ":0"
		}
		args = append(args, "--lora-scaled", strings.Join(files, ","))
	}
	return Command{Path: path, Args: args}, nil
}

// parakeetCommand runs the ASR NIM's container as NVIDIA documents it
// (docker run --gpus, --shm-size=8GB, -e NGC_API_KEY, NIM_HTTP_API_PORT,
// NIM_TAGS_SELECTOR), with its HTTP port published on the VMI's loopback
// only (the agent is its one client) and its gRPC port not published. A
// container of the same name left by a killed agent is removed first; the
// Docker client forwards the agent's SIGTERM to the container (--sig-proxy,
// on by default without a TTY). The NGC key is passed by name: its value is
// in the environment, never in the command line (which the agent logs and
// reports); the job's own variables go through ParakeetEnvFile.
func parakeetCommand(port int) Command {
	p := strconv.Itoa(port)
	return Command{Path: "sh", Args: []string{"-c", `docker rm -f "$0" >/dev/null 2>&1; exec docker run --name "$0" "$@"`, ParakeetContainer,
		"--rm", "--gpus", "all", "--shm-size=8GB",
		"-p", "127.0.0.1:" + p + ":" + p,
		"--env-file", ParakeetEnvFile,
		"-e", NGCAPIKeyEnv, "-e", "NIM_HTTP_API_PORT=" + p, "-e", "NIM_TAGS_SELECTOR=" + ParakeetTags,
		"-v", ParakeetCache + ":/opt/nim/.cache",
		ParakeetImage}}
}
