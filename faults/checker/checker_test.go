package checker

import (
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

// sf builds a snowflake ID from the documented layout.
func sf(ms int64, worker, seq int) int64 {
	return (ms-DefaultLayout.EpochMs)<<22 | int64(worker)<<12 | int64(seq)
}

func ok(caller, node string, inc int, ch string, start, end int, ranges ...[2]int64) Call {
	c := Call{Caller: caller, Node: node, Inc: inc, Biz: "b", Channel: ch, Served: ch, Ranges: ranges, Start: at(start), End: at(end)}
	if ch == Ordered {
		c.SubKey = "k"
	}
	return c
}

func TestCleanHistoryPasses(t *testing.T) {
	ms := t0.UnixMilli()
	h := []Call{
		ok("c1", "n1", 1, Snowflake, 0, 1, [2]int64{sf(ms, 1, 0), sf(ms, 1, 9)}),
		ok("c2", "n2", 1, Snowflake, 0, 1, [2]int64{sf(ms, 2, 0), sf(ms, 2, 9)}),
		ok("c3", "n1", 1, Unordered, 0, 2, [2]int64{1, 100}),
		ok("c4", "n2", 1, Unordered, 0, 2, [2]int64{101, 200}),
		ok("o1", "n1", 1, Ordered, 0, 5, [2]int64{1, 2}),
		ok("o2", "n2", 1, Ordered, 3, 7, [2]int64{3, 3}), // concurrent with o1's call
		ok("o1", "n1", 1, Ordered, 8, 9, [2]int64{4, 6}),
		{Caller: "c1", Node: "n1", Inc: 1, Biz: "b", Channel: Snowflake, Start: at(10), End: at(11),
			Err: &Refusal{Code: 3, Retryable: true, RetryAfterMs: 40}},
		{Caller: "c1", Node: "n1", Inc: 1, Biz: "b", Channel: Snowflake, Start: at(12), End: at(13), Transport: "connection refused"},
	}
	r := Check(h, Options{Layout: DefaultLayout})
	if r.Failed() {
		t.Fatalf("clean history failed: %s\n%s", r.Summary(), r.Details())
	}
	if r.IDs != 10+10+100+100+2+1+3 || r.OK != 7 || r.Refused != 1 || r.Transport != 1 {
		t.Fatalf("counts: %s", r.Summary())
	}
}

func TestOverlappingRangesAcrossChannels(t *testing.T) {
	// A fallback range overlapping an UNORDERED range of the same business
	// (not equal endpoints): the sweep must see it.
	h := []Call{
		ok("c1", "n1", 1, Unordered, 0, 1, [2]int64{100, 200}),
		{Caller: "c2", Node: "n2", Inc: 1, Biz: "b", Channel: Snowflake, Served: Unordered, Fallback: true,
			Ranges: [][2]int64{{150, 160}}, Start: at(5), End: at(6)},
	}
	r := Check(h, Options{Layout: DefaultLayout})
	if r.Duplicates != 1 || !strings.Contains(r.Details(), "150..160") {
		t.Fatalf("want one duplicate 150..160: %s\n%s", r.Summary(), r.Details())
	}
	// A range inside a long earlier one that is not the latest-ending.
	h = []Call{
		ok("c1", "n1", 1, Unordered, 0, 1, [2]int64{1, 1000}),
		ok("c2", "n2", 1, Unordered, 0, 1, [2]int64{10, 20}),
		ok("c3", "n3", 1, Unordered, 0, 1, [2]int64{500, 510}),
	}
	if r := Check(h, Options{}); r.Duplicates != 2 {
		t.Fatalf("want 2 overlaps: %s\n%s", r.Summary(), r.Details())
	}
	// Other businesses and ORDERED sub keys are separate spaces.
	h = []Call{ok("c1", "n1", 1, Unordered, 0, 1, [2]int64{1, 10}), ok("o1", "n1", 1, Ordered, 0, 1, [2]int64{1, 10})}
	h[1].SubKey = "x"
	h = append(h, ok("o2", "n1", 1, Ordered, 0, 1, [2]int64{1, 10}))
	if r := Check(h, Options{}); r.Failed() {
		t.Fatalf("separate spaces flagged: %s\n%s", r.Summary(), r.Details())
	}
}

func TestOrderedDuplicateAndOrder(t *testing.T) {
	h := []Call{
		ok("o1", "n1", 1, Ordered, 0, 1, [2]int64{5, 9}),
		ok("o1", "n1", 1, Ordered, 2, 3, [2]int64{3, 4}), // per caller: not increasing
	}
	r := Check(h, Options{})
	if r.Order != 1 || r.Duplicates != 0 {
		t.Fatalf("per-caller order: %s\n%s", r.Summary(), r.Details())
	}
	// Real time across callers: o2 started after o1's call was answered.
	h = []Call{
		ok("o1", "n1", 1, Ordered, 0, 10, [2]int64{20, 21}),
		ok("o2", "n2", 1, Ordered, 11, 12, [2]int64{15, 15}),
		ok("o3", "n3", 1, Ordered, 5, 12, [2]int64{16, 16}), // concurrent with o1: allowed
	}
	r = Check(h, Options{})
	if r.Order != 1 || !strings.Contains(r.Details(), "real-time") {
		t.Fatalf("real-time order: %s\n%s", r.Summary(), r.Details())
	}
	h = []Call{ok("o1", "n1", 1, Ordered, 0, 1, [2]int64{1, 3}), ok("o2", "n2", 1, Ordered, 0, 1, [2]int64{3, 4})}
	if r := Check(h, Options{}); r.Duplicates != 1 {
		t.Fatalf("ordered overlap: %s", r.Summary())
	}
}

func TestWorkerMillisecondTwoIncarnations(t *testing.T) {
	ms := t0.UnixMilli()
	h := []Call{
		ok("c1", "n1", 1, Snowflake, 0, 1, [2]int64{sf(ms, 7, 0), sf(ms, 7, 3)}),
		ok("c1", "n1", 2, Snowflake, 9, 10, [2]int64{sf(ms, 7, 10), sf(ms, 7, 12)}), // restarted: same ms, disjoint seqs
		ok("c2", "n1", 1, Snowflake, 0, 1, [2]int64{sf(ms, 7, 4), sf(ms, 7, 5)}),    // same incarnation: fine
	}
	r := Check(h, Options{Layout: DefaultLayout})
	if r.WorkerMs != 1 || r.Duplicates != 0 {
		t.Fatalf("worker-ms: %s\n%s", r.Summary(), r.Details())
	}
	h = []Call{ok("c1", "n1", 1, Snowflake, 0, 1, [2]int64{sf(ms, 7, 4090), sf(ms+1, 7, 5)})}
	if r := Check(h, Options{Layout: DefaultLayout}); r.WorkerMs != 1 {
		t.Fatalf("range across ms: %s", r.Summary())
	}
}

func TestRefusals(t *testing.T) {
	bad := []Refusal{
		{Code: 10, Retryable: true},                    // INTERNAL is not a fault's answer
		{Code: 4, Retryable: false},                    // WORKER_UNAVAILABLE must be retryable
		{Code: 3, Retryable: true, RetryAfterMs: 0},    // CLOCK_ROLLBACK says how long
		{Code: 1, Retryable: false, Message: "whoops"}, // INVALID_ARGUMENT
	}
	var h []Call
	for i := range bad {
		h = append(h, Call{Caller: "c", Node: "n", Channel: Snowflake, Start: at(i), End: at(i), Err: &bad[i]})
	}
	h = append(h, Call{Caller: "c", Node: "n", Channel: Snowflake, Start: at(9), End: at(9), Err: &Refusal{Code: 5, Retryable: true}})
	r := Check(h, Options{})
	if r.BadRefusals != 4 || r.ErrorsByCode["SEGMENT_UNAVAILABLE"] != 1 {
		t.Fatalf("refusals: %s\n%s", r.Summary(), r.Details())
	}
}

func TestGaps(t *testing.T) {
	h := []Call{
		ok("c1", "n1", 1, Unordered, 0, 100, [2]int64{1, 1}),
		ok("c2", "n2", 1, Snowflake, 0, 200, [2]int64{sf(t0.UnixMilli(), 1, 0), sf(t0.UnixMilli(), 1, 0)}),
		{Caller: "c1", Node: "n1", Channel: Unordered, Start: at(100), End: at(3000), Transport: "timeout"},
		ok("c1", "n1", 1, Unordered, 3000, 3100, [2]int64{2, 2}),
	}
	r := Check(h, Options{From: at(0), To: at(3500), Layout: DefaultLayout})
	if g := r.Gap("channel/UNORDERED"); g.Len != 3000*time.Millisecond {
		t.Fatalf("UNORDERED gap %v", g)
	}
	if g := r.Gap("cluster"); g.Len != 2900*time.Millisecond {
		t.Fatalf("cluster gap %v", g)
	}
	if g := r.Gap("channel/SNOWFLAKE"); g.Len != 3300*time.Millisecond {
		t.Fatalf("SNOWFLAKE gap %v", g)
	}
	if g := r.Gap("channel/ORDERED"); g.Len != 3500*time.Millisecond {
		t.Fatalf("ORDERED (no success) gap %v", g)
	}
	if g := r.Gap("node/n2"); g.Len != 3300*time.Millisecond {
		t.Fatalf("node gap %v", g)
	}
}
