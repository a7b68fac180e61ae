package simcluster

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/worker"
)

// TestNoGPUHeldTwice drives random operations, reservations that overlap
// included, and checks after each that no GPU is held twice or beyond the
// hardware.
func TestNoGPUHeldTwice(t *testing.T) {
	for seed := range uint64(5) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rng := rand.New(rand.NewPCG(seed, 42))
				e := start(t)
				ctx := context.Background()
				ids := []string{jobA, jobB, jobC}
				for range 300 {
					id := ids[rng.IntN(len(ids))]
					replica := rng.IntN(2)
					switch rng.IntN(8) {
					case 0, 1, 2:
						node, first := rng.IntN(2), rng.IntN(9)
						n := 1 + rng.IntN(4)
						res := resv(id, replica, on(node, span(first, first+n-1)...))
						_ = e.c.Apply(ctx, worker.ApplyParams{Job: testJob(id), Reservations: []cosmic.Reservation{res}})
					case 3:
						_ = e.c.Stop(ctx, worker.ReplicaRef{JobID: id, Replica: replica})
					case 4:
						_ = e.c.Restart(ctx, worker.ReplicaRef{JobID: id, Replica: worker.AllReplicas})
					case 5:
						_ = e.c.Delete(ctx, worker.DeleteParams{JobID: id, Replica: replica, Force: rng.IntN(2) == 0})
					case 6:
						_, _ = e.c.Crash(id, replica)
					case 7:
						node := fmt.Sprintf("sim-us-1-node-%d", rng.IntN(2))
						if rng.IntN(2) == 0 {
							_, _ = e.c.LoseNode(node)
						} else {
							_, _ = e.c.RestoreNode(node)
						}
					}
					time.Sleep(time.Duration(rng.IntN(3)) * step)
					assertNoDoubleBooking(t, e.c)
				}
			})
		})
	}
}
