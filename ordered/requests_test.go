package ordered

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/idgen/idgen/segment"
)

// TestRequestMemoryByteBound: many long request ids stay within the byte
// bound (one id over it at most), the newest are kept, and every id dropped
// before its TTL is counted; ids dropped by the TTL are not.
func TestRequestMemoryByteBound(t *testing.T) {
	const maxBytes = 64 << 10
	rm := newRequestMemory(DefaultMaxRequests, maxBytes, time.Minute)
	now := time.Unix(0, 0)
	long := strings.Repeat("x", 100)
	const n = 10_000
	for i := range n {
		e, first := rm.begin(RequestKey{Biz: "b", Scope: "s", ID: fmt.Sprint(long, i)}, "k", 1, now)
		if !first {
			t.Fatal("a new id was not first")
		}
		rm.finish(e, segment.Range{First: int64(i) + 1, Last: int64(i) + 1}, nil)
		if rm.bytes > maxBytes {
			t.Fatalf("after %d ids the memory accounts %d bytes, over its bound %d", i+1, rm.bytes, maxBytes)
		}
	}
	kept := rm.live
	if kept == 0 || rm.mappedLen() != kept || kept*(requestEntryBytes+100) > maxBytes {
		t.Fatalf("kept %d ids (map %d) under %d bytes", kept, len(rm.m), maxBytes)
	}
	if got := rm.dropped.Load(); got != uint64(n-kept) {
		t.Fatalf("dropped %d, want %d (every id not kept)", got, n-kept)
	}
	e, first := rm.begin(RequestKey{Biz: "b", Scope: "s", ID: fmt.Sprint(long, n-1)}, "k", 1, now)
	if first {
		t.Fatal("the most recent id was forgotten")
	}
	if r, ok, err := e.wait(context.Background()); !ok || err != nil || r.First != n {
		t.Fatalf("the most recent id answered %v, %v, %v; want its first range %d", r, ok, err, n)
	}
	if _, first := rm.begin(RequestKey{Biz: "b", Scope: "s", ID: fmt.Sprint(long, 0)}, "k", 1, now); !first {
		t.Fatal("the oldest id was kept past the byte bound")
	}
	before := rm.dropped.Load()
	now = now.Add(2 * time.Minute)
	rm.begin(RequestKey{Biz: "b", ID: "new"}, "k", 1, now)
	if got := rm.dropped.Load(); got != before {
		t.Fatalf("ids past the TTL counted as dropped: %d, want %d", got, before)
	}
	if kept := rm.live; kept != 1 || rm.mappedLen() != 1 || rm.bytes != rm.oldest.size() {
		t.Fatalf("after the TTL: %d ids, %d bytes; want only the new one", kept, rm.bytes)
	}
}

// TestRequestMemoryOneOverBound: an id larger than the whole bound is
// still kept while its attempt runs (the newest entry is never dropped),
// so a concurrent attempt of it waits for the first one's answer.
func TestRequestMemoryOneOverBound(t *testing.T) {
	rm := newRequestMemory(10, 1, time.Minute)
	now := time.Unix(0, 0)
	k := RequestKey{Biz: "b", ID: "big"}
	e, first := rm.begin(k, "k", 1, now)
	if !first {
		t.Fatal("a new id was not first")
	}
	w, first := rm.begin(k, "k", 1, now)
	if first || w != e {
		t.Fatal("a concurrent attempt did not find the first one")
	}
	got := make(chan segment.Range, 1)
	go func() {
		r, ok, err := w.wait(context.Background())
		if !ok || err != nil {
			r = segment.Range{}
		}
		got <- r
	}()
	rm.finish(e, segment.Range{First: 5, Last: 5}, nil)
	if r := <-got; r.First != 5 {
		t.Fatalf("the waiting attempt got %v, want the first attempt's range", r)
	}
	if rm.dropped.Load() != 0 {
		t.Fatal("the only id was counted as dropped")
	}
}

// TestRequestMemoryWaitAfterFinish: an attempt that finds a finished entry
// (no done channel was made: nobody waited) reads its answer at once, and
// a failed one is tried afresh.
func TestRequestMemoryWaitAfterFinish(t *testing.T) {
	rm := newRequestMemory(10, DefaultMaxRequestBytes, time.Minute)
	now := time.Unix(0, 0)
	e, _ := rm.begin(RequestKey{ID: "a"}, "k", 1, now)
	rm.finish(e, segment.Range{First: 7, Last: 7}, nil)
	if e.done != nil {
		t.Fatal("a done channel was made without a waiter")
	}
	w, first := rm.begin(RequestKey{ID: "a"}, "k", 1, now)
	if first {
		t.Fatal("a finished id was not remembered")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // must not matter: the answer is there
	if r, ok, err := w.wait(ctx); !ok || err != nil || r.First != 7 {
		t.Fatalf("got %v, %v, %v; want the stored range", r, ok, err)
	}
	f, _ := rm.begin(RequestKey{ID: "f"}, "k", 1, now)
	rm.finish(f, segment.Range{}, fmt.Errorf("boom"))
	if _, first := rm.begin(RequestKey{ID: "f"}, "k", 1, now); !first {
		t.Fatal("a failed attempt was not tried afresh")
	}
}

// TestStoredRequestsByteBound: the stored gapless ids stay within the byte
// bound, the newest are kept for the barrier, and drops before the TTL are
// counted.
func TestStoredRequestsByteBound(t *testing.T) {
	const maxBytes = 32 << 10
	s := newStoredRequests(DefaultMaxRequests, maxBytes, time.Minute)
	now := time.Unix(0, 0)
	const n = 5_000
	for i := range n {
		s.add(now, []Request{{Biz: "b", ID: fmt.Sprint("id-", i), SubKey: "k", Count: 1}})
		if s.bytes > maxBytes {
			t.Fatalf("after %d ids %d bytes, over the bound %d", i+1, s.bytes, maxBytes)
		}
	}
	var ids []string
	s.each(now, func(q Request) { ids = append(ids, q.ID) })
	if len(ids) == 0 || ids[len(ids)-1] != fmt.Sprint("id-", n-1) {
		t.Fatalf("kept %d ids, the newest %v", len(ids), ids[max(0, len(ids)-1):])
	}
	if got := s.dropped.Load(); got != uint64(n-len(ids)) {
		t.Fatalf("dropped %d, want %d", got, n-len(ids))
	}
	s.each(now.Add(2*time.Minute), func(Request) {})
	if got := s.dropped.Load(); got != uint64(n-len(ids)) || s.bytes != 0 {
		t.Fatalf("after the TTL: dropped %d (want %d, the TTL is not a drop), %d bytes left", got, n-len(ids), s.bytes)
	}
}

// TestRequestMemoryHeapWithinBound: churned far past their byte bound,
// with fresh strings per id as requests bring them, the memories hold no
// more heap than the bound: the bytes accounted per id cover what an id
// costs, hash slots and blocks included. And an id costs at most 300 bytes
// of answers and 220 of stored ids with its strings (a 36-byte id and two
// short ones): the compact memories keep some 16,500 and 23,800 ids in
// their default bound, where a map keyed by RequestKey and slice queues
// took 430-515 and 330-360 bytes (issue 31, a lean owner). Heap figures
// are taken after two collections.
func TestRequestMemoryHeapWithinBound(t *testing.T) {
	const maxBytes = 4 << 20
	const n = 100_000 // about six times what the bound keeps
	heap := func() uint64 {
		runtime.GC()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	now := time.Unix(0, 0)
	h0 := heap()
	rm := newRequestMemory(n, maxBytes, time.Minute)
	for i := range n {
		e, _ := rm.begin(RequestKey{Biz: strings.Clone("own-gapless"), ID: fmt.Sprintf("%036x", i)}, strings.Clone("hot"), 1, now)
		rm.finish(e, segment.Range{First: 1, Last: 1}, nil)
	}
	h1 := heap()
	s := newStoredRequests(n, maxBytes, time.Minute)
	for i := range n {
		s.add(now, []Request{{Biz: strings.Clone("own-gapless"), ID: fmt.Sprintf("%036x", i), SubKey: strings.Clone("hot"), Count: 1}})
	}
	h2 := heap()
	t.Logf("answers: %d ids, %d bytes accounted, %d on the heap; stored: %d ids, %d accounted, %d on the heap",
		rm.live, rm.bytes, int64(h1-h0), s.live, s.bytes, int64(h2-h1))
	if rm.dropped.Load() == 0 || s.dropped.Load() == 0 {
		t.Fatal("the bound was never reached")
	}
	if h1-h0 > maxBytes {
		t.Errorf("the answers hold %d heap bytes, over their bound %d", h1-h0, maxBytes)
	}
	if h2-h1 > maxBytes {
		t.Errorf("the stored ids hold %d heap bytes, over their bound %d", h2-h1, maxBytes)
	}
	if per := int(h1-h0) / rm.live; per > 300 {
		t.Errorf("an answer costs %d heap bytes, want at most 300", per)
	}
	if per := int(h2-h1) / s.live; per > 220 {
		t.Errorf("a stored id costs %d heap bytes, want at most 220", per)
	}
	runtime.KeepAlive(rm)
	runtime.KeepAlive(s)
}

// TestRequestMemoryHashCollisions: keys of one hash (every key here) are
// told apart by the whole key: each finds its own entry, a failed attempt
// leaves the chain from its middle and is tried afresh, and ids dropped by
// the bound leave the chain while the others stay found.
func TestRequestMemoryHashCollisions(t *testing.T) {
	rm := newRequestMemory(4, DefaultMaxRequestBytes, time.Minute)
	rm.hash = func(RequestKey) uint64 { return 7 }
	now := time.Unix(0, 0)
	key := func(id string) RequestKey { return RequestKey{Biz: "b", Scope: "s", ID: id} }
	for i, id := range []string{"a", "b", "c"} {
		e, first := rm.begin(key(id), "k", 1, now)
		if !first {
			t.Fatalf("new id %s found an entry", id)
		}
		if id == "b" {
			rm.finish(e, segment.Range{}, fmt.Errorf("boom"))
			continue
		}
		rm.finish(e, segment.Range{First: int64(i) + 1, Last: int64(i) + 1}, nil)
	}
	if len(rm.m) != 1 || rm.mappedLen() != 2 {
		t.Fatalf("%d hashes, %d entries mapped; want one chain of a and c", len(rm.m), rm.mappedLen())
	}
	for id, want := range map[string]int64{"a": 1, "c": 3} {
		e, first := rm.begin(key(id), "k", 1, now)
		if first {
			t.Fatalf("id %s not found in its chain", id)
		}
		if r, ok, err := e.wait(context.Background()); !ok || err != nil || r.First != want {
			t.Fatalf("id %s answered %v, %v, %v; want %d", id, r, ok, err, want)
		}
	}
	// b failed: tried afresh; d puts the list (a, b failed, c, b, d) over
	// the count bound (4): a, the oldest, leaves it and the chain.
	e, first := rm.begin(key("b"), "k", 1, now)
	if !first {
		t.Fatal("a failed id was not tried afresh")
	}
	rm.finish(e, segment.Range{First: 9, Last: 9}, nil)
	rm.begin(key("d"), "k", 1, now)
	if _, first := rm.begin(key("a"), "k", 1, now); !first {
		t.Fatal("the oldest id a was kept past the count bound")
	}
	for id, want := range map[string]int64{"b": 9, "c": 3} {
		if e, first := rm.begin(key(id), "k", 1, now); first || e.r.First != want {
			t.Fatalf("id %s: first %v, range %v; want its answer %d", id, first, e.r, want)
		}
	}
	// a's new entry dropped the failed b from the list (it was not mapped)
	if rm.live != 4 || rm.mappedLen() != 4 {
		t.Fatalf("%d entries mapped, %d listed; want c, b, d and a", rm.mappedLen(), rm.live)
	}
}

// TestStoredRequestsBlocks: the stored ids run through blocks: across
// block boundaries each returns the newest ids in order, consumed blocks
// are let go (at most two beyond those the live ids fill), and a memory
// emptied by the TTL takes ids again.
func TestStoredRequestsBlocks(t *testing.T) {
	const keep = 3*storedBlockLen + 7
	s := newStoredRequests(keep, DefaultMaxRequestBytes, time.Minute)
	t0 := time.Unix(0, 0)
	for i := range 10 * storedBlockLen {
		s.add(t0, []Request{{Biz: "b", ID: fmt.Sprint(i)}})
	}
	var ids []string
	s.each(t0, func(q Request) { ids = append(ids, q.ID) })
	if len(ids) != keep {
		t.Fatalf("kept %d ids, want %d", len(ids), keep)
	}
	for i, id := range ids {
		if want := fmt.Sprint(10*storedBlockLen - keep + i); id != want {
			t.Fatalf("id %d is %s, want %s (the newest, in order)", i, id, want)
		}
	}
	blocks := 0
	for b := s.oldest; b != nil; b = b.next {
		blocks++
	}
	if blocks > keep/storedBlockLen+2 {
		t.Fatalf("%d blocks hold %d ids", blocks, keep)
	}
	s.each(t0.Add(time.Minute), func(Request) { t.Fatal("an id past the TTL was kept") })
	if s.live != 0 || s.bytes != 0 || s.oldest != s.newest || s.oldest.next != nil {
		t.Fatalf("emptied: %d ids, %d bytes, blocks not let go", s.live, s.bytes)
	}
	s.add(t0.Add(time.Minute), []Request{{Biz: "b", ID: "new"}, {Biz: "b", ID: "newer"}})
	ids = nil
	s.each(t0.Add(time.Minute), func(q Request) { ids = append(ids, q.ID) })
	if len(ids) != 2 || ids[0] != "new" || ids[1] != "newer" {
		t.Fatalf("after emptying, kept %v; want [new newer]", ids)
	}
}

// TestRequestIDsAgeFromAnyFirstTime: ids keep their time as an offset
// from the memory's first time, whichever it is (the zero time.Time too),
// so the TTL counts from each id's own time.
func TestRequestIDsAgeFromAnyFirstTime(t *testing.T) {
	var t0 time.Time // the zero time
	rm := newRequestMemory(10, DefaultMaxRequestBytes, time.Minute)
	s := newStoredRequests(10, DefaultMaxRequestBytes, time.Minute)
	e, _ := rm.begin(RequestKey{ID: "old"}, "k", 1, t0)
	rm.finish(e, segment.Range{First: 1, Last: 1}, nil)
	s.add(t0, []Request{{ID: "old"}})
	t1 := t0.Add(40 * time.Second)
	e, _ = rm.begin(RequestKey{ID: "new"}, "k", 1, t1)
	rm.finish(e, segment.Range{First: 2, Last: 2}, nil)
	s.add(t1, []Request{{ID: "new"}})
	t2 := t0.Add(70 * time.Second) // old is past the TTL, new is not
	var ids []string
	s.each(t2, func(q Request) { ids = append(ids, q.ID) })
	if len(ids) != 1 || ids[0] != "new" {
		t.Fatalf("stored ids kept %v at 70 s; want [new]", ids)
	}
	if _, first := rm.begin(RequestKey{ID: "new"}, "k", 1, t2); first {
		t.Fatal("an answer 30 s old was forgotten")
	}
	if _, first := rm.begin(RequestKey{ID: "old"}, "k", 1, t2); !first {
		t.Fatal("an answer 70 s old was kept past its one-minute TTL")
	}
}

// TestTakeAfterRequestIDsDropped: with a small byte bound, ids dropped
// from memory are counted in Stats; a dropped gapless id is still answered
// with its first range (read back from the store), and a kept cached one
// from memory, so the bound keeps the retry guarantees Take documents.
func TestTakeAfterRequestIDsDropped(t *testing.T) {
	store := newFakeStore()
	clk := newFakeClock()
	coord := newFakeCoord("a:1", clk.Now().Add(time.Hour))
	a, err := New(Config{Store: store, Coordinator: coord, Clock: clk, Self: "a:1", MaxRequestBytes: 16 << 10})
	if err != nil {
		t.Fatal(err)
	}
	for s := range segment.OrderedShards {
		if err := a.Acquire(context.Background(), Grant{Shard: s, Epoch: 1}); err != nil {
			t.Fatal(err)
		}
	}
	gapless := bizMode("chat", segment.OrderedGapless)
	cached := bizMode("chat", segment.OrderedCached)
	first, err := a.Take(context.Background(), gapless, "k", 2, segment.RequestID{ID: "g-0"})
	if err != nil {
		t.Fatal(err)
	}
	var last segment.Range
	for i := range 1000 {
		if last, err = a.Take(context.Background(), cached, "c", 1, segment.RequestID{ID: fmt.Sprint("c-", i)}); err != nil {
			t.Fatal(err)
		}
	}
	st := a.Stats()
	if st.RequestsDropped == 0 || st.RequestsDropped > 1000 {
		t.Fatalf("RequestsDropped %d after 1001 ids over a 16 KiB bound", st.RequestsDropped)
	}
	if a.requests.bytes > 16<<10 {
		t.Fatalf("the memory accounts %d bytes, over its bound", a.requests.bytes)
	}
	again, err := a.Take(context.Background(), gapless, "k", 2, segment.RequestID{ID: "g-0"})
	if err != nil || again != first {
		t.Fatalf("a dropped gapless id answered %v, %v; want its first range %v from the store", again, err, first)
	}
	replays := a.Stats().Replays
	if r, err := a.Take(context.Background(), cached, "c", 1, segment.RequestID{ID: "c-999"}); err != nil || r != last {
		t.Fatalf("the newest cached id answered %v, %v; want %v from memory", r, err, last)
	}
	if got := a.Stats().Replays; got != replays+1 {
		t.Fatalf("replays %d, want %d", got, replays+1)
	}
}

// mappedLen counts the entries in rm.m, chained ones included.
func (rm *requestMemory) mappedLen() int {
	n := 0
	for _, e := range rm.m {
		for ; e != nil; e = e.next {
			n++
		}
	}
	return n
}
