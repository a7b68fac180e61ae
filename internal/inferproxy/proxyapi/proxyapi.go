// Package proxyapi is the fabric contract of proxy-inference towards the
// app-node: the model health of a managed-inference job (Health), its
// params and answer, and the client the app-node asks with (HealthClient).
//
// Importers: internal/inferproxy (serves it), the wiring that gives the
// app-node its model-health source. It imports the domain and the fabric
// only.
package proxyapi

import (
	"context"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
)

// Prefix is where proxy-inference serves the OpenAI-compatible API, behind
// the gateway as on its own listener.
const Prefix = "/inference/v1"

// Health answers a job's ModelHealth (read-only; the trust graph lets the
// app-node and operators call it).
var Health = fabric.Method[HealthParams, ModelHealth]{Name: "inference.modelHealth"}

// HealthParams names the job.
type HealthParams struct {
	JobID string `json:"jobId"`
}

// ModelHealth is a model's health apart from its job's status: from the
// agents' probes (ready in their announcements) and the proxy's own
// observations of errors and latency per replica.
type ModelHealth struct {
	Model    string          `json:"model"`
	JobID    string          `json:"jobId"`
	Health   string          `json:"health"`
	Replicas []ReplicaHealth `json:"replicas"`
}

// ReplicaHealth is one replica's health as the proxy sees it.
type ReplicaHealth struct {
	Replica     int     `json:"replica"`
	Key         string  `json:"key"`
	Health      string  `json:"health"`
	Ready       bool    `json:"ready"`
	Outstanding int64   `json:"outstanding"`
	Requests    int     `json:"recentRequests"`
	ErrorRate   float64 `json:"errorRate"`
	LatencyMs   float64 `json:"latencyMs"` // EWMA of the time to first byte
	ProbeMs     float64 `json:"probeMs,omitempty"`
	Error       string  `json:"error,omitempty"`
}

// HealthClient asks a proxy-inference for a job's model health: the
// app-node's model-health source (appnode.ModelHealthSource), in `cosmicac
// up` as in a standalone app-node.
type HealthClient struct {
	Node  *fabric.Node
	Proxy fabric.PublicKey
}

// ModelHealth answers the health of jobID's model as the proxy sees it.
func (h HealthClient) ModelHealth(ctx context.Context, jobID string) (cosmic.ModelHealth, error) {
	mh, err := Health.Call(ctx, h.Node, h.Proxy, HealthParams{JobID: jobID})
	if err != nil {
		return cosmic.ModelUnknown, err
	}
	return cosmic.ModelHealth(mh.Health), nil
}
