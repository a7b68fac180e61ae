package worker

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/cosmicac/cosmicac/internal/cosmic"
)

// reporter hands each Report to the test; answer (nil: accept) decides how
// it ends.
type reporter struct {
	got    chan Report
	answer func(n int) error
	calls  atomic.Int32
}

func newReporter(answer func(n int) error) *reporter {
	return &reporter{got: make(chan Report, 16), answer: answer}
}

func (r *reporter) Report(ctx context.Context, rep Report) error {
	n := int(r.calls.Add(1))
	r.got <- rep
	if r.answer == nil {
		return nil
	}
	return r.answer(n)
}

func (r *reporter) next(t *testing.T) Report {
	t.Helper()
	select {
	case rep := <-r.got:
		return rep
	case <-time.After(5 * time.Second):
		t.Fatal("no report")
		return Report{}
	}
}

func (r *reporter) none(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case rep := <-r.got:
		t.Fatalf("unexpected report %+v", rep)
	case <-time.After(d):
	}
}

// lockedQueue is a ReportQueue and the lock of the worker it serves.
type lockedQueue struct {
	mu sync.Mutex
	*ReportQueue
}

func newQueue() *lockedQueue {
	q := &lockedQueue{}
	q.ReportQueue = NewReportQueue(&q.mu)
	return q
}

func (q *lockedQueue) set(ref ReplicaRef, rep ReplicaReport) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.Set(ref, rep)
}

func (q *lockedQueue) setCapacity() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.SetCapacity()
}

func (q *lockedQueue) undelivered(ref ReplicaRef) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.Undelivered(ref)
}

func deliver(t *testing.T, q *lockedQueue, d Delivery) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { q.Deliver(ctx, d) })
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
}

func capacityOf(rack string) func(context.Context) (Capacity, error) {
	return func(context.Context) (Capacity, error) {
		return Capacity{Rack: rack, Nodes: []cosmic.Node{{Name: "n0", Rack: rack}}}, nil
	}
}

// thenCapacity answers first on the first call, then as capacityOf(rack).
func thenCapacity(rack string, first func() (Capacity, error)) func(context.Context) (Capacity, error) {
	var calls atomic.Int32
	return func(ctx context.Context) (Capacity, error) {
		if calls.Add(1) == 1 {
			return first()
		}
		return capacityOf(rack)(ctx)
	}
}

func running(i int) ReplicaReport { return ReplicaReport{Replica: i, State: cosmic.StateRunning} }

func TestReportQueueBatchesInOrder(t *testing.T) {
	q := newQueue()
	q.mu.Lock()
	q.Set(ReplicaRef{JobID: "b", Replica: 1}, running(1))
	q.Set(ReplicaRef{JobID: "a", Replica: 2}, running(2))
	q.Set(ReplicaRef{JobID: "b", Replica: 0}, ReplicaReport{Replica: 0, State: cosmic.StatePending})
	q.Set(ReplicaRef{JobID: "b", Replica: 0}, running(0)) // replaces the pending one
	q.SetGone(ReplicaRef{JobID: "a", Replica: 0})
	q.SetCapacity()
	q.mu.Unlock()
	r := newReporter(nil)
	var delivered []Report
	var mu sync.Mutex
	deliver(t, q, Delivery{Rack: "r1", Reporter: r, Capacity: capacityOf("r1"), Delivered: func(rep Report) {
		mu.Lock()
		defer mu.Unlock()
		delivered = append(delivered, rep)
	}})
	got := r.next(t)
	want := Report{
		Rack: "r1",
		Jobs: []JobReport{
			{JobID: "a", Replicas: []ReplicaReport{{Replica: 0, State: cosmic.StateStopped, Gone: true}, running(2)}},
			{JobID: "b", Replicas: []ReplicaReport{running(0), running(1)}},
		},
		Capacity: &Capacity{Rack: "r1", Nodes: []cosmic.Node{{Name: "n0", Rack: "r1"}}},
	}
	if g := got.Jobs[0].Replicas[0].Observed; g.Process == "" {
		t.Errorf("a Gone report is not stamped: %+v", g)
	}
	if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(ReplicaReport{}, "Observed")); diff != "" {
		t.Fatalf("report (-want +got):\n%s", diff)
	}
	r.none(t, 50*time.Millisecond)
	if q.undelivered(ReplicaRef{JobID: "a", Replica: 2}) {
		t.Error("a/2 still undelivered after its report")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(delivered) != 1 || !cmp.Equal(delivered[0], got) {
		t.Errorf("Delivered saw %+v", delivered)
	}
}

func TestReportQueueRetriesWithBackoff(t *testing.T) {
	q := newQueue()
	ref := ReplicaRef{JobID: "j", Replica: 0}
	q.set(ref, running(0))
	r := newReporter(func(n int) error {
		if n <= 3 {
			return errors.New("ork away")
		}
		return nil
	})
	deliver(t, q, Delivery{Rack: "r1", Reporter: r, Capacity: capacityOf("r1"), RetryMin: 5 * time.Millisecond, RetryMax: 10 * time.Millisecond})
	for range 4 {
		if got := r.next(t); len(got.Jobs) != 1 || got.Jobs[0].JobID != "j" {
			t.Fatalf("report %+v", got)
		}
	}
	r.none(t, 50*time.Millisecond)
	if q.undelivered(ref) {
		t.Error("still undelivered after the fourth report succeeded")
	}
}

// A change made while a Report is in flight is not cleared by its delivery.
func TestReportQueueKeepsNewerChanges(t *testing.T) {
	q := newQueue()
	ref := ReplicaRef{JobID: "j", Replica: 0}
	q.set(ref, ReplicaReport{Replica: 0, State: cosmic.StateStarting})
	release := make(chan struct{})
	r := newReporter(func(n int) error {
		if n == 1 {
			<-release
		}
		return nil
	})
	deliver(t, q, Delivery{Rack: "r1", Reporter: r, Capacity: capacityOf("r1")})
	if got := r.next(t); got.Jobs[0].Replicas[0].State != cosmic.StateStarting {
		t.Fatalf("first report %+v", got)
	}
	q.set(ref, running(0))
	close(release)
	if got := r.next(t); got.Jobs[0].Replicas[0].State != cosmic.StateRunning {
		t.Fatalf("second report %+v", got)
	}
	r.none(t, 50*time.Millisecond)
}

// A capacity that cannot be observed stays undelivered: the replicas go
// without it, the capacity follows.
func TestReportQueueCapacityFailure(t *testing.T) {
	q := newQueue()
	q.mu.Lock()
	q.Set(ReplicaRef{JobID: "j", Replica: 0}, running(0))
	q.SetCapacity()
	q.mu.Unlock()
	r := newReporter(nil)
	deliver(t, q, Delivery{Rack: "r1", Reporter: r, Capacity: thenCapacity("r1", func() (Capacity, error) {
		return Capacity{}, errors.New("no nodes yet")
	})})
	if got := r.next(t); got.Capacity != nil || len(got.Jobs) != 1 {
		t.Fatalf("first report %+v, want the replica only", got)
	}
	if got := r.next(t); got.Capacity == nil || len(got.Jobs) != 0 {
		t.Fatalf("second report %+v, want the capacity only", got)
	}
	r.none(t, 50*time.Millisecond)
}

func TestReportQueueWaitsForReady(t *testing.T) {
	q := newQueue()
	q.setCapacity()
	var ready atomic.Bool
	r := newReporter(nil)
	deliver(t, q, Delivery{Rack: "r1", Reporter: r, Capacity: capacityOf("r1"), Ready: ready.Load})
	q.set(ReplicaRef{JobID: "j", Replica: 0}, running(0))
	r.none(t, 50*time.Millisecond)
	ready.Store(true)
	q.Push()
	if got := r.next(t); got.Capacity == nil || len(got.Jobs) != 1 {
		t.Fatalf("report %+v, want the capacity and the replica", got)
	}
}

// A capacity that changes while it is observed is observed again: the
// Report carries the latest.
func TestReportQueueCapacityChangesWhileObserved(t *testing.T) {
	q := newQueue()
	q.setCapacity()
	r := newReporter(nil)
	deliver(t, q, Delivery{Rack: "r1", Reporter: r, Capacity: thenCapacity("r1", func() (Capacity, error) {
		q.setCapacity() // changed while observed
		return Capacity{Rack: "r1"}, nil
	})})
	if got := r.next(t); got.Capacity == nil || len(got.Capacity.Nodes) != 1 {
		t.Fatalf("report %+v, want the capacity observed last", got)
	}
	r.none(t, 50*time.Millisecond)
}

func TestObservationsOrder(t *testing.T) {
	a, b := Observe(), Observe()
	other := Observation{Process: "another process", Seq: 1}
	for _, c := range []struct {
		o, last Observation
		want    bool
	}{
		{b, a, true}, {a, b, false}, {a, a, false},
		{other, b, true},         // a restarted worker
		{Observation{}, b, true}, // unstamped
		{a, Observation{}, true}, // nothing stamped applied yet
	} {
		if got := c.o.Supersedes(c.last); got != c.want {
			t.Errorf("%+v supersedes %+v: %v, want %v", c.o, c.last, got, c.want)
		}
	}
}
