package ordered

import (
	"context"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

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
	// DefaultMaxRequestBytes bounds each of the two memories: 4 MiB of
	// answers (some 16,500 ids of 40 bytes: the last half second of a
	// 30k req/s owner's traffic, and minutes of a quiet one) and as much of
	// stored gapless ids (some 23,800). It was 8 MiB for about as many ids
	// (17,000 and 22,000) before the memories were made compact (issue 31:
	// the owner's peak RSS under 80 MiB, where the two held some 16 MB
	// live, doubled by the collector's headroom).
	DefaultMaxRequestBytes = 4 << 20
	// requestEntryBytes is one answer's cost beside its strings: the
	// requestEntry (128 bytes) and its hash slot (8-byte hash, pointer and
	// a control byte) counted five times: the table doubles at 7/8 load
	// and deleted ids leave tombstones until it grows. Churned at bounds of
	// 1 to 16 MiB, an id measured 171-183 bytes beside its strings (whose
	// allocations take some 72 bytes for 50: a 36-byte id and two short
	// strings); TestRequestMemoryHeapWithinBound checks that the heap stays
	// under the bound.
	requestEntryBytes = 128 + 5*17
	// storedRequestBytes is one stored id's cost beside its strings: a
	// storedRequest (96 bytes, 85 to a block of 8 KiB) and 40 bytes for the
	// rounding of its strings' allocations (measured 104-107 bytes an id
	// beside the 72 bytes that strings of 50 bytes take).
	storedRequestBytes = 96 + 40
)

// requestMemory keeps the answers of recent request ids (bounded in count,
// bytes and age), so a retry reaching the same owner is answered from
// memory, and concurrent attempts of one id wait for the first instead of
// racing it. Cached mode relies on it alone; gapless mode also stores
// request ids with the rows and falls back to the store after a change of
// owner, or when the id was dropped from here.
//
// Why the entries are indexed by a hash of their key and kept in age order
// by a list through the entries: a map keyed by RequestKey holds the key's
// three string headers (48 bytes) in every slot, and slots are many more
// than the ids kept (the table doubles at 7/8 load and keeps tombstones
// under churn), and a slice queue keeps up to three times its live ids
// between compactions. A 64-bit hash slot is 16 bytes, and a list link 8:
// an id costs about half of what it did (see requestEntryBytes), so half
// the bytes keep as many ids (DefaultMaxRequestBytes). Lookups compare the
// whole key, so two keys of one hash (chained) are never confused.
type requestMemory struct {
	mu sync.Mutex
	// hash is maphash with a seed of this memory's. A field, not a
	// method: keys of one 64-bit hash are too rare to meet by chance,
	// so a test makes every key collide to exercise them.
	hash func(RequestKey) uint64
	m    map[uint64]*requestEntry // by hash; entries of one hash chained by next
	// oldest, newest: every entry kept, in insertion order (newer links
	// them), for expiry; failed entries stay until they expire, accounted.
	oldest, newest *requestEntry
	live           int // entries in the list
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
	// epoch is the time of the first call of since; ids record their
	// time as an offset from it, 8 bytes instead of a time.Time's 24.
	epoch    time.Time
	epochSet bool
}

// since returns now as an offset from b.epoch (set by the first call).
// time.Time.Sub uses the monotonic clock when both times carry it, as
// the comparison of two time.Times did.
func (b *idBounds) since(now time.Time) time.Duration {
	if !b.epochSet {
		b.epoch, b.epochSet = now, true
	}
	return now.Sub(b.epoch)
}

// evict reports whether the oldest of live ids kept, recorded at (since),
// goes at now (since), and whether it goes early (by the count or byte
// bound, before its TTL). The newest id never goes early: one id over the
// byte bound is kept (its attempt may be running).
func (b *idBounds) evict(live int, at, now time.Duration) (evict, early bool) {
	if now-at >= b.ttl {
		return true, false
	}
	over := live > 1 && (live > b.max || b.bytes > b.maxBytes)
	return over, over
}

type requestEntry struct {
	key    RequestKey
	subKey string
	count  int64
	at     time.Duration // idBounds.since
	// done is made only when a second attempt waits (rare: most ids are
	// seen once), and closed by finish; nil once finished without waiters.
	done chan struct{}
	r    segment.Range
	// next: the next entry of the same hash in requestMemory.m; newer: the
	// next entry in insertion order. Both are cleared when e leaves, so an
	// attempt still holding e keeps no other entry alive.
	next, newer *requestEntry
	finished    bool
	failed      bool // the attempt failed: a retry tries afresh
	mapped      bool // e is in requestMemory.m
}

// size is what e is accounted for in requestMemory.bytes.
func (e *requestEntry) size() int {
	return requestEntryBytes + len(e.key.Biz) + len(e.key.Scope) + len(e.key.ID) + len(e.subKey)
}

func newRequestMemory(maxEntries, maxBytes int, ttl time.Duration) *requestMemory {
	seed := maphash.MakeSeed()
	return &requestMemory{hash: func(k RequestKey) uint64 { return maphash.Comparable(seed, k) }, m: map[uint64]*requestEntry{},
		idBounds: idBounds{max: maxEntries, maxBytes: maxBytes, ttl: ttl}}
}

// lookup returns the entry of k (of hash h) in the map, nil if none.
func (rm *requestMemory) lookup(h uint64, k RequestKey) *requestEntry {
	for e := rm.m[h]; e != nil; e = e.next {
		if e.key == k {
			return e
		}
	}
	return nil
}

// unmap takes e out of the map, if it is there.
func (rm *requestMemory) unmap(e *requestEntry) {
	if !e.mapped {
		return
	}
	h := rm.hash(e.key)
	if first := rm.m[h]; first == e {
		if e.next == nil {
			delete(rm.m, h)
		} else {
			rm.m[h] = e.next
		}
	} else {
		for p := first; p != nil; p = p.next {
			if p.next == e {
				p.next = e.next
				break
			}
		}
	}
	e.next, e.mapped = nil, false
}

// begin returns the entry of k: first is true when the caller makes the
// attempt (a new entry, or the last attempt failed), false when an earlier
// attempt is in flight or done (wait for it).
func (rm *requestMemory) begin(k RequestKey, subKey string, n int64, now time.Time) (*requestEntry, bool) {
	rm.mu.Lock()
	defer rm.mu.Unlock()
	rm.expire(now)
	h := rm.hash(k)
	if e := rm.lookup(h, k); e != nil {
		// (a failed attempt's entry has left the map: finish)
		if !e.finished && e.done == nil {
			e.done = make(chan struct{})
		}
		return e, false
	}
	e := &requestEntry{key: k, subKey: subKey, count: n, at: rm.since(now), next: rm.m[h], mapped: true}
	rm.m[h] = e
	if rm.newest == nil {
		rm.oldest = e
	} else {
		rm.newest.newer = e
	}
	rm.newest = e
	rm.live++
	rm.bytes += e.size()
	rm.expire(now) // the new entry may put the memory over its bounds
	return e, true
}

// expire drops entries past the TTL or over the bounds, oldest first, in
// O(1) each. The newest entry is never dropped (its attempt is running):
// one id over the byte bound is still kept.
func (rm *requestMemory) expire(now time.Time) {
	since := rm.since(now)
	for e := rm.oldest; e != nil; e = rm.oldest {
		evict, early := rm.evict(rm.live, e.at, since)
		if !evict {
			break
		}
		if e.mapped {
			rm.unmap(e)
			if early {
				rm.dropped.Add(1)
			}
		}
		rm.bytes -= e.size()
		rm.oldest, e.newer = e.newer, nil
		if rm.oldest == nil {
			rm.newest = nil
		}
		rm.live--
	}
}

// finish records the attempt's outcome and wakes the waiters.
func (rm *requestMemory) finish(e *requestEntry, r segment.Range, err error) {
	rm.mu.Lock()
	e.r, e.finished = r, true
	if err != nil {
		e.failed = true
		rm.unmap(e)
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
	mu sync.Mutex
	// The ids kept, oldest first: from oldest[first] to newest[end-1],
	// through blocks of storedBlockLen. Why blocks: a slice queue consumed
	// from its head held up to three times its live ids between
	// compactions and growths (336 bytes an id); blocks hold each id once,
	// beside at most two partly used blocks.
	oldest, newest *storedBlock
	first, end     int
	live           int
	// idBounds.dropped counts ids dropped before their TTL: a barrier
	// after a lossy MySQL failover cannot store them again.
	idBounds
}

// storedBlockLen ids and the link fill one 8 KiB size class of the
// allocator (85 ids of 96 bytes).
const storedBlockLen = int((8<<10 - 8) / unsafe.Sizeof(storedRequest{}))

type storedBlock struct {
	reqs [storedBlockLen]storedRequest
	next *storedBlock
}

type storedRequest struct {
	Request
	at time.Duration // idBounds.since
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
		if s.newest == nil {
			s.oldest = new(storedBlock)
			s.newest = s.oldest
		} else if s.end == storedBlockLen {
			s.newest.next = new(storedBlock)
			s.newest, s.end = s.newest.next, 0
		}
		sq := &s.newest.reqs[s.end]
		*sq = storedRequest{q, s.since(now)}
		s.end++
		s.live++
		s.bytes += sq.size()
	}
	s.expire(now)
}

// each calls fn for every request id still kept, oldest first.
func (s *storedRequests) each(now time.Time, fn func(Request)) {
	s.mu.Lock()
	s.expire(now)
	live := make([]Request, 0, s.live)
	for b, i := s.oldest, s.first; len(live) < s.live; i++ {
		if i == storedBlockLen {
			b, i = b.next, 0
		}
		live = append(live, b.reqs[i].Request)
	}
	s.mu.Unlock()
	for _, q := range live {
		fn(q)
	}
}

// expire drops entries past the TTL or over the bounds, oldest first (O(1)
// each), and the blocks they leave empty.
func (s *storedRequests) expire(now time.Time) {
	since := s.since(now)
	for s.live > 0 {
		q := &s.oldest.reqs[s.first]
		evict, early := s.evict(s.live, q.at, since)
		if !evict {
			break
		}
		if early {
			s.dropped.Add(1)
		}
		s.bytes -= q.size()
		*q = storedRequest{}
		s.first++
		s.live--
		if s.live == 0 {
			// empty: the newest block is kept for the next ids
			s.oldest, s.first, s.end = s.newest, 0, 0
			s.oldest.next = nil
		} else if s.first == storedBlockLen {
			next := s.oldest.next
			s.oldest.next = nil
			s.oldest, s.first = next, 0
		}
	}
}
