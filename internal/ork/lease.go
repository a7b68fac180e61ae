package ork

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cosmicac/cosmicac/internal/config"
	"github.com/cosmicac/cosmicac/internal/store"
)

// LeaseName is the lease the orks sharing a database elect their leader
// by (docs/store.md).
const LeaseName = "ork"

// ErrLeaseLost: the ork could not renew its lease before the time it
// gives itself ran out, or a fenced write found another's epoch; it stops
// acting as the leader.
var ErrLeaseLost = errors.New("ork lease lost")

// LeaseConfig sets how the orks sharing a database elect their leader.
// A follower tries to take the lease every Renew; the leader renews it
// every Renew and steps down when TTL less Renew has passed since the
// start of its last successful renewal. So a follower leads within
// TTL + Renew of the leader's end (docs/store.md).
type LeaseConfig struct {
	TTL   config.Duration `json:"ttl"`
	Renew config.Duration `json:"renew"`
	// Holder names this ork in the lease; it must be unique among the
	// orks and the same across restarts of one (the CLI makes it from the
	// host name and the data dir). Two live processes given one name do
	// not both lead: each start has an instance of its own (Instance).
	Holder string `json:"holder,omitempty"`
	// Instance names this start of the ork in the lease (NewLease makes
	// a random one when empty); Succeeds, the start before it on the same
	// data dir, whose term this one takes over at once (ClaimInstance).
	Instance string `json:"-"`
	Succeeds string `json:"-"`
}

// DefaultLeaseConfig: a 10 s lease renewed every 3 s.
func DefaultLeaseConfig() LeaseConfig {
	return LeaseConfig{TTL: config.Duration(10 * time.Second), Renew: config.Duration(3 * time.Second)}
}

// DefaultHolder names an ork in the lease: its host and data dir, the same
// across its restarts (so that a restarted leader takes its lease back at
// once) and unique among orks that do not share a data dir (which its lock
// forbids).
func DefaultHolder(dataDir string) string {
	host, _ := os.Hostname()
	if abs, err := filepath.Abs(dataDir); err == nil {
		dataDir = abs
	}
	return host + ":" + dataDir
}

// instanceFile, in an ork's data dir, names the instance of the ork that
// last started there (ClaimInstance).
const instanceFile = "ork.instance"

// ClaimInstance makes a new instance name for an ork starting on dataDir
// and returns it with the instance of the ork that started there before
// (empty for the first). The caller holds the data dir's lock, so that
// ork is gone: its term may be taken over at once (LeaseConfig.Succeeds).
func ClaimInstance(dataDir string) (instance, succeeds string, err error) {
	path := filepath.Join(dataDir, instanceFile)
	if b, err := os.ReadFile(path); err == nil {
		succeeds = strings.TrimSpace(string(b))
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", "", fmt.Errorf("read the ork's last instance: %w", err)
	}
	instance = newInstance()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(instance+"\n"), 0o600); err != nil {
		return "", "", fmt.Errorf("record the ork's instance: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", "", fmt.Errorf("record the ork's instance: %w", err)
	}
	return instance, succeeds, nil
}

// newInstance is a random instance name.
func newInstance() string {
	return rand.Text()[:16]
}

// Validate reports every problem of the config.
func (c LeaseConfig) Validate() error {
	var errs []error
	if c.TTL <= 0 {
		errs = append(errs, errors.New("lease ttl must be positive"))
	}
	if c.Renew <= 0 || c.Renew*2 > c.TTL {
		errs = append(errs, fmt.Errorf("lease renew interval %s must be positive and at most half the ttl %s", c.Renew, c.TTL))
	}
	if c.Holder == "" {
		errs = append(errs, errors.New("lease holder is required"))
	}
	return errors.Join(errs...)
}

// LeaseStore is what the lease needs of the database.
type LeaseStore interface {
	store.Leases
}

// Lease elects this ork leader among those sharing the database, and
// keeps it so.
type Lease struct {
	cfg LeaseConfig
	st  LeaseStore
	log *slog.Logger

	mu        sync.Mutex
	term      store.Lease // the term held; Epoch 0 while following
	renewedAt time.Time   // when the last successful renewal (or acquisition) started
	lost      chan struct{}
	lostOnce  sync.Once

	updates  prometheus.Histogram
	failures prometheus.Counter
	// conflict is 1 while another live process holds the lease under
	// this ork's holder name (store.ErrHolderInUse).
	conflict prometheus.Gauge
	isolated prometheus.Gauge // Lead's watchIsolation
}

// NewLease makes the lease of an ork over st.
func NewLease(cfg LeaseConfig, st LeaseStore, log *slog.Logger) (*Lease, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("ork lease config: %w", err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.Instance == "" {
		cfg.Instance = newInstance()
	}
	return &Lease{cfg: cfg, st: st, log: log, lost: make(chan struct{}),
		conflict: prometheus.NewGauge(prometheus.GaugeOpts{Name: "cosmicac_ork_lease_holder_conflict",
			Help: "1 while another live process holds the ork lease under this ork's holder name (a holder name given twice); this ork does not lead meanwhile."}),
		isolated: prometheus.NewGauge(prometheus.GaugeOpts{Name: "cosmicac_ork_isolated",
			Help: "1 while this leader, having reached peers in its term, reaches none (no fabric connection, no rack's worker answering); it yields the lease after the ork's isolationTimeout."}),
		updates: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "cosmicac_ork_store_update_seconds",
			Help: "How long the leading ork's fenced store transactions take, retries included.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{Name: "cosmicac_ork_store_update_errors_total",
			Help: "Fenced store transactions of the leading ork that failed (the function's own errors included)."}),
	}, nil
}

// Acquire waits until this ork holds the lease, trying every Renew, and
// returns the term. Only ctx ending stops it.
func (l *Lease) Acquire(ctx context.Context) (store.Lease, error) {
	tick := time.NewTicker(l.cfg.Renew.D())
	defer tick.Stop()
	following := ""
	for {
		start := time.Now()
		term, err := l.st.AcquireLease(ctx, LeaseName, store.Holder{Name: l.cfg.Holder, Instance: l.cfg.Instance, Succeeds: l.cfg.Succeeds}, l.cfg.TTL.D())
		inUse := errors.Is(err, store.ErrHolderInUse)
		if inUse {
			l.conflict.Set(1)
		} else {
			l.conflict.Set(0)
		}
		if err == nil {
			l.mu.Lock()
			l.term, l.renewedAt = term, start
			l.mu.Unlock()
			l.log.Info("leading", "epoch", term.Epoch, "holder", term.Holder, "instance", term.Instance)
			return term, nil
		}
		if ctx.Err() != nil {
			return store.Lease{}, ctx.Err()
		}
		// Logged once per holder or failure, not every try (the message
		// names the expiry, which a renewal moves).
		if msg, _, _ := strings.Cut(err.Error(), " until "); msg != following {
			following = msg
			switch {
			case inUse:
				l.log.Error("not leading: another live process leads under this ork's holder name; give each ork a --lease-holder of its own", "holder", l.cfg.Holder, "err", err)
			case errors.Is(err, store.ErrNotLeader):
				l.log.Info("following", "why", err.Error())
			default:
				l.log.Warn("acquire lease", "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return store.Lease{}, ctx.Err()
		case <-tick.C:
		}
	}
}

// Hold renews the term Acquire returned every Renew until ctx ends (nil)
// or it cannot renew within TTL less Renew of the last renewal's start, or
// another took the lease, or a fenced write found a newer epoch
// (ErrLeaseLost). The caller stops acting as the leader when it returns.
func (l *Lease) Hold(ctx context.Context) error {
	err := l.hold(ctx)
	if errors.Is(err, ErrLeaseLost) {
		l.mu.Lock()
		l.term = store.Lease{}
		l.mu.Unlock()
	}
	return err
}

func (l *Lease) hold(ctx context.Context) error {
	tick := time.NewTicker(l.cfg.Renew.D())
	defer tick.Stop()
	for {
		l.mu.Lock()
		term, deadline := l.term, l.renewedAt.Add(l.cfg.TTL.D()-l.cfg.Renew.D())
		l.mu.Unlock()
		if time.Until(deadline) <= 0 {
			return fmt.Errorf("no renewal since %s: %w", deadline.Add(l.cfg.Renew.D()-l.cfg.TTL.D()).Format(time.RFC3339Nano), ErrLeaseLost)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-l.lost:
			return fmt.Errorf("a fenced write found a newer epoch than %d: %w", term.Epoch, ErrLeaseLost)
		case <-time.After(time.Until(deadline)):
			continue // checked above
		case <-tick.C:
		}
		start := time.Now()
		rctx, cancel := context.WithDeadline(ctx, deadline)
		renewed, err := l.st.RenewLease(rctx, LeaseName, term.Holder, term.Epoch, l.cfg.TTL.D())
		cancel()
		switch {
		case err == nil:
			l.mu.Lock()
			l.term, l.renewedAt = renewed, start
			l.mu.Unlock()
		case errors.Is(err, store.ErrNotLeader):
			return fmt.Errorf("%w: %w", ErrLeaseLost, err)
		case ctx.Err() != nil:
			return nil
		default:
			l.log.Warn("renew lease", "epoch", term.Epoch, "err", err)
		}
	}
}

// Release ends the term at once, so that a follower need not wait for the
// TTL; for a clean shutdown, after the ork stopped writing.
func (l *Lease) Release(ctx context.Context) error {
	l.mu.Lock()
	term := l.term
	l.term = store.Lease{}
	l.mu.Unlock()
	if term.Epoch == 0 {
		return nil
	}
	return l.st.ReleaseLease(ctx, LeaseName, term.Holder, term.Epoch)
}

// Fenced returns st with every Update fenced by the term Acquire returned:
// each transaction begins with store.Tx.CheckLease, so that none commits
// once another ork took the lease; one refused so ends the lease (Hold
// returns).
func (l *Lease) Fenced(st Store) Store {
	l.mu.Lock()
	epoch := l.term.Epoch
	l.mu.Unlock()
	return fencedStore{Store: st, l: l, epoch: epoch}
}

type fencedStore struct {
	Store
	l     *Lease
	epoch int64
}

func (s fencedStore) Update(ctx context.Context, fn func(tx store.Tx) error) error {
	start := time.Now()
	err := s.Store.Update(ctx, func(tx store.Tx) error {
		if err := tx.CheckLease(ctx, LeaseName, s.epoch); err != nil {
			return err
		}
		return fn(tx)
	})
	s.l.updates.Observe(time.Since(start).Seconds())
	if err != nil {
		s.l.failures.Inc()
	}
	if errors.Is(err, store.ErrNotLeader) {
		s.l.lostOnce.Do(func() { close(s.l.lost) })
	}
	return err
}

// RecordUsage passes GPU metering on to the store, when it keeps usage.
// It is not fenced: each batch is named by its time slot, so what a
// deposed ork records of a slot counts once with the new leader's.
func (s fencedStore) RecordUsage(ctx context.Context, batch string, rows []store.UsageRow) error {
	if u, ok := s.Store.(usageRecorder); ok {
		return u.RecordUsage(ctx, batch, rows)
	}
	return nil
}

var (
	descLeader  = prometheus.NewDesc("cosmicac_ork_leader", "1 while this ork holds the lease and leads placement, 0 while it follows.", nil, nil)
	descEpoch   = prometheus.NewDesc("cosmicac_ork_lease_epoch", "The epoch of the lease term this ork holds (0 while following).", nil, nil)
	descRenewed = prometheus.NewDesc("cosmicac_ork_lease_last_renewal_timestamp_seconds", "When the last successful renewal (or acquisition) of the lease began, in Unix seconds (0 while following).", nil, nil)
)

// Collector exports the lease: leading or not, the epoch, the last
// renewal, and the fenced store transactions' latency and failures.
func (l *Lease) Collector() prometheus.Collector { return leaseCollector{l} }

type leaseCollector struct{ l *Lease }

func (c leaseCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descLeader
	ch <- descEpoch
	ch <- descRenewed
	c.l.conflict.Describe(ch)
	c.l.isolated.Describe(ch)
	c.l.updates.Describe(ch)
	c.l.failures.Describe(ch)
}

func (c leaseCollector) Collect(ch chan<- prometheus.Metric) {
	l := c.l
	l.mu.Lock()
	term, renewed := l.term, l.renewedAt
	l.mu.Unlock()
	leader, at := 0.0, 0.0
	if term.Epoch != 0 {
		leader, at = 1, float64(renewed.UnixNano())/1e9
	}
	ch <- prometheus.MustNewConstMetric(descLeader, prometheus.GaugeValue, leader)
	ch <- prometheus.MustNewConstMetric(descEpoch, prometheus.GaugeValue, float64(term.Epoch))
	ch <- prometheus.MustNewConstMetric(descRenewed, prometheus.GaugeValue, at)
	l.conflict.Collect(ch)
	l.isolated.Collect(ch)
	l.updates.Collect(ch)
	l.failures.Collect(ch)
}
