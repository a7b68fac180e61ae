package ork_test

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cosmicac/cosmicac/internal/config"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/ork"
	"github.com/cosmicac/cosmicac/internal/ork/orkapi"
	"github.com/cosmicac/cosmicac/internal/store"
	"github.com/cosmicac/cosmicac/internal/store/sqlite"
	"github.com/cosmicac/cosmicac/internal/waittest"
	"github.com/cosmicac/cosmicac/internal/worker"
)

func leaseOn(t *testing.T, st ork.LeaseStore, holder string) *ork.Lease {
	t.Helper()
	l, err := ork.NewLease(ork.LeaseConfig{TTL: config.Duration(400 * time.Millisecond), Renew: config.Duration(50 * time.Millisecond), Holder: holder}, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func openSQLite(t *testing.T, path string) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// TestLeaseElectsOne: of two orks, one leads; the other follows until the
// leader releases the lease, then leads with the next epoch; the deposed
// leader's fenced writes are refused, which ends its Hold.
func TestLeaseElectsOne(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		st := openSQLite(t, filepath.Join(t.TempDir(), "ork.db"))
		a, b := leaseOn(t, st, "a"), leaseOn(t, st, "b")
		ta, err := a.Acquire(ctx)
		if err != nil || ta.Epoch != 1 {
			t.Fatalf("a.Acquire = %+v, %v", ta, err)
		}
		wantGauges(t, a, 1, 1)
		wantGauges(t, b, 0, 0)
		fencedA := a.Fenced(st)
		holdCtx, stopHold := context.WithCancel(ctx)
		held := make(chan error, 1)
		go func() { held <- a.Hold(holdCtx) }()
		got := make(chan store.Lease, 1)
		go func() {
			tb, err := b.Acquire(ctx)
			if err != nil {
				t.Error(err)
			}
			got <- tb
		}()
		// a renews well past its TTL while b waits (fake time: the bubble
		// runs until every goroutine waits on it).
		time.Sleep(time.Second)
		synctest.Wait()
		select {
		case tb := <-got:
			t.Fatalf("b acquired %+v while a held the lease", tb)
		default:
		}
		if err := fencedA.Update(ctx, func(store.Tx) error { return nil }); err != nil {
			t.Fatalf("a's fenced write while leading = %v", err)
		}
		stopHold()
		if err := <-held; err != nil {
			t.Fatalf("a.Hold after cancel = %v", err)
		}
		if err := a.Release(ctx); err != nil {
			t.Fatal(err)
		}
		tb := <-got
		if tb.Epoch != 2 || tb.Holder != "b" {
			t.Fatalf("b's term = %+v; want epoch 2", tb)
		}
		wantGauges(t, a, 0, 0)
		wantGauges(t, b, 1, 2)
		if err := fencedA.Update(ctx, func(store.Tx) error { return nil }); !errors.Is(err, store.ErrNotLeader) {
			t.Fatalf("a's fenced write after b took over = %v; want ErrNotLeader", err)
		}
		// The refusal ends a Hold of the deposed term at once.
		if err := a.Hold(ctx); !errors.Is(err, ork.ErrLeaseLost) {
			t.Fatalf("a.Hold after a refused fenced write = %v; want ErrLeaseLost", err)
		}
	})
}

// TestOneHolderNameOneLeader (issue 42): two live orks given one holder
// name do not both lead. The second is refused while the first renews,
// logs why at error level and sets cosmicac_ork_lease_holder_conflict; a
// restart of the first on its data dir (ClaimInstance: the lock proves
// the instance before it gone) takes the term over at once, with a new
// epoch, and the first's term ends.
func TestOneHolderNameOneLeader(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		st := openSQLite(t, filepath.Join(t.TempDir(), "ork.db"))
		dirA, dirB := t.TempDir(), t.TempDir()
		start := func(dir string, log *slog.Logger) *ork.Lease {
			t.Helper()
			cfg := ork.LeaseConfig{TTL: config.Duration(400 * time.Millisecond), Renew: config.Duration(50 * time.Millisecond), Holder: "copied-config"}
			var err error
			if cfg.Instance, cfg.Succeeds, err = ork.ClaimInstance(dir); err != nil {
				t.Fatal(err)
			}
			l, err := ork.NewLease(cfg, st, log)
			if err != nil {
				t.Fatal(err)
			}
			return l
		}
		a := start(dirA, nil)
		ta, err := a.Acquire(ctx)
		if err != nil || ta.Epoch != 1 {
			t.Fatalf("a.Acquire = %+v, %v", ta, err)
		}
		held := make(chan error, 1)
		go func() { held <- a.Hold(ctx) }()

		var logs lockedBuffer
		b := start(dirB, slog.New(slog.NewTextHandler(&logs, nil)))
		bctx, stopB := context.WithCancel(ctx)
		got := make(chan store.Lease, 1)
		go func() {
			tb, _ := b.Acquire(bctx)
			got <- tb
		}()
		time.Sleep(2 * time.Second) // five TTLs of a renewing
		synctest.Wait()
		select {
		case tb := <-got:
			t.Fatalf("b, a second process under a's holder name, acquired %+v while a led", tb)
		default:
		}
		if g := gauges(t, b); g["cosmicac_ork_lease_holder_conflict"] != 1 || g["cosmicac_ork_leader"] != 0 {
			t.Errorf("b's gauges = %v; want a holder conflict, not leading", g)
		}
		if g := gauges(t, a); g["cosmicac_ork_lease_holder_conflict"] != 0 {
			t.Errorf("a's gauges = %v; want no conflict", g)
		}
		if !strings.Contains(logs.String(), "level=ERROR") || !strings.Contains(logs.String(), "another live process leads under this ork's holder name") {
			t.Errorf("b's log says nothing of the conflict:\n%s", logs.String())
		}
		stopB()
		<-got

		// a's process "restarts" on its data dir: the new start takes over
		// at once (a's term has most of its TTL left), with the next epoch,
		// and a's next renewal is refused.
		a2 := start(dirA, nil)
		t2, err := a2.Acquire(ctx)
		if err != nil || t2.Epoch != 2 {
			t.Fatalf("a's restart: Acquire = %+v, %v; want epoch 2 at once", t2, err)
		}
		if err := <-held; !errors.Is(err, ork.ErrLeaseLost) {
			t.Fatalf("a.Hold after its restart took over = %v; want ErrLeaseLost", err)
		}
	})
}

// TestLeaseStepsDownWithoutItsDatabase: a leader whose renewals fail
// steps down, at TTL less Renew after its last renewal began, before its
// term ends (in a synctest bubble: fake time, so both bounds hold on any
// machine).
func TestLeaseStepsDownWithoutItsDatabase(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		st := openSQLite(t, filepath.Join(t.TempDir(), "ork.db"))
		a := leaseOn(t, st, "a")
		start := time.Now()
		if _, err := a.Acquire(ctx); err != nil {
			t.Fatal(err)
		}
		st.Close() // every renewal fails from now on
		if err := a.Hold(ctx); !errors.Is(err, ork.ErrLeaseLost) {
			t.Fatalf("Hold without a database = %v; want ErrLeaseLost", err)
		}
		// Fake time: the step-down is at TTL less Renew after the last
		// renewal began, exactly, and before the term ends.
		if held, min, ttl := time.Since(start), 350*time.Millisecond, 400*time.Millisecond; held < min || held >= ttl {
			t.Errorf("stepped down after %s, want from TTL less Renew (%s) to before the TTL (%s)", held, min, ttl)
		}
		if err := a.Release(ctx); err != nil {
			t.Errorf("Release after stepping down = %v; want nothing to release", err)
		}
	})
}

// wantGauges checks the lease's metrics: leading or not, the epoch, and a
// last renewal only while leading.
// gauges returns the lease's gauges by name.
func gauges(t *testing.T, l *ork.Lease) map[string]float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(l.Collector())
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if g := m.GetGauge(); g != nil {
				got[mf.GetName()] = g.GetValue()
			}
		}
	}
	return got
}

func wantGauges(t *testing.T, l *ork.Lease, leader, epoch float64) {
	t.Helper()
	got := gauges(t, l)
	renewed := got["cosmicac_ork_lease_last_renewal_timestamp_seconds"]
	if got["cosmicac_ork_leader"] != leader || got["cosmicac_ork_lease_epoch"] != epoch || (renewed > 0) != (leader == 1) {
		t.Errorf("lease metrics = %v; want leader %v, epoch %v, a renewal time only while leading", got, leader, epoch)
	}
}

// TestDeposedOrkWritesNoQuota: quota changes go through the fenced store
// as placements do, so an ork whose term ended cannot set or remove one
// (the new leader would not see it until it reloads its quotas).
func TestDeposedOrkWritesNoQuota(t *testing.T) {
	ctx := context.Background()
	st := openSQLite(t, filepath.Join(t.TempDir(), "ork.db"))
	a, b := leaseOn(t, st, "a"), leaseOn(t, st, "b")
	if _, err := a.Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	o, err := ork.New(ork.DefaultConfig(), ork.Deps{Store: a.Fenced(st), Dial: func(fabric.PublicKey, []string) worker.Worker { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	set := func(gpus int) error {
		_, err := o.SetQuota(ctx, orkapi.SetQuotaParams{Team: "ml", Location: "eu", GPUs: gpus, By: "admin"})
		return err
	}
	if err := set(8); err != nil {
		t.Fatalf("SetQuota while leading = %v", err)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	if err := set(16); !errors.Is(err, store.ErrNotLeader) {
		t.Errorf("SetQuota after b took over = %v; want ErrNotLeader", err)
	}
	if err := o.DeleteQuota(ctx, orkapi.QuotaRef{Team: "ml", Location: "eu"}); !errors.Is(err, store.ErrNotLeader) {
		t.Errorf("DeleteQuota after b took over = %v; want ErrNotLeader", err)
	}
	qs, err := st.ListQuotas(ctx, "ml")
	if err != nil {
		t.Fatal(err)
	}
	if len(qs) != 1 || qs[0].GPUs != 8 {
		t.Errorf("quotas after the deposed ork's writes = %+v; want ml's 8 GPUs as the leader set them", qs)
	}
}

// lockedBuffer is a bytes.Buffer safe for a logger's goroutines.
type lockedBuffer = waittest.Buffer
