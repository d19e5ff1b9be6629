package segment_test

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idgen/idgen/clock/clocktest"
	"github.com/idgen/idgen/segment"
	"github.com/idgen/idgen/segment/memstore"
)

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// countingStore counts ReserveSegment calls of any store.
type countingStore struct {
	segment.Store
	segments atomic.Int64
}

func (c *countingStore) ReserveSegment(ctx context.Context, biz string, step int64) (segment.Range, error) {
	c.segments.Add(1)
	return c.Store.ReserveSegment(ctx, biz, step)
}

// TestUnorderedNoDuplicates has 16 goroutines take 100k IDs each in mixed
// batch sizes; the IDs must be unique and the refills few (the step grows
// and loads happen in the background).
func TestUnorderedNoDuplicates(t *testing.T) {
	const workers = 16
	perWorker := int64(100_000)
	if testing.Short() {
		perWorker = 10_000
	}
	mixes := []struct {
		name    string
		batches []int64
	}{
		{"single", []int64{1}},
		{"mixed", []int64{1, 1, 1, 1, 3, 100, 1, 17, 1000}},
	}
	for _, st := range stores {
		for _, mix := range mixes {
			t.Run(st.Name+"/"+mix.name, func(t *testing.T) {
				batches := mix.batches
				s := st.Open(t)
				biz := mustCreate(t, s, segment.Biz{Name: "order", Step: 1000})
				cs := &countingStore{Store: s}
				u := newUnordered(t, segment.UnorderedConfig{Store: cs})

				got := make([][]segment.Range, workers)
				errs := make([]error, workers)
				var wg sync.WaitGroup
				for w := range workers {
					wg.Go(func() {
						ctx := context.Background()
						for left, i := perWorker, w; left > 0; i++ {
							n := min(batches[i%len(batches)], left)
							rs, err := u.Take(ctx, biz, n)
							if err != nil {
								errs[w] = err
								return
							}
							left -= total(rs)
							for _, r := range rs { // merge adjacent ranges to keep memory small
								if k := len(got[w]); k > 0 && got[w][k-1].Last+1 == r.First {
									got[w][k-1].Last = r.Last
								} else {
									got[w] = append(got[w], r)
								}
							}
						}
					})
				}
				wg.Wait()

				var all []segment.Range
				for w := range workers {
					if errs[w] != nil {
						t.Fatalf("worker %d: %v", w, errs[w])
					}
					all = append(all, got[w]...)
				}
				slices.SortFunc(all, func(a, b segment.Range) int { return cmp.Compare(a.First, b.First) })
				var sum int64
				for i, r := range all {
					if i > 0 && r.First <= all[i-1].Last {
						t.Fatalf("duplicate IDs: %v overlaps %v", r, all[i-1])
					}
					sum += r.Len()
				}
				if sum != workers*perWorker {
					t.Fatalf("handed out %d IDs, want %d", sum, workers*perWorker)
				}
				loads := cs.segments.Load()
				stats := statsOf(u, biz.Name)
				t.Logf("%d IDs from %d store calls (last step %d, %d requests waited for a load)", sum, loads, stats.Step, stats.Waits)
				// Starting at step 1000 and doubling per fast segment, 1.6M IDs
				// need about a dozen loads; one per batch would be thousands.
				if loads > 40 {
					t.Errorf("%d store calls for %d IDs: refills are not batched in segments", loads, sum)
				}
			})
		}
	}
}

// TestUnorderedRefillInBackground checks that the next segment is loaded
// at the low-water mark while the current one keeps serving, and that a
// hanging load is never doubled.
func TestUnorderedRefillInBackground(t *testing.T) {
	ms := memstore.New()
	biz := mustCreate(t, ms, segment.Biz{Name: "bg", Step: 100, LowWaterPct: 20})
	u := newUnordered(t, segment.UnorderedConfig{Store: ms, Clock: clocktest.New(t0)})

	if rs := take(t, u, biz, 1); rs[0].First != 1 {
		t.Fatalf("first ID %v, want 1", rs)
	}
	waitIdle(t, u, biz.Name)
	take(t, u, biz, 78) // 21 left: above the low-water mark
	if n := ms.SegmentCalls(); n != 1 {
		t.Fatalf("%d store calls above the low-water mark, want 1", n)
	}

	release := ms.Block()
	defer release()
	take(t, u, biz, 1) // 20 left: the low-water mark starts a load, which hangs
	waitFor(t, "the background load to reach the store", func() bool { return ms.Blocked() == 1 })
	if rs := take(t, u, biz, 20); rs[0].First != 81 || rs[len(rs)-1].Last != 100 {
		t.Fatalf("buffered IDs while loading: %v, want 81..100", rs)
	}
	for range 5 {
		_, err := u.Take(shortCtx(t), biz, 1)
		if !errors.Is(err, segment.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Take with both buffers empty: %v, want ErrUnavailable at the deadline", err)
		}
	}
	if n := ms.SegmentCalls(); n != 2 {
		t.Fatalf("%d store calls, want 2: one load in flight per business", n)
	}

	release()
	waitIdle(t, u, biz.Name)
	if rs := take(t, u, biz, 1); rs[0].First != 101 {
		t.Fatalf("after the load: %v, want 101", rs)
	}
	if s := statsOf(u, biz.Name); s.LoadsOK != 2 || s.Waits < 5 {
		t.Errorf("stats %+v, want 2 loads and at least 5 waits", s)
	}
}

// TestUnorderedBatches checks how batches map onto segments.
func TestUnorderedBatches(t *testing.T) {
	tests := []struct {
		name  string
		step  int64
		takes []int64
		want  [][]segment.Range // per take
	}{
		{"within one segment", 10, []int64{3, 4},
			[][]segment.Range{{{First: 1, Last: 3}}, {{First: 4, Last: 7}}}},
		{"spanning two segments", 10, []int64{7, 5},
			[][]segment.Range{{{First: 1, Last: 7}}, {{First: 8, Last: 10}, {First: 11, Last: 12}}}},
		{"batch larger than the step", 10, []int64{1000},
			[][]segment.Range{{{First: 1, Last: 1000}}}},
		{"batch larger than both buffers", 10, []int64{8, 50},
			[][]segment.Range{{{First: 1, Last: 8}}, {{First: 9, Last: 10}, {First: 11, Last: 30}, {First: 31, Last: 58}}}},
		{"exactly a segment", 10, []int64{10, 1},
			[][]segment.Range{{{First: 1, Last: 10}}, {{First: 11, Last: 11}}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ms := memstore.New()
			biz := mustCreate(t, ms, segment.Biz{Name: "b", Step: tc.step})
			u := newUnordered(t, segment.UnorderedConfig{Store: ms, Clock: clocktest.New(t0)})
			for i, n := range tc.takes {
				got := take(t, u, biz, n)
				if !slices.Equal(got, tc.want[i]) {
					t.Fatalf("take %d (%d IDs) = %v, want %v", i, n, got, tc.want[i])
				}
				waitIdle(t, u, biz.Name)
			}
		})
	}
}

// TestUnorderedStoreDown: buffered IDs keep serving through a store outage,
// then requests fail fast with ErrUnavailable, and the load is retried
// after the backoff once there is demand.
func TestUnorderedStoreDown(t *testing.T) {
	ms := memstore.New()
	clk := clocktest.New(t0)
	biz := mustCreate(t, ms, segment.Biz{Name: "down", Step: 100})
	var hookOK, hookErr atomic.Int64
	u := newUnordered(t, segment.UnorderedConfig{
		Store: ms, Clock: clk, MaxStep: 100, RetryBackoff: time.Second, MaxRetryBackoff: 4 * time.Second,
		OnLoad: func(_ string, _ time.Duration, err error) {
			if err != nil {
				hookErr.Add(1)
			} else {
				hookOK.Add(1)
			}
		},
	})
	take(t, u, biz, 1)
	waitIdle(t, u, biz.Name)

	ms.FailNext(1000, nil)
	take(t, u, biz, 79) // low-water mark: the background load fails
	if s := waitIdle(t, u, biz.Name); s.LoadFailures != 1 {
		t.Fatalf("stats %+v, want one load failure", s)
	}
	if rs := take(t, u, biz, 20); rs[0].First != 81 {
		t.Fatalf("buffered IDs during the outage: %v, want 81..100", rs)
	}
	// Nothing buffered, backoff running: fail at once, do not call the store.
	calls := ms.SegmentCalls()
	_, err := u.Take(context.Background(), biz, 1)
	if !errors.Is(err, segment.ErrUnavailable) || !errors.Is(err, memstore.ErrInjected) {
		t.Fatalf("Take with the store down: %v, want ErrUnavailable with the store's error", err)
	}
	if ms.SegmentCalls() != calls {
		t.Fatal("a request during the backoff called the store")
	}
	// After the backoff the next demand retries (and fails again).
	clk.Add(2 * time.Second)
	if _, err := u.Take(shortCtx(t), biz, 1); !errors.Is(err, segment.ErrUnavailable) {
		t.Fatalf("retry with the store still down: %v", err)
	}
	if ms.SegmentCalls() != calls+1 {
		t.Fatalf("store calls %d, want %d: one retry after the backoff", ms.SegmentCalls(), calls+1)
	}
	// The store is back.
	ms.FailNext(0, nil)
	clk.Add(10 * time.Second)
	if rs := take(t, u, biz, 1); rs[0].First != 101 {
		t.Fatalf("after recovery: %v, want 101", rs)
	}
	s := waitIdle(t, u, biz.Name)
	if s.LoadFailures != 2 || s.LoadsOK != 2 {
		t.Errorf("stats %+v, want 2 failures and 2 good loads", s)
	}
	waitFor(t, "OnLoad calls", func() bool { return hookOK.Load() == 2 && hookErr.Load() == 2 })
}

// TestUnorderedWaitBoundedByDeadline: with both buffers empty and the store
// hanging, a request gives up at its deadline with ErrUnavailable.
func TestUnorderedWaitBoundedByDeadline(t *testing.T) {
	for _, st := range stores {
		t.Run(st.Name, func(t *testing.T) {
			s := st.Open(t)
			biz := mustCreate(t, s, segment.Biz{Name: "slow"})
			gate := &gatedStore{Store: s, gate: make(chan struct{})}
			u := newUnordered(t, segment.UnorderedConfig{Store: gate})
			_, err := u.Take(shortCtx(t), biz, 1)
			if !errors.Is(err, segment.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Take with a hanging store: %v, want ErrUnavailable at the deadline", err)
			}
			close(gate.gate)
			if rs := take(t, u, biz, 1); rs[0].First != 1 {
				t.Fatalf("after the store answered: %v, want 1 (the hanging load's segment)", rs)
			}
		})
	}
}

// gatedStore holds ReserveSegment until gate is closed, for any store.
type gatedStore struct {
	segment.Store
	gate chan struct{}
}

func (g *gatedStore) ReserveSegment(ctx context.Context, biz string, step int64) (segment.Range, error) {
	select {
	case <-g.gate:
	case <-ctx.Done():
		return segment.Range{}, ctx.Err()
	}
	return g.Store.ReserveSegment(ctx, biz, step)
}

// TestUnorderedRegression: a segment not above what was already received
// is refused, counted, and never handed out.
func TestUnorderedRegression(t *testing.T) {
	ms := memstore.New()
	clk := clocktest.New(t0)
	biz := mustCreate(t, ms, segment.Biz{Name: "reg", Step: 100})
	u := newUnordered(t, segment.UnorderedConfig{Store: ms, Clock: clk, MaxStep: 100})
	seen := map[int64]bool{}
	takeAll := func(n int64) {
		t.Helper()
		for _, r := range take(t, u, biz, n) {
			for id := r.First; id <= r.Last; id++ {
				if seen[id] {
					t.Fatalf("ID %d handed out twice", id)
				}
				seen[id] = true
			}
		}
		waitIdle(t, u, biz.Name)
	}
	takeAll(80) // 1..80; the low-water load brings 101..200
	if err := ms.SetMaxID(biz.Name, 50); err != nil {
		t.Fatal(err) // the store lost 51..200: a failover to a lagging replica
	}
	takeAll(100) // 81..180; the next load returns 51..150 and is refused
	s := statsOf(u, biz.Name)
	if s.Regressions != 1 || s.LoadFailures != 1 {
		t.Fatalf("stats %+v, want one regression", s)
	}
	takeAll(20) // 181..200 still buffered
	_, err := u.Take(context.Background(), biz, 1)
	if !errors.Is(err, segment.ErrRegressed) || !errors.Is(err, segment.ErrUnavailable) {
		t.Fatalf("Take after the refusal: %v, want ErrRegressed", err)
	}
	// The store catches up; the next demand after the backoff is served.
	if err := ms.SetMaxID(biz.Name, 1000); err != nil {
		t.Fatal(err)
	}
	clk.Add(time.Minute)
	if rs := take(t, u, biz, 1); rs[0].First != 1001 {
		t.Fatalf("after the store caught up: %v, want 1001", rs)
	}
}

// TestUnorderedFloor: segments reaching the floor are refused with
// ErrExhausted; IDs already buffered below it are still used.
func TestUnorderedFloor(t *testing.T) {
	tests := []struct {
		name       string
		floor      int64
		wantServed int64
	}{
		{"first segment reaches the floor", 100, 0},
		{"third segment reaches the floor", 201, 200},
		{"floor just above a segment", 301, 300},
		{"last segment shrunk to fit below the floor", 250, 249},
		{"no floor in reach", 1_000_000, 500},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ms := memstore.New()
			biz := mustCreate(t, ms, segment.Biz{Name: "fl", Step: 100})
			u := newUnordered(t, segment.UnorderedConfig{Store: ms, Clock: clocktest.New(t0), MaxStep: 100, Floor: tc.floor})
			var served int64
			var err error
			for served < 500 {
				var rs []segment.Range
				if rs, err = u.Take(context.Background(), biz, 1); err != nil {
					break
				}
				if rs[0].First >= tc.floor {
					t.Fatalf("ID %d handed out at or above the floor %d", rs[0].First, tc.floor)
				}
				served++
			}
			if served != tc.wantServed {
				t.Fatalf("served %d IDs below the floor, want %d (last error %v)", served, tc.wantServed, err)
			}
			if served == 500 {
				return
			}
			if !errors.Is(err, segment.ErrExhausted) {
				t.Fatalf("error at the floor: %v, want ErrExhausted", err)
			}
			calls := ms.SegmentCalls()
			if _, err := u.Take(context.Background(), biz, 1); !errors.Is(err, segment.ErrExhausted) {
				t.Fatalf("second Take at the floor: %v", err)
			}
			if ms.SegmentCalls() != calls || !statsOf(u, biz.Name).Exhausted {
				t.Error("an exhausted business keeps loading segments")
			}
		})
	}
}

// TestUnorderedAdaptiveStep drives the fake clock between segments: fast
// segments double the step up to MaxStep, slow ones halve it down to the
// business's step.
func TestUnorderedAdaptiveStep(t *testing.T) {
	ms := memstore.New()
	clk := clocktest.New(t0)
	biz := mustCreate(t, ms, segment.Biz{Name: "adapt", Step: 100})
	u := newUnordered(t, segment.UnorderedConfig{Store: ms, Clock: clk, SegmentDuration: 15 * time.Minute, MaxStep: 800})
	steps := []struct {
		after time.Duration // how long the previous segment lasted
		want  int64
	}{
		{0, 100},                // first load: the business's step
		{time.Minute, 200},      // used up in 1m < 15m: double
		{time.Minute, 400},      //
		{time.Minute, 800},      //
		{time.Minute, 800},      // capped at MaxStep
		{20 * time.Minute, 800}, // between 15m and 30m: keep
		{40 * time.Minute, 400}, // over 30m: halve
		{40 * time.Minute, 200}, //
		{40 * time.Minute, 100}, //
		{40 * time.Minute, 100}, // never below the business's step
	}
	for i, s := range steps {
		clk.Add(s.after)
		// Drain what is buffered in batches no larger than the business's
		// step (a larger batch would raise the step by itself); draining
		// loads the next segment.
		left := statsOf(u, biz.Name).CurrentRemaining
		if i == 0 {
			left = 1
		}
		for left > 0 {
			n := min(left, biz.Step)
			take(t, u, biz, n)
			left -= n
		}
		if got := waitIdle(t, u, biz.Name); got.Step != s.want {
			t.Fatalf("segment %d after %v: step %d, want %d", i, s.after, got.Step, s.want)
		}
	}
}

func TestUnorderedUnknownBiz(t *testing.T) {
	ms := memstore.New()
	u := newUnordered(t, segment.UnorderedConfig{Store: ms})
	for i := range 2 {
		_, err := u.Take(context.Background(), segment.Biz{Name: "nope"}, 1)
		if !errors.Is(err, segment.ErrUnknownBiz) {
			t.Fatalf("Take %d on an unknown business: %v, want ErrUnknownBiz", i, err)
		}
	}
}

func TestUnorderedInvalidArguments(t *testing.T) {
	ms := memstore.New()
	biz := mustCreate(t, ms, segment.Biz{Name: "b"})
	u := newUnordered(t, segment.UnorderedConfig{Store: ms})
	tests := []struct {
		name string
		biz  segment.Biz
		n    int64
	}{
		{"zero count", biz, 0},
		{"negative count", biz, -1},
		{"count above MaxBatch", biz, segment.MaxBatch + 1},
		{"no business name", segment.Biz{}, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := u.Take(context.Background(), tc.biz, tc.n); !errors.Is(err, segment.ErrInvalid) {
				t.Fatalf("Take: %v, want ErrInvalid", err)
			}
		})
	}
	if ms.SegmentCalls() != 0 {
		t.Error("invalid requests reached the store")
	}
}

func TestUnorderedConfigValidation(t *testing.T) {
	ms := memstore.New()
	tests := []struct {
		name  string
		cfg   segment.UnorderedConfig
		field string
	}{
		{"no store", segment.UnorderedConfig{}, "Store"},
		{"negative duration", segment.UnorderedConfig{Store: ms, SegmentDuration: -1}, "SegmentDuration"},
		{"max step too large", segment.UnorderedConfig{Store: ms, MaxStep: segment.MaxStep + 1}, "MaxStep"},
		{"negative floor", segment.UnorderedConfig{Store: ms, Floor: -1}, "Floor"},
		{"negative load timeout", segment.UnorderedConfig{Store: ms, LoadTimeout: -1}, "LoadTimeout"},
		{"negative backoff", segment.UnorderedConfig{Store: ms, RetryBackoff: -1}, "RetryBackoff"},
		{"max backoff below backoff", segment.UnorderedConfig{Store: ms, RetryBackoff: time.Minute, MaxRetryBackoff: time.Second}, "MaxRetryBackoff"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := segment.NewUnordered(tc.cfg)
			if !errors.Is(err, segment.ErrInvalid) || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("NewUnordered: %v, want ErrInvalid naming %s", err, tc.field)
			}
		})
	}
}

// TestUnorderedClose: Close aborts a hanging load and later requests fail.
func TestUnorderedClose(t *testing.T) {
	ms := memstore.New()
	biz := mustCreate(t, ms, segment.Biz{Name: "c"})
	release := ms.Block()
	defer release()
	u, err := segment.NewUnordered(segment.UnorderedConfig{Store: ms})
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := u.Take(context.Background(), biz, 1)
		errc <- err
	}()
	waitFor(t, "the load to reach the store", func() bool { return ms.Blocked() == 1 })
	if err := u.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, segment.ErrUnavailable) {
		t.Fatalf("waiting Take at Close: %v, want ErrUnavailable", err)
	}
	if _, err := u.Take(context.Background(), biz, 1); !errors.Is(err, segment.ErrUnavailable) {
		t.Fatalf("Take after Close: %v, want ErrUnavailable", err)
	}
}

// countingGate is a gatedStore that counts reservations and the steps
// asked for.
type countingGate struct {
	gatedStore
	mu    sync.Mutex
	steps []int64
}

func (g *countingGate) ReserveSegment(ctx context.Context, biz string, step int64) (segment.Range, error) {
	g.mu.Lock()
	g.steps = append(g.steps, step)
	g.mu.Unlock()
	return g.gatedStore.ReserveSegment(ctx, biz, step)
}

// TestUnorderedWaitersServedInArrivalOrder: with the step pinned at 1, the
// requests queued behind a load are served in arrival order by the next
// load, which asks for all of them at once; no herd races for one-ID
// segments (issue 10, refill hand-off).
func TestUnorderedWaitersServedInArrivalOrder(t *testing.T) {
	ms := memstore.New()
	biz := mustCreate(t, ms, segment.Biz{Name: "fifo", Step: 1})
	g := &countingGate{gatedStore: gatedStore{Store: ms, gate: make(chan struct{})}}
	u := newUnordered(t, segment.UnorderedConfig{Store: g, MaxStep: 1})

	const n = 40
	type result struct {
		i   int
		rs  []segment.Range
		err error
	}
	results := make(chan result, n)
	for i := 0; i < n; i++ {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			rs, err := u.Take(ctx, biz, 1)
			results <- result{i, rs, err}
		}()
		// Enqueue one at a time so that arrival order is known.
		testWaitFor(t, func() bool { return statsOf(u, biz.Name).Waits == uint64(i+1) })
	}
	close(g.gate)
	got := make([]int64, n)
	for range n {
		r := <-results
		if r.err != nil || len(r.rs) != 1 || r.rs[0].Len() != 1 {
			t.Fatalf("waiter %d: %v %v", r.i, r.rs, r.err)
		}
		got[r.i] = r.rs[0].First
	}
	for i := 1; i < n; i++ {
		if got[i] <= got[i-1] {
			t.Fatalf("waiter %d got %d, not above waiter %d's %d: not served in arrival order (%v)", i, got[i], i-1, got[i-1], got)
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	// The first load was asked for the first waiter alone; the one after
	// it covers the rest of the queue.
	if len(g.steps) > 3 || g.steps[1] < n-1 {
		t.Fatalf("loads asked for %v; want the second load to cover the %d queued waiters", g.steps, n-1)
	}
}

// testWaitFor polls cond (state, not time: the bound only ends a hang).
func testWaitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestUnorderedOnWait: OnWait reports every request that waited for a
// load, with how long (on the processor's clock) and what it got, and only
// those: requests served from memory and requests refused at once during
// a failed load's backoff are not waits.
func TestUnorderedOnWait(t *testing.T) {
	ms := memstore.New()
	clk := clocktest.New(t0)
	biz := mustCreate(t, ms, segment.Biz{Name: "waits", Step: 100})
	hung := mustCreate(t, ms, segment.Biz{Name: "hung", Step: 100})
	down := mustCreate(t, ms, segment.Biz{Name: "down", Step: 100})
	type wait struct {
		biz string
		d   time.Duration
		err error
	}
	var mu sync.Mutex
	var waits []wait
	got := func() []wait {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(waits)
	}
	u := newUnordered(t, segment.UnorderedConfig{Store: ms, Clock: clk, MaxStep: 100, RetryBackoff: time.Second,
		OnWait: func(biz string, d time.Duration, err error) {
			mu.Lock()
			waits = append(waits, wait{biz, d, err})
			mu.Unlock()
		}})

	// Both buffers empty: the first request waits for the load, 40 ms.
	release := ms.Block()
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := u.Take(ctx, biz, 1)
		done <- err
	}()
	waitFor(t, "the request to wait for the load", func() bool { return ms.Blocked() == 1 && statsOf(u, biz.Name).Waits == 1 })
	clk.Add(40 * time.Millisecond)
	release()
	if err := <-done; err != nil {
		t.Fatalf("Take waiting for the first load: %v", err)
	}
	if w := got(); len(w) != 1 || w[0] != (wait{biz.Name, 40 * time.Millisecond, nil}) {
		t.Fatalf("OnWait calls %+v, want one for %q of 40ms without error", w, biz.Name)
	}
	// Served from memory: no wait.
	waitIdle(t, u, biz.Name)
	take(t, u, biz, 10)
	if w := got(); len(w) != 1 {
		t.Fatalf("requests served from memory reported as waits: %+v", w)
	}

	// A hanging store: the request waits until its deadline.
	release = ms.Block()
	if _, err := u.Take(shortCtx(t), hung, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Take with a hanging store: %v, want the deadline", err)
	}
	if w := got(); len(w) != 2 || w[1].biz != hung.Name || !errors.Is(w[1].err, segment.ErrUnavailable) || !errors.Is(w[1].err, context.DeadlineExceeded) {
		t.Fatalf("OnWait calls %+v, want a second one for %q ending at the deadline", w, hung.Name)
	}
	release()
	waitIdle(t, u, hung.Name)

	// A failed load: its waiter is reported with the error; the next
	// request, refused at once during the backoff, is not a wait.
	ms.FailNext(1, nil)
	if _, err := u.Take(context.Background(), down, 1); !errors.Is(err, memstore.ErrInjected) {
		t.Fatalf("Take with the load failing: %v", err)
	}
	if _, err := u.Take(context.Background(), down, 1); !errors.Is(err, segment.ErrUnavailable) {
		t.Fatalf("Take during the backoff: %v", err)
	}
	if w := got(); len(w) != 3 || w[2].biz != down.Name || !errors.Is(w[2].err, memstore.ErrInjected) {
		t.Fatalf("OnWait calls %+v, want a third (and last) one for %q with the load's error", w, down.Name)
	}
}
