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
	biz      Biz           // settings of the latest request (for loads started by a hand-off)

	// queue holds the requests waiting for a load, in arrival order. A
	// finished load hands its numbers to them head first (waitQueue), so
	// waiters are served in order and do not race each other for a small
	// segment; while the queue is non-empty a load is in flight and new
	// requests queue behind it.
	queue []*waiter

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

// waiter is one request waiting in a business's queue.
type waiter struct {
	need int64
	out  []Range
	err  error
	done chan struct{} // closed when served (need == 0) or failed (err != nil)
}

// queued is what the waiting requests still need in all (b.mu held).
func (b *bizBuffer) queued() int64 {
	var n int64
	for _, w := range b.queue {
		n += w.need
	}
	return n
}

// serveQueue hands buffered numbers to the waiters in arrival order and
// stops at the first one it cannot serve whole (b.mu held).
func (b *bizBuffer) serveQueue() {
	for len(b.queue) > 0 {
		w := b.queue[0]
		w.need, w.out = b.take(w.need, w.out)
		if w.need > 0 {
			return
		}
		close(w.done)
		b.queue[0] = nil
		b.queue = b.queue[1:]
	}
}

// failQueue ends every waiting request with err (b.mu held); numbers a
// waiter already held are dropped: a gap, never a duplicate.
func (b *bizBuffer) failQueue(err error) {
	for _, w := range b.queue {
		w.err = err
		close(w.done)
	}
	b.queue = nil
}

// leave removes w from the queue (its caller gave up) unless it was served
// or failed meanwhile; it reports whether w was still waiting (b.mu held).
func (b *bizBuffer) leave(w *waiter) bool {
	for i, q := range b.queue {
		if q == w {
			b.queue = append(b.queue[:i], b.queue[i+1:]...)
			return true
		}
	}
	return false
}
