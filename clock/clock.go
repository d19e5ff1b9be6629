// Package clock is the wall-clock source of the snowflake generator and the
// guard that keeps the generator from ever issuing a timestamp lower than one
// it already used.
//
// The generator deliberately reads the wall clock, not only Go's monotonic
// reading: snowflake timestamps must agree with the other nodes of the
// cluster and with the high-water marks written to ZooKeeper, and a process
// that silently kept its own monotonic time after an NTP step would drift away
// from both. So a backward wall-clock step is not absorbed; it is seen by the
// Guard, waited out when small and refused when large, and every refusal is
// reported so operators can alert on it.
package clock

import "time"

// Clock is a source of wall time.
type Clock interface {
	Now() time.Time
}

// Sleeper is implemented by clocks that control how waiting advances them
// (the fake clock in clocktest moves itself forward instead of blocking).
// Code that waits for the clock to reach a point calls Sleep on a Clock that
// implements it and time.Sleep otherwise.
type Sleeper interface {
	Sleep(d time.Duration)
}

// System is the operating system's wall clock.
type System struct{}

var _ Clock = System{}

// Now returns time.Now().
func (System) Now() time.Time { return time.Now() }

// Sleep waits for d with the given clock: c.Sleep when c is a Sleeper,
// time.Sleep otherwise.
func Sleep(c Clock, d time.Duration) {
	if s, ok := c.(Sleeper); ok {
		s.Sleep(d)
		return
	}
	time.Sleep(d)
}

// Millis returns c's time as Unix milliseconds.
func Millis(c Clock) int64 { return c.Now().UnixMilli() }
