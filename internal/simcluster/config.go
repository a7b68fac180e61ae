package simcluster

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/cosmicac/cosmicac/internal/config"
	"github.com/cosmicac/cosmicac/internal/cosmic"
)

// Config is the shape of the simulated rack.
type Config struct {
	// Rack is the rack's ID, as registered with the ork.
	Rack string `json:"rack"`
	// Location is the location the rack is listed under.
	Location string `json:"location"`
	// GPUModel is the model of every GPU of the rack.
	GPUModel string `json:"gpuModel"`
	// Nodes is the number of nodes; GPUsPerNode the GPUs of each.
	Nodes       int `json:"nodes"`
	GPUsPerNode int `json:"gpusPerNode"`
	// CPUsPerNode and MemoryGiBPerNode are what each node gives jobs; 0:
	// a DGX H100's share per GPU, 28 vCPUs and 256 GiB (224 and 2048 for
	// 8 GPUs).
	CPUsPerNode      int `json:"cpusPerNode,omitempty"`
	MemoryGiBPerNode int `json:"memoryGiBPerNode,omitempty"`
	// Step is the time one simulated lifecycle step takes (one import
	// increment, scheduling, boot, ...). Zero means DefaultStep.
	Step config.Duration `json:"step"`
	// StopGrace is how long a replica's agent has to stop when the
	// replica is killed or deleted (it pushes the job's RW volumes
	// first), as a VM has to power off; the replica keeps its GPUs
	// until then. Zero means DefaultStopGrace.
	StopGrace config.Duration `json:"stopGrace,omitempty"`
	// NodePrefix names the nodes: NodePrefix + index. Empty means
	// Rack + "-node-", giving "sim-us-1-node-0".
	NodePrefix string `json:"nodePrefix,omitempty"`
	// NoHostShells turns the rack's shells off: its replicas run no VM, so
	// `jobs shell`, the web Terminal and `jobs ssh` would run on the
	// platform's host as its user. With it set, the platform's agents and
	// simulated sshd refuse every session, saying why (`cosmicac up
	// --sim-host-shells=false`).
	NoHostShells bool `json:"noHostShells,omitempty"`
	// LlamaCPP says the rack's host runs the llama.cpp runtime's replicas
	// as real llama-server processes (`cosmicac up` sets it when it has
	// the engine): its catalogue then lists the runtime. The other
	// runtimes are simulated.
	LlamaCPP bool `json:"-"`
	// VolumesDir is where the rack keeps its standalone volumes, a
	// directory each (VolumesDir/TEAM/NAME) that a replica's agent uses
	// as the volume: no VM runs here to mount a disk in (docs/data.md).
	// The platform sets it under its data directory; empty, a job that
	// mounts one fails to start, saying why.
	VolumesDir string `json:"-"`
}

// Defaults and bounds of a Config.
const (
	DefaultStep = time.Second
	// DefaultStopGrace is a VM's time to power off: the agent's bound on
	// its push at a stop (agent.StopPushTimeout) and a minute more.
	DefaultStopGrace = 11 * time.Minute
	MaxNodes         = 10000
	MaxGPUsPerNode   = 64
	MaxStep          = time.Hour
	// DefaultCPUsPerGPU and DefaultMemoryGiBPerGPU size a node's CPU and
	// memory when the config gives none: a DGX H100's per GPU.
	DefaultCPUsPerGPU      = 28
	DefaultMemoryGiBPerGPU = 256
	MaxCPUsPerNode         = 4096
	MaxMemoryGiBPerNode    = 64 * 1024
	defaultRack            = "sim-us-1"
	defaultLocation        = "us"
	defaultGPUModel        = "GH100_H100_SXM5_80GB"
)

// DefaultConfig is the rack of `cosmicac up`: sim-us-1 in us, 2 nodes of
// 8 GH100_H100_SXM5_80GB, one step a second.
func DefaultConfig() Config {
	return Config{
		Rack:        defaultRack,
		Location:    defaultLocation,
		GPUModel:    defaultGPUModel,
		Nodes:       2,
		GPUsPerNode: 8,
		Step:        config.Duration(DefaultStep),
	}
}

// withDefaults fills the zero fields that have a default.
func (c Config) withDefaults() Config {
	if c.Step == 0 {
		c.Step = config.Duration(DefaultStep)
	}
	if c.StopGrace == 0 {
		c.StopGrace = config.Duration(DefaultStopGrace)
	}
	if c.NodePrefix == "" {
		c.NodePrefix = c.Rack + "-node-"
	}
	if c.CPUsPerNode == 0 {
		c.CPUsPerNode = DefaultCPUsPerGPU * c.GPUsPerNode
	}
	if c.MemoryGiBPerNode == 0 {
		c.MemoryGiBPerNode = DefaultMemoryGiBPerGPU * c.GPUsPerNode
	}
	return c
}

// NodeName is the name of node i.
func (c Config) NodeName(i int) string { return c.withDefaults().NodePrefix + strconv.Itoa(i) }

// Validate reports every problem of the config at once.
func (c Config) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &cosmic.FieldError{Field: field, Message: fmt.Sprintf(format, args...)})
	}
	rack := cosmic.Rack{ID: c.Rack, Type: cosmic.RackTypeServer, Location: c.Location, GPUModel: c.GPUModel}
	for _, fe := range cosmic.FieldErrors(rack.Validate()) {
		switch fe.Field {
		case "id":
			bad("rack", "%s", fe.Message)
		case "location", "gpuModel":
			bad(fe.Field, "%s", fe.Message)
		}
	}
	if c.Nodes < 1 || c.Nodes > MaxNodes {
		bad("nodes", "%d nodes: want 1 to %d", c.Nodes, MaxNodes)
	}
	if c.GPUsPerNode < 1 || c.GPUsPerNode > MaxGPUsPerNode {
		bad("gpusPerNode", "%d GPUs per node: want 1 to %d", c.GPUsPerNode, MaxGPUsPerNode)
	}
	if c.CPUsPerNode < 0 || c.CPUsPerNode > MaxCPUsPerNode {
		bad("cpusPerNode", "%d vCPUs per node: want 1 to %d (0 means %d per GPU)", c.CPUsPerNode, MaxCPUsPerNode, DefaultCPUsPerGPU)
	}
	if c.MemoryGiBPerNode < 0 || c.MemoryGiBPerNode > MaxMemoryGiBPerNode {
		bad("memoryGiBPerNode", "%d GiB per node: want 1 to %d (0 means %d per GPU)", c.MemoryGiBPerNode, MaxMemoryGiBPerNode, DefaultMemoryGiBPerGPU)
	}
	if c.Step < 0 || c.Step.D() > MaxStep {
		bad("step", "%s: want a duration above 0 and at most %s (0 means %s)", c.Step, MaxStep, DefaultStep)
	}
	if c.NodePrefix != "" && !cosmic.ValidLocation(c.NodePrefix+"0") {
		bad("nodePrefix", "%q does not make valid node names", c.NodePrefix)
	}
	return errors.Join(errs...)
}
