package joblog_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/joblog"
	"github.com/cosmicac/cosmicac/internal/waittest"
)

// fakeMonitor takes batches unless it is away.
type fakeMonitor struct {
	mu   sync.Mutex
	away bool
	got  []joblog.Record
}

func (f *fakeMonitor) Call(ctx context.Context, _ fabric.PublicKey, method string, params, result any) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.away {
		return errors.New("unreachable")
	}
	p := params.(joblog.AppendParams)
	f.got = append(f.got, p.Records...)
	result.(*joblog.AppendReply).Accepted = len(p.Records)
	return nil
}

func (f *fakeMonitor) setAway(b bool) {
	f.mu.Lock()
	f.away = b
	f.mu.Unlock()
}

func TestForwarderDropsWhileAwayAndRecovers(t *testing.T) {
	mon := &fakeMonitor{away: true}
	f := joblog.NewForwarder(mon, fabric.PublicKey{}, 10)
	f.MinBackoff, f.MaxBackoff = time.Millisecond, 5*time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- f.Run(ctx) }()
	for i := range 30 {
		f.Emit(joblog.Record{JobID: "j1", Team: "ml", Source: joblog.SourceApplication, Line: string(rune('a' + i%26))})
	}
	if s := f.Stats(); s.Dropped != 20 || s.Buffered != 10 {
		t.Fatalf("stats %+v, want 20 dropped and 10 buffered", s)
	}
	waittest.Until(t, func() bool { return f.Stats().Failures >= 2 }, "a second failed send: it keeps trying")
	mon.setAway(false)
	fctx, fcancel := context.WithTimeout(ctx, 10*time.Second)
	defer fcancel()
	if err := f.Flush(fctx); err != nil {
		t.Fatal(err)
	}
	mon.mu.Lock()
	got := mon.got
	mon.mu.Unlock()
	if len(got) != 11 {
		t.Fatalf("monitor got %d records, want the drop notice and 10", len(got))
	}
	n := got[0]
	if n.Step != "log_dropped" || n.Source != joblog.SourceSystem || n.JobID != "j1" || n.Team != "ml" || !strings.HasPrefix(n.Line, "20 log records dropped") {
		t.Errorf("drop notice %+v", n)
	}
	for i, r := range got[1:] {
		if r.Line != string(rune('a'+i)) {
			t.Fatalf("record %d is %q", i, r.Line)
		}
	}
	if s := f.Stats(); s.Sent != 10 || s.Dropped != 20 || s.Buffered != 0 || s.Failures == 0 {
		t.Errorf("stats %+v", s)
	}
	cancel()
	<-done
}

// stuckMonitor holds every call until released, telling when one entered.
type stuckMonitor struct {
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

func (m *stuckMonitor) Call(ctx context.Context, _ fabric.PublicKey, _ string, _, _ any) error {
	m.once.Do(func() { close(m.entered) })
	select {
	case <-m.release:
	case <-ctx.Done():
	}
	return errors.New("released")
}

// Emit never waits for the monitor: with a call stuck in flight, 30 more
// records are taken (10 buffered) or dropped and counted, at once.
func TestEmitDoesNotWaitForTheMonitor(t *testing.T) {
	mon := &stuckMonitor{entered: make(chan struct{}), release: make(chan struct{})}
	f := joblog.NewForwarder(mon, fabric.PublicKey{}, 10)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- f.Run(ctx) }()
	defer func() { close(mon.release); cancel(); <-done }()
	f.Emit(joblog.Record{JobID: "j1", Source: joblog.SourceApplication, Line: "first"})
	<-mon.entered
	for range 29 {
		f.Emit(joblog.Record{JobID: "j1", Source: joblog.SourceApplication, Line: "more"})
	}
	if s := f.Stats(); s.Emitted != 30 || s.Buffered != 10 || s.Dropped != 20 {
		t.Fatalf("stats %+v, want 30 emitted, 10 buffered, 20 dropped", s)
	}
}

func TestTee(t *testing.T) {
	a, b := joblog.NewRing(10), joblog.NewRing(10)
	joblog.Tee(a, b).Emit(joblog.Record{JobID: "j", Line: "x"})
	if len(a.Job("j")) != 1 || len(b.Job("j")) != 1 {
		t.Fatal("a record did not reach both sinks")
	}
}
