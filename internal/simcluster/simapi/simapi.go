// Package simapi is the contract of the simulated rack's fault methods
// (`cosmicac rpc`, the system tests): their names, params and answer. The
// simulated worker (internal/simcluster) serves them to operators only;
// internal/trust names them in the graph.
//
// It imports the standard library only.
package simapi

import "time"

// Fault methods, served over the fabric by simcluster.Cluster.RegisterFaults.
const (
	MethodFailImport  = "simFailImport"
	MethodCrash       = "simCrash"
	MethodLoseNode    = "simLoseNode"
	MethodRestoreNode = "simRestoreNode"
	MethodUnreachable = "simUnreachable"
	MethodHoldAgent   = "simHoldAgent"
)

// MaxUnreachable bounds one simUnreachable.
const MaxUnreachable = time.Hour

// ReplicaParams names a replica: the params of simFailImport and simCrash.
// For simFailImport an empty JobID means "the next import to start".
type ReplicaParams struct {
	JobID   string `json:"jobId"`
	Replica int    `json:"replica"`
}

// NodeParams names a node: the params of simLoseNode and simRestoreNode.
type NodeParams struct {
	Node string `json:"node"`
}

// UnreachableParams is the params of simUnreachable.
type UnreachableParams struct {
	Seconds float64 `json:"seconds"`
}

// FaultAck answers a fault method.
type FaultAck struct {
	Fault  string `json:"fault"`
	Detail string `json:"detail"`
	// Until is when an outage ends (simUnreachable only).
	Until time.Time `json:"until,omitzero"`
}
