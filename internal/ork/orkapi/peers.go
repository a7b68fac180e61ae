package orkapi

// The bound part of the trust graph as the ork holds it (watchPeers): what
// internal/trust's keyrings follow.

import (
	"time"

	"github.com/cosmicac/cosmicac/internal/cosmic"
)

// Peers is the bound part of the graph as the ork holds it: every rack's
// worker key and every placed replica with its agents' keys. It is the
// answer of the ork's watchPeers.
type Peers struct {
	// Epoch names the ork process; Version counts its changes. A follower
	// with another epoch takes the next answer whatever its version.
	Epoch      string      `json:"epoch"`
	Version    uint64      `json:"version"`
	Racks      []RackPeer  `json:"racks"`
	Placements []Placement `json:"placements"`
}

// RackPeer is a rack and its worker's key.
type RackPeer struct {
	Rack      string `json:"rack"`
	WorkerKey string `json:"workerKey"`
}

// Placement is a replica that holds GPUs on a rack, and the keys its
// worker issued to its agents (by VMI index; none until the worker
// reports them).
type Placement struct {
	Job       string         `json:"job"`
	Team      string         `json:"team"`
	Type      cosmic.JobType `json:"type"`
	Replica   int            `json:"replica"`
	Rack      string         `json:"rack"`
	AgentKeys []string       `json:"agentKeys,omitempty"`
	// Draining says the replica takes no new requests: a rollout replaces
	// it once those in flight end (proxy-inference routes around it).
	Draining bool `json:"draining,omitempty"`
	// Stopping says the replica was stopped (kill, delete) and holds no
	// GPU, but its VM still powers off: its agent pushes the job's RW
	// volumes (docs/data.md). Its keys are bound for that alone
	// (trust.StoppingMethods) until the rack reports the replica ended or
	// StopPushWait passes.
	Stopping bool `json:"stopping,omitempty"`
}

// StopPushWait bounds how long a stopped replica's agents stay bound to
// push the job's RW volumes (vmboot.StopPushWait).
const StopPushWait = 11 * time.Minute

// WatchPeersParams asks for Peers newer than (Epoch, Since), waiting up to
// WaitMillis for a change (0: answer at once).
type WatchPeersParams struct {
	Epoch      string `json:"epoch,omitempty"`
	Since      uint64 `json:"since,omitempty"`
	WaitMillis int    `json:"waitMillis,omitempty"`
}

// MaxWatchWait bounds how long the ork holds a watchPeers call.
const MaxWatchWait = 30 * time.Second
