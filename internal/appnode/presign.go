package appnode

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/datasync"
	"github.com/cosmicac/cosmicac/internal/datasync/dataapi"
	"github.com/cosmicac/cosmicac/internal/datasync/presign"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/seal"
	"github.com/cosmicac/cosmicac/internal/store"
	"github.com/cosmicac/cosmicac/internal/trust"
)

// PresignTTL is how long a signed request of a volume stays good.
const PresignTTL = 15 * time.Minute

// ServePresign registers dataapi.Presign on r (docs/data.md, "The
// platform signs; the job transfers"): a job's instance agent gets signed
// requests for its own job's volumes, each for the volume's container and
// prefix and as its permission allows; the secret key is opened here and
// goes nowhere. A job's agent asking for another job is forbidden, as the
// trust graph's confinement says; getJob reads the job (the ork).
func ServePresign(r fabric.Registrar, getJob func(ctx context.Context, id string) (cosmic.Job, error), ds store.Datastores, key *seal.Key) {
	dataapi.Presign.Handle(r, func(ctx context.Context, _ fabric.PublicKey, p dataapi.PresignParams) (dataapi.PresignReply, error) {
		if c, ok := trust.CallerOf(ctx); ok && c.Role != trust.Operator {
			switch {
			case !c.Role.IsAgent() || c.Job != p.Job:
				return dataapi.PresignReply{}, fabric.Errorf(fabric.CodeForbidden, "%s signs only its own job's volumes", c)
			case c.Role == trust.InferenceAgent && !p.Model:
				return dataapi.PresignReply{}, fabric.Errorf(fabric.CodeForbidden, "%s signs only its job's model source: the instance agent fills volumes", c)
			case c.Role == trust.InstanceAgent && p.Model:
				return dataapi.PresignReply{}, fabric.Errorf(fabric.CodeForbidden, "%s fills volumes: the model source is the inference agents'", c)
			case c.Stopping && p.Op == datasync.OpGet:
				return dataapi.PresignReply{}, fabric.Errorf(fabric.CodeForbidden, "%s is stopping: it pushes its volumes (listings, puts, deletes), and reads nothing", c)
			}
		}
		j, err := getJob(ctx, p.Job)
		if err != nil {
			if errors.Is(err, cosmic.ErrNotFound) || fabric.ErrorCode(err) == fabric.CodeNotFound {
				return dataapi.PresignReply{}, fabric.Errorf(fabric.CodeNotFound, "job %s not found", p.Job)
			}
			return dataapi.PresignReply{}, err
		}
		var v cosmic.Volume
		var src *cosmic.DataStoreSource
		switch {
		case p.Model:
			if j.Spec.Inference == nil || j.Spec.Inference.ModelSource == nil {
				return dataapi.PresignReply{}, fabric.Errorf(fabric.CodeBadRequest, "job %s takes its model from no datastore", p.Job)
			}
			// The weights are read: a volume of permission RO.
			src, v = j.Spec.Inference.ModelSource, cosmic.Volume{Permission: cosmic.PermissionRO}
		case p.Volume < 0 || p.Volume >= len(j.Spec.Volumes):
			return dataapi.PresignReply{}, fabric.Errorf(fabric.CodeBadRequest, "job %s has no volume %d", p.Job, p.Volume)
		default:
			v = j.Spec.Volumes[p.Volume]
			side := "volumeSource.dataStore"
			src = v.Source.DataStore
			if p.Target {
				src, side = targetOf(v), "volumeTarget.targetDataStore"
			}
			if src == nil {
				return dataapi.PresignReply{}, fabric.Errorf(fabric.CodeBadRequest, "volume %d of job %s has no %s", p.Volume, p.Job, side)
			}
		}
		d, err := ds.GetDatastore(ctx, j.Team, src.Alias)
		if errors.Is(err, cosmic.ErrNotFound) {
			return dataapi.PresignReply{}, fabric.Errorf(fabric.CodeNotFound, "team %s has no datastore %s (any more)", j.Team, src.Alias)
		}
		if err != nil {
			return dataapi.PresignReply{}, err
		}
		secret, err := key.Open(d.SealedSecret, datastoreAD(d.Team, d.Alias))
		if err != nil {
			return dataapi.PresignReply{}, fabric.Errorf(fabric.CodeUnavailable, "datastore %s of team %s: its secret does not open with this app-node's secrets key (every app-node of a database needs the same file)", d.Alias, d.Team)
		}
		// What each side may do: a volume with a push target reads its
		// source and writes its target (listed for the push's comparison,
		// never read); one without writes back to its source as its
		// permission allows.
		perm := strings.ToUpper(v.Permission)
		writes := perm == cosmic.PermissionRW || perm == cosmic.PermissionRWD
		hasTarget := targetOf(v) != nil
		put, del := writes && !hasTarget, perm == cosmic.PermissionRWD && !hasTarget
		if p.Target {
			put, del = writes, false
			if p.Op == datasync.OpGet {
				return dataapi.PresignReply{}, fabric.Errorf(fabric.CodeBadRequest, "volume %d of job %s: its push target is written, not read", p.Volume, p.Job)
			}
		}
		reqs, err := presign.Sign(presign.Volume{Endpoint: d.Endpoint, Region: d.Region, AccessKey: d.AccessKey, SecretKey: string(secret),
			Container: src.Container, Prefix: src.Prefix, Put: put, Delete: del, Archive: src.Archive != ""},
			p.Op, p.Keys, p.Token, PresignTTL, time.Now())
		if err != nil {
			return dataapi.PresignReply{}, fabric.Errorf(fabric.CodeBadRequest, "volume %d of job %s: %v", p.Volume, p.Job, err)
		}
		return dataapi.PresignReply{Requests: reqs}, nil
	})
}
