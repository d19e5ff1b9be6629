package ordered

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/idgen/idgen/internal/wait"
	"github.com/idgen/idgen/segment"
)

// sameShardKey returns a sub key other than sub in sub's shard.
func sameShardKey(t *testing.T, sub string) string {
	t.Helper()
	for i := range 100_000 {
		if k := fmt.Sprintf("other-%d", i); segment.Shard(k) == segment.Shard(sub) {
			return k
		}
	}
	t.Fatal("no key found in the shard")
	return ""
}

// waiters is how many requests of key wait for a persist: queued with
// numbers of their own, or joined to a queued attempt of their request id.
func waiters(a *Allocator, key Key) int {
	sh := a.shards[segment.Shard(key.SubKey)].Load()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	ks := sh.keys[key]
	if ks == nil {
		return 0
	}
	n := len(ks.waiters)
	for _, w := range ks.waiters {
		n += len(w.joined)
	}
	return n
}

// takeResult is what one Take answered.
type takeResult struct {
	r   segment.Range
	err error
}

// abandonedRetry sets up issue 29's hole i on a fresh node of store: a
// persist of key held in flight; a gapless attempt of request id req-1
// (count 2) queued behind it, whose caller gives up; then, after between
// ran (nil: nothing), the attempt's retry and a request of other (a key of
// key's shard) queued for the same group commit. It releases the held
// persist and returns the node, and the retry's and the unrelated
// request's answers.
func abandonedRetry(t *testing.T, store *fakeStore, clk *fakeClock, key Key, other string, between func(*node)) (n *node, retry, unrelated takeResult) {
	t.Helper()
	n = newNode(t, store, clk, "a:1")
	n.acquireAll(t, 1, time.Time{})
	biz := bizMode(key.Biz, segment.OrderedGapless)
	bg := context.Background()

	// A persist in flight, held, so that what follows queues behind it.
	store.hold = make(chan struct{})
	blocker := make(chan error, 1)
	go func() { _, err := n.a.Take(bg, biz, key.SubKey, 1, segment.RequestID{}); blocker <- err }()
	wait.For(t, 10*time.Second, "the first persist to start", func() bool { return waiters(n.a, key) == 1 })

	// The first attempt of req-1 queues, and its caller gives up.
	ctx, cancel := context.WithCancel(bg)
	first := make(chan error, 1)
	go func() { _, err := n.a.Take(ctx, biz, key.SubKey, 2, segment.RequestID{ID: "req-1"}); first <- err }()
	wait.For(t, 10*time.Second, "the first attempt to queue", func() bool { return waiters(n.a, key) == 2 })
	cancel()
	if err := <-first; !errors.Is(err, segment.ErrUnavailable) {
		t.Fatalf("abandoned attempt: %v, want a retryable refusal", err)
	}
	if between != nil {
		between(n)
	}

	// Its retry, and an unrelated key of the shard, queue for the same
	// group commit.
	retryc, unrelatedc := make(chan takeResult, 1), make(chan takeResult, 1)
	go func() {
		r, err := n.a.Take(bg, biz, key.SubKey, 2, segment.RequestID{ID: "req-1"})
		retryc <- takeResult{r, err}
	}()
	go func() { r, err := n.a.Take(bg, biz, other, 1, segment.RequestID{}); unrelatedc <- takeResult{r, err} }()
	wait.For(t, 10*time.Second, "the retry and the unrelated request to queue", func() bool {
		return waiters(n.a, Key{key.Biz, other}) == 1 && waiters(n.a, key) == 3
	})
	close(store.hold)
	if err := <-blocker; err != nil {
		t.Fatalf("request before the abandoned one: %v", err)
	}
	return n, <-retryc, <-unrelatedc
}

// TestAbandonedRequestDoesNotBreakItsGroupCommit is issue 29's hole i. A
// gapless request whose caller gave up stays queued for the next persist;
// the caller's retry, with the same request id, lands in the same group
// commit. Before the fix the batch held the id twice, the store refused
// it as invalid, and every request of the commit failed as
// INVALID_ARGUMENT, an unrelated key's included. Now the retry joins the
// queued attempt and gets its range; the unrelated key is served.
func TestAbandonedRequestDoesNotBreakItsGroupCommit(t *testing.T) {
	store := newFakeStore()
	clk := newFakeClock()
	key := Key{"chat", "room-1"}
	n, got, u := abandonedRetry(t, store, clk, key, sameShardKey(t, key.SubKey), nil)
	if u.err != nil {
		t.Fatalf("unrelated key of the same group commit: %v (code would be %s)", u.err, codeOf(u.err))
	}
	if got.err != nil {
		t.Fatalf("retry of the abandoned request: %v (code would be %s)", got.err, codeOf(got.err))
	}
	// The retry got the range stored for the id: a later retry, from
	// memory or from the store on a new owner, gets the same.
	biz, bg := bizMode("chat", segment.OrderedGapless), context.Background()
	if again, err := n.a.Take(bg, biz, key.SubKey, 2, segment.RequestID{ID: "req-1"}); err != nil || again != got.r {
		t.Fatalf("second retry: %v %v, want %v", again, err, got.r)
	}
	if s, ok := store.reqs[RequestKey{Biz: "chat", ID: "req-1"}]; !ok || s.Range != got.r {
		t.Fatalf("stored request %+v (stored %v), answered %v", s, ok, got.r)
	}
	// The retry joined the queued attempt: nothing was allocated for it,
	// so the key's next number follows the id's range (a gapless key
	// leaves no gap behind an abandoned request).
	if next, err := n.a.Take(bg, biz, key.SubKey, 1, segment.RequestID{}); err != nil || next.First != got.r.Last+1 {
		t.Fatalf("next number after the retry: %v %v, want %d", next, err, got.r.Last+1)
	}
	b := newNode(t, store, clk, "b:1")
	b.acquireAll(t, 2, time.Time{})
	if again, err := b.a.Take(bg, biz, key.SubKey, 2, segment.RequestID{ID: "req-1"}); err != nil || again != got.r {
		t.Fatalf("retry on a new owner: %v %v, want %v", again, err, got.r)
	}
}

// codeOf names how the server would classify err.
func codeOf(err error) string {
	switch {
	case errors.Is(err, segment.ErrInvalid), errors.Is(err, segment.ErrRequestMismatch):
		return "INVALID_ARGUMENT (not retryable)"
	case errors.Is(err, segment.ErrUnavailable):
		return "SEGMENT_UNAVAILABLE (retryable)"
	}
	return "other"
}

// TestRoundNeverHoldsARequestIDTwice: the safety net under join. Were two
// waiters of one request id queued at once (join missed the first: here
// the test removes it from the shard's index), the group commit takes one
// and the other waits for the next, where the store reports the id stored
// and the waiter gets the stored range. Neither the commit nor an
// unrelated key fails, and the id has one answer.
func TestRoundNeverHoldsARequestIDTwice(t *testing.T) {
	store := newFakeStore()
	key := Key{"chat", "room-1"}
	_, got, u := abandonedRetry(t, store, newFakeClock(), key, sameShardKey(t, key.SubKey), func(n *node) {
		sh := n.a.shards[segment.Shard(key.SubKey)].Load()
		sh.mu.Lock()
		clear(sh.reqs) // as if join had missed the queued attempt
		sh.mu.Unlock()
	})
	if u.err != nil {
		t.Fatalf("unrelated key: %v", u.err)
	}
	stored, ok := store.reqs[RequestKey{Biz: "chat", ID: "req-1"}]
	if got.err != nil || !ok || got.r != stored.Range {
		t.Fatalf("retry: %v, %v; stored %+v (%v): want the stored range", got.r, got.err, stored, ok)
	}
}
