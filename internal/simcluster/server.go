package simcluster

import (
	"context"
	"errors"
	"log/slog"

	"golang.org/x/sync/errgroup"

	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/joblog"
	"github.com/cosmicac/cosmicac/internal/worker"
)

// ServerDeps are what a simulated rack served on the fabric is built on:
// the same for `cosmicac up` and `cosmicac wrk-server-sim`.
type ServerDeps struct {
	// Fabric is the worker's node: its identity, address and policy.
	Fabric fabric.Config
	// Ork takes the reports; OrkAddrs are where it listens.
	Ork      fabric.PublicKey
	OrkAddrs []string
	// Monitor, when not zero, takes the job log records (a
	// joblog.Forwarder on the worker's node); MonitorAddrs are where it
	// listens.
	Monitor      fabric.PublicKey
	MonitorAddrs []string
	// Logs, when set, takes the records too (the platform's ring).
	Logs joblog.Sink
	Log  *slog.Logger
	// Agents and Inference run the replicas' agents in process (Deps).
	Agents    AgentRunner
	Inference InferenceRunner
}

// Server is a simulated rack served on the fabric as a rack worker: the
// worker methods, the faults and the agents' reports on an Endpoint that
// simUnreachable takes down, reports to the ork, and the job log records
// forwarded to the monitor. NewServer starts listening; Run plays it.
type Server struct {
	*Cluster
	ep  *Endpoint
	fwd *joblog.Forwarder // nil: no monitor
	log *slog.Logger
}

// NewServer makes the rack of cfg on d and brings its node up (its address
// is known from here on: register it with the ork). Run it, or Close it.
func NewServer(cfg Config, d ServerDeps) (*Server, error) {
	if d.Fabric.Identity == nil {
		return nil, errors.New("simcluster: the worker's identity is required")
	}
	log := d.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{log: log}
	s.ep = NewEndpoint(d.Fabric, func(n *fabric.Node) { s.serve(n, d) })
	logs := d.Logs
	if d.Monitor != (fabric.PublicKey{}) {
		s.fwd = joblog.NewForwarder(joblog.NodeFunc(s.ep.Node), d.Monitor, 10000)
		if logs == nil {
			logs = s.fwd
		} else {
			logs = joblog.Tee(logs, s.fwd)
		}
	}
	c, err := New(cfg, Deps{Reporter: s.ep.Reporter(d.Ork), Logs: logs, Log: log, Link: s.ep, Agents: d.Agents, Inference: d.Inference})
	if err != nil {
		return nil, err
	}
	s.Cluster = c // before the node is up: its methods serve the cluster
	if err := s.ep.Up(); err != nil {
		return nil, err
	}
	c.worker = Peer{Key: d.Fabric.Identity.PublicKey(), Addrs: []string{s.ep.Addr()}}
	return s, nil
}

// serve registers the rack's methods on n, each time the endpoint comes
// up, and the addresses of the peers it calls.
func (s *Server) serve(n *fabric.Node, d ServerDeps) {
	worker.Serve(n, s.Cluster)
	s.RegisterFaults(n)
	ServeAgentReports(n, s.log)
	n.AddAddrs(d.Ork, d.OrkAddrs...)
	if len(d.MonitorAddrs) > 0 {
		n.AddAddrs(d.Monitor, d.MonitorAddrs...)
	}
}

// Run plays the rack and forwards its records until ctx ends, then takes
// it off the fabric; it returns once all it started has stopped.
func (s *Server) Run(ctx context.Context) error {
	defer s.ep.Close()
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return s.Cluster.Run(gctx) })
	if s.fwd != nil {
		g.Go(func() error { return s.fwd.Run(gctx) })
	}
	return g.Wait()
}

// Close takes the rack off the fabric (Run does so when it ends).
func (s *Server) Close() error { return s.ep.Close() }

// Node is the worker's current node (nil while an outage holds it down).
func (s *Server) Node() *fabric.Node { return s.ep.Node() }

// Addr is the worker's fabric address.
func (s *Server) Addr() string { return s.ep.Addr() }

// Forwarder is the forwarder of the job log records to the monitor (nil:
// none), for its metrics.
func (s *Server) Forwarder() *joblog.Forwarder { return s.fwd }
