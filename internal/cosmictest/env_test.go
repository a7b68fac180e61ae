package cosmictest

import (
	"testing"
	"time"
)

// deadlineTB is a testing.TB with a deadline of its own (or none), as a
// *testing.T has under go test -timeout (or -timeout 0).
type deadlineTB struct {
	testing.TB
	d  time.Time
	ok bool
}

func (d deadlineTB) Deadline() (time.Time, bool) { return d.d, d.ok }

// A platform's context ends at the test binary's deadline less
// cleanupMargin, not after a fixed time per test; only without a deadline
// (a benchmark, -timeout 0) does the bound given apply.
func TestEnvContextEndsAtTheTestBinarysDeadline(t *testing.T) {
	far := time.Now().Add(3 * time.Hour)
	for _, c := range []struct {
		name string
		tb   testing.TB
		want time.Time // approximately, for the fallback
	}{
		{"the test binary's deadline", deadlineTB{TB: t, d: far, ok: true}, far.Add(-cleanupMargin)},
		{"no deadline: the bound given", deadlineTB{TB: t}, time.Now().Add(7 * time.Minute)},
		{"no Deadline method (a benchmark): the bound given", struct{ testing.TB }{t}, time.Now().Add(7 * time.Minute)},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := envContext(c.tb, 7*time.Minute)
			defer cancel()
			got, ok := ctx.Deadline()
			if !ok {
				t.Fatal("no deadline")
			}
			if d := got.Sub(c.want).Abs(); d > 5*time.Second {
				t.Errorf("deadline %v, want %v", got, c.want)
			}
		})
	}
}
