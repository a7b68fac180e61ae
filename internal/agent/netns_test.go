package agent

// TestNetns runs the agent in its own network namespace, as if inside a VMI
// on another network: it is dial-only and reaches the platform node in a
// second namespace over a veth pair; the platform node opens shells on it
// over the connection the agent opened. The addresses exist only inside the
// namespaces.
//
// It needs root and iproute2's `ip`. Without them it is skipped, unless CI
// is set: CI runs as root and must run it (as internal/fabric's TestNetns).

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/cosmicac/cosmicac/internal/agent/agentapi"
	"github.com/cosmicac/cosmicac/internal/agent/shellproto"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/netnstest"
	"github.com/cosmicac/cosmicac/internal/waittest"
)

const (
	nsRoleEnv   = "AGENT_NETNS_ROLE"   // "agent" or "platform"
	nsConfigEnv = "AGENT_NETNS_CONFIG" // agent: its config file; platform: its key file
	nsPeerEnv   = "AGENT_NETNS_PEER"   // platform: the agent's key

	nsPlatformIP = "10.232.0.1"
	nsAgentIP    = "10.232.0.2"
	nsPort       = "7431"
)

func TestNetns(t *testing.T) {
	pair := netnstest.New(t, "ag", nsPlatformIP, nsAgentIP)
	nsP, nsA := pair.A, pair.B

	dir := t.TempDir()
	platID, agentID := mustID(t), mustID(t)
	platKey := filepath.Join(dir, "platform.key")
	if err := fabric.WriteIdentityFile(platKey, platID); err != nil {
		t.Fatal(err)
	}
	pem, _ := agentID.MarshalPEM()
	fc := FileConfig{FileBootstrap: FileBootstrap{JobID: "0b7c54a8-5f0e-4c1e-9d3a-2f6b8e1c4d70", Team: "ml",
		Identity: &FileIdentity{PrivateKeyPEM: string(pem), PublicKey: agentID.PublicKey().String()},
		Peers:    []FilePeer{{Role: agentapi.RoleAppNode, Key: platID.PublicKey().String(), Addrs: []string{nsPlatformIP + ":" + nsPort}}}},
		Shell: "/bin/bash", WorkDir: dir}
	b, _ := yaml.Marshal(fc)
	cfgPath := filepath.Join(dir, "agent.yaml")
	if err := os.WriteFile(cfgPath, b, 0o600); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	helper := func(ns, role, config string) *exec.Cmd {
		cmd := exec.CommandContext(ctx, "ip", "netns", "exec", ns, os.Args[0], "-test.run=^TestNetnsHelper$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), nsRoleEnv+"="+role, nsConfigEnv+"="+config, nsPeerEnv+"="+agentID.PublicKey().String())
		cmd.WaitDelay = 5 * time.Second
		return cmd
	}
	plat := helper(nsP, "platform", platKey)
	var platOut bytes.Buffer
	plat.Stdout, plat.Stderr = &platOut, &platOut
	if err := plat.Start(); err != nil {
		t.Fatal(err)
	}
	ag := helper(nsA, "agent", cfgPath)
	agIn, err := ag.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var agOut bytes.Buffer
	ag.Stdout, ag.Stderr = &agOut, &agOut
	if err := ag.Start(); err != nil {
		t.Fatal(err)
	}
	perr := plat.Wait()
	agIn.Close()
	aerr := ag.Wait()
	t.Logf("platform side:\n%s", platOut.String())
	if perr != nil || !strings.Contains(platOut.String(), "NETNS-OK") {
		t.Fatalf("platform side failed: %v\nagent side:\n%s", perr, agOut.String())
	}
	if aerr != nil {
		t.Fatalf("agent side: %v\n%s", aerr, agOut.String())
	}
}

// TestNetnsHelper is one side of TestNetns; it does nothing when run
// directly.
func TestNetnsHelper(t *testing.T) {
	switch os.Getenv(nsRoleEnv) {
	case "agent":
		cfg, err := LoadConfig(os.Getenv(nsConfigEnv))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		go func() { io.Copy(io.Discard, os.Stdin); cancel() }()
		if err := New(cfg, nil).Run(ctx); err != nil {
			t.Fatal(err)
		}
	case "platform":
		netnsPlatform(t)
	default:
		t.Skip("helper of TestNetns")
	}
}

func netnsPlatform(t *testing.T) {
	id, err := fabric.ReadIdentityFile(os.Getenv(nsConfigEnv))
	if err != nil {
		t.Fatal(err)
	}
	agentKey, err := fabric.ParsePublicKey(os.Getenv(nsPeerEnv))
	if err != nil {
		t.Fatal(err)
	}
	n, err := fabric.New(fabric.Config{Component: "app-node", Identity: id, Listen: nsPlatformIP + ":" + nsPort,
		Policy: fabric.NewAllowList(agentKey)})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	waittest.Within(t, 60*time.Second, func() bool { return n.Connected(agentKey) }, "the agent to connect")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// Ready follows the agent's first successful ping, which may end just
	// after its connection shows here.
	waittest.NoError(t, func() error {
		st, err := agentapi.GetStatus(ctx, n, agentKey)
		if err != nil {
			t.Fatalf("status: %v", err)
		}
		if !st.Ready {
			return fmt.Errorf("status %+v", st)
		}
		return nil
	}, "the agent to be ready")
	r := &testRig{platform: n, dialer: agentapi.FabricDialer{Node: n, Agent: agentKey}}

	// A terminal: input, resize, Ctrl-C, the exit code.
	s := r.open(t, shellproto.OpenParams{TTY: true, Rows: 24, Cols: 80})
	s.send(t, "echo hi-$((40+2)); stty size\n")
	waitFor(t, s.out, "hi-42")
	waitFor(t, s.out, "24 80")
	// The shell watches for the new size, then the window changes: the
	// resize frame may overtake typed input or follow it.
	s.send(t, "until [ \"$(stty size)\" = '40 120' ]; do sleep 0.01; done; echo resized-$((40+120))\n")
	s.resize <- agentapi.Size{Rows: 40, Cols: 120}
	waitFor(t, s.out, "resized-160")
	s.send(t, "sh -c 'echo sleeping-$((2*3)); exec sleep 100'\n")
	waitFor(t, s.out, "sleeping-6") // the foreground process: the ^C is its
	s.send(t, "\x03echo status-$?\n")
	waitFor(t, s.out, "status-130")
	s.send(t, "exit 3\n")
	if es := s.wait(t); es.Code != 3 {
		t.Fatalf("exit %d", es.Code)
	}
	// Pipes and a 1 MiB round trip.
	c, _, err := r.dialer.DialShell(ctx, "", shellproto.OpenParams{Argv: []string{"sha256sum"}})
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("0123456789abcdef"), 1<<16)
	var out bytes.Buffer
	es, err := agentapi.RunSession(ctx, c, agentapi.SessionIO{Stdin: bytes.NewReader(data), Stdout: &out})
	sum := sha256.Sum256(data)
	if err != nil || es.Code != 0 || !strings.HasPrefix(out.String(), hex.EncodeToString(sum[:])) {
		t.Fatalf("sha256sum: %+v %v %q", es, err, out.String())
	}
	fmt.Printf("sha256 of 1 MiB through the shell: %s", out.String())
	fmt.Println("NETNS-OK")
}
