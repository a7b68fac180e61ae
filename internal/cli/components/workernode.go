package components

import (
	"context"
	"errors"
	"log/slog"

	"golang.org/x/sync/errgroup"

	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/joblog"
	"github.com/cosmicac/cosmicac/internal/metrics"
	"github.com/cosmicac/cosmicac/internal/monitor"
	"github.com/cosmicac/cosmicac/internal/trust"
	"github.com/cosmicac/cosmicac/internal/worker"
)

// workerNode is what a standalone rack worker (wrk-server-qemu,
// wrk-server-k8s-nvidia) runs on, the same for every rack kind: its fabric
// node, confined to its rack, which knows the ork's address (and the
// monitor's, when given); its keyring (the ork, the monitor, the
// operators, and the agents the worker binds); its reporter to the ork;
// where its job records go (the monitor, else nowhere); its metrics.
// internal/platform's startWorkerNode is `up`'s.
type workerNode struct {
	node     *fabric.Node
	ring     *trust.Keyring
	reporter worker.Reporter
	logs     joblog.Sink
	// monitor is the monitor's key and addresses ("--monitor"), for the
	// agents' peers; zero without one.
	monitor      fabric.PublicKey
	monitorAddrs []string

	fwd          *joblog.Forwarder
	serveMetrics func(context.Context) error
	close        func()
}

// workerNode starts the node of the component (the worker of rack) from
// the --ork and --monitor flags (ork, mon: KEY@HOST:PORT; mon may be "").
func (c *componentFlags) workerNode(component, rack, ork, mon string, log *slog.Logger) (*workerNode, error) {
	var p peers
	orkKey, err := p.one("ork", trust.Ork, ork)
	if err != nil {
		return nil, err
	}
	wn := &workerNode{logs: joblog.Discard}
	if mon != "" {
		if wn.monitor, err = p.one("monitor", trust.Monitor, mon); err != nil {
			return nil, err
		}
		wn.monitorAddrs = p.addrs[wn.monitor]
	}
	n, ring, err := c.dialNode(component, p, log, trust.OnRack(rack))
	if err != nil {
		return nil, err
	}
	wn.node, wn.ring = n, ring
	wn.close = func() {
		n.Close()
		c.unlock() // after the node: the data dir is free once all is closed
	}
	reg := metrics.NewRegistry()
	if wn.serveMetrics, err = c.listenMetrics(reg); err != nil {
		wn.close()
		return nil, err
	}
	if mon != "" {
		wn.fwd = joblog.NewForwarder(n, wn.monitor, 10000)
		reg.MustRegister(monitor.ForwarderCollector(component, wn.fwd))
		wn.logs = wn.fwd
	}
	wn.reporter = worker.NewReporterClient(n, orkKey)
	return wn, nil
}

// run serves w's methods and runs it, the log forwarder, the metrics and
// more, until ctx ends or one of them fails; it returns once all have
// stopped, and closes the node.
func (wn *workerNode) run(ctx context.Context, w interface {
	worker.Worker
	Run(context.Context) error
}, more ...func(context.Context) error) error {
	defer wn.close()
	worker.Serve(wn.node, w)
	g, ctx := errgroup.WithContext(ctx)
	if wn.fwd != nil {
		g.Go(func() error { return wn.fwd.Run(ctx) })
	}
	g.Go(func() error { return wn.serveMetrics(ctx) })
	g.Go(func() error { return w.Run(ctx) })
	for _, f := range more {
		g.Go(func() error { return f(ctx) })
	}
	err := g.Wait()
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}
