package clock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/idgen/idgen/clock"
	"github.com/idgen/idgen/clock/clocktest"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

func TestGuardEpisodeLogsOncePerIncident(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	fc := clocktest.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	var rejected int
	g := clock.NewGuard(clock.GuardConfig{Clock: fc, Logger: zap.New(core), OnReject: func(time.Duration) { rejected++ }}, 0)
	if _, err := g.Millis(); err != nil {
		t.Fatal(err)
	}
	fc.Add(-50 * time.Millisecond)
	for range 10 {
		if _, err := g.Millis(); !errors.Is(err, clock.ErrRollback) {
			t.Fatalf("err = %v, want rollback", err)
		}
	}
	if g.Behind() != 50*time.Millisecond {
		t.Fatalf("Behind = %v", g.Behind())
	}
	fc.Add(51 * time.Millisecond)
	if _, err := g.Millis(); err != nil {
		t.Fatal(err)
	}
	if rejected != 10 {
		t.Fatalf("OnReject called %d times, want 10", rejected)
	}
	if n := logs.FilterMessageSnippet("clock rollback:").Len(); n != 1 {
		t.Fatalf("%d start logs, want 1", n)
	}
	end := logs.FilterMessageSnippet("episode over").All()
	if len(end) != 1 || end[0].ContextMap()["rejected"] != int64(10) {
		t.Fatalf("end logs = %+v", end)
	}
	if g.Behind() != 0 {
		t.Fatalf("Behind = %v after catching up", g.Behind())
	}
}

func TestGuardNegativeWaitRefusesAnyStep(t *testing.T) {
	fc := clocktest.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	g := clock.NewGuard(clock.GuardConfig{Clock: fc, MaxBackwardWait: -1}, 0)
	_, _ = g.Millis()
	fc.Add(-time.Millisecond)
	if _, err := g.Millis(); !errors.Is(err, clock.ErrRollback) {
		t.Fatalf("err = %v", err)
	}
}

func TestOffsetClock(t *testing.T) {
	base := clocktest.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	o := &clock.Offset{Base: base}
	o.Set(-time.Second)
	if got := o.Now(); !got.Equal(base.Now().Add(-time.Second)) || o.Get() != -time.Second {
		t.Fatalf("Offset.Now = %v", got)
	}
}

// TestWaitIsBoundedAndRechecked (issue 9 item 8): a 3 ms step back is being
// waited out when the clock steps back another hour: the guard refuses at
// once instead of sleeping through it.
func TestWaitIsBoundedAndRechecked(t *testing.T) {
	fc := clocktest.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	g := clock.NewGuard(clock.GuardConfig{Clock: fc}, 0)
	if _, err := g.Millis(); err != nil {
		t.Fatal(err)
	}
	fc.Add(-3 * time.Millisecond)
	slept := time.Duration(0)
	fc.OnSleep(func(d time.Duration) {
		slept += d
		if slept <= 5*time.Millisecond {
			fc.Add(-time.Hour)
		}
	})
	_, err := g.Peek()
	var rb *clock.RollbackError
	if !errors.As(err, &rb) || rb.Behind < time.Hour {
		t.Fatalf("err = %v, want a rollback refusal of about an hour", err)
	}
	if slept > 2*clock.DefaultMaxBackwardWait {
		t.Fatalf("slept %v, more than twice the tolerance", slept)
	}
}

// TestPeekRecordsNothing: only Commit moves the guard.
func TestPeekRecordsNothing(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	fc := clocktest.New(start)
	g := clock.NewGuard(clock.GuardConfig{Clock: fc}, 0)
	fc.Add(time.Hour)
	if _, err := g.Peek(); err != nil || g.Last() != 0 {
		t.Fatalf("Peek: %v, last %d; want nothing recorded", err, g.Last())
	}
	fc.Set(start)
	if _, err := g.Peek(); err != nil {
		t.Fatalf("after the clock came back: %v", err)
	}
	g.Commit(start.UnixMilli())
	g.Commit(1)
	if g.Last() != start.UnixMilli() {
		t.Fatalf("Commit lowered the guard to %d", g.Last())
	}
}

// TestGuardRejectJumpCountsApart: a forward jump reported by the guard's
// user goes to OnJump with how far past the mark, never to OnReject (the
// rollback counter keeps its meaning), records nothing, and readings not
// past the mark are ignored.
func TestGuardRejectJumpCountsApart(t *testing.T) {
	fc := clocktest.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	var rollbacks int
	var jumps []time.Duration
	g := clock.NewGuard(clock.GuardConfig{Clock: fc,
		OnReject: func(time.Duration) { rollbacks++ },
		OnJump:   func(ahead time.Duration) { jumps = append(jumps, ahead) }}, 0)
	ms, err := g.Millis()
	if err != nil {
		t.Fatal(err)
	}
	g.RejectJump(ms+3_600_000, ms+5000)
	g.RejectJump(ms+6000, ms+5000)
	g.RejectJump(ms+5000, ms+5000) // at the mark: not a refusal
	if len(jumps) != 2 || jumps[0] != time.Hour-5*time.Second || jumps[1] != time.Second {
		t.Fatalf("OnJump got %v, want [%v 1s]", jumps, time.Hour-5*time.Second)
	}
	if rollbacks != 0 {
		t.Fatalf("OnReject called %d times for forward jumps", rollbacks)
	}
	if g.Last() != ms || g.Behind() != 0 {
		t.Fatalf("a refused jump recorded something: Last %d (want %d), Behind %v", g.Last(), ms, g.Behind())
	}
	// Without a hook nothing happens.
	clock.NewGuard(clock.GuardConfig{Clock: fc}, 0).RejectJump(ms+10, ms)
}
