package inferagent

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/cosmicac/cosmicac/internal/cosmic"
)

// DefaultPort is the port the runtime serves on inside the VMI (loopback
// only: the agent is its one client).
const DefaultPort = 8000

// ParakeetServer is the program the parakeet image must provide: an
// OpenAI-compatible speech-to-text server (POST /v1/audio/transcriptions,
// GET /v1/models, GET /health) for NeMo's parakeet models. See
// docs/inference.md, "Runtimes".
const ParakeetServer = "cosmicac-parakeet-server"

// Roles of a VMI in a replica.
const (
	// RoleHead runs the runtime's API server (the only role of a
	// single-VMI replica).
	RoleHead = "head"
	// RoleWorker joins the head of a multi-node vLLM replica (headless).
	RoleWorker = "worker"
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
}

// Role is the VMI's role: the lowest VMI index leads. The election needs no
// messages: every agent knows its index and the count from the bootstrap.
func (p Placement) Role() string {
	if p.VMIIndex == 0 {
		return RoleHead
	}
	return RoleWorker
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

// ServedModelName is the name clients ask for: servedModelName, else the
// model id.
func ServedModelName(in cosmic.InferenceSpec) string {
	if in.ServedModelName != "" {
		return in.ServedModelName
	}
	return in.Model
}

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
// Parakeet: `cosmicac-parakeet-server --model MODEL --served-model-name NAME
// --host 127.0.0.1 --port PORT`.
//
// inference.args (already validated against cosmic.VLLMArgs) follow in key
// order as --KEY VALUE; a boolean flag is --KEY for "true", and for "false"
// nothing, or --no-KEY for the flags vLLM turns on by default.
func BuildCommand(in cosmic.InferenceSpec, p Placement) (Command, error) {
	port := p.Port
	if port == 0 {
		port = DefaultPort
	}
	name := ServedModelName(in)
	if in.Model == "" {
		return Command{}, errors.New("inference.model is empty")
	}
	switch in.Runtime {
	case cosmic.RuntimeParakeet:
		if p.VMICount > 1 {
			return Command{}, fmt.Errorf("the parakeet runtime runs on one VMI, not %d", p.VMICount)
		}
		return Command{Path: ParakeetServer, Args: []string{"--model", in.Model, "--served-model-name", name,
			"--host", "127.0.0.1", "--port", strconv.Itoa(port)}}, nil
	case cosmic.RuntimeVLLM, "":
	default:
		return Command{}, fmt.Errorf("unknown runtime %q", in.Runtime)
	}
	args := []string{"serve", in.Model, "--served-model-name", name, "--host", "127.0.0.1", "--port", strconv.Itoa(port),
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
		if p.Role() == RoleWorker {
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
	return Command{Path: "vllm", Args: args}, nil
}
