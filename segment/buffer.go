package segment

import (
	"sync"
	"time"
)

// segBuf is one segment in memory: numbers next..last are still free.
// The zero value is an empty buffer.
type segBuf struct {
	next, last int64
	size       int64 // numbers in the segment when it was loaded
}

func (b segBuf) remaining() int64 {
	if b.size == 0 || b.next > b.last {
		return 0
	}
	return b.last - b.next + 1
}

// bizBuffer is the double buffer of one business: the current segment,
// the next one, and the state of the single loader that fills the next
// one. Its mutex is per business, so businesses never contend with each
// other; it is held only for in-memory bookkeeping, never across a store
// call.
type bizBuffer struct {
	name string

	mu  sync.Mutex
	cur segBuf
	nxt segBuf

	step       int64     // size of the last segment loaded (0: none yet)
	lastLoadAt time.Time // when the last segment was loaded, for the adaptive step
	maxBatch   int64     // the largest request seen, so a segment covers a batch
	highest    int64     // highest number received from the store (regression guard)

	loading  bool          // one load in flight at most
	loadDone chan struct{} // closed when the in-flight load ends

	lastErr   error         // error of the last load, nil after a success
	retryAt   time.Time     // no load before this after a failure
	backoff   time.Duration // current retry backoff, doubled per failure
	exhausted error         // sticky: the store is past the floor

	// statistics
	loadsOK, loadFailures, regressions, waits uint64
	lastLoadDur                               time.Duration
}

// take hands out up to need numbers, appending ranges to out, and returns
// what is still needed. It takes nothing when the two buffers together
// cannot cover the request and the next buffer is still to be loaded: the
// caller waits for that load rather than holding numbers while it waits.
// Only when the next buffer is loaded and still too small (a batch larger
// than the last step) does it take everything and leave the rest to a
// further load.
func (b *bizBuffer) take(need int64, out []Range) (int64, []Range) {
	if b.cur.remaining()+b.nxt.remaining() < need && b.nxt.remaining() == 0 {
		return need, out
	}
	for need > 0 {
		if b.cur.remaining() == 0 {
			if b.nxt.remaining() == 0 {
				break
			}
			b.cur, b.nxt = b.nxt, segBuf{}
		}
		k := min(need, b.cur.remaining())
		out = append(out, Range{First: b.cur.next, Last: b.cur.next + k - 1})
		b.cur.next += k
		need -= k
	}
	if b.cur.remaining() == 0 && b.nxt.remaining() > 0 {
		b.cur, b.nxt = b.nxt, segBuf{}
	}
	return need, out
}

// wantsLoad reports whether the next segment should be loaded now: none is
// loading or loaded, and either a request is waiting (need > 0), the
// current segment is empty, or it is down to lowWaterPct of its size.
func (b *bizBuffer) wantsLoad(need int64, lowWaterPct int) bool {
	if b.loading || b.exhausted != nil || b.nxt.remaining() > 0 {
		return false
	}
	rem := b.cur.remaining()
	return need > 0 || rem == 0 || rem*100 <= int64(lowWaterPct)*b.cur.size
}

// nextStep is the adaptive step (as in Meituan Leaf): a segment should last
// about target. If the last one was used up faster, double the step; if it
// lasted more than twice as long, halve it; always between minStep (the
// business's configured step) and maxStep, and never below the largest
// batch seen or want (what a waiting request still needs).
func (b *bizBuffer) nextStep(now time.Time, target time.Duration, minStep, maxStep, want int64) int64 {
	maxStep = max(maxStep, minStep)
	step := b.step
	switch {
	case step == 0:
		step = minStep
	case now.Sub(b.lastLoadAt) < target:
		step *= 2
	case now.Sub(b.lastLoadAt) >= 2*target:
		step /= 2
	}
	step = min(max(step, minStep), maxStep)
	return max(step, b.maxBatch, want)
}

// failed records a failed load and schedules the next try.
func (b *bizBuffer) failed(err error, now time.Time, minBackoff, maxBackoff time.Duration) {
	b.lastErr = err
	b.loadFailures++
	switch {
	case b.backoff == 0:
		b.backoff = minBackoff
	default:
		b.backoff = min(2*b.backoff, maxBackoff)
	}
	b.retryAt = now.Add(b.backoff)
}

// loaded stores a good segment: into the current buffer when that is empty
// (nobody could use it otherwise), else into the next one.
func (b *bizBuffer) loaded(r Range, now time.Time) {
	seg := segBuf{next: r.First, last: r.Last, size: r.Len()}
	if b.cur.remaining() == 0 {
		b.cur = seg
	} else {
		b.nxt = seg
	}
	b.highest = r.Last
	b.step = r.Len()
	b.lastLoadAt = now
	b.lastErr, b.backoff, b.retryAt = nil, 0, time.Time{}
	b.loadsOK++
}

// BizStats is a snapshot of one business's double buffer, read by a
// Prometheus collector at scrape time.
type BizStats struct {
	Biz              string
	CurrentRemaining int64 // numbers left in the current segment
	NextRemaining    int64 // numbers in the loaded next segment (0: none)
	Step             int64 // size of the last segment loaded
	Loading          bool  // a load is in flight
	LoadsOK          uint64
	LoadFailures     uint64 // store errors, timeouts, refused segments
	Regressions      uint64 // segments refused because the store went backwards
	Waits            uint64 // requests that found both buffers empty and waited
	LastLoadDuration time.Duration
	Exhausted        bool // the store is past the floor: no more segments
}

func (b *bizBuffer) stats() BizStats {
	b.mu.Lock()
	defer b.mu.Unlock()
	return BizStats{
		Biz: b.name, CurrentRemaining: b.cur.remaining(), NextRemaining: b.nxt.remaining(),
		Step: b.step, Loading: b.loading, LoadsOK: b.loadsOK, LoadFailures: b.loadFailures,
		Regressions: b.regressions, Waits: b.waits, LastLoadDuration: b.lastLoadDur,
		Exhausted: b.exhausted != nil,
	}
}
