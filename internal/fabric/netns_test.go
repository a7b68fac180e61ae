package fabric

// TestNetns runs a fabric server and a client as two processes in two
// network namespaces joined by a veth pair, so that calls cross a real
// (virtual) link between two addresses instead of loopback. The addresses
// exist only inside the namespaces; no traffic reaches the host's network.
//
// It needs root and iproute2's `ip`. Without them it is skipped, unless the
// CI environment variable is set: CI runs as root and must run it.

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/netnstest"
)

// Environment of the helper processes.
const (
	netnsRoleEnv = "FABRIC_NETNS_ROLE" // "server" or "client"
	netnsKeyEnv  = "FABRIC_NETNS_KEY"  // this process's key file
	netnsPeerEnv = "FABRIC_NETNS_PEER" // the other side's public key
	netnsAddrEnv = "FABRIC_NETNS_ADDR" // the server's host:port
)

const (
	netnsServerIP = "10.231.0.1"
	netnsClientIP = "10.231.0.2"
	netnsPort     = "7420"
)

func TestNetns(t *testing.T) {
	pair := netnstest.New(t, "fab", netnsServerIP, netnsClientIP)
	nsS, nsC := pair.A, pair.B

	dir := t.TempDir()
	srvID, cliID := mustIdentity(t), mustIdentity(t)
	srvKey, cliKey := filepath.Join(dir, "server.key"), filepath.Join(dir, "client.key")
	if err := WriteIdentityFile(srvKey, srvID); err != nil {
		t.Fatal(err)
	}
	if err := WriteIdentityFile(cliKey, cliID); err != nil {
		t.Fatal(err)
	}
	addr := netnsServerIP + ":" + netnsPort

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	helper := func(ns, role, key string, peer PublicKey) *exec.Cmd {
		cmd := exec.CommandContext(ctx, "ip", "netns", "exec", ns, os.Args[0], "-test.run=^TestNetnsHelper$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(),
			netnsRoleEnv+"="+role, netnsKeyEnv+"="+key, netnsPeerEnv+"="+peer.String(), netnsAddrEnv+"="+addr)
		cmd.WaitDelay = 5 * time.Second
		return cmd
	}

	// The server prints "READY" once it serves; it stops when its stdin
	// closes.
	srv := helper(nsS, "server", srvKey, cliID.PublicKey())
	stdin, err := srv.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := srv.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var srvErr bytes.Buffer
	srv.Stderr = &srvErr
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	srvDone := make(chan error, 1)
	var srvOut bytes.Buffer
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			srvOut.WriteString(sc.Text() + "\n")
			if sc.Text() == "READY" {
				close(ready)
			}
		}
		srvDone <- srv.Wait()
	}()
	select {
	case <-ready:
	case err := <-srvDone:
		t.Fatalf("server exited before serving: %v\n%s%s", err, srvOut.String(), srvErr.String())
	case <-ctx.Done():
		t.Fatalf("server did not start\n%s", srvErr.String())
	}

	cli := helper(nsC, "client", cliKey, srvID.PublicKey())
	out, err := cli.CombinedOutput()
	t.Logf("client:\n%s", out)
	if err != nil {
		stdin.Close()
		<-srvDone
		t.Fatalf("client failed: %v\nserver:\n%s%s", err, srvOut.String(), srvErr.String())
	}
	stdin.Close()
	if err := <-srvDone; err != nil {
		t.Fatalf("server: %v\n%s%s", err, srvOut.String(), srvErr.String())
	}
}

// TestNetnsHelper is the body of the processes TestNetns starts; run on its
// own it does nothing.
func TestNetnsHelper(t *testing.T) {
	role := os.Getenv(netnsRoleEnv)
	if role == "" {
		t.Skip("helper process of TestNetns")
	}
	id, err := ReadIdentityFile(os.Getenv(netnsKeyEnv))
	if err != nil {
		t.Fatal(err)
	}
	peer, err := ParsePublicKey(os.Getenv(netnsPeerEnv))
	if err != nil {
		t.Fatal(err)
	}
	addr := os.Getenv(netnsAddrEnv)
	switch role {
	case "server":
		netnsServer(t, id, peer, addr)
	case "client":
		netnsClient(t, id, peer, addr)
	default:
		t.Fatalf("unknown role %q", role)
	}
}

type netnsEcho struct {
	Text   string    `json:"text"`
	Caller PublicKey `json:"caller"`
}

func netnsServer(t *testing.T, id *Identity, client PublicKey, addr string) {
	n, err := New(Config{Component: "netns-server", Identity: id, Listen: addr, Policy: NewAllowList(client)})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	HandleFunc(n, "echo", func(_ context.Context, peer PublicKey, in netnsEcho) (netnsEcho, error) {
		return netnsEcho{Text: in.Text, Caller: peer}, nil
	})
	// callback calls the caller back over the connection it opened: the
	// client listens nowhere, like an agent behind NAT.
	HandleFunc(n, "callback", func(ctx context.Context, peer PublicKey, _ struct{}) (string, error) {
		var who string
		err := n.Call(ctx, peer, "whoami", nil, &who)
		return who, err
	})
	n.HandleStream("echo.stream", func(_ context.Context, r *StreamRequest) error {
		s, err := r.Accept(nil)
		if err != nil {
			return err
		}
		_, err = io.Copy(s, s)
		return err
	})
	fmt.Println("READY")
	io.Copy(io.Discard, os.Stdin) // until the parent closes our stdin
}

func netnsClient(t *testing.T, id *Identity, server PublicKey, addr string) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			n, err := New(Config{Component: "netns-client", Identity: id, Transports: []string{tr}, Policy: NewAllowList(server)})
			if err != nil {
				t.Fatal(err)
			}
			defer n.Close()
			HandleFunc(n, "whoami", func(context.Context, PublicKey, struct{}) (string, error) { return "client/" + tr, nil })
			n.AddAddrs(server, addr)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()

			var pr PingReply
			if err := n.Call(ctx, server, MethodPing, nil, &pr); err != nil {
				t.Fatalf("ping: %v", err)
			}
			if pr.PublicKey != server.String() || pr.Component != "netns-server" || pr.Transport != tr || pr.Access != "full" {
				t.Fatalf("ping = %+v", pr)
			}
			var e netnsEcho
			if err := n.Call(ctx, server, "echo", netnsEcho{Text: "across namespaces"}, &e); err != nil {
				t.Fatalf("echo: %v", err)
			}
			if e.Text != "across namespaces" || e.Caller != id.PublicKey() {
				t.Fatalf("echo = %+v, want our text and key %s", e, id.PublicKey())
			}
			var who string
			if err := n.Call(ctx, server, "callback", nil, &who); err != nil || who != "client/"+tr {
				t.Fatalf("callback = %q, %v", who, err)
			}
			s, err := n.OpenStream(ctx, server, "echo.stream", nil, nil)
			if err != nil {
				t.Fatalf("open stream: %v", err)
			}
			defer s.Close()
			payload := bytes.Repeat([]byte("0123456789abcdef"), 64<<10) // 1 MiB
			werr := make(chan error, 1)
			go func() {
				_, err := s.Write(payload)
				if err == nil {
					err = s.CloseWrite()
				}
				werr <- err
			}()
			s.SetReadDeadline(time.Now().Add(20 * time.Second))
			got, err := io.ReadAll(s)
			if err != nil {
				t.Fatalf("read stream: %v", err)
			}
			if err := <-werr; err != nil {
				t.Fatalf("write stream: %v", err)
			}
			if !bytes.Equal(got, payload) {
				t.Fatalf("stream echoed %d bytes, want %d", len(got), len(payload))
			}
			t.Logf("%s: ping, echo, callback and a 1 MiB stream to %s ok", tr, addr)
		})
	}
}

// TestDialOnlyNodeReachesOtherHosts: a node without a listen address (an
// agent behind NAT) once bound its QUIC socket to 127.0.0.1, from which the
// kernel refuses to send to any other host ("sendmsg: invalid argument"), so
// such nodes could only ever use the TCP fallback. TestNetns shows it across
// namespaces; this shows it on the host's own non-loopback address.
func TestDialOnlyNodeReachesOtherHosts(t *testing.T) {
	agent := newNode(t, "agent", withListen(""), withTransports(TransportQUIC))
	if ip := agent.udp.LocalAddr().(*net.UDPAddr).IP; ip.IsLoopback() {
		t.Fatalf("dial-only node's UDP socket is bound to %v: it cannot reach other hosts", ip)
	}
	var host string
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil && !ipn.IP.IsLoopback() && !ipn.IP.IsLinkLocalUnicast() {
			host = ipn.IP.String()
			break
		}
	}
	if host == "" {
		t.Log("no non-loopback IPv4 address on this host; checked the socket's address only")
		return
	}
	srv := newNode(t, "server", withListen(net.JoinHostPort(host, "0")), withPolicy(NewAllowList(agent.PublicKey())))
	agent.AddAddrs(srv.PublicKey(), srv.Addr())
	var pr PingReply
	if err := agent.Call(ctxT(t), srv.PublicKey(), MethodPing, nil, &pr); err != nil {
		t.Fatalf("QUIC call from a dial-only node to %s: %v", srv.Addr(), err)
	}
	if pr.Transport != TransportQUIC {
		t.Fatalf("transport %q, want quic", pr.Transport)
	}
}
