// Package k8sworker is the rack worker that runs jobs as KubeVirt GPU VMs on
// a Kubernetes cluster (cosmicac-wrk-server-k8s-nvidia).
//
// This part of it is pure: the rack's configuration (RackConfig), the
// builders that turn a job and one replica's reservation into its graph of
// Kubernetes objects (BuildRoot, BuildReplica), the mapping from the
// cluster's nodes to the rack's capacity (NodesCapacity) and the mapping
// from observed DataVolumes and VMIs to a replica's status (ReplicaStatus).
// None of it talks to an apiserver; docs/k8s-worker.md describes the graph,
// its names, labels and ownership.
//
// Importers: the CLI wiring (and this package's own apply/watch code). It
// imports the domain (internal/cosmic), the worker contract
// (internal/worker) and the Kubernetes, KubeVirt and CDI API types.
package k8sworker
