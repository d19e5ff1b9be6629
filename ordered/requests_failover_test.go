package ordered

import (
	"context"
	"testing"
	"time"

	"github.com/idgen/idgen/segment"
)

// TestRequestIDSurvivesLossyFailover: a gapless request id answered by a
// lost its stored record (and its rows) in a lossy MySQL failover. The
// barrier stores the ids a remembers again with the rows, so the caller's
// retry reaching the next owner b gets the first answer, as Take promises
// (the simulator's seed 62: "request id c3-127 first answered [[11 14]],
// replayed [[204 207]]"). Before, the barrier raised only the rows: no
// number was repeated, but the retry got a fresh range.
// Negative control: IDGEN_FAULT_ORDERED_FORGET_REQUESTS=1.
func TestRequestIDSurvivesLossyFailover(t *testing.T) {
	t.Setenv("IDGEN_FAULT_ORDERED_FORGET_REQUESTS", "1")
	control := faultInjectBuild
	ctx := context.Background()
	store, clk := newFakeStore(), newFakeClock()
	a := gatedNode(t, store, clk, "a:1", newFakeGate())
	a.acquireAll(t, 1, time.Time{})
	biz := bizMode("chat", segment.OrderedGapless)
	before := store.snapshot()
	rid := segment.RequestID{ID: "req-1", Scope: "caller"}
	first, err := a.a.Take(ctx, biz, "k", 3, rid)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.a.Take(ctx, biz, "k", 2, segment.RequestID{}); err != nil {
		t.Fatal(err)
	}
	store.lossyFailover(before)
	store.loseRequests()
	store.flush(a.a)
	// a crashes; b owns the shard and serves the retry.
	b := gatedNode(t, store, clk, "b:1", newFakeGate())
	b.acquireAll(t, 2, time.Time{})
	again, err := b.a.Take(ctx, biz, "k", 3, rid)
	if err != nil {
		t.Fatal(err)
	}
	if control {
		if again == first {
			t.Fatalf("negative control: the retry got %v again: the switch does not reopen the hole", again)
		}
		return
	}
	if again != first {
		t.Fatalf("the retry of %q got %v, first answered %v", rid.ID, again, first)
	}
	next, err := b.a.Take(ctx, biz, "k", 1, segment.RequestID{})
	// Above a's answers (the retry's own allocation on b is a gap, as for
	// any replay a later owner finds stored: replayDuplicates).
	if err != nil || next.First <= 5 {
		t.Fatalf("next number %v %v, want above 5", next, err)
	}
}

// storedRequests keeps at most max ids, none older than the TTL.
func TestStoredRequestsBounded(t *testing.T) {
	s := newStoredRequests(3, DefaultMaxRequestBytes, time.Minute)
	t0 := time.Unix(1_000_000, 0)
	for i := range 5 {
		s.add(t0.Add(time.Duration(i)*time.Second), []Request{{Biz: "b", ID: string(rune('a' + i))}})
	}
	var ids []string
	s.each(t0.Add(5*time.Second), func(q Request) { ids = append(ids, q.ID) })
	if len(ids) != 3 || ids[0] != "c" || ids[2] != "e" {
		t.Fatalf("kept %v, want the newest three [c d e]", ids)
	}
	ids = nil
	s.each(t0.Add(time.Minute+3*time.Second), func(q Request) { ids = append(ids, q.ID) })
	if len(ids) != 1 || ids[0] != "e" {
		t.Fatalf("kept %v a minute later, want [e]", ids)
	}
}
