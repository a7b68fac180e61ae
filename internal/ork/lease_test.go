package ork_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/config"
	"github.com/cosmicac/cosmicac/internal/ork"
	"github.com/cosmicac/cosmicac/internal/store"
	"github.com/cosmicac/cosmicac/internal/store/sqlite"
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
	ctx := context.Background()
	st := openSQLite(t, filepath.Join(t.TempDir(), "ork.db"))
	a, b := leaseOn(t, st, "a"), leaseOn(t, st, "b")
	ta, err := a.Acquire(ctx)
	if err != nil || ta.Epoch != 1 {
		t.Fatalf("a.Acquire = %+v, %v", ta, err)
	}
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
	// a renews well past its TTL while b waits.
	time.Sleep(time.Second)
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
	if err := fencedA.Update(ctx, func(store.Tx) error { return nil }); !errors.Is(err, store.ErrNotLeader) {
		t.Fatalf("a's fenced write after b took over = %v; want ErrNotLeader", err)
	}
	// The refusal ends a Hold of the deposed term at once.
	if err := a.Hold(ctx); !errors.Is(err, ork.ErrLeaseLost) {
		t.Fatalf("a.Hold after a refused fenced write = %v; want ErrLeaseLost", err)
	}
}

// TestLeaseStepsDownWithoutItsDatabase: a leader whose renewals fail
// steps down before its TTL ends.
func TestLeaseStepsDownWithoutItsDatabase(t *testing.T) {
	ctx := context.Background()
	st := openSQLite(t, filepath.Join(t.TempDir(), "ork.db"))
	a := leaseOn(t, st, "a")
	term, err := a.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	st.Close() // every renewal fails from now on
	start := time.Now()
	if err := a.Hold(ctx); !errors.Is(err, ork.ErrLeaseLost) {
		t.Fatalf("Hold without a database = %v; want ErrLeaseLost", err)
	}
	if end := time.Now(); !end.Before(term.ExpiresAt) {
		t.Errorf("stepped down at %s (after %s), not before the term's end %s", end, end.Sub(start), term.ExpiresAt)
	}
}
