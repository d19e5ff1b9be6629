package ordered

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idgen/idgen/segment"
)

// The gapless holes of the fault scenario ordered-owner-zk-partition
// (issue 31): an owner persisted the numbers of requests in flight under
// its epoch, then lost the shard (its ZooKeeper session expired: Lost; or
// its lease lapsed) before it answered them. It refused them, the callers'
// retries (the server's ride-out, a forward, the client) got the next
// numbers from the next term, and the persisted numbers were a hole that
// no failed call explained. Fixed: numbers a persist of the term made
// durable under its epoch are answered after the term ended, as long as
// the barrier's gate has not closed since (shard.go, answerable).

// takeAsync runs one Take in a goroutine and returns its outcome.
func takeAsync(a *Allocator, biz segment.Biz, sub string, n int64, rid segment.RequestID) <-chan takeOutcome {
	ch := make(chan takeOutcome, 1)
	go func() {
		r, err := a.Take(context.Background(), biz, sub, n, rid)
		ch <- takeOutcome{r, err}
	}()
	return ch
}

type takeOutcome struct {
	r   segment.Range
	err error
}

// waitInFlight waits until the key's shard has a persist in flight (its
// round launched: the waiters it covers are the round's).
func waitInFlight(t *testing.T, a *Allocator, sub string) *shard {
	t.Helper()
	sh := a.shards[segment.Shard(sub)].Load()
	for i := 0; ; i++ {
		sh.mu.Lock()
		n := sh.rounds
		sh.mu.Unlock()
		if n > 0 {
			return sh
		}
		if i > 5000 {
			t.Fatal("no persist in flight")
		}
		time.Sleep(time.Millisecond)
	}
}

// lostInFlight starts a Take of n numbers of "k" on old, holds its persist
// in flight and ends old's term (Lost) meanwhile; closing store.hold lets
// the persist run.
func lostInFlight(t *testing.T, store *fakeStore, old *node, biz segment.Biz, n int64, rid segment.RequestID) <-chan takeOutcome {
	t.Helper()
	store.hold = make(chan struct{})
	got := takeAsync(old.a, biz, "k", n, rid)
	waitInFlight(t, old.a, "k")
	old.a.Lost(segment.Shard("k"))
	return got
}

// TestPersistedAnswerSurvivesLostShard: the term ends (Lost, or the lease
// runs out unrenewed) while a gapless request's persist is in flight; the
// persist commits under the term's epoch. The request is answered its
// persisted numbers, and the next owner continues above them: no hole.
func TestPersistedAnswerSurvivesLostShard(t *testing.T) {
	for _, how := range []string{"lost", "lease lapsed"} {
		t.Run(how, func(t *testing.T) {
			store := newFakeStore()
			clk := newFakeClock()
			old := newNode(t, store, clk, "a:1")
			old.acquireAll(t, 1, time.Time{})
			biz := bizMode("chat", segment.OrderedGapless)
			if r, err := old.a.Take(context.Background(), biz, "k", 1, segment.RequestID{}); err != nil || r.First != 1 {
				t.Fatalf("first take: %v %v", r, err)
			}
			store.hold = make(chan struct{})
			got := takeAsync(old.a, biz, "k", 2, segment.RequestID{})
			waitInFlight(t, old.a, "k")
			switch how {
			case "lost":
				old.a.Lost(segment.Shard("k"))
			default:
				old.coord.setValidUntil(clk.Now())
			}
			close(store.hold) // the persist commits under epoch 1
			res := <-got
			if res.err != nil {
				t.Fatalf("persisted under its epoch, then refused: %v (numbers 2..3 are a hole no failed call explains)", res.err)
			}
			if res.r != (segment.Range{First: 2, Last: 3}) {
				t.Fatalf("answered %v, want 2..3", res.r)
			}
			if st := old.a.Stats(); st.AnsweredAfterLoss != 1 {
				t.Fatalf("AnsweredAfterLoss %d, want 1", st.AnsweredAfterLoss)
			}
			nw := newNode(t, store, clk, "b:1")
			nw.acquireAll(t, 2, time.Time{})
			if r, err := nw.a.Take(context.Background(), biz, "k", 1, segment.RequestID{}); err != nil || r.First != 4 {
				t.Fatalf("next owner: %v %v, want 4", r, err)
			}
			// The ended term answers nothing new.
			if how == "lease lapsed" {
				if _, err := old.a.Take(context.Background(), biz, "k", 1, segment.RequestID{}); err == nil {
					t.Fatal("the old owner answered a new request after its lease ran out")
				}
			}
		})
	}
}

// TestFencedInFlightPersistAfterLostShard: the term ends and the next
// owner claims before the persist in flight commits: the persist is fenced
// and the request refused (nothing of it was written), so the next owner's
// numbers are not a duplicate and leave no hole.
func TestFencedInFlightPersistAfterLostShard(t *testing.T) {
	store := newFakeStore()
	clk := newFakeClock()
	old := newNode(t, store, clk, "a:1")
	old.acquireAll(t, 1, time.Time{})
	biz := bizMode("chat", segment.OrderedGapless)
	got := lostInFlight(t, store, old, biz, 2, segment.RequestID{})
	nw := newNode(t, store, clk, "b:1")
	if err := nw.a.Acquire(context.Background(), Grant{Shard: segment.Shard("k"), Epoch: 2}); err != nil {
		t.Fatal(err)
	}
	close(store.hold)
	if res := <-got; res.err == nil {
		t.Fatalf("a persist fenced by the next owner's claim was answered: %v", res.r)
	}
	if r, err := nw.a.Take(context.Background(), biz, "k", 1, segment.RequestID{}); err != nil || r.First != 1 {
		t.Fatalf("next owner: %v %v, want 1 (the fenced persist wrote nothing)", r, err)
	}
}

// TestLateAnswerNeedsTheGate: the term ends while the persist is in
// flight, and the barrier's gate closes right after the persist passed its
// check (a MySQL server change: the new server may have lost the numbers).
// They are not answered: the refusal is a failed call that explains the
// hole, not a passing NotOwner the server rides out and retries.
func TestLateAnswerNeedsTheGate(t *testing.T) {
	store := newFakeStore()
	clk := newFakeClock()
	gate := newFakeGate()
	old := gatedNode(t, store, clk, "a:1", gate)
	old.acquireAll(t, 1, time.Time{})
	biz := bizMode("chat", segment.OrderedGapless)
	got := lostInFlight(t, store, old, biz, 2, segment.RequestID{})
	gate.mu.Lock()
	gate.onCheck = gate.closeLocked
	gate.mu.Unlock()
	close(store.hold)
	res := <-got
	var ue *UnavailableError
	if !errors.As(res.err, &ue) || ue.NotOwner || !errors.Is(res.err, errGateClosed) {
		t.Fatalf("late answer across a gate closure: %v %v, want a refusal naming the gate (not NotOwner)", res.r, res.err)
	}
}

// TestRetriedRequestIDAfterLostShard: a gapless request id persisted by a
// term that ended before its answer: the answer is the persisted range,
// and a retry of the id at the next owner gets that same range from the
// stored ids, never a second one.
func TestRetriedRequestIDAfterLostShard(t *testing.T) {
	store := newFakeStore()
	clk := newFakeClock()
	old := newNode(t, store, clk, "a:1")
	old.acquireAll(t, 1, time.Time{})
	biz := bizMode("chat", segment.OrderedGapless)
	rid := segment.RequestID{ID: "r-1"}
	got := lostInFlight(t, store, old, biz, 3, rid)
	close(store.hold)
	res := <-got
	if res.err != nil || res.r != (segment.Range{First: 1, Last: 3}) {
		t.Fatalf("old owner: %v %v, want 1..3", res.r, res.err)
	}
	nw := newNode(t, store, clk, "b:1")
	nw.acquireAll(t, 2, time.Time{})
	if r, err := nw.a.Take(context.Background(), biz, "k", 3, rid); err != nil || r != res.r {
		t.Fatalf("retry at the next owner: %v %v, want %v", r, err, res.r)
	}
	// (The retry's own allocation, 4..6, is skipped: a replayed id costs
	// its allocation, explained by the attempt whose failure made the
	// caller retry.)
	if r, err := nw.a.Take(context.Background(), biz, "k", 1, segment.RequestID{}); err != nil || r.First <= 3 {
		t.Fatalf("next owner: %v %v, want above 3", r, err)
	}
}

// TestFailedPersistFailsOnlyItsOwnWaiters: two persists of one shard in
// flight (MaxInFlight 2); the first to finish fails. Only its request
// fails: the other's numbers commit and are answered. Rounds used to be a
// zero-size struct, every one at the same address, so the failure failed
// both requests and the committed numbers were a hole.
func TestFailedPersistFailsOnlyItsOwnWaiters(t *testing.T) {
	store := newFakeStore()
	clk := newFakeClock()
	coord := newFakeCoord("a:1", clk.Now().Add(time.Hour))
	a, err := New(Config{Store: store, Coordinator: coord, Clock: clk, Self: "a:1", MaxInFlight: 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Acquire(context.Background(), Grant{Shard: segment.Shard("k"), Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	biz := bizMode("chat", segment.OrderedGapless)
	if _, err := a.Take(context.Background(), biz, "k", 1, segment.RequestID{}); err != nil {
		t.Fatal(err)
	}
	store.hold = make(chan struct{})
	first := takeAsync(a, biz, "k", 1, segment.RequestID{})
	sh := waitInFlight(t, a, "k")
	second := takeAsync(a, biz, "k", 1, segment.RequestID{})
	for i := 0; ; i++ {
		sh.mu.Lock()
		n := sh.rounds
		sh.mu.Unlock()
		if n == 2 {
			break
		}
		if i > 5000 {
			t.Fatal("the second persist never launched")
		}
		time.Sleep(time.Millisecond)
	}
	store.mu.Lock()
	store.failNext = errors.New("store down")
	store.mu.Unlock()
	store.hold <- struct{}{} // one persist fails
	var outs []takeOutcome
	select {
	case o := <-first:
		outs = append(outs, o)
	case o := <-second:
		outs = append(outs, o)
	}
	close(store.hold) // the other commits
	for len(outs) < 2 {
		select {
		case o := <-first:
			outs = append(outs, o)
		case o := <-second:
			outs = append(outs, o)
		}
	}
	failed, ok := 0, 0
	var answered segment.Range
	for _, o := range outs {
		if o.err != nil {
			failed++
		} else {
			ok++
			answered = o.r
		}
	}
	if failed != 1 || ok != 1 {
		t.Fatalf("one persist failed: %d requests failed, %d answered (%+v), want 1 and 1", failed, ok, outs)
	}
	if row := store.row(Key{"chat", "k"}); row > answered.Last {
		t.Fatalf("the store holds %d, the highest answer is %d: a committed number was refused", row, answered.Last)
	}
}
