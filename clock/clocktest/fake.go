// Package clocktest provides a hand-driven clock for tests. Unlike the system
// clock it can be stepped backwards, which is how tests provoke the rollback
// guard.
package clocktest

import (
	"sync"
	"time"

	"github.com/idgen/idgen/clock"
)

// Fake is a Clock that moves only when told to. Sleep advances it by the
// requested duration, so code that waits for the clock finishes at once.
// It is safe for concurrent use.
type Fake struct {
	mu      sync.Mutex
	now     time.Time
	onSleep func(d time.Duration)
}

var (
	_ clock.Clock   = (*Fake)(nil)
	_ clock.Sleeper = (*Fake)(nil)
)

// New returns a Fake clock reading t.
func New(t time.Time) *Fake { return &Fake{now: t} }

// Now returns the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// Set moves the clock to t, backwards or forwards.
func (f *Fake) Set(t time.Time) {
	f.mu.Lock()
	f.now = t
	f.mu.Unlock()
}

// Add moves the clock by d (negative d steps it back).
func (f *Fake) Add(d time.Duration) {
	f.mu.Lock()
	f.now = f.now.Add(d)
	f.mu.Unlock()
}

// Sleep advances the clock by d (at least 1µs so waiting loops progress),
// then runs the hook set by OnSleep, if any.
func (f *Fake) Sleep(d time.Duration) {
	if d < time.Microsecond {
		d = time.Microsecond
	}
	f.Add(d)
	f.mu.Lock()
	hook := f.onSleep
	f.mu.Unlock()
	if hook != nil {
		hook(d)
	}
}

// OnSleep sets a hook that Sleep runs after advancing the clock: tests use
// it to step the clock (say, back by an hour) or to block while code under
// test is waiting. nil removes the hook.
func (f *Fake) OnSleep(hook func(d time.Duration)) {
	f.mu.Lock()
	f.onSleep = hook
	f.mu.Unlock()
}
