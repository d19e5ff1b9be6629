package clock

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// DefaultMaxBackwardWait is how far the clock may step back before the guard
// refuses instead of waiting.
const DefaultMaxBackwardWait = 5 * time.Millisecond

// ErrRollback is matched (errors.Is) by every *RollbackError.
var ErrRollback = errors.New("clock moved backwards")

// RollbackError reports a backward clock step larger than the guard waits
// out. It is retryable: the guard serves again once the clock has passed
// LastMs.
type RollbackError struct {
	LastMs int64         // highest Unix millisecond already used
	NowMs  int64         // the clock's current reading
	Behind time.Duration // LastMs - NowMs
}

func (e *RollbackError) Error() string {
	return fmt.Sprintf("clock moved backwards by %v (now %d ms, already used %d ms): refusing until the clock catches up; check NTP on this host",
		e.Behind, e.NowMs, e.LastMs)
}

// Is makes errors.Is(err, ErrRollback) true.
func (e *RollbackError) Is(target error) bool { return target == ErrRollback }

// GuardConfig configures a Guard. The zero value of every field is a
// documented default.
type GuardConfig struct {
	Clock Clock // nil: System
	// MaxBackwardWait is the largest backward step that is waited out.
	// Zero: DefaultMaxBackwardWait; negative: never wait, refuse any step back.
	MaxBackwardWait time.Duration
	// OnReject is called for every reading refused because the clock
	// stepped back (count it in a metric). Forward jumps go to OnJump.
	OnReject func(behind time.Duration)
	// OnJump is called for every reading its user refused because it is
	// ahead of the durable high-water mark it may issue up to (a forward
	// clock jump, or a mark not extended in time), as reported through
	// RejectJump; ahead is how far past the mark. Count it in a metric. It
	// must not block: the snowflake generator calls it under its lock.
	OnJump func(ahead time.Duration)
	Logger *zap.Logger // nil: no logs
}

// Guard hands out millisecond readings that never go below a reading
// already used. Reading and using are separate steps: Peek reads (waiting
// out a small step back, refusing a large one) and records nothing; Commit
// records a millisecond that an issued ID actually used. So a reading that
// issued nothing (refused by the high-water ceiling, say, after a forward
// jump of an hour) never poisons the guard. The snowflake generator calls
// both under its own lock; the methods are safe for concurrent use anyway.
//
// A refusal starts a rollback episode: the first refusal is logged at error
// level with its size, later ones only counted, and the first good reading
// after it logs the end of the episode with how long it lasted and how many
// requests were refused. Operators get one log line per incident, not one
// per request.
type Guard struct {
	clock    Clock
	maxWait  time.Duration
	onReject func(time.Duration)
	onJump   func(time.Duration)
	log      *zap.Logger

	last atomic.Int64 // highest Unix ms handed out

	episode atomic.Bool // fast-path flag: a rollback episode is open

	mu        sync.Mutex // guards the episode fields below
	inEpisode bool
	epStart   time.Time
	epMax     time.Duration
	epCount   int64
}

// NewGuard returns a Guard that has handed out nothing yet; floorMs (Unix
// ms, may be 0) is treated as already used, so the first reading is at least
// floorMs.
func NewGuard(cfg GuardConfig, floorMs int64) *Guard {
	g := &Guard{clock: cfg.Clock, maxWait: cfg.MaxBackwardWait, onReject: cfg.OnReject, onJump: cfg.OnJump, log: cfg.Logger}
	if g.clock == nil {
		g.clock = System{}
	}
	if g.maxWait == 0 {
		g.maxWait = DefaultMaxBackwardWait
	}
	if g.maxWait < 0 {
		g.maxWait = 0
	}
	if g.log == nil {
		g.log = zap.NewNop()
	}
	g.last.Store(floorMs)
	return g
}

// Clock returns the clock the guard reads.
func (g *Guard) Clock() Clock { return g.clock }

// Last returns the highest Unix millisecond handed out so far.
func (g *Guard) Last() int64 { return g.last.Load() }

// Peek returns the current Unix millisecond, never lower than the highest
// committed one. A backward step of up to MaxBackwardWait is slept out, in
// passes of at most MaxBackwardWait that re-read the clock and re-check the
// limit, so a further step back during the wait is refused at once instead
// of slept through; the whole wait is bounded by twice MaxBackwardWait. A
// larger step returns a *RollbackError. Peek records nothing.
func (g *Guard) Peek() (int64, error) {
	var waited time.Duration
	for {
		now := Millis(g.clock)
		last := g.last.Load()
		if now >= last {
			g.endEpisode()
			return now, nil
		}
		behind := time.Duration(last-now) * time.Millisecond
		if behind > g.maxWait || waited >= 2*g.maxWait {
			g.reject(now, last, behind)
			return 0, &RollbackError{LastMs: last, NowMs: now, Behind: behind}
		}
		pass := min(behind, g.maxWait)
		Sleep(g.clock, pass)
		waited += pass
	}
}

// Commit records ms (Unix ms) as used by an issued ID: later readings are
// at least ms. It never lowers what is recorded.
func (g *Guard) Commit(ms int64) { g.Raise(ms) }

// Millis is Peek followed by Commit of the reading: for callers that use
// every reading they get.
func (g *Guard) Millis() (int64, error) {
	ms, err := g.Peek()
	if err != nil {
		return 0, err
	}
	g.Commit(ms)
	return ms, nil
}

// Raise treats ms (Unix ms) as already used: later readings are at least
// ms. It never lowers the recorded value.
func (g *Guard) Raise(ms int64) {
	for {
		cur := g.last.Load()
		if ms <= cur || g.last.CompareAndSwap(cur, ms) {
			return
		}
	}
}

// Behind reports how far the clock currently is below the highest reading
// handed out (0 when it is not). Readiness checks use it: a node is not
// ready while Behind exceeds MaxBackwardWait.
func (g *Guard) Behind() time.Duration {
	d := g.last.Load() - Millis(g.clock)
	if d <= 0 {
		return 0
	}
	return time.Duration(d) * time.Millisecond
}

// RejectJump reports a reading its user refused because nowMs (the
// reading, Unix ms) is past ceilingMs, the durable high-water mark it may
// issue up to: a forward clock jump, or a mark the worker registry did not
// extend in time. The guard refuses only backward steps itself (Peek); the
// snowflake generator, which holds the ceiling, refuses forward ones and
// reports each here so that both kinds of refusal are counted in one
// place (GuardConfig.OnJump beside OnReject). It records nothing: the
// reading was not used. A reading not past the ceiling is ignored.
func (g *Guard) RejectJump(nowMs, ceilingMs int64) {
	if g.onJump != nil && nowMs > ceilingMs {
		g.onJump(time.Duration(nowMs-ceilingMs) * time.Millisecond)
	}
}

// MaxBackwardWait returns the effective tolerance.
func (g *Guard) MaxBackwardWait() time.Duration { return g.maxWait }

func (g *Guard) reject(now, last int64, behind time.Duration) {
	if g.onReject != nil {
		g.onReject(behind)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.epCount++
	if behind > g.epMax {
		g.epMax = behind
	}
	if g.inEpisode {
		return
	}
	g.inEpisode = true
	g.episode.Store(true)
	g.epStart = g.clock.Now()
	g.log.Error("clock rollback: refusing snowflake IDs until the clock catches up",
		zap.Duration("behind", behind), zap.Int64("now_ms", now), zap.Int64("last_used_ms", last),
		zap.Duration("max_backward_wait", g.maxWait))
}

func (g *Guard) endEpisode() {
	if !g.episode.Load() {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.inEpisode {
		return
	}
	g.log.Warn("clock rollback episode over: serving snowflake IDs again",
		zap.Duration("max_behind", g.epMax), zap.Int64("rejected", g.epCount),
		zap.Duration("lasted", g.clock.Now().Sub(g.epStart)))
	g.inEpisode, g.epMax, g.epCount = false, 0, 0
	g.episode.Store(false)
}
