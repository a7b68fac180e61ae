// Package dataapi is the fabric contract of a job's data path
// (docs/data.md): the app-node's data.presign, which a job's instance
// agent calls for the signed requests its volumes need, and Signer, the
// agent's side of it (a datasync.Signer over the fabric). The app-node
// serves it (appnode.ServePresign); the trust graph lets a job's instance
// agents call it for their own job only.
package dataapi

import (
	"context"

	"github.com/cosmicac/cosmicac/internal/datasync"
	"github.com/cosmicac/cosmicac/internal/fabric"
)

// Presign signs requests for one volume of a job.
var Presign = fabric.Method[PresignParams, PresignReply]{Name: "data.presign"}

// PresignParams ask for requests for volume Volume (its index in the
// job's spec.volumes) of job Job: a listing page after Token, or one
// request a key (volume-relative) for Op. Target asks for the volume's
// push target (volumeTarget.targetDataStore) rather than its source.
type PresignParams struct {
	Job    string `json:"job"`
	Volume int    `json:"volume"`
	Target bool   `json:"target,omitempty"`
	// Model asks for the job's inference.modelSource instead of a volume
	// (read only: listings and gets).
	Model bool        `json:"model,omitempty"`
	Op    datasync.Op `json:"op"`
	Keys  []string    `json:"keys,omitempty"`
	Token string      `json:"token,omitempty"`
}

// PresignReply are the signed requests, in the keys' order.
type PresignReply struct {
	Requests []datasync.SignedRequest `json:"requests"`
}

// Signer is a datasync.Signer that asks the app-node AppNode over Node
// for the requests of one volume of one job.
type Signer struct {
	Node    fabric.Caller
	AppNode fabric.PublicKey
	Job     string
	Volume  int
	Target  bool
	Model   bool // the job's model source, not a volume
}

// Sign implements datasync.Signer.
func (s Signer) Sign(ctx context.Context, op datasync.Op, keys []string, token string) ([]datasync.SignedRequest, error) {
	r, err := Presign.Call(ctx, s.Node, s.AppNode, PresignParams{Job: s.Job, Volume: s.Volume, Target: s.Target, Model: s.Model, Op: op, Keys: keys, Token: token})
	return r.Requests, err
}

var _ datasync.Signer = Signer{}
