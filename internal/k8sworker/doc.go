// Package k8sworker is the rack worker that runs jobs as KubeVirt GPU VMs on
// a Kubernetes cluster (cosmicac-wrk-server-k8s-nvidia).
//
// The pure part: the rack's configuration (RackConfig), the builders that
// turn a job and one replica's reservation into its graph of Kubernetes
// objects (BuildRoot, BuildReplica), the mapping from the cluster's nodes to
// the rack's capacity (RackNodes, GPUsInUse), the mapping from observed
// DataVolumes and VMIs to a replica's status (ReplicaStatus), and the
// DataVolumes of the teams' standalone volumes with what Capacity reports
// of them (BuildStandaloneVolume, StandaloneVolumeName, StoredVolumes). The
// runtime (Worker: New, Run and the worker.Worker methods) applies the
// graphs with server-side apply and reports status and capacity from
// informers; docs/k8s-worker.md describes both.
//
// Importers: the CLI wiring (and this package's own apply/watch code). It
// imports the domain (internal/cosmic), the worker contract
// (internal/worker) and the Kubernetes, KubeVirt and CDI API types.
package k8sworker
