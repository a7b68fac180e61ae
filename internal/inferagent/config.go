package inferagent

import (
	"errors"
	"fmt"
	"time"

	"github.com/cosmicac/cosmicac/internal/agent"
	"github.com/cosmicac/cosmicac/internal/agent/agentapi"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/joblog"
)

// FileConfig is /etc/cosmicac/agent.yaml in a managed-inference VMI: the
// bootstrap both agents read, the model, then the agent's own, optional
// settings.
type FileConfig struct {
	agent.FileBootstrap
	Inference *cosmic.InferenceSpec `json:"inference,omitempty"`

	// The agent's own settings.
	// Port is the runtime's port (default 8000).
	Port int `json:"port,omitempty"`
	// Simulated runs the simulated runtime in-process instead of the
	// command (for the simulated rack and demos).
	Simulated bool `json:"simulated,omitempty"`
	// NGCKeyFile is the file holding the NGC API key the parakeet runtime
	// (the ASR NIM) downloads its model with (default
	// DefaultNGCKeyFile; a missing file: no key).
	NGCKeyFile string `json:"ngcKeyFile,omitempty"`
	// LlamaServer and ModelDir are the node's llama-server and its GGUF
	// models, for the llama.cpp runtime (defaults: llama-server on PATH,
	// DefaultModelDir).
	LlamaServer string `json:"llamaServer,omitempty"`
	ModelDir    string `json:"modelDir,omitempty"`
}

// DefaultNGCKeyFile is where the VMI holds the rack's NGC API key (0600,
// root): the operator's, never a job's spec.
const DefaultNGCKeyFile = "/etc/cosmicac/ngc-api-key"

// Peer is a platform component the agent admits (and dials when it has
// addresses): agent.Peer, under this name for internal/inferproxy's tests.
type Peer = agent.Peer

// Peer roles of the bootstrap that internal/inferproxy's tests name here
// (the others are agent's only: agentapi.RoleDirectory, agentapi.RoleWorker, …).
const (
	RoleDirectory = agentapi.RoleDirectory
	RoleProxy     = agentapi.RoleProxy
)

// Config is a parsed agent configuration.
type Config struct {
	JobID     string
	Team      string
	Replica   int
	Placement Placement
	Inference cosmic.InferenceSpec
	Identity  *fabric.Identity
	// Peers are the only keys admitted; those with addresses are dialled
	// and kept connected (the proxy reaches the agent over them).
	Peers  []agent.Peer
	Listen string
	// Env is the runtime's environment on top of the agent's.
	Env []string
	// NGCKeyFile holds the NGC API key of the parakeet runtime, set in its
	// environment as NGC_API_KEY and nowhere else ("": none).
	NGCKeyFile string
	// Launcher starts the runtime (default ExecLauncher).
	Launcher Launcher
	// Simulated says the bootstrap asked for the simulated runtime
	// (FileConfig.Simulated): the wiring then sets a Launcher of
	// internal/inferagent/simlaunch (this package carries no simulator).
	Simulated bool
	// Logs receives the runtime's output (application records) and the
	// agent's own steps (system records). Default: the monitor its Peers
	// name, over the agent's node (agent.MonitorForwarder), else discard.
	Logs joblog.Sink
	// OnChange is called with the status after each change; it must not block.
	OnChange func(agentapi.InferenceStatus)

	// ProbeInterval is the time between readiness probes once ready
	// (default 10s); HealthPoll between /health polls while starting
	// (default 500ms); ProbeTimeout bounds one probe (default 30s);
	// AnnounceTTL is the directory TTL (default 15s, refreshed every third).
	ProbeInterval time.Duration
	HealthPoll    time.Duration
	ProbeTimeout  time.Duration
	AnnounceTTL   time.Duration
	// RestartBackoff is the first wait before restarting an exited runtime
	// (doubling to 30s; default 1s).
	RestartBackoff time.Duration
}

func (c *Config) setDefaults() {
	if c.Launcher == nil {
		c.Launcher = ExecLauncher{}
	}
	if c.ProbeInterval == 0 {
		c.ProbeInterval = 10 * time.Second
	}
	if c.HealthPoll == 0 {
		c.HealthPoll = 500 * time.Millisecond
	}
	if c.ProbeTimeout == 0 {
		c.ProbeTimeout = 30 * time.Second
	}
	if c.AnnounceTTL == 0 {
		c.AnnounceTTL = 15 * time.Second
	}
	if c.RestartBackoff == 0 {
		c.RestartBackoff = time.Second
	}
	if c.Placement.VMICount == 0 {
		c.Placement.VMICount = 1
	}
}

// LoadConfig reads the agent's YAML file (and the env file it names).
func LoadConfig(path string) (Config, error) {
	var fc FileConfig
	if err := agent.ReadBootstrap(path, &fc); err != nil {
		return Config{}, err
	}
	return fc.Parse()
}

// Parse checks a FileConfig and turns it into a Config.
func (fc FileConfig) Parse() (Config, error) {
	var errs []error
	cfg := Config{JobID: fc.JobID, Team: fc.Team, Replica: fc.Replica, Listen: fc.Listen,
		Placement: Placement{VMIIndex: fc.VMIIndex, VMICount: max(fc.VMICount, 1), GPUs: fc.GPUs, Hosts: fc.Hosts, Port: fc.Port,
			LlamaServer: fc.LlamaServer, ModelDir: fc.ModelDir}}
	if fc.JobID == "" {
		errs = append(errs, errors.New("jobId is required"))
	}
	if fc.Inference == nil {
		errs = append(errs, errors.New("inference is required (the model to serve)"))
	} else {
		cfg.Inference = *fc.Inference
		if _, err := BuildCommand(cfg.Inference, cfg.Placement); err != nil {
			errs = append(errs, err)
		}
	}
	boot, err := fc.FileBootstrap.Parse()
	if err != nil {
		errs = append(errs, err)
	}
	cfg.Identity, cfg.Peers, cfg.Env = boot.Identity, boot.Peers, boot.Env
	cfg.Simulated = fc.Simulated
	cfg.NGCKeyFile = fc.NGCKeyFile
	if cfg.NGCKeyFile == "" {
		cfg.NGCKeyFile = DefaultNGCKeyFile
	}
	if err := errors.Join(errs...); err != nil {
		return Config{}, fmt.Errorf("agent config: %w", err)
	}
	return cfg, nil
}
