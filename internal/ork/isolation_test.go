package ork

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

func gaugeValue(t *testing.T, g prometheus.Gauge) float64 {
	t.Helper()
	var m dto.Metric
	if err := g.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetGauge().GetValue()
}

// TestWatchIsolation: a leader yields only after it reached a peer in its
// term and then reached none for the whole limit; one that never reached
// a peer (a follower as cut off as the leader it replaced) never yields,
// so the lease does not go back and forth.
func TestWatchIsolation(t *testing.T) {
	const limit = 30 * time.Second
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	type step struct {
		reaches bool
		lasts   time.Duration
	}
	for _, tc := range []struct {
		name  string
		steps []step
		yield bool
	}{
		{"never reached a peer", []step{{false, 10 * limit}}, false},
		{"reached, then none for the limit", []step{{true, time.Minute}, {false, limit + 2*time.Second}}, true},
		{"reached, then none for less than the limit, then reached again", []step{{true, time.Minute}, {false, limit - 5*time.Second}, {true, time.Minute}, {false, limit - 5*time.Second}, {true, time.Minute}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var reaches atomic.Bool
				gauge := prometheus.NewGauge(prometheus.GaugeOpts{Name: "isolated"})
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				done := make(chan error, 1)
				reaches.Store(tc.steps[0].reaches)
				go func() { done <- watchIsolation(ctx, reaches.Load, limit, gauge, log) }()
				for _, s := range tc.steps {
					reaches.Store(s.reaches)
					time.Sleep(s.lasts)
					synctest.Wait()
					select {
					case err := <-done:
						if !tc.yield || !errors.Is(err, ErrIsolated) {
							t.Fatalf("watchIsolation returned %v; want it to go on", err)
						}
						if got := gaugeValue(t, gauge); got != 0 {
							t.Errorf("isolated gauge %v after yielding; want 0 (the process steps down)", got)
						}
						return
					default:
					}
					want := 0.0
					if !s.reaches && tc.steps[0].reaches {
						want = 1
					}
					if got := gaugeValue(t, gauge); got != want {
						t.Errorf("isolated gauge %v after %v for %s; want %v", got, s.reaches, s.lasts, want)
					}
				}
				if tc.yield {
					t.Fatal("watchIsolation did not yield")
				}
				cancel()
				if err := <-done; err != nil {
					t.Fatalf("watchIsolation at the end of its context: %v; want nil", err)
				}
			})
		})
	}
}
