package ordered

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/idgen/idgen/segment"
)

func bizMode(name string, mode segment.OrderedMode) segment.Biz {
	return segment.Biz{Name: name, StartNum: 1, OrderedMode: mode}
}

// takeAll runs callers goroutines each taking per times from key and
// returns every range in the order each caller received them.
func takeAll(t *testing.T, a *Allocator, biz segment.Biz, sub string, callers, per int) [][]segment.Range {
	t.Helper()
	out := make([][]segment.Range, callers)
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for c := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range per {
				r, err := a.Take(context.Background(), biz, sub, 1, segment.RequestID{})
				if err != nil {
					errs <- err
					return
				}
				out[c] = append(out[c], r)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return out
}

// checkUniqueIncreasing fails on a number handed out twice, or a caller
// receiving a number not above its previous one.
func checkUniqueIncreasing(t *testing.T, per [][]segment.Range) (maxLast int64, total int) {
	t.Helper()
	seen := map[int64]bool{}
	for c, rs := range per {
		var prev int64
		for _, r := range rs {
			if r.First <= prev {
				t.Fatalf("caller %d got %d..%d after %d: not increasing", c, r.First, r.Last, prev)
			}
			prev = r.Last
			for v := r.First; v <= r.Last; v++ {
				if seen[v] {
					t.Fatalf("number %d handed out twice", v)
				}
				seen[v] = true
			}
			maxLast = max(maxLast, r.Last)
			total++
		}
	}
	return maxLast, total
}

func TestGaplessGroupCommitDurableBeforeAnswer(t *testing.T) {
	store := newFakeStore()
	clk := newFakeClock()
	n := newNode(t, store, clk, "a:1")
	n.acquireAll(t, 1, time.Time{})
	biz := bizMode("chat", segment.OrderedGapless)
	store.delay = time.Millisecond // persists take time, so requests queue behind them
	per := takeAll(t, n.a, biz, "room-1", 16, 50)
	maxLast, total := checkUniqueIncreasing(t, per)
	if maxLast != int64(total) {
		t.Fatalf("gapless: %d answers ended at %d: a gap without a failure", total, maxLast)
	}
	if got := store.row(Key{"chat", "room-1"}); got != maxLast {
		t.Fatalf("stored row %d, last answer %d: an answer was not durable", got, maxLast)
	}
	st := n.a.Stats()
	if st.Persists >= uint64(total) {
		t.Fatalf("%d persists for %d answers: no group commit", st.Persists, total)
	}
	t.Logf("%d answers in %d persists", total, st.Persists)
}

func TestCachedReservesAheadAndCrashGapIsOneReservation(t *testing.T) {
	store := newFakeStore()
	clk := newFakeClock()
	n := newNode(t, store, clk, "a:1")
	n.acquireAll(t, 1, time.Time{})
	biz := bizMode("chat", segment.OrderedCached)
	key := Key{"chat", "room-1"}
	var last int64
	for i := range 2000 {
		if i%100 == 0 {
			clk.Add(10 * time.Millisecond) // 10,000 numbers per second
		}
		r, err := n.a.Take(context.Background(), biz, "room-1", 1, segment.RequestID{})
		if err != nil {
			t.Fatal(err)
		}
		if r.First != last+1 {
			t.Fatalf("got %d after %d", r.First, last)
		}
		last = r.Last
	}
	st := n.a.Stats()
	if st.FromMemory < 1500 || st.Persists > 200 {
		t.Fatalf("cached: %d of 2000 from memory in %d persists: not reserving ahead", st.FromMemory, st.Persists)
	}
	// The owner crashes: nothing written back. A new owner (epoch 2)
	// starts above everything persisted.
	stored := store.row(key)
	window := int64(float64(10_000) * DefaultWindow.Seconds())
	if gap := stored - last; gap < 0 || gap > 2*window {
		t.Fatalf("persisted %d with %d answered: reservation ahead %d, want 0..%d (about one window of traffic)", stored, last, gap, 2*window)
	}
	m := newNode(t, store, clk, "b:1")
	m.acquireAll(t, 2, time.Time{})
	r, err := m.a.Take(context.Background(), biz, "room-1", 1, segment.RequestID{})
	if err != nil {
		t.Fatal(err)
	}
	if r.First <= last {
		t.Fatalf("new owner answered %d, not above %d answered before the crash", r.First, last)
	}
	t.Logf("crash gap %d numbers (reservation sized for %d)", r.First-last-1, window)
}

func TestFencedOwnerStopsAndNeverWritesBack(t *testing.T) {
	store := newFakeStore()
	clk := newFakeClock()
	old := newNode(t, store, clk, "a:1")
	old.acquireAll(t, 1, time.Time{})
	biz := bizMode("chat", segment.OrderedCached)
	for range 50 {
		clk.Add(time.Millisecond)
		if _, err := old.a.Take(context.Background(), biz, "k", 1, segment.RequestID{}); err != nil {
			t.Fatal(err)
		}
	}
	if store.row(Key{"chat", "k"}) <= 50 {
		t.Fatal("cached mode did not reserve ahead; the test shows nothing")
	}
	// A new owner claims epoch 2 (the old one is paused, unaware) and
	// moves the key far ahead.
	nw := newNode(t, store, clk, "b:1")
	nw.acquireAll(t, 2, time.Time{})
	var newLast int64
	for range 50 {
		r, err := nw.a.Take(context.Background(), bizMode("chat", segment.OrderedGapless), "k", 100, segment.RequestID{})
		if err != nil {
			t.Fatal(err)
		}
		newLast = r.Last
	}
	// The old owner resumes and hands off: its write-back of exact (old,
	// lower) counters must be refused by the epoch.
	if err := old.a.Release(context.Background(), segment.Shard("k")); !errors.Is(err, ErrFenced) {
		t.Fatalf("stale write-back: %v, want ErrFenced", err)
	}
	if got := store.row(Key{"chat", "k"}); got != newLast {
		t.Fatalf("row %d after the stale write-back, want %d: a deposed owner lowered it (TiDB #46444)", got, newLast)
	}
}

func TestWithoutEpochAStaleWriteBackRepeatsNumbers(t *testing.T) {
	// The negative control of the test above: the same story on a store
	// that ignores the epoch repeats numbers.
	store := newFakeStore()
	store.noFence = true
	clk := newFakeClock()
	old := newNode(t, store, clk, "a:1")
	old.acquireAll(t, 1, time.Time{})
	for range 50 {
		clk.Add(time.Millisecond)
		if _, err := old.a.Take(context.Background(), bizMode("chat", segment.OrderedCached), "k", 1, segment.RequestID{}); err != nil {
			t.Fatal(err)
		}
	}
	nw := newNode(t, store, clk, "b:1")
	nw.acquireAll(t, 2, time.Time{})
	r1, err := nw.a.Take(context.Background(), bizMode("chat", segment.OrderedGapless), "k", 100, segment.RequestID{})
	if err != nil {
		t.Fatal(err)
	}
	_ = old.a.Release(context.Background(), segment.Shard("k"))
	third := newNode(t, store, clk, "c:1")
	third.acquireAll(t, 3, time.Time{})
	r2, err := third.a.Take(context.Background(), bizMode("chat", segment.OrderedGapless), "k", 1, segment.RequestID{})
	if err != nil {
		t.Fatal(err)
	}
	if r2.First > r1.Last {
		t.Fatalf("control: without the epoch the third owner still started above (%d > %d); the test no longer shows what the epoch prevents", r2.First, r1.Last)
	}
}

func TestLeaseWaitAndExpiry(t *testing.T) {
	store := newFakeStore()
	clk := newFakeClock()
	n := newNode(t, store, clk, "a:1")
	notBefore := clk.Now().Add(3 * time.Second)
	n.acquireAll(t, 1, notBefore)
	biz := bizMode("chat", segment.OrderedGapless)
	_, err := n.a.Take(context.Background(), biz, "k", 1, segment.RequestID{})
	var ue *UnavailableError
	if !errors.As(err, &ue) || ue.NotOwner || ue.RetryAfter != 3*time.Second {
		t.Fatalf("during the lease wait: %v, want a retryable refusal with a 3s hint", err)
	}
	// The refusal allocated nothing: a gapless key goes on without a gap
	// (a number persisted and then refused is lost to the key).
	if store.persists != 0 {
		t.Fatalf("%d persists during the lease wait, want none", store.persists)
	}
	clk.Add(3 * time.Second)
	if r, err := n.a.Take(context.Background(), biz, "k", 1, segment.RequestID{}); err != nil || r.First != 1 {
		t.Fatalf("after the lease wait: %v %v, want 1 (no gap)", r, err)
	}
	// The lease is not renewed: at ValidUntil the node stops answering,
	// even from memory.
	n.coord.setValidUntil(clk.Now().Add(time.Second))
	cached := bizMode("chat", segment.OrderedCached)
	if _, err := n.a.Take(context.Background(), cached, "k2", 1, segment.RequestID{}); err != nil {
		t.Fatal(err)
	}
	clk.Add(time.Second)
	if _, err := n.a.Take(context.Background(), cached, "k2", 1, segment.RequestID{}); !errors.As(err, &ue) {
		t.Fatalf("after the lease ran out: %v, want a refusal", err)
	}
	if n.a.Stats().LeaseRefusals != 2 {
		t.Fatalf("lease refusals %d, want 2", n.a.Stats().LeaseRefusals)
	}
}

// TestLeaseWaitRefusalSaysWhoseLease: a refusal in a takeover's lease wait
// names the previous owner and when its lease ends (issue 31 item 5), so a
// caller (or whoever reads its log) knows whom the wait is for and how long
// it lasts; without a previous owner it says so.
func TestLeaseWaitRefusalSaysWhoseLease(t *testing.T) {
	store := newFakeStore()
	clk := newFakeClock()
	n := newNode(t, store, clk, "b:1")
	wall := time.Date(2026, 11, 26, 12, 0, 3, 412_000_000, time.UTC)
	s := segment.Shard("k")
	g := Grant{Shard: s, Epoch: 8, NotBefore: clk.Now().Add(800 * time.Millisecond), From: "10.0.0.1:8888", NotBeforeWall: wall}
	if err := n.a.Acquire(context.Background(), g); err != nil {
		t.Fatal(err)
	}
	_, err := n.a.Take(context.Background(), bizMode("chat", segment.OrderedGapless), "k", 1, segment.RequestID{})
	var ue *UnavailableError
	if !errors.As(err, &ue) || ue.RetryAfter != 800*time.Millisecond {
		t.Fatalf("in the lease wait: %v, want a refusal with an 800ms hint", err)
	}
	want := fmt.Sprintf("ordered shard %d: new owner (epoch 8) waits out the lease of 10.0.0.1:8888, the previous owner, until 12:00:03.412Z", s)
	if err.Error() != want {
		t.Fatalf("refusal:\n got %q\nwant %q", err.Error(), want)
	}
	if got := leaseWaitReason(Grant{Epoch: 3}); got != "new owner (epoch 3) waits out the lease of the previous owner" {
		t.Fatalf("without a previous owner: %q", got)
	}
}

func TestNotOwnerNamesTheOwner(t *testing.T) {
	n := newNode(t, newFakeStore(), newFakeClock(), "a:1")
	_, err := n.a.Take(context.Background(), bizMode("chat", segment.OrderedGapless), "k", 1, segment.RequestID{})
	var ue *UnavailableError
	if !errors.As(err, &ue) || !ue.NotOwner || ue.Owner.Addr != "other:1" || !errors.Is(err, segment.ErrUnavailable) {
		t.Fatalf("not owner: %v", err)
	}
}

func TestPlannedHandOffLeavesNoGap(t *testing.T) {
	store := newFakeStore()
	clk := newFakeClock()
	a := newNode(t, store, clk, "a:1")
	a.acquireAll(t, 1, time.Time{})
	biz := bizMode("chat", segment.OrderedCached)
	var last int64
	for i := range 500 {
		if i%50 == 0 {
			clk.Add(10 * time.Millisecond)
		}
		r, err := a.a.Take(context.Background(), biz, "k", 1, segment.RequestID{})
		if err != nil {
			t.Fatal(err)
		}
		last = r.Last
	}
	if store.row(Key{"chat", "k"}) <= last {
		t.Fatal("cached mode did not reserve ahead; the test shows nothing")
	}
	for s := range segment.OrderedShards {
		if err := a.a.Release(context.Background(), s); err != nil {
			t.Fatal(err)
		}
	}
	if got := store.row(Key{"chat", "k"}); got != last {
		t.Fatalf("after the hand-off the row is %d, want the exact %d", got, last)
	}
	if _, err := a.a.Take(context.Background(), biz, "k", 1, segment.RequestID{}); err == nil {
		t.Fatal("answered after handing the shard off")
	}
	b := newNode(t, store, clk, "b:1")
	b.acquireAll(t, 2, time.Time{})
	r, err := b.a.Take(context.Background(), biz, "k", 1, segment.RequestID{})
	if err != nil || r.First != last+1 {
		t.Fatalf("next owner: %v %v, want %d: a gap after a planned hand-off", r, err, last+1)
	}
}

func TestRequestIDs(t *testing.T) {
	store := newFakeStore()
	clk := newFakeClock()
	a := newNode(t, store, clk, "a:1")
	a.acquireAll(t, 1, time.Time{})
	gapless := bizMode("chat", segment.OrderedGapless)
	r1, err := a.a.Take(context.Background(), gapless, "k", 3, segment.RequestID{ID: "req-1"})
	if err != nil {
		t.Fatal(err)
	}
	again, err := a.a.Take(context.Background(), gapless, "k", 3, segment.RequestID{ID: "req-1"})
	if err != nil || again != r1 {
		t.Fatalf("replay from memory: %v %v, want %v", again, err, r1)
	}
	if _, err := a.a.Take(context.Background(), gapless, "other", 3, segment.RequestID{ID: "req-1"}); !errors.Is(err, segment.ErrRequestMismatch) {
		t.Fatalf("reused id: %v", err)
	}
	// A new owner has no memory of it: gapless finds it in the store.
	b := newNode(t, store, clk, "b:1")
	b.acquireAll(t, 2, time.Time{})
	again, err = b.a.Take(context.Background(), gapless, "k", 3, segment.RequestID{ID: "req-1"})
	if err != nil || again != r1 {
		t.Fatalf("gapless replay on a new owner: %v %v, want %v", again, err, r1)
	}
	// ... and the allocation the replay displaced is a gap, not reused.
	next, err := b.a.Take(context.Background(), gapless, "k", 1, segment.RequestID{})
	if err != nil || next.First <= r1.Last {
		t.Fatalf("after the replay: %v %v", next, err)
	}
	// Cached: in memory only; a new owner answers a fresh range above.
	cached := bizMode("chat", segment.OrderedCached)
	c1, err := b.a.Take(context.Background(), cached, "k", 1, segment.RequestID{ID: "req-2"})
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := b.a.Take(context.Background(), cached, "k", 1, segment.RequestID{ID: "req-2"}); again != c1 {
		t.Fatalf("cached replay on the same owner: %v, want %v", again, c1)
	}
	c := newNode(t, store, clk, "c:1")
	c.acquireAll(t, 3, time.Time{})
	fresh, err := c.a.Take(context.Background(), cached, "k", 1, segment.RequestID{ID: "req-2"})
	if err != nil || fresh.First <= c1.Last {
		t.Fatalf("cached retry on a new owner: %v %v, want a fresh range above %d", fresh, err, c1.Last)
	}
}

func TestConcurrentRetriesOfOneIDGetOneRange(t *testing.T) {
	store := newFakeStore()
	store.delay = 2 * time.Millisecond
	clk := newFakeClock()
	a := newNode(t, store, clk, "a:1")
	a.acquireAll(t, 1, time.Time{})
	var wg sync.WaitGroup
	got := make([]segment.Range, 8)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := a.a.Take(context.Background(), bizMode("chat", segment.OrderedGapless), "k", 2, segment.RequestID{ID: "same"})
			if err != nil {
				t.Error(err)
			}
			got[i] = r
		}()
	}
	wg.Wait()
	for _, r := range got {
		if r != got[0] {
			t.Fatalf("concurrent attempts of one id got %v", got)
		}
	}
}

func TestStoreBehindIsRaisedAboveAnswered(t *testing.T) {
	store := newFakeStore()
	clk := newFakeClock()
	a := newNode(t, store, clk, "a:1")
	a.acquireAll(t, 1, time.Time{})
	biz := bizMode("chat", segment.OrderedGapless)
	var last int64
	for range 20 {
		r, err := a.a.Take(context.Background(), biz, "k", 1, segment.RequestID{})
		if err != nil {
			t.Fatal(err)
		}
		last = r.Last
	}
	// A lossy failover: the row goes back; this node takes the shard
	// again in a new term.
	store.mu.Lock()
	store.rows[Key{"chat", "k"}] = 5
	store.mu.Unlock()
	a.a.Lost(segment.Shard("k"))
	if err := a.a.Acquire(context.Background(), Grant{Shard: segment.Shard("k"), Epoch: 2}); err != nil {
		t.Fatal(err)
	}
	r, err := a.a.Take(context.Background(), biz, "k", 1, segment.RequestID{})
	if err != nil || r.First <= last {
		t.Fatalf("after the store went back: %v %v, want above %d", r, err, last)
	}
	if a.a.Stats().Regressions != 1 {
		t.Fatal("regression not counted")
	}
	var remembered int64
	a.a.Remembered(func(biz, sub string, l int64) {
		if sub == "k" {
			remembered = l
		}
	})
	if remembered != r.Last {
		t.Fatalf("remembered %d, want %d", remembered, r.Last)
	}
}

func TestPersistFailureFailsOnlyItsRequests(t *testing.T) {
	store := newFakeStore()
	clk := newFakeClock()
	a := newNode(t, store, clk, "a:1")
	a.acquireAll(t, 1, time.Time{})
	biz := bizMode("chat", segment.OrderedGapless)
	if _, err := a.a.Take(context.Background(), biz, "k", 1, segment.RequestID{}); err != nil {
		t.Fatal(err)
	}
	store.mu.Lock()
	store.failNext = errors.New("connection reset")
	store.mu.Unlock()
	_, err := a.a.Take(context.Background(), biz, "k", 1, segment.RequestID{})
	if !errors.Is(err, segment.ErrUnavailable) {
		t.Fatalf("failed persist: %v", err)
	}
	r, err := a.a.Take(context.Background(), biz, "k", 1, segment.RequestID{})
	if err != nil || r.First != 3 {
		t.Fatalf("after a failed persist: %v %v, want 3 (2 is the failed request's gap)", r, err)
	}
}

func TestManyKeysAcrossShardsStayIncreasing(t *testing.T) {
	store := newFakeStore()
	clk := newFakeClock()
	a := newNode(t, store, clk, "a:1")
	a.acquireAll(t, 1, time.Time{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	got := map[string][]int64{}
	for c := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mode := segment.OrderedGapless
			if c%2 == 1 {
				mode = segment.OrderedCached
			}
			for i := range 200 {
				sub := fmt.Sprintf("key-%d", (c*7+i)%64)
				r, err := a.a.Take(context.Background(), bizMode("chat", mode), sub, 1, segment.RequestID{})
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				got[sub] = append(got[sub], r.First)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for sub, vs := range got {
		sort.Slice(vs, func(i, j int) bool { return vs[i] < vs[j] })
		for i := 1; i < len(vs); i++ {
			if vs[i] == vs[i-1] {
				t.Fatalf("key %s: %d twice", sub, vs[i])
			}
		}
	}
}

func TestPipelinedPersistsCommittingOutOfOrder(t *testing.T) {
	// Up to MaxInFlight persists of one shard run at once and commit in
	// any order; the row must still end at the last answer and every
	// answer be durable when sent.
	store := newFakeStore()
	store.jitter = true
	clk := newFakeClock()
	coord := newFakeCoord("a:1", clk.Now().Add(time.Hour))
	a, err := New(Config{Store: store, Coordinator: coord, Clock: clk, Self: "a:1", MaxInFlight: 4})
	if err != nil {
		t.Fatal(err)
	}
	n := &node{a: a, coord: coord}
	n.acquireAll(t, 1, time.Time{})
	biz := bizMode("chat", segment.OrderedGapless)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var violations []string
	for c := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 40 {
				r, err := n.a.Take(context.Background(), biz, "hot", 1, segment.RequestID{ID: fmt.Sprintf("c%d-%d", c, rand.Int())})
				if err != nil {
					t.Error(err)
					return
				}
				if got := store.row(Key{"chat", "hot"}); got < r.Last {
					mu.Lock()
					violations = append(violations, fmt.Sprintf("answered %d with the row at %d", r.Last, got))
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if len(violations) > 0 {
		t.Fatalf("answers not durable when sent: %v", violations[:min(5, len(violations))])
	}
	if got := store.row(Key{"chat", "hot"}); got != 640 {
		t.Fatalf("row %d after 640 answers", got)
	}
}

func TestLocalClaimsAboveAStoredEpoch(t *testing.T) {
	// A standalone node whose clock is behind an earlier start's epoch
	// claims above the stored one instead of failing to start.
	store := newFakeStore()
	store.epochs[7] = time.Now().Add(time.Hour).UnixMilli()
	l := NewLocal("a:1")
	a, err := New(Config{Store: store, Coordinator: l, Self: "a:1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Start(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	if got := l.Owner(7).Epoch; got != store.epochs[7] || got <= l.Owner(6).Epoch {
		t.Fatalf("shard 7 epoch %d, stored %d", got, store.epochs[7])
	}
	if _, err := a.Take(context.Background(), bizMode("chat", segment.OrderedGapless), "k", 1, segment.RequestID{}); err != nil {
		t.Fatal(err)
	}
}

func TestRequestMemoryBounded(t *testing.T) {
	rm := newRequestMemory(100, DefaultMaxRequestBytes, time.Minute)
	now := time.Unix(0, 0)
	for i := range 10_000 {
		e, first := rm.begin(RequestKey{Biz: "b", ID: fmt.Sprint(i)}, "k", 1, now)
		if !first {
			t.Fatal("a new id was not first")
		}
		rm.finish(e, segment.Range{First: int64(i) + 1, Last: int64(i) + 1}, nil)
	}
	if rm.mappedLen() > 101 || rm.live > 101 {
		t.Fatalf("memory holds %d ids, %d in its list: not bounded", rm.mappedLen(), rm.live)
	}
	if _, first := rm.begin(RequestKey{Biz: "b", ID: "9999"}, "k", 1, now); first {
		t.Fatal("the most recent id was forgotten")
	}
	now = now.Add(2 * time.Minute)
	if _, first := rm.begin(RequestKey{Biz: "b", ID: "9998"}, "k", 1, now); !first {
		t.Fatal("an id past the TTL was remembered")
	}
}

func BenchmarkTakeWithRequestIDs(b *testing.B) {
	// Every Go client call carries a request id: the memory of ids must
	// not cost more per request as it fills (it once copied its queue).
	store := newFakeStore()
	clk := newFakeClock()
	coord := newFakeCoord("a:1", clk.Now().Add(time.Hour))
	a, _ := New(Config{Store: store, Coordinator: coord, Clock: clk, Self: "a:1", MaxRequests: 10_000})
	for s := range segment.OrderedShards {
		_ = a.Acquire(context.Background(), Grant{Shard: s, Epoch: 1})
	}
	biz := bizMode("chat", segment.OrderedCached)
	b.ResetTimer()
	for i := range b.N {
		if i%1000 == 0 {
			clk.Add(10 * time.Millisecond)
		}
		if _, err := a.Take(context.Background(), biz, "hot", 1, segment.RequestID{ID: strconv.Itoa(i)}); err != nil {
			b.Fatal(err)
		}
	}
}

// TestPersistDurationsHistogram: every persist attempt, good or failed, is
// observed in Stats.PersistDurations, in the bucket of its duration, and
// the histogram agrees with the persist counters.
func TestPersistDurationsHistogram(t *testing.T) {
	store := newFakeStore()
	clk := newFakeClock()
	n := newNode(t, store, clk, "a:1")
	n.acquireAll(t, 1, time.Time{})
	if h := n.a.Stats().PersistDurations; h.Count != 0 || h.Sum != 0 || len(h.Counts) != len(PersistBuckets) || len(h.Bounds) != len(PersistBuckets) {
		t.Fatalf("before any persist: %+v, want an empty histogram over PersistBuckets", h)
	}
	biz := bizMode("chat", segment.OrderedGapless)
	if _, err := n.a.Take(context.Background(), biz, "k", 1, segment.RequestID{}); err != nil {
		t.Fatal(err)
	}
	store.mu.Lock()
	store.delay = 20 * time.Millisecond
	store.mu.Unlock()
	if _, err := n.a.Take(context.Background(), biz, "k", 1, segment.RequestID{}); err != nil {
		t.Fatal(err)
	}
	store.mu.Lock()
	store.failNext = errors.New("connection reset")
	store.mu.Unlock()
	if _, err := n.a.Take(context.Background(), biz, "k", 1, segment.RequestID{}); !errors.Is(err, segment.ErrUnavailable) {
		t.Fatalf("failed persist: %v", err)
	}
	st := n.a.Stats()
	h := st.PersistDurations
	if h.Count != 3 || h.Count != st.Persists+st.PersistFailures {
		t.Fatalf("histogram count %d, persists %d + failures %d: want 3, every attempt", h.Count, st.Persists, st.PersistFailures)
	}
	if d := h.Sum - st.PersistSeconds; d > 1e-9 || d < -1e-9 || h.Sum < 0.04 {
		t.Fatalf("histogram sum %v, PersistSeconds %v: want equal, and at least the two 20ms persists", h.Sum, st.PersistSeconds)
	}
	for i := range h.Counts {
		if i > 0 && h.Counts[i] < h.Counts[i-1] || h.Counts[i] > h.Count {
			t.Fatalf("bucket counts %v (count %d) not cumulative", h.Counts, h.Count)
		}
		if i == 5 && h.Counts[i] > 1 { // le=0.016
			t.Fatalf("bucket le=%v holds %d of %v: the two 20ms persists are not above it", h.Bounds[i], h.Counts[i], h.Counts)
		}
	}
}

// TestDurationsBuckets: an observation counts in the first bucket whose
// bound it does not exceed, and in every later one; above the last bound
// only in Count.
func TestDurationsBuckets(t *testing.T) {
	var h durations
	for _, d := range []time.Duration{0, 500 * time.Microsecond, 600 * time.Microsecond, 3 * time.Millisecond, time.Hour} {
		h.observe(d)
	}
	s := h.snapshot()
	want := []uint64{2, 3, 3, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4}
	if s.Count != 5 || fmt.Sprint(s.Counts) != fmt.Sprint(want) {
		t.Fatalf("counts %v count %d, want %v count 5", s.Counts, s.Count, want)
	}
	if wantSum := (time.Hour + 4100*time.Microsecond).Seconds(); s.Sum < wantSum-1e-9 || s.Sum > wantSum+1e-9 {
		t.Fatalf("sum %v, want %v", s.Sum, wantSum)
	}
	if PersistBuckets[0] != 0.0005 || PersistBuckets[len(PersistBuckets)-1] != 0.0005*(1<<13) {
		t.Fatalf("PersistBuckets %v", PersistBuckets)
	}
}

// TestFencedPersistTellsCoordinator: a persist the store fences drops the
// shard and reports it (Coordinator.Fenced), so the coordinator gives the
// shard's lease up instead of keeping a shard nobody serves (issue 29,
// "What to build" 5).
func TestFencedPersistTellsCoordinator(t *testing.T) {
	store := newFakeStore()
	clk := newFakeClock()
	old := newNode(t, store, clk, "a:1")
	old.acquireAll(t, 1, time.Time{})
	biz := bizMode("chat", segment.OrderedGapless)
	if _, err := old.a.Take(context.Background(), biz, "k", 1, segment.RequestID{}); err != nil {
		t.Fatal(err)
	}
	nw := newNode(t, store, clk, "b:1")
	nw.acquireAll(t, 2, time.Time{})
	if _, err := old.a.Take(context.Background(), biz, "k", 1, segment.RequestID{}); err == nil {
		t.Fatal("the deposed owner answered after a newer epoch was claimed")
	}
	if got := old.coord.fenced.Load(); got != 1 {
		t.Fatalf("Coordinator.Fenced called %d times, want 1", got)
	}
	if st := old.a.Stats(); st.ShardsOwned != segment.OrderedShards-1 {
		t.Fatalf("old owner holds %d shards after the fence, want %d", st.ShardsOwned, segment.OrderedShards-1)
	}
}

// TestSameAddressSameEpochRefused: a restored ZooKeeper grants an epoch a
// second time, to a new process at the address of the first (a restarted
// pod with a stable name) while the first, paused, still holds the epoch.
// The second claim is refused (a *FencedError at the stored epoch, which
// makes the coordinator wait out the first owner's lease: issue 29, hole
// b); before, both claims carried the bare address and the store took the
// second for a retry of the first. A retry by the same process passes.
func TestSameAddressSameEpochRefused(t *testing.T) {
	store := newFakeStore()
	clk := newFakeClock()
	first := newNode(t, store, clk, "a:1")
	first.acquireAll(t, 5, time.Time{})
	second := newNode(t, store, clk, "a:1")
	err := second.a.Acquire(context.Background(), Grant{Shard: 3, Epoch: 5})
	var fe *FencedError
	if !errors.As(err, &fe) || fe.Stored != 5 {
		t.Fatalf("a second process at the same address claiming the same epoch: %v, want a *FencedError at epoch 5", err)
	}
	first.a.Lost(3)
	if err := first.a.Acquire(context.Background(), Grant{Shard: 3, Epoch: 5}); err != nil {
		t.Fatalf("the same process claiming its epoch again: %v", err)
	}
}

// BenchmarkTakeCached: one cached answer from memory on the system clocks
// (SystemClock and WallClock, as in production), the path where the lease
// checks' clock reads are the largest share of the work. The Clock
// sub-benchmarks measure one read of each clock, for comparison.
func BenchmarkTakeCached(b *testing.B) {
	b.Run("take", func(b *testing.B) {
		coord := newFakeCoord("a:1", time.Now().Add(time.Hour))
		a, err := New(Config{Store: newFakeStore(), Coordinator: coord, Clock: SystemClock{}, Self: "a:1", MaxReservation: 1 << 40})
		if err != nil {
			b.Fatal(err)
		}
		for s := range segment.OrderedShards {
			_ = a.Acquire(context.Background(), Grant{Shard: s, Epoch: 1})
		}
		biz := bizMode("chat", segment.OrderedCached)
		for b.Loop() {
			if _, err := a.Take(context.Background(), biz, "hot", 1, segment.RequestID{}); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(a.Stats().FromMemory)/float64(b.N), "memory/op")
	})
	for name, clk := range map[string]Clock{"clock=system": SystemClock{}, "clock=wall": WallClock{}} {
		b.Run(name, func(b *testing.B) {
			var t time.Time
			for b.Loop() {
				t = clk.Now()
			}
			_ = t
		})
	}
}

// TestShardChangedWakesAtEveryChangeOfTerm: the channel ShardChanged gives
// is closed when the shard's term is installed (Acquire), handed off
// (Release) and lost (Lost), and only then: the server's ride-out of a
// shard in transition waits on it instead of a back-off step (issue 31).
func TestShardChangedWakesAtEveryChangeOfTerm(t *testing.T) {
	ctx := context.Background()
	n := newNode(t, newFakeStore(), newFakeClock(), "a:1")
	biz := bizMode("chat", segment.OrderedCached)
	idx := segment.Shard("k")
	closed := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	steps := []struct {
		what   string
		change func() error
		serves bool
	}{
		{"acquire", func() error { return n.a.Acquire(ctx, Grant{Shard: idx, Epoch: 1}) }, true},
		{"hand-off", func() error { return n.a.Release(ctx, idx) }, false},
		{"acquire again", func() error { return n.a.Acquire(ctx, Grant{Shard: idx, Epoch: 2}) }, true},
		{"loss", func() error { n.a.Lost(idx); return nil }, false},
	}
	for _, s := range steps {
		ch := n.a.ShardChanged("k")
		if _, err := n.a.Take(ctx, biz, "k", 1, segment.RequestID{}); (err == nil) == s.serves {
			t.Fatalf("before the %s: Take %v", s.what, err)
		}
		// Another shard's change, and a look at this one, wake nobody.
		other := (idx + 1) % segment.OrderedShards
		if err := n.a.Acquire(ctx, Grant{Shard: other, Epoch: 1}); err != nil {
			t.Fatal(err)
		}
		n.a.Lost(other)
		if closed(ch) {
			t.Fatalf("before the %s: the channel is closed without a change of the shard", s.what)
		}
		if err := s.change(); err != nil {
			t.Fatalf("%s: %v", s.what, err)
		}
		if !closed(ch) {
			t.Fatalf("after the %s: the channel taken before it is not closed: a ride-out would wait for its timer", s.what)
		}
		if _, err := n.a.Take(ctx, biz, "k", 1, segment.RequestID{}); (err == nil) != s.serves {
			t.Fatalf("after the %s: Take %v", s.what, err)
		}
		if closed(n.a.ShardChanged("k")) {
			t.Fatalf("after the %s: a new channel is closed already", s.what)
		}
	}
}
