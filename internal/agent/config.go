package agent

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path"
	"strings"
	"time"

	"github.com/cosmicac/cosmicac/internal/agent/agentapi"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/joblog"
)

// FileConfig is the instance agent's YAML file: the bootstrap
// (/etc/cosmicac/agent.yaml in a VMI). After the fields both agents read
// come the ones of k8sworker.AgentConfig only the instance agent reads,
// then its own, optional settings.
type FileConfig struct {
	FileBootstrap
	Command   []string        `json:"command,omitempty"`
	HTTPPort  int             `json:"httpPort,omitempty"`
	GRPCPort  int             `json:"grpcPort,omitempty"`
	Inference json.RawMessage `json:"inference,omitempty"`
	// Volumes and DataProxy mirror vmboot.AgentConfig's: the volumes
	// filled at their mount paths, and the proxy to their datastores.
	Volumes   []FileVolume `json:"volumes,omitempty"`
	DataProxy string       `json:"dataProxy,omitempty"`

	// The agent's own settings.
	// Env is added after the env file, NAME=value each.
	Env []string `json:"env,omitempty"`
	// Shell is the login shell of sessions without argv (default: $SHELL,
	// then /bin/bash, then /bin/sh).
	Shell string `json:"shell,omitempty"`
	// WorkDir is where sessions and the command start (default: $HOME of
	// the agent's user, else /).
	WorkDir string `json:"workDir,omitempty"`
	// SSHPort is where sshd listens on the VM's loopback (default 22).
	SSHPort int `json:"sshPort,omitempty"`
}

// FileVolume is a volume as the bootstrap carries it (vmboot.AgentVolume).
type FileVolume struct {
	Index     int    `json:"index"`
	MountPath string `json:"mountPath"`
	Push      bool   `json:"push,omitempty"`
	Delete    bool   `json:"delete,omitempty"`
	Target    bool   `json:"target,omitempty"`
	Git       string `json:"git,omitempty"`
	// Archive and PushArchive mirror vmboot.AgentVolume's.
	Archive     string `json:"archive,omitempty"`
	PushArchive string `json:"pushArchive,omitempty"`
	// Standalone, Disk and ReadOnly mirror vmboot.AgentVolume's.
	Standalone string `json:"standalone,omitempty"`
	Disk       string `json:"disk,omitempty"`
	ReadOnly   bool   `json:"readOnly,omitempty"`
}

// Config is a parsed agent configuration.
type Config struct {
	JobID    string
	Team     string
	Replica  int
	VMIIndex int
	Identity *fabric.Identity
	// Peers are the keys the platform authorised for this job: the only
	// ones admitted. Those with addresses are dialled and kept connected.
	Peers   []Peer
	Shell   string
	Command []string
	// Env is the environment of the command and of sessions, on top of the
	// agent's own (NAME=value each).
	Env     []string
	WorkDir string
	Listen  string
	// TCPPorts are the VM's loopback ports tcp.connect may reach (default:
	// 22 only).
	TCPPorts []int
	// SSHPort is the loopback port a tcp.connect to port 22 (`jobs ssh`)
	// reaches (default 22; tests point it at a throwaway sshd).
	SSHPort int
	// Notice, if set, is told on stderr at the start of every shell
	// session (the simulated rack's: the shell is on the platform's host,
	// not in a VM).
	Notice string
	// RefuseShells, if set, refuses every shell session with this
	// message (and exit code 126) instead of starting it: the operator
	// turned host shells off.
	RefuseShells string
	// Logs receives the agent's records: session records (system) and the
	// command's output (application). Default: the monitor its Peers name,
	// over the agent's node (MonitorForwarder), else discard.
	Logs joblog.Sink
	// Volumes are the job's datastore volumes, copied in before the agent
	// is ready and the command starts (docs/data.md).
	Volumes []Volume
	// DataClient makes the volumes' requests to their datastores (nil: a
	// client of the standard library's, which reaches them directly).
	DataClient *http.Client
	// StopPush bounds the push of the RW volumes when the agent is
	// stopped (0: StopPushTimeout).
	StopPush time.Duration
	// OnChange, if set, is called with the new status after each change
	// (ready, a session opened or closed, the command exited). It must not
	// block.
	OnChange func(agentapi.Status)
}

// LoadConfig reads the agent's YAML file, the env file it names and the
// identity it holds or names.
func LoadConfig(path string) (Config, error) {
	var fc FileConfig
	if err := ReadBootstrap(path, &fc); err != nil {
		return Config{}, err
	}
	return fc.Parse()
}

// Parse checks a FileConfig and turns it into a Config.
func (fc FileConfig) Parse() (Config, error) {
	var errs []error
	cfg := Config{JobID: fc.JobID, Team: fc.Team, Replica: fc.Replica, VMIIndex: fc.VMIIndex,
		Shell: fc.Shell, Command: fc.Command, WorkDir: fc.WorkDir, Listen: fc.Listen, SSHPort: fc.SSHPort}
	cfg.TCPPorts = []int{agentapi.DefaultSSHPort}
	for _, port := range []int{fc.HTTPPort, fc.GRPCPort} {
		if port > 0 {
			cfg.TCPPorts = append(cfg.TCPPorts, port)
		}
	}
	if fc.JobID == "" {
		errs = append(errs, errors.New("jobId is required"))
	}
	boot, err := fc.FileBootstrap.Parse()
	if err != nil {
		errs = append(errs, err)
	}
	cfg.Identity, cfg.Peers, cfg.Env = boot.Identity, boot.Peers, boot.Env
	for _, e := range fc.Env {
		if !strings.Contains(e, "=") {
			errs = append(errs, fmt.Errorf("env %q: want NAME=value", e))
		}
	}
	cfg.Env = append(cfg.Env, fc.Env...)
	for _, v := range fc.Volumes {
		if !path.IsAbs(v.MountPath) || path.Clean(v.MountPath) != v.MountPath || v.MountPath == "/" {
			errs = append(errs, fmt.Errorf("volume %d: mount path %q: want a clean absolute path below /", v.Index, v.MountPath))
			continue
		}
		if v.Standalone != "" && !diskSerialRe.MatchString(v.Disk) {
			errs = append(errs, fmt.Errorf("volume %d: standalone volume %q: disk serial %q: want 1 to 20 letters, digits, - or _", v.Index, v.Standalone, v.Disk))
			continue
		}
		cfg.Volumes = append(cfg.Volumes, Volume{Index: v.Index, MountPath: v.MountPath, Dir: v.MountPath,
			Push: v.Push && v.Git == "" && v.Standalone == "", Delete: v.Delete, Target: v.Target, Git: v.Git,
			Archive: v.Archive, PushArchive: v.PushArchive, Standalone: v.Standalone, Disk: v.Disk, ReadOnly: v.ReadOnly})
	}
	if fc.DataProxy != "" {
		u, err := url.Parse(fc.DataProxy)
		if err != nil || u.Scheme != "http" || u.Host == "" {
			errs = append(errs, fmt.Errorf("dataProxy %q: want http://HOST:PORT", fc.DataProxy))
		} else {
			cfg.DataClient = &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(u), ForceAttemptHTTP2: false,
				MaxIdleConnsPerHost: 8, IdleConnTimeout: 90 * time.Second}}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return Config{}, fmt.Errorf("agent config: %w", err)
	}
	return cfg, nil
}

// ReadEnvFile reads the worker's env file: one NAME='value' a line, quoted
// for the POSIX shell (k8sworker's envFile), blank lines and # comments
// skipped. It returns NAME=value strings.
func ReadEnvFile(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParseEnv(b)
}

// ParseEnv parses the content of an env file (see ReadEnvFile).
func ParseEnv(b []byte) ([]string, error) {
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	// A quoted value may span lines: join until the quotes balance.
	var pending string
	line := 0
	for sc.Scan() {
		line++
		l := sc.Text()
		if pending != "" {
			l = pending + "\n" + l
			pending = ""
		} else if t := strings.TrimSpace(l); t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		name, raw, ok := strings.Cut(l, "=")
		if !ok || name == "" || strings.ContainsAny(name, " \t'\"") {
			return nil, fmt.Errorf("env file line %d: want NAME='value'", line)
		}
		v, complete, err := unquote(raw)
		if err != nil {
			return nil, fmt.Errorf("env file line %d: %w", line, err)
		}
		if !complete {
			pending = l
			continue
		}
		out = append(out, name+"="+v)
	}
	if pending != "" {
		return nil, errors.New("env file: unterminated quote at end")
	}
	return out, sc.Err()
}

// unquote reads a POSIX-shell word made of 'single-quoted' parts, \-escaped
// characters and plain characters. complete is false inside an open quote.
func unquote(s string) (v string, complete bool, err error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return "", false, nil
			}
			b.WriteString(s[i+1 : i+1+j])
			i += j + 1
		case '\\':
			if i+1 >= len(s) {
				return "", false, errors.New("trailing backslash")
			}
			b.WriteByte(s[i+1])
			i++
		case ' ', '\t', '"', '$', '`':
			return "", false, fmt.Errorf("unsupported character %q outside single quotes", c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), true, nil
}
