package segment

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/idgen/idgen/clock"
)

// Defaults for UnorderedConfig fields left zero.
const (
	DefaultSegmentDuration = 15 * time.Minute
	DefaultLoadTimeout     = 5 * time.Second
	DefaultRetryBackoff    = 100 * time.Millisecond
	DefaultMaxRetryBackoff = 5 * time.Second
)

// UnorderedConfig configures an Unordered processor. The zero value of
// every field but Store is a documented default.
type UnorderedConfig struct {
	// Store reserves the segments. Required.
	Store Store
	// SegmentDuration is how long one segment should last; the step
	// doubles when segments go faster and halves when they last more than
	// twice as long (default 15m).
	SegmentDuration time.Duration
	// MaxStep caps the adaptive step (default and upper bound: MaxStep).
	// A business whose configured step is larger uses its own step, and a
	// load is never smaller than the demand already waiting for it (the
	// largest batch seen, or the sum of the queued requests): a cap below
	// that would only make callers queue for several loads.
	MaxStep int64
	// Floor is an exclusive upper bound for the numbers handed out (0: no
	// bound). These segments also serve the SNOWFLAKE fallback, so they
	// must stay below the snowflake ID floor: a segment reaching Floor is
	// refused with ErrExhausted.
	Floor int64
	// LoadTimeout bounds one store call of a background load (default 5s).
	LoadTimeout time.Duration
	// RetryBackoff is the wait before retrying after a failed load,
	// doubled per consecutive failure up to MaxRetryBackoff (defaults
	// 100ms and 5s). While it runs, a request that finds both buffers
	// empty fails at once instead of piling onto a store that is down.
	RetryBackoff    time.Duration
	MaxRetryBackoff time.Duration
	// OnLoad is called after every load with its duration and error (nil
	// on success), e.g. to feed a latency histogram. It runs on the
	// loader's goroutine and must not block.
	OnLoad func(biz string, d time.Duration, err error)
	// OnWait is called for every request that found both buffers of its
	// business empty and waited for a load, when the wait ends: d is how
	// long it waited, err what it got (nil: served; a failed load, or
	// its context done). Not called for requests served from memory, nor
	// for those refused at once because no load could start (the last
	// load failed and its backoff runs, the floor was reached). It runs
	// on the request's goroutine and must not block.
	OnWait func(biz string, d time.Duration, err error)
	// Ledger, when set, is the cluster's shared record of the segments
	// handed out (package zkguard): a segment is served only after the
	// ledger accepted it, and one that overlaps a recorded segment (the
	// store went backwards: a failover to a lagging replica) is dropped,
	// the store is raised above the ledger (Store must be a Raiser) and
	// the load tries again. Nil: only this processor's own history guards.
	Ledger Ledger
	// Clock times segments for the adaptive step and the backoff (default
	// the system clock).
	Clock clock.Clock
	// Logger receives load failures and refusals (nil: no logs).
	Logger *zap.Logger
}

// withDefaults validates c and fills its defaults; errors name the field.
func (c UnorderedConfig) withDefaults() (UnorderedConfig, error) {
	switch {
	case c.Store == nil:
		return c, fmt.Errorf("%w: UnorderedConfig.Store is nil", ErrInvalid)
	case c.SegmentDuration < 0:
		return c, fmt.Errorf("%w: UnorderedConfig.SegmentDuration %v is negative", ErrInvalid, c.SegmentDuration)
	case c.MaxStep < 0 || c.MaxStep > MaxStep:
		return c, fmt.Errorf("%w: UnorderedConfig.MaxStep %d out of range 0..%d", ErrInvalid, c.MaxStep, MaxStep)
	case c.Floor < 0:
		return c, fmt.Errorf("%w: UnorderedConfig.Floor %d is negative", ErrInvalid, c.Floor)
	case c.LoadTimeout < 0:
		return c, fmt.Errorf("%w: UnorderedConfig.LoadTimeout %v is negative", ErrInvalid, c.LoadTimeout)
	case c.RetryBackoff < 0:
		return c, fmt.Errorf("%w: UnorderedConfig.RetryBackoff %v is negative", ErrInvalid, c.RetryBackoff)
	case c.MaxRetryBackoff < 0:
		return c, fmt.Errorf("%w: UnorderedConfig.MaxRetryBackoff %v is negative", ErrInvalid, c.MaxRetryBackoff)
	}
	if c.SegmentDuration == 0 {
		c.SegmentDuration = DefaultSegmentDuration
	}
	if c.MaxStep == 0 {
		c.MaxStep = MaxStep
	}
	if c.LoadTimeout == 0 {
		c.LoadTimeout = DefaultLoadTimeout
	}
	if c.RetryBackoff == 0 {
		c.RetryBackoff = DefaultRetryBackoff
	}
	if c.MaxRetryBackoff == 0 {
		c.MaxRetryBackoff = DefaultMaxRetryBackoff
	}
	if c.MaxRetryBackoff < c.RetryBackoff {
		return c, fmt.Errorf("%w: UnorderedConfig.MaxRetryBackoff %v is below RetryBackoff %v", ErrInvalid, c.MaxRetryBackoff, c.RetryBackoff)
	}
	if c.Clock == nil {
		c.Clock = clock.System{}
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	return c, nil
}

// Ledger records the UNORDERED segments handed out by any node of a
// cluster, outside the store, so that a store that went backwards cannot
// make one node serve a segment another node served.
type Ledger interface {
	// Claim records r as handed out for biz. When r overlaps a segment
	// recorded before, it records nothing and returns an error wrapping
	// ErrRegressed with the highest end recorded for biz. Other errors
	// (the ledger cannot be reached) wrap ErrUnavailable; whether the
	// segment may be served anyway is the ledger's decision: it returns
	// nil then.
	Claim(ctx context.Context, biz string, r Range) (highest int64, err error)
}

// maxLedgerRepairs bounds the reserve, refuse, raise rounds of one load.
const maxLedgerRepairs = 3

// Unordered serves the UNORDERED channel from per-business double buffers:
// requests are served from memory while one background load per business
// fetches the next segment, so the hot path touches the store only when
// both buffers are empty. It is safe for concurrent use.
type Unordered struct {
	cfg   UnorderedConfig
	log   *zap.Logger
	clock clock.Clock

	bufs sync.Map // business name -> *bizBuffer

	ctx    context.Context // cancelled by Close: aborts loads
	cancel context.CancelFunc
	closed atomic.Bool
	loadMu sync.RWMutex // orders starting a load against Close's Wait
	loads  sync.WaitGroup
}

// NewUnordered returns a processor; it loads nothing until asked.
func NewUnordered(cfg UnorderedConfig) (*Unordered, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Unordered{cfg: cfg, log: cfg.Logger, clock: cfg.Clock, ctx: ctx, cancel: cancel}, nil
}

// Take hands out n (1..MaxBatch) numbers for biz, usually as one range,
// as two when the batch spans the current and the next segment (more only
// when a batch is larger than the segments loaded so far).
//
// It waits for the store only when both buffers are empty, and then no
// longer than ctx allows: the error wraps ErrUnavailable (retryable) on a
// deadline or a failed load, ErrExhausted when the store passed the floor,
// ErrRegressed (with ErrUnavailable) when the store went backwards,
// ErrUnknownBiz when the store does not know biz.
func (u *Unordered) Take(ctx context.Context, biz Biz, n int64) ([]Range, error) {
	if n < 1 || n > MaxBatch {
		return nil, fmt.Errorf("%w: count %d out of range 1..%d", ErrInvalid, n, MaxBatch)
	}
	if biz.Name == "" {
		return nil, fmt.Errorf("%w: biz name is empty", ErrInvalid)
	}
	if u.closed.Load() {
		return nil, fmt.Errorf("segment: biz %q: %w: processor closed", biz.Name, ErrUnavailable)
	}
	b := u.buffer(biz.Name)
	var out []Range
	need := n

	b.mu.Lock()
	b.maxBatch = max(b.maxBatch, n)
	b.biz = biz
	if len(b.queue) == 0 { // nobody waits before us: serve from memory
		need, out = b.take(need, out)
	}
	if need == 0 {
		if b.wantsLoad(0, lowWater(biz)) && !u.clock.Now().Before(b.retryAt) {
			u.startLoad(b, biz, 0) // prefetch at the low-water mark
		}
		b.mu.Unlock()
		return out, nil
	}
	// Wait in line for a load. The load asks for what every waiter needs,
	// so one finished load serves the whole queue in arrival order.
	w := &waiter{need: need, out: out, done: make(chan struct{})}
	waitStart := u.clock.Now()
	b.queue = append(b.queue, w)
	b.waits++
	if !b.loading && b.exhausted == nil && !u.clock.Now().Before(b.retryAt) {
		u.startLoad(b, biz, u.loadWant(b))
	}
	if !b.loading {
		err := u.cannotWait(b)
		b.leave(w)
		b.mu.Unlock()
		return nil, err
	}
	b.mu.Unlock()

	out, err := u.wait(ctx, b, w)
	if u.cfg.OnWait != nil {
		u.cfg.OnWait(biz.Name, u.clock.Now().Sub(waitStart), err)
	}
	return out, err
}

// wait blocks until the load serves or fails w, or ctx is done first.
func (u *Unordered) wait(ctx context.Context, b *bizBuffer, w *waiter) ([]Range, error) {
	select {
	case <-w.done:
	case <-ctx.Done():
		b.mu.Lock()
		left := b.leave(w)
		b.mu.Unlock()
		if left {
			// Numbers already taken for this request are dropped: a gap,
			// never a duplicate.
			return nil, fmt.Errorf("segment: biz %q: waiting for a segment: %w: %w", b.name, ErrUnavailable, ctx.Err())
		}
		<-w.done // served or failed meanwhile: answer with that
	}
	if w.err != nil {
		return nil, w.err
	}
	return w.out, nil
}

// loadWant is what the next load must cover beyond the buffers: what the
// waiting requests need, less what is buffered (b.mu held).
func (u *Unordered) loadWant(b *bizBuffer) int64 {
	return min(max(0, b.queued()-b.cur.remaining()-b.nxt.remaining()), MaxStep)
}

// cannotWait returns the error for a request that needs a load when none
// is in flight (b.mu held): the floor was reached, the last load failed
// and its backoff is running, or the processor is closed.
func (u *Unordered) cannotWait(b *bizBuffer) error {
	switch {
	case b.exhausted != nil:
		return b.exhausted
	case b.loading:
		return nil
	case u.closed.Load():
		return fmt.Errorf("segment: biz %q: %w: processor closed", b.name, ErrUnavailable)
	case b.lastErr != nil:
		return requestError(b.name, b.lastErr)
	}
	return fmt.Errorf("segment: biz %q: %w: no segment loading", b.name, ErrUnavailable)
}

// requestError turns a load error into what a request sees: the sentinel
// a caller acts on stays visible, everything else is ErrUnavailable.
func requestError(biz string, err error) error {
	switch {
	case errors.Is(err, ErrUnknownBiz), errors.Is(err, ErrExhausted):
		return err
	case errors.Is(err, ErrRegressed):
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return fmt.Errorf("segment: biz %q: %w: %w", biz, ErrUnavailable, err)
}

func lowWater(biz Biz) int {
	if biz.LowWaterPct < 1 || biz.LowWaterPct > MaxLowWaterPct {
		return DefaultLowWaterPct
	}
	return biz.LowWaterPct
}

func (u *Unordered) buffer(name string) *bizBuffer {
	if v, ok := u.bufs.Load(name); ok {
		return v.(*bizBuffer)
	}
	v, _ := u.bufs.LoadOrStore(name, &bizBuffer{name: name})
	return v.(*bizBuffer)
}

// startLoad starts the business's single background load (b.mu held).
func (u *Unordered) startLoad(b *bizBuffer, biz Biz, want int64) {
	u.loadMu.RLock()
	defer u.loadMu.RUnlock()
	if u.closed.Load() {
		return
	}
	minStep := biz.Step
	if minStep < 1 {
		minStep = DefaultStep
	}
	step := b.nextStep(u.clock.Now(), u.cfg.SegmentDuration, minStep, u.cfg.MaxStep, want)
	if room := u.cfg.Floor - 1 - b.highest; u.cfg.Floor > 0 && b.highest > 0 && room >= max(want, 1) {
		// Near the floor, ask only for what still fits below it, rather
		// than a large segment that would be refused whole. (The store's
		// counter may be further on if other nodes share it; then the
		// segment is refused anyway.)
		step = min(step, room)
	}
	b.loading = true
	done := make(chan struct{})
	b.loadDone = done
	u.loads.Add(1)
	go u.load(b, step, done)
}

// load reserves one segment and files it, or records why not.
func (u *Unordered) load(b *bizBuffer, step int64, done chan struct{}) {
	defer u.loads.Done()
	ctx, cancel := context.WithTimeout(u.ctx, u.cfg.LoadTimeout)
	start := u.clock.Now()
	r, err := u.reserve(ctx, b, step)
	cancel()
	now := u.clock.Now()
	d := now.Sub(start)

	b.mu.Lock()
	b.lastLoadDur = d
	if err == nil {
		b.loaded(r, now)
	} else {
		b.failed(err, now, u.cfg.RetryBackoff, u.cfg.MaxRetryBackoff)
	}
	failures := b.loadFailures
	b.mu.Unlock()

	// Report before the load counts as finished, so whoever sees it
	// finished (a waiter, Stats, Close) also sees it reported.
	if u.cfg.OnLoad != nil {
		u.cfg.OnLoad(b.name, d, err)
	}
	switch {
	case err == nil:
		u.log.Debug("segment loaded", zap.String("biz", b.name), zap.Int64("step", step),
			zap.Int64("first", r.First), zap.Int64("last", r.Last), zap.Duration("took", d))
	case errors.Is(err, ErrRegressed), errors.Is(err, ErrExhausted):
		// already logged at error level by check
	default:
		u.log.Warn("segment load failed; buffered IDs keep serving, retrying on next demand",
			zap.String("biz", b.name), zap.Int64("step", step), zap.Error(err), zap.Uint64("failures", failures))
	}

	b.mu.Lock()
	b.loading = false
	close(done)
	// Hand the numbers to the waiting requests in arrival order; if some
	// still wait (the segment was smaller than the queue), load again at
	// once, for all of them.
	if err != nil {
		b.failQueue(requestError(b.name, err))
	} else {
		b.serveQueue()
		switch {
		case len(b.queue) > 0:
			u.startLoad(b, b.biz, u.loadWant(b))
			if !b.loading {
				b.failQueue(u.cannotWait(b))
			}
		case b.wantsLoad(0, lowWater(b.biz)) && !u.clock.Now().Before(b.retryAt):
			u.startLoad(b, b.biz, 0) // prefetch, as a request would have
		}
	}
	b.mu.Unlock()
}

// reserve reserves a segment that passes this processor's own check and,
// with a Ledger, the cluster's: a segment the ledger refuses is dropped (a
// gap), the store is raised above the ledger's highest end and the
// reservation tried again.
func (u *Unordered) reserve(ctx context.Context, b *bizBuffer, step int64) (Range, error) {
	for round := 1; ; round++ {
		r, err := u.cfg.Store.ReserveSegment(ctx, b.name, step)
		if err != nil {
			return r, err
		}
		b.mu.Lock()
		err = u.check(b, r)
		b.mu.Unlock()
		if err != nil || u.cfg.Ledger == nil {
			return r, err
		}
		high, err := u.cfg.Ledger.Claim(ctx, b.name, r)
		if err == nil {
			return r, nil
		}
		if !errors.Is(err, ErrRegressed) {
			return Range{}, err
		}
		b.mu.Lock()
		b.regressions++
		b.mu.Unlock()
		raiser, ok := u.cfg.Store.(Raiser)
		u.log.Error("segment refused: another node already served numbers in it (the store went backwards: a lossy failover?); raising the store above them",
			zap.String("biz", b.name), zap.Int64("first", r.First), zap.Int64("last", r.Last),
			zap.Int64("cluster_highest", high), zap.Int("round", round), zap.Bool("can_raise", ok))
		if !ok || round == maxLedgerRepairs {
			return Range{}, err
		}
		if err := raiser.RaiseSegment(ctx, b.name, high); err != nil {
			return Range{}, fmt.Errorf("segment: biz %q: raise the store above %d: %w", b.name, high, err)
		}
	}
}

// check refuses a segment that would break uniqueness (b.mu held): one not
// above what this processor already received (the store went backwards,
// e.g. a failover to a lagging replica) or one reaching the floor.
func (u *Unordered) check(b *bizBuffer, r Range) error {
	switch {
	case r.First < 1 || r.Last < r.First:
		return fmt.Errorf("segment: biz %q: store returned invalid range %d..%d", b.name, r.First, r.Last)
	case r.First <= b.highest:
		b.regressions++
		err := fmt.Errorf("segment: biz %q: store returned %d..%d, not above %d already received: %w",
			b.name, r.First, r.Last, b.highest, ErrRegressed)
		u.log.Error("segment refused: store went backwards", zap.String("biz", b.name),
			zap.Int64("first", r.First), zap.Int64("last", r.Last), zap.Int64("highest_received", b.highest), zap.Error(err))
		return err
	case u.cfg.Floor > 0 && r.Last >= u.cfg.Floor:
		// The store's counter is past the floor for good: stop loading.
		b.highest = max(b.highest, r.Last)
		b.exhausted = fmt.Errorf("segment: biz %q: segment %d..%d reaches the floor %d: %w",
			b.name, r.First, r.Last, u.cfg.Floor, ErrExhausted)
		u.log.Error("segment refused: it reaches the snowflake floor; no more UNORDERED IDs for this business",
			zap.String("biz", b.name), zap.Int64("first", r.First), zap.Int64("last", r.Last),
			zap.Int64("floor", u.cfg.Floor), zap.Error(b.exhausted))
		return b.exhausted
	}
	return nil
}

// Stats returns a snapshot per business, sorted by name, for metrics at
// scrape time.
func (u *Unordered) Stats() []BizStats {
	var out []BizStats
	u.bufs.Range(func(_, v any) bool {
		out = append(out, v.(*bizBuffer).stats())
		return true
	})
	slices.SortFunc(out, func(a, b BizStats) int { return strings.Compare(a.Biz, b.Biz) })
	return out
}

// Close stops background loads and waits for them; later requests fail
// with ErrUnavailable. Numbers still buffered are dropped (a gap, never a
// duplicate).
func (u *Unordered) Close() error {
	u.loadMu.Lock()
	u.closed.Store(true)
	u.loadMu.Unlock()
	u.cancel()
	u.loads.Wait()
	return nil
}
