package cli

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/ork/orkapi"
)

// defaultAgentKeysRefresh is how often a standalone app-node or agents'
// directory asks the ork for the agents' keys.
const defaultAgentKeysRefresh = 5 * time.Second

// agentKeys admits the in-VM agents of live jobs on a component that runs
// as its own process (app-node, wrk-directory; docs/architecture.md): the
// keys the ork lists in the jobs' status (cosmic.ReplicaStatus.AgentKeys,
// which the Kubernetes worker reports), for the replicas that hold GPUs,
// refreshed from the ork (listJobs, a read-only method). A key no longer
// listed is no longer admitted and its connections are revoked. This is
// what `cosmicac up` does in process through k8sworker.AgentOptions.OnAgents.
type agentKeys struct {
	ork  *orkapi.Client
	node *fabric.Node // revokes keys taken off
	log  *slog.Logger

	mu     sync.RWMutex
	keys   map[fabric.PublicKey]agentOwner
	failed bool // the last refresh failed (logged once)
}

type agentOwner struct {
	job     string
	replica int
}

// agentJobStates are the job states whose replicas may have a VM.
var agentJobStates = []cosmic.State{cosmic.StatePending, cosmic.StateStarting, cosmic.StateRunning,
	cosmic.StateDegraded, cosmic.StateRestarting, cosmic.StateUnknown}

// policy is base, then the listed agents' keys with access grant.
func (k *agentKeys) policy(base fabric.Policy, grant fabric.Access) fabric.Policy {
	return fabric.PolicyFunc(func(pk fabric.PublicKey) fabric.Access {
		if a := base.Access(pk); a != fabric.AccessNone {
			return a
		}
		k.mu.RLock()
		_, ok := k.keys[pk]
		k.mu.RUnlock()
		if ok {
			return grant
		}
		return fabric.AccessNone
	})
}

// verify is appnode.FabricShells.Verify: key is listed for the job's
// replica.
func (k *agentKeys) verify(jobID string, replica int, key fabric.PublicKey) bool {
	k.mu.RLock()
	defer k.mu.RUnlock()
	o, ok := k.keys[key]
	return ok && o == agentOwner{jobID, replica}
}

// refresh reads the keys from the ork.
func (k *agentKeys) refresh(ctx context.Context) error {
	const size = 1000
	next := map[fabric.PublicKey]agentOwner{}
	for page := 0; ; page++ {
		r, err := k.ork.ListJobs(ctx, orkapi.ListJobsParams{States: agentJobStates, Page: page, Size: size})
		if err != nil {
			return err
		}
		for _, j := range r.Jobs {
			for _, rs := range j.Status.Replicas {
				if !rs.State.HoldsGPUs() {
					continue
				}
				for _, s := range rs.AgentKeys {
					if pk, err := fabric.ParsePublicKey(s); err == nil {
						next[pk] = agentOwner{j.ID, rs.Index}
					}
				}
			}
		}
		if len(r.Jobs) < size || (page+1)*size >= r.Total {
			break
		}
	}
	var removed []fabric.PublicKey
	k.mu.Lock()
	for pk, o := range k.keys {
		if n, ok := next[pk]; !ok || n != o {
			removed = append(removed, pk)
		}
	}
	k.keys = next
	k.mu.Unlock()
	for _, pk := range removed {
		k.node.Revoke(pk)
	}
	return nil
}

// run refreshes the keys every interval until ctx ends.
func (k *agentKeys) run(ctx context.Context, every time.Duration) {
	if every <= 0 {
		every = defaultAgentKeysRefresh
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		rctx, cancel := context.WithTimeout(ctx, max(every, 5*time.Second))
		err := k.refresh(rctx)
		cancel()
		switch {
		case err != nil && ctx.Err() == nil && !k.failed:
			k.log.Warn("the agents' keys could not be read from the ork; keeping the last ones", "err", err)
			k.failed = true
		case err == nil && k.failed:
			k.log.Info("the agents' keys are read from the ork again")
			k.failed = false
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
