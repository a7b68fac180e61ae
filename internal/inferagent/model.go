package inferagent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"time"

	"github.com/cosmicac/cosmicac/internal/agent/agentapi"
	"github.com/cosmicac/cosmicac/internal/backoff"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/datasync"
	"github.com/cosmicac/cosmicac/internal/datasync/dataapi"
	"github.com/cosmicac/cosmicac/internal/fabric"
)

// fetchModel takes the model's weights from the job's datastore
// (inference.modelSource) into the node's cache, or finds them there, and
// answers their path for the runtime (the one GGUF file for llama.cpp,
// the directory otherwise) and the cache's entry that holds them. Until
// it has them, or ctx ends, it tries again, saying why in the job's log
// and the agent's status.
func (a *Agent) fetchModel(ctx context.Context, n *fabric.Node) (path, entry string, err error) {
	in := a.cfg.Inference
	src := in.ModelSource
	var appNode fabric.PublicKey
	found := false
	for _, p := range a.cfg.Peers {
		if p.Role == agentapi.RoleAppNode {
			appNode, found = p.Key, true
		}
	}
	if !found {
		return "", "", errors.New("the agent knows no app-node to sign its model's requests")
	}
	cache := cmp.Or(a.cfg.Placement.ModelCache, DefaultModelCache)
	signer := dataapi.Signer{Node: n, AppNode: appNode, Job: a.cfg.JobID, Model: true}
	b := backoff.Backoff{Min: 500 * time.Millisecond, Max: 30 * time.Second}
	where := fmt.Sprintf("datastore %s, %s/%s", src.Alias, src.Container, src.Prefix)
	a.record("model", true, "taking the model from %s into the node's cache", where)
	for {
		start := time.Now()
		f, err := datasync.Fetch(ctx, signer, cache, a.cfg.Team, datasync.Options{})
		if err == nil {
			path, perr := modelPath(in, f.Dir)
			if perr != nil {
				err = perr
			} else {
				if len(f.Evicted) > 0 {
					var n int64
					for _, e := range f.Evicted {
						n += e.Bytes
					}
					a.record("model", true, "the node's cache made room: %d models used least recently removed (%d bytes), the file system past %d%% full",
						len(f.Evicted), n, datasync.CacheHighPercent)
				}
				if f.Warm {
					a.record("model", true, "the model is in the node's cache already (%s): nothing copied", f.Digest[:12])
				} else {
					a.record("model", true, "the model copied into the node's cache (%s): %d objects, %d bytes in %v", f.Digest[:12], f.Objects, f.Bytes,
						time.Since(start).Round(time.Millisecond))
				}
				return path, f.Dir, nil
			}
		}
		if ctx.Err() != nil {
			return "", "", ctx.Err()
		}
		msg := fmt.Sprintf("the model from %s: %v", where, err)
		a.record("model", false, "%s; trying again", msg)
		a.update(func(st *agentapi.InferenceStatus) { st.Ready, st.Error = false, msg })
		if !backoff.Sleep(ctx, b.Next()) {
			return "", "", ctx.Err()
		}
	}
}

// modelPath is the runtime's model in a fetched directory: for llama.cpp
// its one GGUF file (at any depth), for the others the directory.
func modelPath(in cosmic.InferenceSpec, dir string) (string, error) {
	if in.Runtime != cosmic.RuntimeLlamaCPP {
		return dir, nil
	}
	var ggufs []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() && strings.HasSuffix(p, ".gguf") {
			ggufs = append(ggufs, p)
		}
		return nil
	})
	switch {
	case err != nil:
		return "", err
	case len(ggufs) != 1:
		return "", fmt.Errorf("the model's prefix holds %d GGUF files; the llama.cpp runtime wants one", len(ggufs))
	}
	return ggufs[0], nil
}
