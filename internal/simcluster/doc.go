// Package simcluster is the embedded simulated rack: the default rack of
// `cosmicac up`, for trying CosmicAC without a Kubernetes cluster.
//
// A Cluster implements worker.Worker exactly as the Kubernetes worker does
// and plays each replica's VMI life in simulated steps (Config.Step): the
// replica is accepted (pending), its root disk is imported with progress,
// one VMI per reserved node is scheduled and booted, and the replica runs.
// Every step writes a system log record (joblog) and a report to the ork
// (worker.Reporter). Faults (a failed import, a crashed VMI, a lost node, an
// unreachable worker) are injected over the fabric (RegisterFaults) or by
// calling the Cluster's fault methods. See docs/simulated-rack.md.
//
// Importers: the CLI wiring (`cosmicac up`) and whole-system tests. It
// imports the domain, the worker contract, joblog and the fabric.
package simcluster
