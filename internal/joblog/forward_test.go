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
	t0 := time.Now()
	for i := range 30 {
		f.Emit(joblog.Record{JobID: "j1", Team: "ml", Source: joblog.SourceApplication, Line: string(rune('a' + i%26))})
	}
	if el := time.Since(t0); el > 100*time.Millisecond {
		t.Errorf("30 Emits took %v while the monitor was away", el)
	}
	if s := f.Stats(); s.Dropped != 20 || s.Buffered != 10 {
		t.Fatalf("stats %+v, want 20 dropped and 10 buffered", s)
	}
	for f.Stats().Failures < 2 { // it keeps trying
		time.Sleep(time.Millisecond)
	}
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

func TestTee(t *testing.T) {
	a, b := joblog.NewRing(10), joblog.NewRing(10)
	joblog.Tee(a, b).Emit(joblog.Record{JobID: "j", Line: "x"})
	if len(a.Job("j")) != 1 || len(b.Job("j")) != 1 {
		t.Fatal("a record did not reach both sinks")
	}
}
