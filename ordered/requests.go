package ordered

import (
	"context"
	"sync"
	"time"

	"github.com/idgen/idgen/segment"
)

// requestMemory keeps the answers of recent request ids (bounded in count
// and age), so a retry reaching the same owner is answered from memory, and
// concurrent attempts of one id wait for the first instead of racing it.
// Cached mode relies on it alone; gapless mode also stores request ids with
// the rows and falls back to the store after a change of owner.
type requestMemory struct {
	mu    sync.Mutex
	m     map[RequestKey]*requestEntry
	queue []*requestEntry // insertion order, for expiry; live from head
	head  int
	max   int
	ttl   time.Duration
}

type requestEntry struct {
	key    RequestKey
	subKey string
	count  int64
	at     time.Time
	done   chan struct{}
	r      segment.Range
	err    error
	failed bool // the attempt failed: a retry tries afresh
}

func newRequestMemory(maxEntries int, ttl time.Duration) *requestMemory {
	return &requestMemory{m: map[RequestKey]*requestEntry{}, max: maxEntries, ttl: ttl}
}

// begin returns the entry of k: first is true when the caller makes the
// attempt (a new entry, or the last attempt failed), false when an earlier
// attempt is in flight or done (wait for it).
func (rm *requestMemory) begin(k RequestKey, subKey string, n int64, now time.Time) (*requestEntry, bool) {
	rm.mu.Lock()
	defer rm.mu.Unlock()
	rm.expire(now)
	if e := rm.m[k]; e != nil && !e.failed {
		return e, false
	}
	e := &requestEntry{key: k, subKey: subKey, count: n, at: now, done: make(chan struct{})}
	rm.m[k] = e
	rm.queue = append(rm.queue, e)
	return e, true
}

// expire drops entries past the TTL or over the bound, oldest first. The
// queue is consumed from head and compacted once half of it is consumed,
// so each request costs O(1) amortised.
func (rm *requestMemory) expire(now time.Time) {
	for rm.head < len(rm.queue) {
		e := rm.queue[rm.head]
		if len(rm.queue)-rm.head <= rm.max && now.Sub(e.at) < rm.ttl {
			break
		}
		if rm.m[e.key] == e {
			delete(rm.m, e.key)
		}
		rm.queue[rm.head] = nil
		rm.head++
	}
	if rm.head > 0 && rm.head >= len(rm.queue)/2 {
		rm.queue = append(rm.queue[:0], rm.queue[rm.head:]...)
		clear(rm.queue[len(rm.queue):cap(rm.queue)])
		rm.head = 0
	}
}

// finish records the attempt's outcome and wakes the waiters.
func (rm *requestMemory) finish(e *requestEntry, r segment.Range, err error) {
	rm.mu.Lock()
	e.r, e.err = r, err
	if err != nil {
		e.failed = true
		if rm.m[e.key] == e {
			delete(rm.m, e.key)
		}
	}
	rm.mu.Unlock()
	close(e.done)
}

// wait waits for the attempt of e. ok is false when it failed (the caller
// makes its own attempt); err is the caller's context ending.
func (e *requestEntry) wait(ctx context.Context) (segment.Range, bool, error) {
	select {
	case <-e.done:
	case <-ctx.Done():
		return segment.Range{}, true, &UnavailableError{Shard: segment.Shard(e.subKey),
			Reason: "an earlier attempt with this request id is still in flight", Err: ctx.Err()}
	}
	if e.failed {
		return segment.Range{}, false, nil
	}
	return e.r, true, nil
}

// storedRequests keeps the gapless request ids this node stored (bounded
// in count and age like requestMemory), so the barrier after a MySQL
// failover can store them again on the new server (RememberedRequests).
//
// Why: a lossy failover loses the request ids of the group commits the
// replica had not received, with their rows. The barrier raises the rows
// (Remembered), so no number is repeated; without the ids, a caller's
// retry of an answered request id reaching any owner afterwards got a
// fresh range instead of its first answer (the simulator's seed 62).
type storedRequests struct {
	mu    sync.Mutex
	queue []storedRequest // insertion order; live from head
	head  int
	max   int
	ttl   time.Duration
}

type storedRequest struct {
	Request
	at time.Time
}

func newStoredRequests(maxEntries int, ttl time.Duration) *storedRequests {
	return &storedRequests{max: maxEntries, ttl: ttl}
}

// add records reqs, stored at now.
func (s *storedRequests) add(now time.Time, reqs []Request) {
	if len(reqs) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, q := range reqs {
		s.queue = append(s.queue, storedRequest{q, now})
	}
	s.expire(now)
}

// each calls fn for every request id still kept, oldest first.
func (s *storedRequests) each(now time.Time, fn func(Request)) {
	s.mu.Lock()
	s.expire(now)
	live := append([]storedRequest(nil), s.queue[s.head:]...)
	s.mu.Unlock()
	for _, q := range live {
		fn(q.Request)
	}
}

// expire drops entries past the TTL or over the bound, oldest first,
// compacting the queue once half of it is consumed (O(1) amortised).
func (s *storedRequests) expire(now time.Time) {
	for s.head < len(s.queue) {
		if len(s.queue)-s.head <= s.max && now.Sub(s.queue[s.head].at) < s.ttl {
			break
		}
		s.queue[s.head] = storedRequest{}
		s.head++
	}
	if s.head > 0 && s.head >= len(s.queue)/2 {
		s.queue = append(s.queue[:0], s.queue[s.head:]...)
		clear(s.queue[len(s.queue):cap(s.queue)])
		s.head = 0
	}
}
