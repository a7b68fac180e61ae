package simcluster

import (
	"cmp"
	"context"
	"maps"
	"slices"
	"time"

	"github.com/cosmicac/cosmicac/internal/worker"
)

// reportLoop delivers undelivered changes to the reporter. Changes are
// kept per replica (the latest report of each) until a Report carrying them
// succeeds; a failure is retried with exponential backoff. The lifecycle
// never waits for it.
func (c *Cluster) reportLoop(ctx context.Context) {
	backoff := c.retryMin
	t := time.NewTimer(time.Hour)
	t.Stop()
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.push:
		}
		for {
			rep, sent, ok := c.pending(time.Now())
			if !ok {
				break
			}
			rctx, cancel := context.WithTimeout(ctx, reportTimeout)
			err := c.rep.Report(rctx, rep)
			cancel()
			if err == nil {
				c.delivered(sent)
				backoff = c.retryMin
				continue
			}
			if ctx.Err() != nil {
				return
			}
			c.log.Warn("report failed", "err", err, "retry_in", backoff)
			t.Reset(backoff)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			backoff = min(2*backoff, c.retryMax)
		}
	}
}

// sentVersions is what a Report carried, to clear on delivery.
type sentVersions struct {
	replicas map[replicaKey]uint64
	capacity uint64
}

// pending builds a Report of every undelivered change; ok is false when
// there is none or the worker plays unreachable.
func (c *Cluster) pending(now time.Time) (worker.Report, sentVersions, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	sent := sentVersions{replicas: make(map[replicaKey]uint64, len(c.dirty)), capacity: c.capDirty}
	if (len(c.dirty) == 0 && c.capDirty == 0) || c.availableLocked(now) != nil {
		return worker.Report{}, sent, false
	}
	rep := worker.Report{Rack: c.cfg.Rack}
	if c.capDirty != 0 {
		capa := c.capacityLocked(now)
		rep.Capacity = &capa
	}
	keys := slices.SortedFunc(maps.Keys(c.dirty), func(a, b replicaKey) int {
		return cmp.Or(cmp.Compare(a.job, b.job), cmp.Compare(a.replica, b.replica))
	})
	for _, k := range keys {
		d := c.dirty[k]
		sent.replicas[k] = d.version
		if n := len(rep.Jobs); n == 0 || rep.Jobs[n-1].JobID != k.job {
			rep.Jobs = append(rep.Jobs, worker.JobReport{JobID: k.job})
		}
		jr := &rep.Jobs[len(rep.Jobs)-1]
		jr.Replicas = append(jr.Replicas, d.rep)
	}
	return rep, sent, true
}

// delivered clears the changes a Report carried, unless newer ones came.
func (c *Cluster) delivered(sent sentVersions) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, v := range sent.replicas {
		if d, ok := c.dirty[k]; ok && d.version == v {
			delete(c.dirty, k)
		}
	}
	if c.capDirty == sent.capacity {
		c.capDirty = 0
	}
}
