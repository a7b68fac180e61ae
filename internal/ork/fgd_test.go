package ork_test

import (
	"strings"
	"testing"
	"testing/synctest"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/ork/orkapi"
)

// TestFGDKeepsRoomForQueuedJobs: the jobs the ork queues are in the mix
// its fgd placement weighs, before and after a restart. Rack a has a node
// of 8 GPUs, rack b one of 6. A 6-GPU job waits on its team's quota; a
// 1-GPU job of another team goes to a (where 7 stay free, room for the
// 6), not b (where the 6 would not fit again), as it would with the queue
// not counted; so does a second one after the snapshot is rebuilt (rack b
// registers again) and a third after a restart.
func TestFGDKeepsRoomForQueuedJobs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newWorker(t, "b", 6)
		e := newEnv(t, newWorker(t, "a", 8), b)
		e.setQuota("q", "H100", 1)
		big := e.createAs("q", 6)
		e.wantQuotaWait(big.ID, "team q uses 0 of 1 H100 GPUs in eu; this job needs 6, more than the quota: raise it for the job to run")
		for i, then := range []string{"", "rebuild", "restart"} {
			switch then {
			case "rebuild":
				if _, err := e.o.RegisterRack(e.ctx, orkapi.RegisterRackParams{Rack: cosmic.Rack{ID: "b", Location: "eu", GPUModel: "H100", WorkerKey: b.key.String()}}); err != nil {
					t.Fatal(err)
				}
				synctest.Wait()
			case "restart":
				e.restart()
			}
			one := e.createAs("t", 1)
			e.heartbeats(1)
			held := e.held(one.ID)
			if len(held) != 1 || !strings.HasPrefix(held[0], "a/") {
				t.Fatalf("1-GPU job %d (%q before it) holds %v, want a GPU of rack a", i, then, held)
			}
		}
		e.checkBooks()
	})
}
