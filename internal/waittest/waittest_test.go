package waittest

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// fakeT records a Fatalf instead of stopping the test.
type fakeT struct {
	testing.TB
	failed string
}

func (f *fakeT) Helper() {}
func (f *fakeT) Fatalf(format string, args ...any) {
	f.failed = format
}

func TestUntilReturnsWhenTheConditionHolds(t *testing.T) {
	var n atomic.Int32
	Until(t, func() bool { return n.Add(1) == 5 }, "the fifth call")
	if n.Load() != 5 {
		t.Fatalf("cond called %d times, want 5", n.Load())
	}
}

func TestWithinFailsWhenTheConditionNeverHolds(t *testing.T) {
	f := &fakeT{TB: t}
	Within(f, 10*time.Millisecond, func() bool { return false }, "never")
	if f.failed == "" {
		t.Fatal("Within did not fail on a condition that never holds")
	}
}

func TestNoErrorReportsTheLastError(t *testing.T) {
	f := &fakeT{TB: t}
	var n atomic.Int32
	NoError(f, func() error {
		if n.Add(1) < 3 {
			return errors.New("not yet")
		}
		return nil
	}, "the third call")
	if f.failed != "" || n.Load() != 3 {
		t.Fatalf("failed %q after %d calls", f.failed, n.Load())
	}
}

func TestNoErrorWithinFailsWithTheLastError(t *testing.T) {
	f := &fakeT{TB: t}
	var msg string
	f2 := &msgT{fakeT: f, msg: &msg}
	NoErrorWithin(f2, 10*time.Millisecond, func() error { return errors.New("still 3 of 4") }, "four")
	if !strings.Contains(msg, "still 3 of 4") || !strings.Contains(msg, "four") {
		t.Fatalf("NoErrorWithin failed with %q; want the last error and what it waited for", msg)
	}
}

// msgT keeps the formatted failure.
type msgT struct {
	*fakeT
	msg *string
}

func (m *msgT) Fatalf(format string, args ...any) { *m.msg = fmt.Sprintf(format, args...) }

func TestPollSaysWhetherTheConditionHeld(t *testing.T) {
	var n atomic.Int32
	if !Poll(Timeout, func() bool { return n.Add(1) == 3 }) || n.Load() != 3 {
		t.Fatalf("Poll of a condition true on the third call: %d calls", n.Load())
	}
	if Poll(5*time.Millisecond, func() bool { return false }) {
		t.Fatal("Poll of a condition never true said it held")
	}
}

// A bound of minutes polls less often, never less than 20 times a second
// for a bound of seconds, never less than twice a second.
func TestMaxIntervalGrowsWithTheBound(t *testing.T) {
	for _, c := range []struct{ d, want time.Duration }{
		{10 * time.Millisecond, 50 * time.Millisecond},
		{Timeout, 50 * time.Millisecond},
		{30 * time.Second, 50 * time.Millisecond},
		{time.Minute, 100 * time.Millisecond},
		{3 * time.Minute, 300 * time.Millisecond},
		{10 * time.Minute, 500 * time.Millisecond},
	} {
		if got := maxInterval(c.d); got != c.want {
			t.Errorf("maxInterval(%v) = %v, want %v", c.d, got, c.want)
		}
	}
}
