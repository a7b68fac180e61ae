package inferagent

import (
	"errors"
	"fmt"
	"os"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/cosmicac/cosmicac/internal/agent"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/joblog"
)

// Peer roles the inference agent knows (the strings of k8sworker.Peer.Role).
const (
	RoleOrk       = "ork"       // a directory: the agent announces itself there
	RoleDirectory = "directory" // another directory
	RoleWorkerKey = "worker"    // the rack worker: receives MethodReport events
	RoleMonitor   = "monitor"   // wrk-monitor: receives the agent's log records
	RoleProxy     = "proxy-inference"
)

// FileIdentity is the agent's key pair as the bootstrap carries it.
type FileIdentity struct {
	PrivateKeyPEM string `json:"privateKeyPEM"`
	PublicKey     string `json:"publicKey"`
}

// FilePeer is a platform peer as the bootstrap carries it.
type FilePeer struct {
	Role  string   `json:"role"`
	Key   string   `json:"key"`
	Addrs []string `json:"addrs,omitempty"`
}

// FileConfig is /etc/cosmicac/agent.yaml in a managed-inference VMI. Its
// first fields mirror k8sworker.AgentConfig (the agent imports no k8s.io);
// the last ones are the agent's own and optional.
type FileConfig struct {
	JobID     string                `json:"jobId"`
	JobType   string                `json:"jobType,omitempty"`
	Team      string                `json:"team,omitempty"`
	Replica   int                   `json:"replica"`
	VMIIndex  int                   `json:"vmiIndex"`
	VMICount  int                   `json:"vmiCount,omitempty"`
	GPUs      int                   `json:"gpus,omitempty"`
	Hosts     []string              `json:"hosts,omitempty"`
	Identity  *FileIdentity         `json:"identity,omitempty"`
	Peers     []FilePeer            `json:"peers,omitempty"`
	EnvFile   string                `json:"envFile,omitempty"`
	Inference *cosmic.InferenceSpec `json:"inference,omitempty"`

	// The agent's own settings.
	IdentityFile string `json:"identityFile,omitempty"`
	// Listen makes the agent also listen on a fabric address.
	Listen string `json:"listen,omitempty"`
	// Port is the runtime's port (default 8000).
	Port int `json:"port,omitempty"`
	// Simulated runs the simulated runtime in-process instead of the
	// command (for the simulated rack and demos).
	Simulated bool `json:"simulated,omitempty"`
}

// Peer is a platform component the agent admits (and dials when it has
// addresses).
type Peer struct {
	Role  string
	Key   fabric.PublicKey
	Addrs []string
}

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
	Peers  []Peer
	Listen string
	// Env is the runtime's environment on top of the agent's.
	Env []string
	// Launcher starts the runtime (default ExecLauncher).
	Launcher Launcher
	// Logs receives the runtime's output (application records) and the
	// agent's own steps (system records). Default: discard.
	Logs joblog.Sink
	// OnChange is called with the status after each change; it must not block.
	OnChange func(Status)

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
	if c.Logs == nil {
		c.Logs = joblog.Discard
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
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, err
	}
	var fc FileConfig
	if err := yaml.Unmarshal(b, &fc); err != nil {
		return Config{}, fmt.Errorf("agent config %s: %w", path, err)
	}
	return fc.Parse()
}

// Parse checks a FileConfig and turns it into a Config.
func (fc FileConfig) Parse() (Config, error) {
	var errs []error
	cfg := Config{JobID: fc.JobID, Team: fc.Team, Replica: fc.Replica, Listen: fc.Listen,
		Placement: Placement{VMIIndex: fc.VMIIndex, VMICount: max(fc.VMICount, 1), GPUs: fc.GPUs, Hosts: fc.Hosts, Port: fc.Port}}
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
	switch {
	case fc.Identity != nil:
		id, err := fabric.ParseIdentityPEM([]byte(fc.Identity.PrivateKeyPEM))
		if err != nil {
			errs = append(errs, fmt.Errorf("identity: %w", err))
			break
		}
		if fc.Identity.PublicKey != "" && fc.Identity.PublicKey != id.PublicKey().String() {
			errs = append(errs, fmt.Errorf("identity: publicKey %s does not match the private key", fc.Identity.PublicKey))
		}
		cfg.Identity = id
	case fc.IdentityFile != "":
		id, err := fabric.ReadIdentityFile(fc.IdentityFile)
		if err != nil {
			errs = append(errs, fmt.Errorf("identityFile: %w", err))
		}
		cfg.Identity = id
	default:
		errs = append(errs, errors.New("identity (or identityFile) is required"))
	}
	for i, p := range fc.Peers {
		k, err := fabric.ParsePublicKey(p.Key)
		if err != nil {
			errs = append(errs, fmt.Errorf("peers[%d].key: %w", i, err))
			continue
		}
		cfg.Peers = append(cfg.Peers, Peer{Role: p.Role, Key: k, Addrs: p.Addrs})
	}
	if fc.EnvFile != "" {
		env, err := agent.ReadEnvFile(fc.EnvFile) // the worker's NAME='value' file
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
		cfg.Env = env
	}
	if fc.Simulated {
		cfg.Launcher = &SimLauncher{}
	}
	if err := errors.Join(errs...); err != nil {
		return Config{}, fmt.Errorf("agent config: %w", err)
	}
	return cfg, nil
}
