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

// ErrBeyondHighWater is returned when issuing would use a timestamp past
// the slot's recorded high-water mark: the mark could not be extended (the
// worker registry is unreachable), so the node stops rather than use time a
// successor might also use. Retryable once the mark is extended again.
var ErrBeyondHighWater = errors.New("snowflake: timestamp beyond the worker slot's high-water mark")

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
	// NotBefore (Unix ms): no ID gets a timestamp <= NotBefore.
	NotBefore int64
	// HighWater (Unix ms): no ID gets a timestamp > HighWater until Extend
	// raises it. 0: no ceiling.
	HighWater int64
}

// Range is an inclusive range of IDs. Within one millisecond a batch is
// contiguous, so a batch is returned as one range per millisecond it used.
type Range struct {
	First, Last int64
}

// Generator issues snowflake IDs for one worker. It is safe for concurrent
// use; one mutex covers (millisecond, sequence), which measures well above
// the 4096-per-millisecond cap on one core (see BenchmarkNext).
type Generator struct {
	layout Layout
	worker int
	guard  *clock.Guard
	clk    clock.Clock

	ceiling atomic.Int64 // Unix ms, 0 = none

	mu   sync.Mutex
	last int64 // Unix ms of the last issued ID
	seq  int   // last sequence used in last
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
	gen := &Generator{layout: l, worker: l.Worker(cfg.IDC, cfg.Node), guard: g, clk: g.Clock()}
	// Start "exhausted" at NotBefore (or at what the guard already used) so
	// the first ID is in a later millisecond.
	gen.last = max(cfg.NotBefore, g.Last(), l.EpochMs())
	g.Raise(gen.last)
	gen.seq = MaxSequence
	gen.ceiling.Store(cfg.HighWater)
	return gen, nil
}

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

// LastUsed returns the Unix millisecond of the last issued ID (or the
// NotBefore it started from).
func (g *Generator) LastUsed() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.last
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
	return g.last, first, nil
}

// tick reads the guarded clock and checks the ceiling and the time bits.
func (g *Generator) tick() (int64, error) {
	ms, err := g.guard.Millis()
	if err != nil {
		return 0, err
	}
	if c := g.ceiling.Load(); c != 0 && ms > c {
		return 0, fmt.Errorf("%w (now %d ms, mark %d ms)", ErrBeyondHighWater, ms, c)
	}
	if ms-g.layout.EpochMs() > maxMillis {
		return 0, ErrTimeOverflow
	}
	return ms, nil
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
