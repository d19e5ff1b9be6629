package ordered

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idgen/idgen/segment"
)

// Memory bounds of the request ids kept (Config.MaxRequestBytes), and what
// one kept id costs beside its strings.
//
// Why a byte bound beside the count: at the default 100,000 ids the two
// memories held about 63 MB live (423 and 208 bytes an id, measured with
// 42-byte ids), which the garbage collector's headroom (GOGC=100) doubles:
// an owner under 30k req/s grew to 139 MiB RSS, five times the RPC floor's
// server. The count alone cannot bound bytes, since ids and sub keys are up
// to the caller.
const (
	// DefaultMaxRequestBytes bounds each of the two memories: 8 MiB of
	// answers (some 17,000 ids of 40 bytes: the last half second of a
	// 30k req/s owner's traffic, and minutes of a quiet one) and as much of
	// stored gapless ids (some 22,000).
	DefaultMaxRequestBytes = 8 << 20
	// requestEntryBytes is one answer's cost beside its strings: the
	// requestEntry (144 bytes), its map slot (key and pointer, 56 bytes
	// and a control byte) counted five times, and its queue pointer
	// counted three times. Why so many: the map table doubles at 7/8 load
	// and deleted ids leave tombstones until it is rehashed, and the queue
	// grows by a quarter and is compacted only once half of it is consumed.
	// A memory churned at its bound measured 395 bytes an id beside its
	// strings; TestRequestMemoryHeapWithinBound checks that the heap stays
	// under the bound.
	requestEntryBytes = 144 + 5*57 + 3*8
	// storedRequestBytes is one stored id's cost beside its strings: a
	// storedRequest (112 bytes) counted three times for the queue's growth
	// and compaction (measured 231 bytes an id at the bound).
	storedRequestBytes = 3 * 112
)

// requestMemory keeps the answers of recent request ids (bounded in count,
// bytes and age), so a retry reaching the same owner is answered from
// memory, and concurrent attempts of one id wait for the first instead of
// racing it. Cached mode relies on it alone; gapless mode also stores
// request ids with the rows and falls back to the store after a change of
// owner, or when the id was dropped from here.
type requestMemory struct {
	mu    sync.Mutex
	m     map[RequestKey]*requestEntry
	queue []*requestEntry // insertion order, for expiry; live from head
	head  int
	// idBounds.dropped counts answers dropped before their TTL: a retry
	// of one reaching this owner afterwards is a new request in cached
	// mode (a gap, never a duplicate).
	idBounds
}

// idBounds is what the two memories share: their count, byte and age
// bounds, the bytes accounted to the ids kept, and the count of ids
// dropped by the count or byte bound before their TTL.
type idBounds struct {
	max, maxBytes int
	ttl           time.Duration
	bytes         int
	dropped       atomic.Uint64
}

// evict reports whether the oldest of live ids kept, recorded at, goes at
// now, and whether it goes early (by the count or byte bound, before its
// TTL). The newest id never goes early: one id over the byte bound is
// kept (its attempt may be running).
func (b *idBounds) evict(live int, at, now time.Time) (evict, early bool) {
	if now.Sub(at) >= b.ttl {
		return true, false
	}
	over := live > 1 && (live > b.max || b.bytes > b.maxBytes)
	return over, over
}

type requestEntry struct {
	key    RequestKey
	subKey string
	count  int64
	at     time.Time
	// done is made only when a second attempt waits (rare: most ids are
	// seen once), and closed by finish; nil once finished without waiters.
	done     chan struct{}
	finished bool
	r        segment.Range
	err      error
	failed   bool // the attempt failed: a retry tries afresh
}

// size is what e is accounted for in requestMemory.bytes.
func (e *requestEntry) size() int {
	return requestEntryBytes + len(e.key.Biz) + len(e.key.Scope) + len(e.key.ID) + len(e.subKey)
}

func newRequestMemory(maxEntries, maxBytes int, ttl time.Duration) *requestMemory {
	return &requestMemory{m: map[RequestKey]*requestEntry{}, idBounds: idBounds{max: maxEntries, maxBytes: maxBytes, ttl: ttl}}
}

// begin returns the entry of k: first is true when the caller makes the
// attempt (a new entry, or the last attempt failed), false when an earlier
// attempt is in flight or done (wait for it).
func (rm *requestMemory) begin(k RequestKey, subKey string, n int64, now time.Time) (*requestEntry, bool) {
	rm.mu.Lock()
	defer rm.mu.Unlock()
	rm.expire(now)
	if e := rm.m[k]; e != nil && !e.failed {
		if !e.finished && e.done == nil {
			e.done = make(chan struct{})
		}
		return e, false
	}
	e := &requestEntry{key: k, subKey: subKey, count: n, at: now}
	rm.m[k] = e
	rm.queue = append(rm.queue, e)
	rm.bytes += e.size()
	rm.expire(now) // the new entry may put the memory over its bounds
	return e, true
}

// expire drops entries past the TTL or over the bounds, oldest first. The
// queue is consumed from head and compacted once half of it is consumed,
// so each request costs O(1) amortised. The newest entry is never dropped
// (its attempt is running): one id over the byte bound is still kept.
func (rm *requestMemory) expire(now time.Time) {
	for rm.head < len(rm.queue) {
		e := rm.queue[rm.head]
		evict, early := rm.evict(len(rm.queue)-rm.head, e.at, now)
		if !evict {
			break
		}
		if rm.m[e.key] == e {
			delete(rm.m, e.key)
			if early && !e.failed {
				rm.dropped.Add(1)
			}
		}
		rm.bytes -= e.size()
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
	e.r, e.err, e.finished = r, err, true
	if err != nil {
		e.failed = true
		if rm.m[e.key] == e {
			delete(rm.m, e.key)
		}
	}
	done := e.done
	rm.mu.Unlock()
	if done != nil {
		close(done)
	}
}

// wait waits for the attempt of e, as begin returned it. ok is false when
// it failed (the caller makes its own attempt); err is the caller's
// context ending. A nil done means the attempt had finished when begin
// returned e (begin makes done for an unfinished one, under the lock that
// finish takes, so the outcome is visible here).
func (e *requestEntry) wait(ctx context.Context) (segment.Range, bool, error) {
	if e.done != nil {
		select {
		case <-e.done:
		case <-ctx.Done():
			return segment.Range{}, true, &UnavailableError{Shard: segment.Shard(e.subKey),
				Reason: "an earlier attempt with this request id is still in flight", Err: ctx.Err()}
		}
	}
	if e.failed {
		return segment.Range{}, false, nil
	}
	return e.r, true, nil
}

// storedRequests keeps the gapless request ids this node stored (bounded
// in count, bytes and age like requestMemory), so the barrier after a MySQL
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
	// idBounds.dropped counts ids dropped before their TTL: a barrier
	// after a lossy MySQL failover cannot store them again.
	idBounds
}

type storedRequest struct {
	Request
	at time.Time
}

// size is what q is accounted for in storedRequests.bytes.
func (q *storedRequest) size() int {
	return storedRequestBytes + len(q.Biz) + len(q.Scope) + len(q.ID) + len(q.SubKey)
}

func newStoredRequests(maxEntries, maxBytes int, ttl time.Duration) *storedRequests {
	return &storedRequests{idBounds: idBounds{max: maxEntries, maxBytes: maxBytes, ttl: ttl}}
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
		s.bytes += s.queue[len(s.queue)-1].size()
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

// expire drops entries past the TTL or over the bounds, oldest first,
// compacting the queue once half of it is consumed (O(1) amortised).
func (s *storedRequests) expire(now time.Time) {
	for s.head < len(s.queue) {
		q := &s.queue[s.head]
		evict, early := s.evict(len(s.queue)-s.head, q.at, now)
		if !evict {
			break
		}
		if early {
			s.dropped.Add(1)
		}
		s.bytes -= q.size()
		s.queue[s.head] = storedRequest{}
		s.head++
	}
	if s.head > 0 && s.head >= len(s.queue)/2 {
		s.queue = append(s.queue[:0], s.queue[s.head:]...)
		clear(s.queue[len(s.queue):cap(s.queue)])
		s.head = 0
	}
}
