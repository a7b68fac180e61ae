package simcluster

import (
	"context"

	"github.com/cosmicac/cosmicac/internal/worker"
)

// reportLoop delivers undelivered changes to the reporter (the latest
// report of each replica, and the capacity) until a Report carrying them
// succeeds; a failure is retried with exponential backoff, and nothing is
// sent while the worker plays unreachable. The lifecycle never waits for
// it.
func (c *Cluster) reportLoop(ctx context.Context) {
	c.reports.Deliver(ctx, worker.Delivery{
		Rack:     c.cfg.Rack,
		Reporter: c.rep,
		Log:      c.log,
		RetryMin: c.retryMin,
		RetryMax: c.retryMax,
		Ready:    func() bool { return c.available() == nil },
		Capacity: c.Capacity,
	})
}
