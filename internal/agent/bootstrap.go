package agent

import (
	"errors"
	"fmt"
	"os"

	"sigs.k8s.io/yaml"

	"github.com/cosmicac/cosmicac/internal/agent/agentapi"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/trust"
)

// The bootstrap is the file the rack workers write into a job's VMI
// (/etc/cosmicac/agent.yaml, by cloud-init): the instance agent and the
// inference agent (internal/inferagent) both read it, and share what
// follows.

// peerRoles maps the bootstrap's roles to the classes of key they are.
var peerRoles = map[string]trust.Role{
	agentapi.RoleDirectory: trust.Directory,
	agentapi.RoleWorker:    trust.Worker,
	agentapi.RoleAppNode:   trust.AppNode,
	agentapi.RoleMonitor:   trust.Monitor,
	agentapi.RoleProxy:     trust.Proxy,
}

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

// FileBootstrap is the part of the bootstrap both agents read; their
// FileConfigs embed it. Its first fields mirror k8sworker.AgentConfig's
// (the agents import no k8s.io, so they keep their own copy); the last ones
// are the agents' own and optional.
type FileBootstrap struct {
	JobID    string        `json:"jobId"`
	JobType  string        `json:"jobType,omitempty"`
	Team     string        `json:"team,omitempty"`
	Replica  int           `json:"replica"`
	VMIIndex int           `json:"vmiIndex"`
	VMICount int           `json:"vmiCount,omitempty"`
	GPUs     int           `json:"gpus,omitempty"`
	Hosts    []string      `json:"hosts,omitempty"`
	Identity *FileIdentity `json:"identity,omitempty"`
	Peers    []FilePeer    `json:"peers,omitempty"`
	EnvFile  string        `json:"envFile,omitempty"`

	// IdentityFile is read when Identity is absent (a key made with
	// `cosmicac keys generate`).
	IdentityFile string `json:"identityFile,omitempty"`
	// Listen makes the agent also listen on a fabric address (for agents
	// on a routable network, and tests). Default: dial-only.
	Listen string `json:"listen,omitempty"`
}

// Peer is a platform component an agent admits and, when it has addresses,
// dials and keeps connected.
type Peer struct {
	Role  string
	Key   fabric.PublicKey
	Addrs []string
}

// Bootstrap is what FileBootstrap.Parse makes of a bootstrap.
type Bootstrap struct {
	Identity *fabric.Identity
	Peers    []Peer
	// Env is what the env file holds (NAME=value each; none when the file
	// does not exist).
	Env []string
}

// ReadBootstrap reads an agent's YAML file into fc, the FileConfig of
// either agent (whose Parse checks it).
func ReadBootstrap(path string, fc any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := yaml.Unmarshal(b, fc); err != nil {
		return fmt.Errorf("agent config %s: %w", path, err)
	}
	return nil
}

// Parse reads the identity (inline, or IdentityFile), the peers and the env
// file. Its error joins every problem it found; the agents check the other
// fields themselves.
func (b FileBootstrap) Parse() (Bootstrap, error) {
	var out Bootstrap
	var errs []error
	id, err := parseIdentity(b.Identity, b.IdentityFile)
	out.Identity = id
	errs = append(errs, err)
	out.Peers, err = parsePeers(b.Peers)
	errs = append(errs, err)
	if b.EnvFile != "" {
		env, err := ReadEnvFile(b.EnvFile)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
		out.Env = env
	}
	return out, errors.Join(errs...)
}

// parseIdentity reads the inline identity, checking its public key when the
// bootstrap gives one, or else the identity file.
func parseIdentity(fi *FileIdentity, file string) (*fabric.Identity, error) {
	switch {
	case fi != nil:
		id, err := fabric.ParseIdentityPEM([]byte(fi.PrivateKeyPEM))
		if err != nil {
			return nil, fmt.Errorf("identity: %w", err)
		}
		if fi.PublicKey != "" && fi.PublicKey != id.PublicKey().String() {
			return id, fmt.Errorf("identity: publicKey %s does not match the private key (%s)", fi.PublicKey, id.PublicKey())
		}
		return id, nil
	case file != "":
		id, err := fabric.ReadIdentityFile(file)
		if err != nil {
			return id, fmt.Errorf("identityFile: %w", err)
		}
		return id, nil
	default:
		return nil, errors.New("identity (or identityFile) is required: the platform gives each agent its key")
	}
}

// parsePeers checks every peer's key and addresses; its error joins every
// problem. A peer with a bad key is left out.
func parsePeers(fps []FilePeer) ([]Peer, error) {
	var peers []Peer
	var errs []error
	for i, p := range fps {
		k, err := fabric.ParsePublicKey(p.Key)
		if err != nil {
			errs = append(errs, fmt.Errorf("peers[%d].key: %w", i, err))
			continue
		}
		for _, a := range p.Addrs {
			if _, _, err := fabric.ParsePeer(p.Key + "@" + a); err != nil {
				errs = append(errs, fmt.Errorf("peers[%d].addrs: %w", i, err))
			}
		}
		if _, ok := peerRoles[p.Role]; !ok {
			errs = append(errs, fmt.Errorf("peers[%d].role: %q is not one of directory, worker, app-node, monitor, proxy-inference", i, p.Role))
			continue
		}
		peers = append(peers, Peer{Role: p.Role, Key: k, Addrs: p.Addrs})
	}
	return peers, errors.Join(errs...)
}
