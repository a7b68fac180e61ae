package inferagent

import (
	"context"
	"io"
	"net"
	"sync"
	"time"

	"github.com/cosmicac/cosmicac/internal/agent/agentapi"
	"github.com/cosmicac/cosmicac/internal/fabric"
)

// The agent passes the proxy's HTTP/1.1 connections to the runtime byte for
// byte: each agentapi.MethodInferenceHTTP stream is relayed to a TCP connection of its own to
// the runtime, with no HTTP parsing in between. The proxy speaks HTTP/1.1
// (keep-alive) to the runtime through it; every read of the runtime's
// answer (an SSE event, as the runtime flushed it) is written to the stream
// at once. Closing either end closes the other: a client that leaves the
// proxy closes the runtime's connection, and vLLM stops generating.

// relayLinger bounds how long, after the runtime closed a connection (its
// keep-alive timeout), the agent waits for the proxy to close its end.
const relayLinger = 10 * time.Second

var relayBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// openRelay answers an agentapi.MethodInferenceHTTP stream: refused unless this VMI is the
// replica's head and its runtime runs, else relayed to a new connection to
// the runtime.
func (a *Agent) openRelay(ctx context.Context, req *fabric.StreamRequest) error {
	if a.cfg.Placement.Role() != agentapi.PlacementHead {
		return fabric.Errorf(fabric.CodeUnavailable, "this VMI is a headless worker; send requests to the replica's head")
	}
	addr := a.runtimeAddr()
	if addr == "" {
		return fabric.Errorf(fabric.CodeUnavailable, "the replica's runtime is not running")
	}
	rc, err := dialRuntime(ctx, addr)
	if err != nil {
		return fabric.Errorf(fabric.CodeUnavailable, "the replica's runtime did not answer: %v", err)
	}
	s, err := req.Accept(nil)
	if err != nil {
		rc.Close()
		return err
	}
	relay(s, rc)
	return nil
}

// relay copies between the proxy's stream s and the runtime's connection
// rc until either ends.
func relay(s *fabric.Stream, rc net.Conn) {
	up := make(chan struct{})
	go func() {
		defer close(up)
		bp := relayBufs.Get().(*[]byte)
		defer relayBufs.Put(bp)
		io.CopyBuffer(struct{ io.Writer }{rc}, s, *bp) // the proxy's requests
		// The proxy closed its end (it retired the connection, or the
		// client left): close the runtime's, which stops its work.
		rc.Close()
	}()
	bp := relayBufs.Get().(*[]byte)
	defer relayBufs.Put(bp)
	_, err := io.CopyBuffer(s, struct{ io.Reader }{rc}, *bp) // the runtime's answers
	select {
	case <-up: // the proxy ended it
		s.Close()
		return
	default:
	}
	if err != nil {
		// The runtime's connection broke: cut the stream, so that the
		// proxy sees an answer end early as an error, never as complete.
		s.Close()
		rc.Close()
		<-up
		return
	}
	// The runtime closed the connection after a complete answer.
	s.CloseWrite()
	t := time.NewTimer(relayLinger)
	defer t.Stop()
	select {
	case <-up:
	case <-t.C:
	}
	s.Close()
	rc.Close()
	<-up
}
