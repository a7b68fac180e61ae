package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/store"
)

// h is the holder name with its first instance.
func h(name string) store.Holder { return store.Holder{Name: name, Instance: name + "-1"} }

// takeOver acquires lease name for holder, polling until the current
// term (given a short TTL) has expired by the database's clock.
func takeOver(t *testing.T, s store.Store, name, holder string, ttl time.Duration) store.Lease {
	t.Helper()
	return takeOverAs(t, s, name, h(holder), ttl)
}

// takeOverAs is takeOver for a holder with its instance.
func takeOverAs(t *testing.T, s store.Store, name string, holder store.Holder, ttl time.Duration) store.Lease {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(30 * time.Second)
	for {
		l, err := s.AcquireLease(ctx, name, holder, ttl)
		if err == nil {
			return l
		}
		if !errors.Is(err, store.ErrNotLeader) || time.Now().After(deadline) {
			t.Fatalf("AcquireLease(%s, %+v) = %v", name, holder, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// testLeases: a lease is acquired, renewed and checked; another holder is
// refused while it lasts and takes it over, with the next epoch, once it
// expires; the old epoch's renewals and fenced claims are then refused;
// a released lease passes at once.
func testLeases(t *testing.T, open func(t *testing.T) store.Store) {
	ctx := context.Background()
	s := open(t)
	rackFixture(t, s)
	_, err := s.GetLease(ctx, "ork")
	wantErr(t, "GetLease(never taken)", err, cosmic.ErrNotFound)
	wantErr(t, "CheckLease(never taken)", s.CheckLease(ctx, "ork", 1), store.ErrNotLeader)
	for name, f := range map[string]func() error{
		"no name":   func() error { _, err := s.AcquireLease(ctx, "", h("a"), time.Second); return err },
		"no holder": func() error { _, err := s.AcquireLease(ctx, "ork", h(""), time.Second); return err },
		"no ttl":    func() error { _, err := s.AcquireLease(ctx, "ork", h("a"), 0); return err },
		"no instance": func() error {
			_, err := s.AcquireLease(ctx, "ork", store.Holder{Name: "a"}, time.Second)
			return err
		},
		"renew ttl": func() error { _, err := s.RenewLease(ctx, "ork", "a", 1, -time.Second); return err },
	} {
		wantErr(t, "AcquireLease("+name+")", f(), cosmic.ErrInvalid)
	}

	a, err := s.AcquireLease(ctx, "ork", h("a"), time.Minute)
	if err != nil || a.Epoch != 1 || a.Holder != "a" {
		t.Fatalf("AcquireLease(a) = %+v, %v; want epoch 1 held by a", a, err)
	}
	if got, err := s.GetLease(ctx, "ork"); err != nil || got.Epoch != 1 || got.Holder != "a" || !got.ExpiresAt.After(time.Now().Add(30*time.Second)) {
		t.Errorf("GetLease = %+v, %v; want a's epoch 1 for about a minute", got, err)
	}
	_, err = s.AcquireLease(ctx, "ork", h("b"), time.Minute)
	wantErr(t, "AcquireLease(b while a holds it)", err, store.ErrNotLeader)
	if again, err := s.AcquireLease(ctx, "ork", h("a"), time.Minute); err != nil || again.Epoch != 1 {
		t.Errorf("AcquireLease(a again) = %+v, %v; want epoch 1 kept", again, err)
	}
	if r, err := s.RenewLease(ctx, "ork", "a", 1, 2*time.Minute); err != nil || r.Epoch != 1 || !r.ExpiresAt.After(a.ExpiresAt) {
		t.Errorf("RenewLease(a, 1) = %+v, %v; want a later expiry than %s", r, err, a.ExpiresAt)
	}
	_, err = s.RenewLease(ctx, "ork", "b", 1, time.Minute)
	wantErr(t, "RenewLease(b)", err, store.ErrNotLeader)
	_, err = s.RenewLease(ctx, "ork", "a", 2, time.Minute)
	wantErr(t, "RenewLease(a, wrong epoch)", err, store.ErrNotLeader)
	if err := s.CheckLease(ctx, "ork", 1); err != nil {
		t.Errorf("CheckLease(1) = %v", err)
	}
	wantErr(t, "CheckLease(2)", s.CheckLease(ctx, "ork", 2), store.ErrNotLeader)

	// a's term lapses; b takes over with epoch 2.
	if _, err := s.RenewLease(ctx, "ork", "a", 1, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	b := takeOver(t, s, "ork", "b", time.Minute)
	if b.Epoch != 2 || b.Holder != "b" {
		t.Fatalf("takeover = %+v; want epoch 2 held by b", b)
	}
	_, err = s.RenewLease(ctx, "ork", "a", 1, time.Minute)
	wantErr(t, "RenewLease(a after takeover)", err, store.ErrNotLeader)
	_, err = s.AcquireLease(ctx, "ork", h("a"), time.Minute)
	wantErr(t, "AcquireLease(a after takeover)", err, store.ErrNotLeader)

	// a's fenced claim is refused and leaves nothing; b's commits.
	claim := func(epoch int64, r cosmic.Reservation) error {
		return s.Update(ctx, func(tx store.Tx) error {
			if err := tx.CheckLease(ctx, "ork", epoch); err != nil {
				return err
			}
			return tx.ClaimGPUs(ctx, r)
		})
	}
	wantErr(t, "claim at stale epoch 1", claim(1, res("j1", 0, "r1", on("n1", 0))), store.ErrNotLeader)
	wantReservations(t, s, nil)
	if err := claim(2, res("j1", 0, "r1", on("n1", 0))); err != nil {
		t.Fatalf("claim at epoch 2 = %v", err)
	}
	wantReservations(t, s, []cosmic.Reservation{res("j1", 0, "r1", on("n1", 0))})

	// A released lease passes at once, to the next epoch; releasing a term
	// no longer held does nothing.
	if err := s.ReleaseLease(ctx, "ork", "b", 2); err != nil {
		t.Fatal(err)
	}
	_, err = s.RenewLease(ctx, "ork", "b", 2, time.Minute)
	wantErr(t, "RenewLease(released)", err, store.ErrNotLeader)
	if c, err := s.AcquireLease(ctx, "ork", h("a"), time.Minute); err != nil || c.Epoch != 3 {
		t.Fatalf("AcquireLease(a after release) = %+v, %v; want epoch 3", c, err)
	}
	if err := s.ReleaseLease(ctx, "ork", "b", 2); err != nil {
		t.Fatal(err)
	}
	if got, err := s.GetLease(ctx, "ork"); err != nil || got.Epoch != 3 || got.Holder != "a" || got.ExpiresAt.IsZero() {
		t.Errorf("GetLease after a stale release = %+v, %v; want a's epoch 3", got, err)
	}
	// Leases of other names are apart.
	if o, err := s.AcquireLease(ctx, "other", h("b"), time.Minute); err != nil || o.Epoch != 1 {
		t.Errorf("AcquireLease(other) = %+v, %v", o, err)
	}

	// One holder name, two processes: a second start under a's name is
	// refused while a's first lives (both errors), and says why; a start
	// that succeeds a-1 (its data dir's lock proves a-1 gone) takes the
	// term at once, with a new epoch; a-1's renewals then fail.
	a2 := store.Holder{Name: "a", Instance: "a-2"}
	_, err = s.AcquireLease(ctx, "ork", a2, time.Minute)
	wantErr(t, "AcquireLease(a's name, another instance)", err, store.ErrNotLeader)
	wantErr(t, "AcquireLease(a's name, another instance)", err, store.ErrHolderInUse)
	if got, err := s.GetLease(ctx, "ork"); err != nil || got.Instance != "a-1" || got.Epoch != 3 {
		t.Errorf("GetLease = %+v, %v; want a-1's epoch 3", got, err)
	}
	a2.Succeeds = "a-3" // not the instance that holds it
	_, err = s.AcquireLease(ctx, "ork", a2, time.Minute)
	wantErr(t, "AcquireLease(succeeding another instance)", err, store.ErrHolderInUse)
	a2.Succeeds = "a-1"
	if got, err := s.AcquireLease(ctx, "ork", a2, time.Minute); err != nil || got.Epoch != 4 || got.Instance != "a-2" {
		t.Fatalf("AcquireLease(a-2 succeeding a-1) = %+v, %v; want epoch 4 held by a-2", got, err)
	}
	_, err = s.RenewLease(ctx, "ork", "a", 3, time.Minute)
	wantErr(t, "RenewLease(a-1 after a-2 took over)", err, store.ErrNotLeader)
	if r, err := s.RenewLease(ctx, "ork", "a", 4, time.Minute); err != nil || r.Instance != "a-2" {
		t.Errorf("RenewLease(a-2) = %+v, %v", r, err)
	}
	// b succeeding a-2 takes nothing: Succeeds is of one's own name.
	_, err = s.AcquireLease(ctx, "ork", store.Holder{Name: "b", Instance: "b-1", Succeeds: "a-2"}, time.Minute)
	wantErr(t, "AcquireLease(b succeeding a-2)", err, store.ErrNotLeader)
	// A new start after the term lapsed gets a new epoch too.
	if _, err := s.RenewLease(ctx, "ork", "a", 4, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	a3 := takeOverAs(t, s, "ork", store.Holder{Name: "a", Instance: "a-3"}, time.Minute)
	if a3.Epoch != 5 {
		t.Errorf("a-3 after a-2's term lapsed = %+v; want epoch 5", a3)
	}

	s.Close()
	s = open(t)
	if got, err := s.GetLease(ctx, "ork"); err != nil || got.Epoch != 5 || got.Holder != "a" || got.Instance != "a-3" {
		t.Errorf("GetLease after reopen = %+v, %v; want a-3's epoch 5", got, err)
	}
}

// testConcurrentAcquire: of eight holders acquiring a free lease at once,
// exactly one wins; the others are refused with ErrNotLeader.
func testConcurrentAcquire(t *testing.T, open func(t *testing.T) store.Store) {
	ctx := context.Background()
	s := open(t)
	const n = 8
	var (
		wg   sync.WaitGroup
		errs = make([]error, n)
		won  = make([]store.Lease, n)
	)
	for i := range n {
		wg.Go(func() { won[i], errs[i] = s.AcquireLease(ctx, "ork", h(fmt.Sprint("h", i)), time.Minute) })
	}
	wg.Wait()
	winners := 0
	for i, err := range errs {
		switch {
		case err == nil:
			winners++
			if won[i].Epoch != 1 || won[i].Holder != fmt.Sprint("h", i) {
				t.Errorf("winner %d got %+v", i, won[i])
			}
		case !errors.Is(err, store.ErrNotLeader):
			t.Errorf("acquirer %d: %v; want ErrNotLeader or success", i, err)
		}
	}
	if winners != 1 {
		t.Fatalf("%d acquirers won; want exactly 1 (%v)", winners, errs)
	}
}

// testFencedRace: a leader commits fenced claims in a loop while another
// takes the lease over; from the takeover's commit on, none of the old
// leader's claims commits (the reservations the new leader reads then are
// the last), and the old leader's loop ends with ErrNotLeader.
func testFencedRace(t *testing.T, open func(t *testing.T) store.Store) {
	ctx := context.Background()
	s := open(t)
	rackFixture(t, s)
	a, err := s.AcquireLease(ctx, "ork", h("a"), 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		for i := 0; ; i++ {
			err := s.Update(ctx, func(tx store.Tx) error {
				if err := tx.CheckLease(ctx, "ork", a.Epoch); err != nil {
					return err
				}
				if err := tx.ReleaseGPUs(ctx, "j1", store.AllReplicas); err != nil {
					return err
				}
				return tx.ClaimGPUs(ctx, res("j1", 0, "r1", on("n1", i%8)))
			})
			if err != nil {
				done <- err
				return
			}
		}
	}()
	b := takeOver(t, s, "ork", "b", time.Minute)
	seen, err := s.Reservations(ctx)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		wantErr(t, "the old leader's claims", err, store.ErrNotLeader)
	case <-time.After(30 * time.Second):
		t.Fatal("the old leader's claims go on after the takeover")
	}
	after, err := s.Reservations(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(seen, after); diff != "" {
		t.Errorf("a claim of epoch %d committed after epoch %d began (-at takeover +after):\n%s", a.Epoch, b.Epoch, diff)
	}
}
