package storetest

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/idgen/idgen/segment"
)

// concurrency is how many goroutines the concurrent checks run.
const concurrency = 16

func (s *suite) testSegmentContiguous(t *testing.T, st segment.Store) {
	a := create(t, st, segment.Biz{Name: s.name("seg_a")})
	b := create(t, st, segment.Biz{Name: s.name("seg_b")})
	tests := []struct {
		biz  string
		step int64
		want segment.Range
	}{
		{a.Name, 10, segment.Range{First: 1, Last: 10}},
		{a.Name, 5, segment.Range{First: 11, Last: 15}},
		{b.Name, 3, segment.Range{First: 1, Last: 3}}, // businesses do not share counters
		{a.Name, 1, segment.Range{First: 16, Last: 16}},
		{a.Name, 1000, segment.Range{First: 17, Last: 1016}},
		{b.Name, 2, segment.Range{First: 4, Last: 5}},
	}
	for _, tc := range tests {
		got, err := st.ReserveSegment(ctx(t), tc.biz, tc.step)
		if err != nil || got != tc.want {
			t.Fatalf("ReserveSegment(%q, %d) = %v, %v; want %v", tc.biz, tc.step, got, err, tc.want)
		}
	}
}

func (s *suite) testSegmentStartNum(t *testing.T, st segment.Store) {
	b := create(t, st, segment.Biz{Name: s.name("seg_start"), StartNum: 1_000_000})
	got, err := st.ReserveSegment(ctx(t), b.Name, 100)
	if want := (segment.Range{First: 1_000_000, Last: 1_000_099}); err != nil || got != want {
		t.Fatalf("first segment %v, %v; want %v", got, err, want)
	}
	// Updating the biz (StartNum cannot change) does not reset the counter.
	if _, err := st.UpdateBiz(ctx(t), b.Name, segment.BizUpdate{Step: ptr(int64(7))}); err != nil {
		t.Fatal(err)
	}
	got, err = st.ReserveSegment(ctx(t), b.Name, 1)
	if want := (segment.Range{First: 1_000_100, Last: 1_000_100}); err != nil || got != want {
		t.Fatalf("segment after update %v, %v; want %v", got, err, want)
	}
}

func (s *suite) testSegmentInvalidStep(t *testing.T, st segment.Store) {
	b := create(t, st, segment.Biz{Name: s.name("seg_bad")})
	for _, step := range []int64{0, -1, segment.MaxStep + 1} {
		_, err := st.ReserveSegment(ctx(t), b.Name, step)
		wantErr(t, fmt.Sprintf("ReserveSegment step %d", step), err, segment.ErrInvalid, "step")
	}
	got, err := st.ReserveSegment(ctx(t), b.Name, 1)
	if err != nil || got.First != 1 {
		t.Errorf("after invalid steps: %v, %v; want the counter untouched", got, err)
	}
}

func (s *suite) testSegmentConcurrent(t *testing.T, st segment.Store) {
	b := create(t, st, segment.Biz{Name: s.name("seg_conc"), StartNum: 42})
	const perWorker = 25
	ranges := make([][]segment.Range, concurrency)
	errs := make([]error, concurrency)
	var wg sync.WaitGroup
	for w := range concurrency {
		wg.Go(func() {
			for i := range perWorker {
				r, err := st.ReserveSegment(ctx(t), b.Name, int64(1+(w+i)%7))
				if err != nil {
					errs[w] = err
					return
				}
				ranges[w] = append(ranges[w], r)
			}
		})
	}
	wg.Wait()
	var all []segment.Range
	for w := range concurrency {
		if errs[w] != nil {
			t.Fatalf("worker %d: %v", w, errs[w])
		}
		all = append(all, ranges[w]...)
	}
	checkDisjointCover(t, "concurrent segments", all, 42)
}

func (s *suite) testOrderedSequence(t *testing.T, st segment.Store) {
	b := create(t, st, segment.Biz{Name: s.name("ord_seq"), Channel: segment.ChannelOrdered})
	req := func(key string, n int64) segment.OrderedRequest {
		return segment.OrderedRequest{Biz: b.Name, SubKey: key, Count: n, StartNum: 1}
	}
	tests := []struct {
		req  segment.OrderedRequest
		want segment.Range
	}{
		{req("user:1", 1), segment.Range{First: 1, Last: 1}},
		{req("user:1", 1), segment.Range{First: 2, Last: 2}},
		{req("user:2", 3), segment.Range{First: 1, Last: 3}}, // keys are independent
		{req("user:1", 10), segment.Range{First: 3, Last: 12}},
		{req("", 2), segment.Range{First: 1, Last: 2}}, // the empty sub key is a key too
		{req("用户:42", 1), segment.Range{First: 1, Last: 1}},
		{req(strings.Repeat("k", segment.MaxSubKeyLen), 1), segment.Range{First: 1, Last: 1}},
		{req("user:2", 1), segment.Range{First: 4, Last: 4}},
	}
	for _, tc := range tests {
		got, err := st.ReserveOrdered(ctx(t), tc.req)
		if err != nil || got != tc.want {
			t.Fatalf("ReserveOrdered(%q, %d) = %v, %v; want %v", tc.req.SubKey, tc.req.Count, got, err, tc.want)
		}
	}
	// ORDERED and UNORDERED counters are separate.
	got, err := st.ReserveSegment(ctx(t), b.Name, 5)
	if want := (segment.Range{First: 1, Last: 5}); err != nil || got != want {
		t.Errorf("ReserveSegment after ordered use: %v, %v; want %v", got, err, want)
	}
}

func (s *suite) testOrderedStartNum(t *testing.T, st segment.Store) {
	b := create(t, st, segment.Biz{Name: s.name("ord_start"), StartNum: 500})
	got, err := st.ReserveOrdered(ctx(t), segment.OrderedRequest{Biz: b.Name, SubKey: "k", Count: 2, StartNum: 500})
	if want := (segment.Range{First: 500, Last: 501}); err != nil || got != want {
		t.Fatalf("first ordered range %v, %v; want %v", got, err, want)
	}
	// StartNum only applies to a row's creation.
	got, err = st.ReserveOrdered(ctx(t), segment.OrderedRequest{Biz: b.Name, SubKey: "k", Count: 1, StartNum: 9000})
	if want := (segment.Range{First: 502, Last: 502}); err != nil || got != want {
		t.Fatalf("second ordered range %v, %v; want %v", got, err, want)
	}
	// StartNum 0 means the default, 1.
	got, err = st.ReserveOrdered(ctx(t), segment.OrderedRequest{Biz: b.Name, SubKey: "other", Count: 1})
	if want := (segment.Range{First: 1, Last: 1}); err != nil || got != want {
		t.Fatalf("ordered range with StartNum 0: %v, %v; want %v", got, err, want)
	}
}

func (s *suite) testOrderedInvalid(t *testing.T, st segment.Store) {
	b := create(t, st, segment.Biz{Name: s.name("ord_bad")})
	tests := []struct {
		name  string
		req   segment.OrderedRequest
		field string
	}{
		{"count zero", segment.OrderedRequest{Biz: b.Name, SubKey: "k"}, "count"},
		{"count negative", segment.OrderedRequest{Biz: b.Name, SubKey: "k", Count: -3}, "count"},
		{"count too large", segment.OrderedRequest{Biz: b.Name, SubKey: "k", Count: segment.MaxStep + 1}, "count"},
		{"sub key too long", segment.OrderedRequest{Biz: b.Name, SubKey: strings.Repeat("k", segment.MaxSubKeyLen+1), Count: 1}, "sub_key"},
		{"request id too long", segment.OrderedRequest{Biz: b.Name, SubKey: "k", Count: 1, RequestID: strings.Repeat("r", segment.MaxRequestIDLen+1)}, "request_id"},
		{"start num negative", segment.OrderedRequest{Biz: b.Name, SubKey: "k", Count: 1, StartNum: -1}, "start_num"},
		{"bad biz name", segment.OrderedRequest{Biz: "a b", SubKey: "k", Count: 1}, "name"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := st.ReserveOrdered(ctx(t), tc.req)
			wantErr(t, "ReserveOrdered", err, segment.ErrInvalid, tc.field)
		})
	}
	got, err := st.ReserveOrdered(ctx(t), segment.OrderedRequest{Biz: b.Name, SubKey: "k", Count: 1})
	if err != nil || got.First != 1 {
		t.Errorf("after invalid requests: %v, %v; want the counter untouched", got, err)
	}
}

func (s *suite) testOrderedConcurrent(t *testing.T, st segment.Store) {
	b := create(t, st, segment.Biz{Name: s.name("ord_conc"), StartNum: 7})
	const perWorker = 25
	keys := []string{"a", "b", "c", "d"}
	type result struct {
		key string
		r   segment.Range
	}
	results := make([][]result, concurrency)
	errs := make([]error, concurrency)
	var wg sync.WaitGroup
	for w := range concurrency {
		wg.Go(func() {
			var last = map[string]int64{}
			for i := range perWorker {
				key := keys[(w+i)%len(keys)]
				r, err := st.ReserveOrdered(ctx(t), segment.OrderedRequest{Biz: b.Name, SubKey: key, Count: int64(1 + i%3), StartNum: 7})
				if err != nil {
					errs[w] = err
					return
				}
				if r.First <= last[key] {
					errs[w] = fmt.Errorf("key %q: range %v not above %d seen before by this worker", key, r, last[key])
					return
				}
				last[key] = r.Last
				results[w] = append(results[w], result{key, r})
			}
		})
	}
	wg.Wait()
	byKey := map[string][]segment.Range{}
	for w := range concurrency {
		if errs[w] != nil {
			t.Fatalf("worker %d: %v", w, errs[w])
		}
		for _, res := range results[w] {
			byKey[res.key] = append(byKey[res.key], res.r)
		}
	}
	for key, rs := range byKey {
		checkDisjointCover(t, "key "+key, rs, 7)
	}
}

func (s *suite) testOrderedIdempotent(t *testing.T, st segment.Store) {
	b := create(t, st, segment.Biz{Name: s.name("ord_idem")})
	other := create(t, st, segment.Biz{Name: s.name("ord_idem2")})
	req := segment.OrderedRequest{Biz: b.Name, SubKey: "k", Count: 5, RequestID: "req-1"}
	first, err := st.ReserveOrdered(ctx(t), req)
	if err != nil || first != (segment.Range{First: 1, Last: 5}) {
		t.Fatalf("first request: %v, %v", first, err)
	}
	for i := range 3 {
		again, err := st.ReserveOrdered(ctx(t), req)
		if err != nil || again != first {
			t.Fatalf("retry %d: %v, %v; want %v", i, again, err, first)
		}
	}
	expect := first.Last + 1
	if rr, ok := st.(segment.ReplayReporter); ok {
		again, err := rr.ReserveOrderedReplay(ctx(t), req)
		if err != nil || again.Range != first || !again.Replayed {
			t.Errorf("ReserveOrderedReplay of a retry: %+v, %v", again, err)
		}
		fresh, err := rr.ReserveOrderedReplay(ctx(t), segment.OrderedRequest{Biz: b.Name, SubKey: "k", Count: 1, RequestID: "req-new"})
		if err != nil || fresh.Replayed || fresh.First != expect {
			t.Errorf("ReserveOrderedReplay of a new request: %+v, %v", fresh, err)
		}
		expect++
	}
	// Retries left no gap: the next request continues right after.
	next, err := st.ReserveOrdered(ctx(t), segment.OrderedRequest{Biz: b.Name, SubKey: "k", Count: 1, RequestID: "req-2"})
	if err != nil || next.First != expect {
		t.Fatalf("request after retries: %v, %v; want it to start at %d", next, err, expect)
	}
	// The same request id in another business is a different request.
	o, err := st.ReserveOrdered(ctx(t), segment.OrderedRequest{Biz: other.Name, SubKey: "k", Count: 2, RequestID: "req-1"})
	if err != nil || o != (segment.Range{First: 1, Last: 2}) {
		t.Fatalf("same request id in another biz: %v, %v", o, err)
	}
	// Requests without an id are never deduplicated.
	plain := segment.OrderedRequest{Biz: other.Name, SubKey: "p", Count: 1}
	r1, err1 := st.ReserveOrdered(ctx(t), plain)
	r2, err2 := st.ReserveOrdered(ctx(t), plain)
	if err1 != nil || err2 != nil || r1 == r2 {
		t.Fatalf("two requests without id: %v %v, %v %v; want different ranges", r1, err1, r2, err2)
	}
}

// testOrderedRequestMismatch: a request id reused for another sub key or
// count is refused, with an error that names neither the stored request's
// sub key nor its count (without a credential, callers share ids: those
// would be someone else's).
func (s *suite) testOrderedRequestMismatch(t *testing.T, st segment.Store) {
	b := create(t, st, segment.Biz{Name: s.name("ord_mis")})
	const storedSub, storedCount = "secret-room-42", 7919
	req := segment.OrderedRequest{Biz: b.Name, SubKey: storedSub, Count: storedCount, RequestID: "r"}
	first, err := st.ReserveOrdered(ctx(t), req)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		req  segment.OrderedRequest
	}{
		{"other sub key", segment.OrderedRequest{Biz: b.Name, SubKey: "k2", Count: storedCount, RequestID: "r"}},
		{"other count", segment.OrderedRequest{Biz: b.Name, SubKey: storedSub, Count: 3, RequestID: "r"}},
	}
	storedCountWord := regexp.MustCompile(`\b` + strconv.Itoa(storedCount) + `\b`)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := st.ReserveOrdered(ctx(t), tc.req)
			wantErr(t, "reused request id", err, segment.ErrRequestMismatch, "request_id")
			if msg := err.Error(); (tc.req.SubKey != storedSub && strings.Contains(msg, storedSub)) ||
				(tc.req.Count != storedCount && storedCountWord.MatchString(msg)) {
				t.Errorf("mismatch error %q names the stored request's sub key or count", msg)
			}
		})
	}
	// Mismatches reserved nothing: the other key is still fresh and the
	// original request still replays.
	got, err := st.ReserveOrdered(ctx(t), segment.OrderedRequest{Biz: b.Name, SubKey: "k2", Count: 1})
	if err != nil || got.First != 1 {
		t.Errorf("k2 after mismatch: %v, %v; want a fresh counter", got, err)
	}
	again, err := st.ReserveOrdered(ctx(t), req)
	if err != nil || again != first {
		t.Errorf("original request after mismatch: %v, %v; want %v", again, err, first)
	}
}

// testOrderedRequestScopes: request ids are scoped to the caller's
// credential (RequestScope). Another caller reusing an id gets a range of
// its own, never the first caller's; an id another caller used first does
// not block the first caller's use of it; each caller's retry replays its
// own range.
func (s *suite) testOrderedRequestScopes(t *testing.T, st segment.Store) {
	b := create(t, st, segment.Biz{Name: s.name("ord_scope")})
	const victimScope, attackerScope = "0123456789abcdef", "fedcba9876543210"
	victimReq := segment.OrderedRequest{Biz: b.Name, SubKey: "room", Count: 3, RequestID: "r", RequestScope: victimScope}
	victim, err := st.ReserveOrdered(ctx(t), victimReq)
	if err != nil {
		t.Fatal(err)
	}
	// The same id, sub key and count from another caller: a new range.
	attacker := victimReq
	attacker.RequestScope = attackerScope
	got, err := st.ReserveOrdered(ctx(t), attacker)
	if err != nil || got.First <= victim.Last {
		t.Fatalf("another caller reusing the victim's request id: %v, %v; want a new range above %v (never the victim's)", got, err, victim)
	}
	// And without a credential: a new range too.
	unscoped := victimReq
	unscoped.RequestScope = ""
	if u, err := st.ReserveOrdered(ctx(t), unscoped); err != nil || u.First <= got.Last {
		t.Fatalf("a caller without a credential reusing the id: %v, %v; want a new range above %v", u, err, got)
	}
	// An id the attacker used first, for another sub key and count, does
	// not block the victim.
	pre := segment.OrderedRequest{Biz: b.Name, SubKey: "elsewhere", Count: 1, RequestID: "future", RequestScope: attackerScope}
	if _, err := st.ReserveOrdered(ctx(t), pre); err != nil {
		t.Fatal(err)
	}
	later := segment.OrderedRequest{Biz: b.Name, SubKey: "room", Count: 2, RequestID: "future", RequestScope: victimScope}
	lr, err := st.ReserveOrdered(ctx(t), later)
	if err != nil {
		t.Fatalf("the victim's use of an id another caller used first: %v", err)
	}
	// Each caller's retry replays its own range.
	for _, tc := range []struct {
		req  segment.OrderedRequest
		want segment.Range
	}{{victimReq, victim}, {attacker, got}, {later, lr}} {
		if again, err := st.ReserveOrdered(ctx(t), tc.req); err != nil || again != tc.want {
			t.Fatalf("retry of %+v: %v, %v; want %v", tc.req, again, err, tc.want)
		}
	}
	// A scope is checked like the rest of the request.
	bad := victimReq
	bad.RequestScope = "no spaces"
	_, err = st.ReserveOrdered(ctx(t), bad)
	wantErr(t, "malformed scope", err, segment.ErrInvalid, "scope")
}

func (s *suite) testOrderedConcurrentRetries(t *testing.T, st segment.Store) {
	b := create(t, st, segment.Biz{Name: s.name("ord_retry")})
	ranges := make([]segment.Range, concurrency)
	errs := make([]error, concurrency)
	var wg sync.WaitGroup
	for w := range concurrency {
		wg.Go(func() {
			ranges[w], errs[w] = st.ReserveOrdered(ctx(t), segment.OrderedRequest{Biz: b.Name, SubKey: "k", Count: 3, RequestID: "same"})
		})
	}
	wg.Wait()
	for w := range concurrency {
		if errs[w] != nil || ranges[w] != ranges[0] {
			t.Fatalf("concurrent retry %d: %v, %v; want %v like the others", w, ranges[w], errs[w], ranges[0])
		}
	}
	next, err := st.ReserveOrdered(ctx(t), segment.OrderedRequest{Biz: b.Name, SubKey: "k", Count: 1})
	if err != nil || next.First != ranges[0].Last+1 {
		t.Fatalf("after concurrent retries: %v, %v; want %d (reserved once)", next, err, ranges[0].Last+1)
	}
}

// testOrderedAbove: a reservation never starts at or below req.Above; a
// row behind it is raised (reported as Raised), with or without a request
// id, and a retry of that request id replays the raised range.
func (s *suite) testOrderedAbove(t *testing.T, st segment.Store) {
	b := create(t, st, segment.Biz{Name: s.name("ord_above")})
	r, err := st.ReserveOrdered(ctx(t), segment.OrderedRequest{Biz: b.Name, SubKey: "k", Count: 2})
	if err != nil || r != (segment.Range{First: 1, Last: 2}) {
		t.Fatalf("first: %v, %v", r, err)
	}
	// Above below the row: no change.
	r, err = st.ReserveOrdered(ctx(t), segment.OrderedRequest{Biz: b.Name, SubKey: "k", Count: 1, Above: 1})
	if err != nil || r.First != 3 {
		t.Fatalf("Above under the row: %v, %v; want 3..3", r, err)
	}
	rr, _ := st.(segment.ReplayReporter)
	for i, tc := range []struct {
		key, rid string
		above    int64
	}{{"k", "", 100}, {"k", "rid-a", 200}, {"new", "", 50}, {"new2", "rid-b", 70}} {
		req := segment.OrderedRequest{Biz: b.Name, SubKey: tc.key, Count: 3, RequestID: tc.rid, Above: tc.above}
		var got segment.Reservation
		if rr != nil {
			got, err = rr.ReserveOrderedReplay(ctx(t), req)
		} else {
			got.Range, err = st.ReserveOrdered(ctx(t), req)
		}
		if err != nil || got.First != tc.above+1 || got.Last != tc.above+3 {
			t.Fatalf("case %d: Above %d: %+v, %v; want %d..%d", i, tc.above, got, err, tc.above+1, tc.above+3)
		}
		if rr != nil && (!got.Raised || got.Replayed) {
			t.Errorf("case %d: %+v: want Raised and not Replayed", i, got)
		}
		if tc.rid != "" {
			// The retry replays the raised range, whatever Above it carries.
			req.Above = 0
			again, err := st.ReserveOrdered(ctx(t), req)
			if err != nil || again != got.Range {
				t.Errorf("case %d: retry of %q: %v, %v; want %v", i, tc.rid, again, err, got.Range)
			}
		}
	}
	// The row stays raised: the next plain reservation continues above.
	r, err = st.ReserveOrdered(ctx(t), segment.OrderedRequest{Biz: b.Name, SubKey: "k", Count: 1})
	if err != nil || r.First != 204 {
		t.Fatalf("after the raises: %v, %v; want 204", r, err)
	}
}

// testOrderedFence: a Fence error aborts a reservation with a request id
// (nothing stored: the retry is a new reservation) and is returned.
func (s *suite) testOrderedFence(t *testing.T, st segment.Store) {
	b := create(t, st, segment.Biz{Name: s.name("ord_fence")})
	closed := errors.New("gate closed")
	req := segment.OrderedRequest{Biz: b.Name, SubKey: "k", Count: 1, RequestID: "rid",
		Fence: func() error { return closed }}
	if _, err := st.ReserveOrdered(ctx(t), req); !errors.Is(err, closed) {
		t.Fatalf("fenced reservation: %v; want the fence's error", err)
	}
	req.Fence = nil
	r, err := st.ReserveOrdered(ctx(t), req)
	if err != nil || r.First < 1 {
		t.Fatalf("retry after the fence: %v, %v", r, err)
	}
	if rr, ok := st.(segment.ReplayReporter); ok {
		again, err := rr.ReserveOrderedReplay(ctx(t), req)
		if err != nil || !again.Replayed || again.Range != r {
			t.Fatalf("second retry: %+v, %v; want a replay of %v", again, err, r)
		}
	}
}
