// Package wait polls a condition in tests: on state, never on time, with
// a bound that only ends a hang (set it well above what the condition was
// measured to take, for a busy 2-core CI machine).
package wait

import (
	"testing"
	"time"
)

// interval between two looks: short enough not to slow a test down, long
// enough not to spin a core.
const interval = 10 * time.Millisecond

// For polls cond until it holds, failing the test after d.
func For(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(interval)
	}
}

// OK calls f until it returns nil, failing the test with f's last error
// after d.
func OK(t testing.TB, d time.Duration, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %v", what, d, err)
		}
		time.Sleep(interval)
	}
}
