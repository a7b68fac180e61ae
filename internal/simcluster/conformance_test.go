package simcluster

import (
	"context"
	"testing"

	"github.com/cosmicac/cosmicac/internal/config"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/worker/workertest"
)

// TestConformance runs the worker conformance suite against the simulated
// rack: the same checks as the Kubernetes and QEMU workers', each on its
// own rack, and chained on one (as the QEMU worker runs them).
func TestConformance(t *testing.T) {
	for _, mode := range []struct {
		name string
		mode workertest.Mode
	}{{"separate", workertest.Separate}, {"chained", workertest.Chained}} {
		t.Run(mode.name, func(t *testing.T) {
			jobs := 0
			workertest.Run(t, func(t *testing.T) *workertest.Rack {
				r := simRack(t)
				job := r.Job
				r.Job = func() cosmic.Job { jobs++; return job() }
				return r
			}, mode.mode)
			// Chained, the checks take over one replica: one job, one boot
			// to begin with, for all of them.
			if mode.mode == workertest.Chained && jobs != 1 && !t.Failed() {
				t.Errorf("the chained checks made %d jobs, want 1", jobs)
			}
		})
	}
}

// simRack is a fresh simulated rack for the conformance suite.
func simRack(t *testing.T) *workertest.Rack {
	cfg := DefaultConfig()
	cfg.Step = config.Duration(step)
	rep := &workertest.Recorder{}
	c := mustNew(t, cfg, Deps{Reporter: rep})
	c.retryMin, c.retryMax = step, 4*step
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	})
	next := 0
	return &workertest.Rack{
		Worker:  c,
		Reports: rep,
		Job:     func() cosmic.Job { return testJob(cosmic.NewJobID()) },
		Place: func(j cosmic.Job, replica int) cosmic.Reservation {
			next++ // one GPU each, never the same
			return resv(j.ID, replica, on(next/cfg.GPUsPerNode%cfg.Nodes, next%cfg.GPUsPerNode))
		},
		RootDisk: c.RootDisk,
	}
}
