package agent

import (
	"context"
	"io"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/cosmicac/cosmicac/internal/agent/agentapi"
	"github.com/cosmicac/cosmicac/internal/fabric"
)

func (a *Agent) allowedPort(p int) bool {
	if len(a.cfg.TCPPorts) > 0 {
		return slices.Contains(a.cfg.TCPPorts, p)
	}
	return p == agentapi.DefaultSSHPort
}

func (a *Agent) handleTCP(ctx context.Context, req *fabric.StreamRequest) error {
	var p agentapi.TCPConnectParams
	if err := req.Decode(&p); err != nil {
		return err
	}
	if p.Port == 0 {
		p.Port = agentapi.DefaultSSHPort
	}
	if !a.allowedPort(p.Port) {
		return fabric.Errorf(fabric.CodeForbidden, "port %d is not open to the platform", p.Port)
	}
	target := p.Port
	if target == agentapi.DefaultSSHPort && a.cfg.SSHPort > 0 {
		target = a.cfg.SSHPort
	}
	var d net.Dialer
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	c, err := d.DialContext(dctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(target)))
	cancel()
	if err != nil {
		return fabric.Errorf(fabric.CodeUnavailable, "connect to port %d in the VM: %v", p.Port, err)
	}
	defer c.Close()
	st, err := req.Accept(nil)
	if err != nil {
		return err
	}
	a.record("tcp", "tcp connection to port %d opened by key %s", p.Port, req.Peer.Short())
	var wg sync.WaitGroup
	wg.Go(func() {
		io.Copy(c, st)
		c.(*net.TCPConn).CloseWrite()
	})
	io.Copy(st, c)
	st.CloseWrite()
	wg.Wait()
	return nil
}
