// Package logevery bounds log lines that callers can provoke (refused
// tokens, refused connections, businesses created on first use): one line
// per key per window, carrying how many were held back before it. The
// metrics beside such lines stay exact; the log only has to show that it
// happens, who and what, without letting a caller flood it.
package logevery

import (
	"sync"
	"time"
)

// Limiter lets one line per key through per window. Keys must come from a
// bounded set (RPC method names, a fixed word): one entry is kept per key
// for good. The zero value is not usable; use New.
type Limiter struct {
	window time.Duration
	now    func() time.Time

	mu   sync.Mutex
	keys map[string]*state
}

type state struct {
	last       time.Time // when the last line for the key was let through
	suppressed int       // lines held back since
}

// New returns a limiter of one line per key per window, reading the time
// from now (nil: time.Now).
func New(window time.Duration, now func() time.Time) *Limiter {
	if now == nil {
		now = time.Now
	}
	return &Limiter{window: window, now: now, keys: map[string]*state{}}
}

// Window is the limiter's window (logged with the lines, so a reader knows
// what "suppressed" covers).
func (l *Limiter) Window() time.Duration { return l.window }

// Allow reports whether a line for key may be written now and, when it
// may, how many lines for key were held back since the previous one. A
// clock that went back lets the line through rather than silencing the
// key until it catches up.
func (l *Limiter) Allow(key string) (ok bool, suppressed int) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.keys[key]
	if s == nil {
		l.keys[key] = &state{last: now}
		return true, 0
	}
	if d := now.Sub(s.last); d >= 0 && d < l.window {
		s.suppressed++
		return false, 0
	}
	suppressed, s.suppressed, s.last = s.suppressed, 0, now
	return true, suppressed
}
