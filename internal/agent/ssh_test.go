package agent

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/agent/agentapi"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/testenv"
)

const (
	proxyAgentEnv = "AGENT_PROXY_AGENT" // KEY@ADDR
	proxyKeyEnv   = "AGENT_PROXY_KEY"   // the proxy's key file
	proxyPortEnv  = "AGENT_PROXY_PORT"
)

// The user's own ssh through the fabric: ssh runs with a ProxyCommand
// (this test binary, standing for `cosmicac jobs ssh --proxy`) that opens
// tcp.connect on the agent, which connects to sshd on the VM's loopback.
func TestSSHThroughFabric(t *testing.T) {
	testenv.RequireCommands(t, "apt-get install openssh-server", "/usr/sbin/sshd")
	dir := t.TempDir()
	sshd := newSSHD(t, dir)
	port, _ := strconv.Atoi(sshd.port)

	proxyID := mustID(t)
	proxyKey := filepath.Join(dir, "proxy.key")
	if err := fabric.WriteIdentityFile(proxyKey, proxyID); err != nil {
		t.Fatal(err)
	}
	r := newRig(t, func(c *Config) {
		c.Listen = "127.0.0.1:0"
		c.Peers = append(c.Peers, Peer{Role: agentapi.RoleAppNode, Key: proxyID.PublicKey()})
		c.TCPPorts = []int{port}
	})
	proxy := strings.Join([]string{os.Args[0], "-test.run=^TestSSHProxyHelper$"}, " ")
	cmd := exec.Command("ssh", "-F", "/dev/null", "-i", sshd.key, "-o", "StrictHostKeyChecking=no",
		"-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", "-o", "BatchMode=yes",
		"-o", "ProxyCommand="+proxy, "root@job-vm", "echo over-ssh-$((6*7))")
	cmd.Env = append(os.Environ(), proxyAgentEnv+"="+r.dialer.Agent.String()+"@"+r.agent.Node().Addr(),
		proxyKeyEnv+"="+proxyKey, proxyPortEnv+"="+sshd.port)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "over-ssh-42") {
		t.Fatalf("ssh: %v: %s", err, out)
	}
	// A port the agent does not open is refused.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := agentapi.DialTCP(ctx, r.platform, r.dialer.Agent, 25); fabric.ErrorCode(err) != fabric.CodeForbidden {
		t.Fatalf("port 25: %v", err)
	}
}

// TestSSHProxyHelper is the ProxyCommand of TestSSHThroughFabric.
func TestSSHProxyHelper(t *testing.T) {
	peer := os.Getenv(proxyAgentEnv)
	if peer == "" {
		t.Skip("helper of TestSSHThroughFabric")
	}
	key, addrs, err := fabric.ParsePeer(peer)
	if err != nil {
		t.Fatal(err)
	}
	id, err := fabric.ReadIdentityFile(os.Getenv(proxyKeyEnv))
	if err != nil {
		t.Fatal(err)
	}
	port, _ := strconv.Atoi(os.Getenv(proxyPortEnv))
	n, err := fabric.New(fabric.Config{Component: "cli", Identity: id, Policy: fabric.NewAllowList(key)})
	if err != nil {
		t.Fatal(err)
	}
	n.AddAddrs(key, addrs...)
	st, err := agentapi.DialTCP(context.Background(), n, key, port)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		io.Copy(st, os.Stdin)
		st.CloseWrite()
	}()
	io.Copy(os.Stdout, st)
	os.Exit(0) // no test output on ssh's stream
}
