package logevery

import (
	"testing"
	"time"
)

// TestLogLimiter: one line per key per window; the lines held back meanwhile
// are counted and handed to the next line let through; keys are separate.
func TestLogLimiter(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	l := New(10*time.Second, func() time.Time { return now })
	if ok, n := l.Allow("A"); !ok || n != 0 {
		t.Fatalf("first line: %v %d", ok, n)
	}
	for i := range 5 {
		now = now.Add(time.Second)
		if ok, _ := l.Allow("A"); ok {
			t.Fatalf("line %d inside the window let through", i)
		}
	}
	if ok, n := l.Allow("B"); !ok || n != 0 {
		t.Fatalf("another key: %v %d", ok, n)
	}
	now = now.Add(5 * time.Second) // 10 s after A's line
	if ok, n := l.Allow("A"); !ok || n != 5 {
		t.Fatalf("after the window: %v, suppressed %d; want true, 5", ok, n)
	}
	if ok, _ := l.Allow("A"); ok {
		t.Fatal("the window restarts at the line let through")
	}
	now = now.Add(10 * time.Second)
	if ok, n := l.Allow("A"); !ok || n != 1 {
		t.Fatalf("next window: %v, suppressed %d; want true, 1", ok, n)
	}
}

// TestClockBack: a clock that went back lets the line through.
func TestClockBack(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	l := New(10*time.Second, func() time.Time { return now })
	l.Allow("A")
	now = now.Add(-time.Minute)
	if ok, _ := l.Allow("A"); !ok {
		t.Fatal("a line after the clock stepped back was held")
	}
}
