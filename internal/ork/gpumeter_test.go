package ork_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/cosmicac/cosmicac/internal/config"
	"github.com/cosmicac/cosmicac/internal/ork"
	"github.com/cosmicac/cosmicac/internal/ork/orkapi"
	"github.com/cosmicac/cosmicac/internal/store"
)

// TestGPUMeter: the ork samples the GPUs each job holds every
// gpuMeterEvery into the usage store, as GPU-seconds of the job's team
// (no key, no model for a GPU Container Job): two GPUs for a minute are
// 120 GPU-seconds, to within one sample; a restarted ork goes on adding;
// a deleted job counts while its GPUs are held, until its worker says it
// is gone, then no more.
func TestGPUMeter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorker(t, "r1", 4)
		e := newEnvConfig(t, func(c *ork.Config) { c.GPUMeterEvery = config.Duration(10 * time.Second) }, w)
		start := time.Now()
		j := e.create(2)
		held := func() int64 {
			t.Helper()
			rows, err := e.st.ListUsage(e.ctx, store.UsageQuery{From: start.Add(-time.Hour), To: time.Now().Add(time.Hour), GroupBy: []store.UsageGroup{store.GroupJob, store.GroupTeam}})
			if err != nil {
				t.Fatal(err)
			}
			var s int64
			for _, r := range rows {
				if r.JobID == j.ID {
					if r.Team != "t" || r.Requests != 0 {
						t.Errorf("the job's usage row: %+v", r)
					}
					s += r.GPUSeconds
				}
			}
			return s
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		if got := held(); got < 100 || got > 140 {
			t.Fatalf("2 GPUs for a minute: %d GPU-seconds; want 120 to within a sample", got)
		}
		e.restart()
		time.Sleep(30 * time.Second)
		synctest.Wait()
		before := held()
		if before < 160 || before > 200 {
			t.Fatalf("after a restart and 30 s more: %d GPU-seconds; want about 180", before)
		}
		if _, err := e.o.DeleteJob(e.ctx, orkapi.DeleteJobParams{ID: j.ID, Force: true}); err != nil {
			t.Fatal(err)
		}
		e.push(w, w.gone(j.ID, 0)) // the worker says the replica is gone: its GPUs are free
		e.wantGone(j.ID)
		after := held()
		time.Sleep(time.Minute)
		synctest.Wait()
		if got := held(); got != after || after > before+40 {
			t.Errorf("a deleted job: %d GPU-seconds, then %d a minute later (%d before the delete)", after, got, before)
		}
	})
}
