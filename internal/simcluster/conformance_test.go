package simcluster

import (
	"context"
	"testing"

	"github.com/cosmicac/cosmicac/internal/config"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/worker/workertest"
)

// TestConformance runs the worker conformance suite against the simulated
// rack: the same checks as the Kubernetes and QEMU workers'.
func TestConformance(t *testing.T) {
	workertest.Run(t, func(t *testing.T) *workertest.Rack {
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
	})
}
