package ork

// The ork as it runs in a process, standalone or in `cosmicac up`: elected
// among the orks sharing its database, fenced by its term.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/cosmicac/cosmicac/internal/fabric"
)

// LeaderDeps is what Lead needs besides the ork's Config.
type LeaderDeps struct {
	// Deps are the ork's own. Lead fences Deps.Store by the lease's term,
	// and dials the workers from Node unless Deps.Dial is set.
	Deps
	// Lease elects this ork among those sharing the database (required).
	Lease *Lease
	// Node makes (or gives) the fabric node the ork serves on, once it
	// leads: a follower does not listen (required). Made with
	// fabric.Config.Starting, it answers "starting" until the ork has
	// loaded its state and serves (Lead opens it).
	Node func() (*fabric.Node, error)
	// Ready, when set, runs once the ork serves and has started, before it
	// runs: what must be in place before it acts (`up` registers its
	// rack; a standalone ork prints its node and exports its metrics). Its
	// error ends Lead.
	Ready func(ctx context.Context, o *Ork, n *fabric.Node) error
	// Lost, when set, is told at once when the lease is lost, before Lead
	// waits for what is in flight to end (its writes are fenced): a
	// process fails stop there if that takes too long (FailStop).
	Lost func(error)
}

// Lead waits for the lease, then runs the ork, fenced by its term, until
// ctx ends (it releases the lease; nil) or the lease is lost (an error:
// the node is closed at once, so that no call is served and nothing is
// sent, and Lead returns once the ork has stopped), or, with
// Config.IsolationTimeout, the ork yields it, cut off from its peers (an
// error wrapping ErrIsolated: the lease is released, the node closed). It returns nil, without
// leading, if ctx ends while it follows.
func Lead(ctx context.Context, cfg Config, d LeaderDeps) error {
	if d.Lease == nil || d.Node == nil || d.Store == nil {
		return errors.New("ork: Lead needs a Lease, a Node and a Store")
	}
	if _, err := d.Lease.Acquire(ctx); err != nil {
		return nil // ctx ended while following
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := d.Lease.Release(rctx); err != nil {
			d.Lease.log.Warn("release lease", "err", err)
		}
	}()
	n, err := d.Node()
	if err != nil {
		return err
	}
	deps := d.Deps
	deps.Store = d.Lease.Fenced(d.Store)
	if deps.Dial == nil {
		deps.Dial = FabricDialer(n)
	}
	o, err := New(cfg, deps)
	if err != nil {
		return err
	}
	// Its state is loaded before it serves: a call answered before would
	// see none (the peers call as soon as the node is up).
	if err := o.Start(ctx); err != nil {
		return err
	}
	o.Serve(n)
	n.Open() // a node made fabric.Config.Starting answered "starting" until now
	if d.Ready != nil {
		if err := d.Ready(ctx, o, n); err != nil {
			return err
		}
	}
	// stepDown takes the ork off the fabric at once: the listeners and
	// connections close first, so no call is served and nothing is sent;
	// Close then waits for the calls in flight (their writes are fenced).
	stepDown := func(err error) error {
		err = fmt.Errorf("stepping down: %w", err)
		go n.Close()
		if d.Lost != nil {
			d.Lost(err)
		}
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return o.Run(gctx) })
	if limit := cfg.IsolationTimeout.D(); limit > 0 {
		g.Go(func() error {
			err := watchIsolation(gctx, func() bool { return o.reachesPeer(n) }, limit, d.Lease.isolated, d.Lease.log)
			if err == nil {
				return nil
			}
			// Released at once, the lease goes to a follower within its
			// Renew, not at the end of the TTL.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			if rerr := d.Lease.Release(rctx); rerr != nil {
				d.Lease.log.Warn("release lease", "err", rerr)
			}
			cancel()
			return stepDown(err)
		})
	}
	g.Go(func() error {
		if err := d.Lease.Hold(gctx); err != nil {
			return stepDown(err)
		}
		return nil
	})
	return g.Wait()
}
