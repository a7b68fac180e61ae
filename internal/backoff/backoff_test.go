package backoff

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

func TestDoublesToMaxAndResets(t *testing.T) {
	b := Backoff{Min: 100 * time.Millisecond, Max: time.Second}
	var got []time.Duration
	for range 6 {
		got = append(got, b.Next())
	}
	want := []time.Duration{100, 200, 400, 800, 1000, 1000}
	for i := range want {
		if got[i] != want[i]*time.Millisecond {
			t.Fatalf("waits %v, want %v ms", got, want)
		}
	}
	b.Reset()
	if d := b.Next(); d != 100*time.Millisecond {
		t.Fatalf("after Reset: %v", d)
	}
	j := Backoff{Min: time.Second, Max: 8 * time.Second, Jitter: true}
	for step := time.Second; step <= 8*time.Second; step *= 2 {
		if d := j.Next(); d < step/2 || d > step {
			t.Fatalf("jittered wait %v outside [%v, %v]", d, step/2, step)
		}
	}
}

func TestSleepEndsWithItsContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		start := time.Now()
		if !Sleep(ctx, time.Minute) || time.Since(start) != time.Minute {
			t.Fatal("a full sleep")
		}
		time.AfterFunc(time.Second, cancel)
		start = time.Now()
		if Sleep(ctx, time.Hour) || time.Since(start) != time.Second {
			t.Fatalf("a cancelled sleep took %v", time.Since(start))
		}
		if Sleep(ctx, 0) {
			t.Fatal("no sleep on a done context reports live")
		}
	})
}
