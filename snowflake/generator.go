package snowflake

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idgen/idgen/clock"
)

// Refusals of the generator. Each is retryable; each carries what the
// caller needs to know how long to wait.
var (
	// ErrClockJump is matched by every *JumpError: the clock reads past the
	// slot's durable high-water mark (a forward clock step, or a mark the
	// worker registry could not extend in time). Issuing there could use
	// time a successor of the slot may also use, so the generator refuses
	// and asks for the mark to be extended at once (Config.ExtendNow).
	ErrClockJump = errors.New("snowflake: clock past the worker slot's durable high-water mark")
	// ErrBeyondHighWater is the earlier name of ErrClockJump.
	ErrBeyondHighWater = ErrClockJump
	// ErrNotYet is matched by every *WaitError: the clock has not passed
	// the slot's NotBefore (what earlier holders of the slot may have used)
	// or the cluster's creation time (the snowflake floor) yet.
	ErrNotYet = errors.New("snowflake: waiting for the clock to pass the worker slot's mark")
	// ErrStopped: the generator was stopped (its worker slot was fenced or
	// the node shuts down); the error names the reason.
	ErrStopped = errors.New("snowflake: generator stopped")
)

// JumpError reports a reading above the high-water ceiling.
type JumpError struct {
	NowMs       int64 // the clock's reading
	HighWaterMs int64 // the durable mark no ID may pass
}

func (e *JumpError) Error() string {
	return fmt.Sprintf("clock is %d ms past the worker slot's durable high-water mark (a forward clock jump, or a mark not yet extended): extending the mark; retry shortly",
		e.NowMs-e.HighWaterMs)
}

// Is makes errors.Is(err, ErrClockJump) true.
func (e *JumpError) Is(target error) bool { return target == ErrClockJump }

// WaitError reports a clock not yet past the slot's NotBefore or the
// cluster's creation time.
type WaitError struct {
	UntilMs int64  // the first millisecond the generator may use
	NowMs   int64  // the clock's reading
	Reason  string // what the wait is for
}

func (e *WaitError) Error() string {
	return fmt.Sprintf("%s: %d ms to go; retry then", e.Reason, e.UntilMs-e.NowMs)
}

// Is makes errors.Is(err, ErrNotYet) true.
func (e *WaitError) Is(target error) bool { return target == ErrNotYet }

// RetryAfter is how long until the generator may serve.
func (e *WaitError) RetryAfter() time.Duration {
	return time.Duration(e.UntilMs-e.NowMs) * time.Millisecond
}

// ErrTimeOverflow: the 41 time bits are used up for this epoch.
var ErrTimeOverflow = errors.New("snowflake: time bits exhausted for this epoch")

// Config configures a Generator. Zero values mean the documented defaults.
type Config struct {
	Layout Layout // zero: default epoch and 2+8 split
	IDC    int
	Node   int
	// Guard is the rollback guard; nil: a new guard over the system clock
	// with clock.DefaultMaxBackwardWait. Pass a shared guard so a generator
	// that replaces another (new slot after a session loss) inherits the
	// last used millisecond.
	Guard *clock.Guard
	// NotBefore (Unix ms): no ID gets a timestamp <= NotBefore. It may be
	// ahead of the clock (a slot whose previous holder's mark has not
	// passed yet): until then calls return a *WaitError at once rather than
	// sleep.
	NotBefore int64
	// CreatedMs (Unix ms) is the cluster's creation time: no ID gets a
	// timestamp below it, so no snowflake ID is ever below the cluster's
	// floor (Layout.Floor(CreatedMs)), where segment and fallback IDs live.
	// A node whose clock reads earlier waits (a *WaitError) instead.
	CreatedMs int64
	// HighWater (Unix ms): no ID gets a timestamp > HighWater until Extend
	// raises it. 0: no ceiling.
	HighWater int64
	// ExtendNow is called (it must not block) when a reading comes within
	// ExtendAhead of the ceiling or passes it, at most once per ceiling
	// value, so the worker lease writes the next mark at once instead of at
	// its next heartbeat. nil: nobody to ask.
	ExtendNow func()
	// ExtendAhead: how close to the ceiling a reading may come before
	// ExtendNow is called. Default 1s.
	ExtendAhead time.Duration
}

// DefaultExtendAhead is Config.ExtendAhead's default.
const DefaultExtendAhead = time.Second

// Range is an inclusive range of IDs. Within one millisecond a batch is
// contiguous, so a batch is returned as one range per millisecond it used.
type Range struct {
	First, Last int64
}

// Generator issues snowflake IDs for one worker. It is safe for concurrent
// use; one mutex covers (millisecond, sequence), which measures well above
// the 4096-per-millisecond cap on one core (see BenchmarkNext).
type Generator struct {
	layout      Layout
	worker      int
	guard       *clock.Guard
	clk         clock.Clock
	start       int64 // the first usable ms is start+1 (NotBefore, CreatedMs-1)
	startWhy    string
	extendNow   func()
	extendAhead int64 // ms

	ceiling atomic.Int64 // Unix ms, 0 = none
	asked   atomic.Int64 // ceiling value ExtendNow was last called for

	mu      sync.Mutex
	last    int64 // Unix ms of the sequence state below
	seq     int   // last sequence used in last
	issued  int64 // Unix ms of the last issued ID (0: none)
	stopped error // non-nil after Stop
}

// New returns a Generator for cfg.
func New(cfg Config) (*Generator, error) {
	l := cfg.Layout.Normalize()
	if err := l.Validate(); err != nil {
		return nil, err
	}
	if cfg.IDC < 0 || cfg.IDC > l.MaxIDC() {
		return nil, fmt.Errorf("%w: idc %d out of range 0..%d for idc_bits=%d", ErrInvalid, cfg.IDC, l.MaxIDC(), l.IDCBits)
	}
	if cfg.Node < 0 || cfg.Node > l.MaxNode() {
		return nil, fmt.Errorf("%w: node %d out of range 0..%d for node_bits=%d", ErrInvalid, cfg.Node, l.MaxNode(), l.NodeBits)
	}
	g := cfg.Guard
	if g == nil {
		g = clock.NewGuard(clock.GuardConfig{}, 0)
	}
	gen := &Generator{layout: l, worker: l.Worker(cfg.IDC, cfg.Node), guard: g, clk: g.Clock(), extendNow: cfg.ExtendNow}
	gen.extendAhead = cfg.ExtendAhead.Milliseconds()
	if cfg.ExtendAhead == 0 {
		gen.extendAhead = DefaultExtendAhead.Milliseconds()
	}
	gen.start, gen.startWhy = max(cfg.NotBefore, l.EpochMs()), "waiting for the clock to pass the worker slot's high-water mark (what its earlier holders may have used)"
	if cfg.CreatedMs-1 > gen.start {
		gen.start, gen.startWhy = cfg.CreatedMs-1, "waiting for the clock to reach the cluster's creation time (IDs below the snowflake floor belong to segments)"
	}
	// Start "exhausted" at the start (or at what this process already used,
	// in case the same slot is held again) so the first ID is in a later
	// millisecond. The guard is not raised: NotBefore is the slot's bound,
	// answered with a WaitError, not a clock rollback.
	gen.last = max(gen.start, g.Last())
	gen.seq = MaxSequence
	gen.ceiling.Store(cfg.HighWater)
	return gen, nil
}

// Stop stops the generator under its lock, so it waits for a call in
// progress, and returns the last millisecond actually used in an issued ID
// (0 if none): the exact high-water mark. Later calls fail with an error
// matching ErrStopped that names reason.
func (g *Generator) Stop(reason error) (lastUsed int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stopped == nil {
		g.stopped = fmt.Errorf("%w: %v", ErrStopped, reason)
	}
	return g.issued
}

// NotBefore returns the first millisecond minus one the generator may use.
func (g *Generator) NotBefore() int64 { return g.start }

// Layout returns the generator's layout.
func (g *Generator) Layout() Layout { return g.layout }

// Worker returns the worker field of issued IDs.
func (g *Generator) Worker() int { return g.worker }

// Extend raises the high-water ceiling (it never lowers it).
func (g *Generator) Extend(highWater int64) {
	for {
		cur := g.ceiling.Load()
		if cur != 0 && highWater <= cur {
			return
		}
		if g.ceiling.CompareAndSwap(cur, highWater) {
			return
		}
	}
}

// HighWater returns the current ceiling (0 = none).
func (g *Generator) HighWater() int64 { return g.ceiling.Load() }

// LastUsed returns the Unix millisecond of the last issued ID, 0 if none.
// A reading that issued nothing (refused by the ceiling, say) never counts.
func (g *Generator) LastUsed() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.issued
}

// Next issues one ID.
func (g *Generator) Next() (int64, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	ms, seq, err := g.reserve(1)
	if err != nil {
		return 0, err
	}
	return g.layout.Compose(ms, g.worker, seq), nil
}

// NextN issues n IDs (n >= 1) as ranges, reserving up to the rest of the
// current millisecond in one step and moving on to the next millisecond for
// the remainder. On error nothing is returned; IDs reserved by the failed
// call are skipped, never issued later.
func (g *Generator) NextN(n int) ([]Range, error) {
	if n < 1 {
		return nil, fmt.Errorf("%w: count %d, want >= 1", ErrInvalid, n)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]Range, 0, 1+n/(MaxSequence+1))
	for n > 0 {
		k := min(n, MaxSequence+1)
		ms, seq, err := g.reserve(k)
		if err != nil {
			return nil, err
		}
		got := g.seq - seq + 1
		first := g.layout.Compose(ms, g.worker, seq)
		out = append(out, Range{First: first, Last: first + int64(got) - 1})
		n -= got
	}
	return out, nil
}

// reserve takes up to k sequence numbers in one millisecond and returns the
// millisecond and the first sequence; g.seq is left at the last one taken.
// Called with g.mu held.
func (g *Generator) reserve(k int) (ms int64, first int, err error) {
	ms, err = g.tick()
	if err != nil {
		return 0, 0, err
	}
	if ms > g.last {
		g.last, g.seq = ms, -1
	}
	if g.seq >= MaxSequence {
		if ms, err = g.waitNext(); err != nil {
			return 0, 0, err
		}
		g.last, g.seq = ms, -1
	}
	first = g.seq + 1
	g.seq = min(g.seq+k, MaxSequence)
	// Only now is the millisecond used: record it.
	g.issued = g.last
	g.guard.Commit(g.last)
	return g.last, first, nil
}

// tick reads the guarded clock (recording nothing) and checks it against
// the start, the ceiling and the time bits. A short wait for the start (up
// to the guard's MaxBackwardWait) is slept out; a longer one is a
// *WaitError at once.
func (g *Generator) tick() (int64, error) {
	if g.stopped != nil {
		return 0, g.stopped
	}
	for {
		ms, err := g.guard.Peek()
		if err != nil {
			return 0, err
		}
		if ms <= g.start {
			wait := time.Duration(g.start+1-ms) * time.Millisecond
			if wait > g.guard.MaxBackwardWait() {
				return 0, &WaitError{UntilMs: g.start + 1, NowMs: ms, Reason: g.startWhy}
			}
			clock.Sleep(g.clk, wait)
			continue
		}
		c := g.ceiling.Load()
		if c != 0 && ms > c {
			g.askExtend(c)
			g.guard.RejectJump(ms, c) // counted beside the guard's rollback refusals
			return 0, &JumpError{NowMs: ms, HighWaterMs: c}
		}
		if c != 0 && ms >= c-g.extendAhead {
			g.askExtend(c)
		}
		if ms-g.layout.EpochMs() > maxMillis {
			return 0, ErrTimeOverflow
		}
		return ms, nil
	}
}

// askExtend calls ExtendNow once per ceiling value.
func (g *Generator) askExtend(ceiling int64) {
	if g.extendNow == nil {
		return
	}
	if prev := g.asked.Load(); prev != ceiling && g.asked.CompareAndSwap(prev, ceiling) {
		g.extendNow()
	}
}

// waitNext waits until the clock is past g.last. The wait is under a
// millisecond unless the clock steps back meanwhile, which the guard reports.
func (g *Generator) waitNext() (int64, error) {
	for {
		ms, err := g.tick()
		if err != nil {
			return 0, err
		}
		if ms > g.last {
			return ms, nil
		}
		if _, ok := g.clk.(clock.Sleeper); ok {
			clock.Sleep(g.clk, time.Duration(g.last+1)*time.Millisecond-time.Duration(g.clk.Now().UnixNano()))
		} else {
			runtime.Gosched()
		}
	}
}
