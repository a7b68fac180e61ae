package cosmictest

import (
	"errors"
	"fmt"
	"github.com/cosmicac/cosmicac/internal/client"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/store"
)

// checkReservations asserts the placement invariants on the store: no GPU
// claimed twice, no node above its capacity, and GPUs held only by jobs
// whose state holds GPUs.
func checkReservations(t *testing.T, e *Env, when string) {
	t.Helper()
	// One transaction, so that the reservations and the jobs are read as of
	// one moment.
	var (
		res  []cosmic.Reservation
		jobs = map[string]cosmic.Job{}
	)
	err := e.P.Store.Update(e.Ctx, func(tx store.Tx) error {
		var err error
		if res, err = tx.Reservations(e.Ctx); err != nil {
			return err
		}
		for _, r := range res {
			if _, ok := jobs[r.JobID]; ok {
				continue
			}
			j, err := tx.GetJob(e.Ctx, r.JobID)
			if err != nil {
				return fmt.Errorf("reservation of missing job %s: %w", r.JobID, err)
			}
			jobs[r.JobID] = j
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%s: %v", when, err)
	}
	seen := map[cosmic.GPURef]string{}
	perNode := map[string]int{}
	for _, r := range res {
		for _, g := range r.GPUs() {
			if other, dup := seen[g]; dup {
				t.Fatalf("%s: GPU %v claimed by %s and %s", when, g, other, r.JobID)
			}
			seen[g] = r.JobID
			if g.Index < 0 || g.Index >= e.Config.Sim.GPUsPerNode {
				t.Fatalf("%s: GPU index %v beyond the node", when, g)
			}
			perNode[g.Node]++
		}
	}
	for n, c := range perNode {
		if c > e.Config.Sim.GPUsPerNode {
			t.Fatalf("%s: node %s has %d GPUs claimed, capacity %d", when, n, c, e.Config.Sim.GPUsPerNode)
		}
	}
	for id, j := range jobs {
		if !j.Status.State.HoldsGPUs() {
			t.Fatalf("%s: job %s is %s but holds GPUs", when, id, j.Status.State)
		}
	}
}

// TestRandomOperationsKeepInvariants runs seeded random sequences of create,
// delete, restart and kill, with restarts of the whole platform (the ork
// among it), checking after every step that no GPU is claimed twice and no
// node is over capacity.
func TestRandomOperationsKeepInvariants(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 42))
			e := NewEnv(t)
			var ids []string
			for step := range 40 {
				op := rng.IntN(10)
				switch {
				case op < 4 || len(ids) == 0:
					var spec cosmic.Spec
					if rng.IntN(4) == 0 {
						spec = VLLM(fmt.Sprint("v", step), 1+rng.IntN(2), []int{4, 8, 16}[rng.IntN(3)])
					} else {
						spec = Container(fmt.Sprint("c", step), 1+rng.IntN(8))
					}
					j, err := e.Client.CreateJob(e.Ctx, spec)
					if fes := fieldErrors(err); len(fes) == 1 && fes[0].Reason != "" {
						continue // it could never fit (2 × 16 GPUs): refused, nothing stored
					}
					if err != nil {
						t.Fatalf("create job: %v", err)
					}
					ids = append(ids, j.ID)
				case op < 6:
					i := rng.IntN(len(ids))
					if _, err := e.Client.DeleteJob(e.Ctx, ids[i], rng.IntN(2) == 0); err == nil {
						ids = append(ids[:i], ids[i+1:]...)
					}
				case op < 7:
					e.Client.RestartJob(e.Ctx, ids[rng.IntN(len(ids))])
				case op < 9:
					e.Client.KillJob(e.Ctx, ids[rng.IntN(len(ids))])
				default:
					e.Restart()
				}
				time.Sleep(time.Duration(rng.IntN(20)) * time.Millisecond)
				checkReservations(t, e, fmt.Sprintf("step %d (op %d)", step, op))
			}
		})
	}
}

// fieldErrors are the invalid fields of an API error, or nil.
func fieldErrors(err error) []cosmic.FieldError {
	var ae *client.APIError
	if !errors.As(err, &ae) {
		return nil
	}
	return ae.FieldErrors()
}
