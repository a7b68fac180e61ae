// Package simsshd is the SSH server of the simulated rack: what answers
// `cosmicac jobs ssh` on `cosmicac up`, where no VM runs and so no VM's
// sshd does. The platform (internal/platform) starts one per gpu-container
// replica on the host's loopback and points that replica's instance agent
// at it (agent.Config.SSHPort), so the bytes take the path they take to a
// real VM: app-node, fabric, instance agent, then this server.
//
// It is a simulation, not an sshd: it admits the job's spec.sshPublicKeys
// (any user name, public keys only) and serves session channels (pty-req,
// window-change, env, shell, exec and the sftp subsystem) whose processes
// run on this machine as the platform's user, like `jobs shell` on the
// simulated rack; it refuses forwarding of any kind (docs/shell.md, "On
// the simulated rack"). Only the wiring (internal/platform) and tests
// may import it: it is a simulator package (internal/archtest).
package simsshd

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"
)

// Banner is what every client is told before it authenticates (OpenSSH's
// ssh prints it on stderr): what it has reached, since it is not a VM.
const Banner = "CosmicAC: this job runs on the simulated rack, where no VM runs. This is CosmicAC's\n" +
	"simulated SSH server (simsshd), not a VM's sshd: your session runs on the platform's host, as\n" +
	"the user running the platform, with no isolation. A rack of VMs (Kubernetes or QEMU) gives the\n" +
	"VM's own sshd (docs/simulated-rack.md).\n"

// Config is one server's: the job's keys and the environment of its
// sessions.
type Config struct {
	// AuthorizedKeys are authorized_keys lines (the job's
	// spec.sshPublicKeys). None means that nobody gets in.
	AuthorizedKeys []string
	// Shell is the login shell (default agent.LoginShell's choice).
	Shell string
	// Env is the sessions' environment on top of this process's
	// (NAME=value each): the job's env vars and HOME.
	Env []string
	// Dir is where sessions start (the replica's home).
	Dir string
	// Record, if set, is given a line for each session opened and closed
	// and each key of AuthorizedKeys that cannot be admitted: the platform
	// writes them in the job's system log. It must not block.
	Record func(line string)
	// Log receives what concerns the server, not a job (default: discard).
	Log *slog.Logger
	// Refuse, if set, admits nobody: it is the banner instead of Banner
	// (the operator turned host shells off).
	Refuse string
}

// Server is a running SSH server.
type Server struct {
	cfg  Config
	ssh  *ssh.ServerConfig
	keys [][]byte // the wire form of each admitted key
	host ssh.PublicKey
	l    net.Listener

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
	nextID int
}

// Start listens on addr (host:port, "127.0.0.1:0" for any free port) and
// serves until Close. The host key is a fresh ed25519 key held in memory:
// a client sees a new host key each time a replica boots, as it would
// with a new VM.
func Start(cfg Config, addr string) (*Server, error) {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, conns: map[net.Conn]struct{}{}}
	for i, line := range cfg.AuthorizedKeys {
		k, _, _, _, err := ssh.ParseAuthorizedKey([]byte(line))
		if err != nil {
			s.record("ssh key %d of the spec is not admitted: %v", i, err)
			continue
		}
		s.keys = append(s.keys, k.Marshal())
	}
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate host key: %w", err)
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		return nil, fmt.Errorf("host key: %w", err)
	}
	// Public keys only: with no password or keyboard-interactive callback
	// the server offers neither, and a client is told "publickey".
	banner := Banner
	if cfg.Refuse != "" {
		banner, s.keys = strings.TrimRight(cfg.Refuse, "\n")+"\n", nil
	}
	s.ssh = &ssh.ServerConfig{PublicKeyCallback: s.admit, ServerVersion: "SSH-2.0-CosmicAC_simsshd",
		BannerCallback: func(ssh.ConnMetadata) string { return banner }}
	s.ssh.AddHostKey(signer)
	s.host = signer.PublicKey()
	if s.l, err = net.Listen("tcp", addr); err != nil {
		return nil, err
	}
	s.wg.Go(s.serve)
	return s, nil
}

// Port is the port the server listens on.
func (s *Server) Port() int { return s.l.Addr().(*net.TCPAddr).Port }

// HostKey is the server's host public key.
func (s *Server) HostKey() ssh.PublicKey {
	return s.host
}

// Close stops listening, cuts every connection (their sessions are hung
// up) and waits for the server's goroutines.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	err := s.l.Close()
	s.wg.Wait()
	return err
}

// admit is the public-key callback: a key whose wire form is one of the
// spec's gets in, whatever the user name.
func (s *Server) admit(meta ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
	b := key.Marshal()
	for _, k := range s.keys {
		if string(k) == string(b) {
			return &ssh.Permissions{Extensions: map[string]string{"pubkey-fp": ssh.FingerprintSHA256(key)}}, nil
		}
	}
	return nil, errors.New("key not in the job's sshPublicKeys")
}

func (s *Server) serve() {
	for {
		c, err := s.l.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return
		}
		s.conns[c] = struct{}{}
		s.mu.Unlock()
		s.wg.Go(func() {
			defer func() {
				s.mu.Lock()
				delete(s.conns, c)
				s.mu.Unlock()
				c.Close()
			}()
			s.handle(c)
		})
	}
}

// handshakeTimeout bounds a connection's key exchange and authentication.
const handshakeTimeout = 30 * time.Second

func (s *Server) handle(c net.Conn) {
	c.SetDeadline(time.Now().Add(handshakeTimeout))
	sc, chans, reqs, err := ssh.NewServerConn(c, s.ssh)
	if err != nil {
		s.cfg.Log.Debug("ssh handshake failed", "remote", c.RemoteAddr().String(), "err", err)
		return
	}
	c.SetDeadline(time.Time{})
	defer sc.Close()
	// Global requests (tcpip-forward, keepalives) are all refused.
	s.wg.Go(func() { ssh.DiscardRequests(reqs) })
	var sessions sync.WaitGroup
	defer sessions.Wait()
	for nch := range chans {
		switch nch.ChannelType() {
		case "session":
			ch, creqs, err := nch.Accept()
			if err != nil {
				continue
			}
			sessions.Go(func() { s.session(sc, ch, creqs) })
		case "direct-tcpip", "direct-streamlocal@openssh.com":
			nch.Reject(ssh.Prohibited, "port forwarding is not served by the simulated rack's SSH server")
		default:
			nch.Reject(ssh.UnknownChannelType, "only session channels are served")
		}
	}
}

func (s *Server) record(format string, args ...any) {
	if s.cfg.Record != nil {
		s.cfg.Record(fmt.Sprintf(format, args...))
	}
}

// who names the session's user for the records.
func who(sc *ssh.ServerConn) string {
	fp := ""
	if sc.Permissions != nil {
		fp = sc.Permissions.Extensions["pubkey-fp"]
	}
	return fmt.Sprintf("%s (key %s)", strings.ReplaceAll(sc.User(), "\n", " "), fp)
}
