// Package usageapi is the contract of inference usage between its
// measurer, proxy-inference, and its keeper, the app-node: the app-node's
// fabric method that records a batch of usage rows (Record), with its
// params. The app-node serves it (appnode.ServeUsage) into the store
// (store.Usage); a proxy in the app-node's process writes to the store
// directly.
//
// Importers: internal/appnode (serves Record), internal/inferproxy
// (delivers), internal/trust (the method's name in the graph). It imports
// the fabric only.
package usageapi

import (
	"time"

	"github.com/cosmicac/cosmicac/internal/fabric"
)

// Record is the app-node's fabric call (the trust graph lets only
// proxy-inference call it) that adds a batch of usage to the store, once
// per batch ID (store.Usage.RecordUsage).
var Record = fabric.Method[RecordParams, struct{}]{Name: "inference.recordUsage"}

// RecordParams is one batch: its ID (unique per proxy and delivery, kept
// across retries) and its rows, each of one minute.
type RecordParams struct {
	Batch string `json:"batch"`
	Rows  []Row  `json:"rows"`
}

// Row is a store.UsageRow on the wire: one minute of one caller's use of
// one job's model.
type Row struct {
	Minute           time.Time `json:"minute"`
	Team             string    `json:"team"`
	KeyID            string    `json:"keyId,omitempty"`
	JobID            string    `json:"jobId"`
	Model            string    `json:"model"`
	Requests         int64     `json:"requests"`
	PromptTokens     int64     `json:"promptTokens"`
	CompletionTokens int64     `json:"completionTokens"`
}
