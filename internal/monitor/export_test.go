package monitor

import "time"

// SetClock sets the clock that numbers records (before the monitor runs).
func SetClock(m *Monitor, now func() time.Time) { m.now = now }
