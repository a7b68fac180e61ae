package simcluster

import (
	"context"
	"errors"
	"sync"

	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/worker"
)

// Link is a worker's presence on the fabric. simUnreachable takes it Down
// and, when the outage is over, brings it Up again.
type Link interface {
	Down() error
	Up() error
}

// Endpoint is a fabric node that can leave the fabric and come back at the
// same address with the same identity: the Link that makes a simulated
// outage real. While it is down nothing listens at its address, so the ork
// sees exactly what it would see of a crashed or partitioned worker: dials
// fail, calls answer unavailable, no report arrives.
//
// Each time it comes up it makes a fresh fabric.Node and hands it to setup,
// which registers the node's methods and addresses (worker.Serve,
// RegisterFaults, AddAddrs of the ork).
type Endpoint struct {
	cfg   fabric.Config
	setup func(*fabric.Node)

	mu     sync.Mutex
	node   *fabric.Node
	addr   string
	closed bool
}

// NewEndpoint makes an endpoint that is down; call Up to start it.
func NewEndpoint(cfg fabric.Config, setup func(*fabric.Node)) *Endpoint {
	return &Endpoint{cfg: cfg, setup: setup}
}

// Up starts a node, at the address of the previous one if there was one.
// It does nothing if the endpoint is up.
func (e *Endpoint) Up() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return errors.New("simcluster: endpoint closed")
	}
	if e.node != nil {
		return nil
	}
	cfg := e.cfg
	if e.addr != "" {
		cfg.Listen = e.addr
	}
	n, err := fabric.New(cfg)
	if err != nil {
		return err
	}
	if e.setup != nil {
		e.setup(n)
	}
	e.node, e.addr = n, n.Addr()
	return nil
}

// Down closes the node, if it is up.
func (e *Endpoint) Down() error {
	e.mu.Lock()
	n := e.node
	e.node = nil
	e.mu.Unlock()
	if n == nil {
		return nil
	}
	return n.Close()
}

// Close takes the endpoint down for good.
func (e *Endpoint) Close() error {
	e.mu.Lock()
	e.closed = true
	e.mu.Unlock()
	return e.Down()
}

// Node is the current node, or nil while down.
func (e *Endpoint) Node() *fabric.Node {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.node
}

// Addr is the address the endpoint serves on (kept while down).
func (e *Endpoint) Addr() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.addr
}

// Reporter returns a worker.Reporter that pushes reports to the ork holding
// key through the endpoint's current node; while down it fails with
// unavailable (and the cluster retries).
func (e *Endpoint) Reporter(ork fabric.PublicKey) worker.Reporter {
	return endpointReporter{e: e, ork: ork}
}

type endpointReporter struct {
	e   *Endpoint
	ork fabric.PublicKey
}

func (r endpointReporter) Report(ctx context.Context, rep worker.Report) error {
	n := r.e.Node()
	if n == nil {
		return fabric.Errorf(fabric.CodeUnavailable, "worker endpoint is down")
	}
	return n.Call(ctx, r.ork, worker.MethodReport, rep, nil)
}
