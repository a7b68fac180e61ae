package ork

import (
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/cosmic"
)

// scaleRule's table: up at once to ceil(demand/target) within the bounds,
// at least one replica for any request, down only after a whole
// cool-down and then to the most the load wanted in it, nothing without
// a fresh report.
func TestScaleRule(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	a := cosmic.Autoscaling{MinReplicas: 0, MaxReplicas: 5, TargetInFlight: 4, ScaleDownDelay: 60}
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	for _, tc := range []struct {
		name    string
		a       cosmic.Autoscaling
		current int
		demand  int
		unknown bool
		now     time.Time
		state   scaler
		want    int
		below   time.Time // the new state's
		peak    int
	}{
		{name: "steady", a: a, current: 2, demand: 8, now: at(0), want: 2},
		{name: "up at once", a: a, current: 1, demand: 9, now: at(0), want: 3},
		{name: "up resets a lull", a: a, current: 1, demand: 9, now: at(0), state: scaler{below: at(-30), peak: 0}, want: 3},
		{name: "up to max", a: a, current: 1, demand: 100, now: at(0), want: 5},
		{name: "up to the location's cap", a: a, current: 1, demand: 100, now: at(0), state: scaler{cap: 3}, want: 3},
		{name: "one request wakes a zero job", a: a, current: 0, demand: 1, now: at(0), want: 1},
		{name: "min holds", a: cosmic.Autoscaling{MinReplicas: 2, MaxReplicas: 5, TargetInFlight: 4, ScaleDownDelay: 60}, current: 2, demand: 0, now: at(0), want: 2},
		{name: "a lull starts", a: a, current: 3, demand: 4, now: at(0), want: 3, below: at(0), peak: 1},
		{name: "a lull goes on", a: a, current: 3, demand: 0, now: at(30), state: scaler{below: at(0), peak: 2}, want: 3, below: at(0), peak: 2},
		{name: "a lull ends in the peak", a: a, current: 3, demand: 0, now: at(60), state: scaler{below: at(0), peak: 2}, want: 2},
		{name: "idle to zero", a: a, current: 1, demand: 0, now: at(60), state: scaler{below: at(0), peak: 0}, want: 0},
		{name: "demand back to the count ends the lull", a: a, current: 3, demand: 12, now: at(59), state: scaler{below: at(0), peak: 2}, want: 3},
		{name: "no fresh report: nothing", a: a, current: 3, demand: 0, unknown: true, now: at(120), state: scaler{below: at(0), peak: 0}, want: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, st := scaleRule(scaleInput{A: tc.a, Current: tc.current, Demand: tc.demand, Known: !tc.unknown, Now: tc.now, State: tc.state})
			if got != tc.want || !st.below.Equal(tc.below) || st.peak != tc.peak || st.cap != tc.state.cap {
				t.Errorf("scaleRule = %d, %+v; want %d, below %v, peak %d", got, st, tc.want, tc.below, tc.peak)
			}
		})
	}
}
