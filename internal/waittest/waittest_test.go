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
