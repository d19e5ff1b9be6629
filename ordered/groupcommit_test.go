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

// subKeyOf returns a sub key of shard.
func subKeyOf(shard int, prefix string) string {
	for i := 0; ; i++ {
		if k := fmt.Sprintf("%s%d", prefix, i); segment.Shard(k) == shard {
			return k
		}
	}
}

func queuedCommits(a *Allocator) int {
	a.commits.mu.Lock()
	defer a.commits.mu.Unlock()
	return len(a.commits.queue)
}

// groupNode is a node with one group commit in flight at a time, its
// first one held (store.hold) on a persist of shard 0: what is taken
// next queues for the second group commit, which carries it all.
func groupNode(t *testing.T, store *fakeStore) (*node, chan error) {
	t.Helper()
	clk := newFakeClock()
	coord := newFakeCoord("a:1", clk.Now().Add(time.Hour))
	a, err := New(Config{Store: store, Coordinator: coord, Clock: clk, Self: "a:1", GroupCommits: 1})
	if err != nil {
		t.Fatal(err)
	}
	n := &node{a: a, coord: coord}
	n.acquireAll(t, 1, time.Time{})
	store.hold = make(chan struct{})
	blocker := make(chan error, 1)
	gapless := bizMode("chat", segment.OrderedGapless)
	go func() {
		_, err := n.a.Take(context.Background(), gapless, subKeyOf(0, "blocker"), 1, segment.RequestID{})
		blocker <- err
	}()
	wait.For(t, 10*time.Second, "the first group commit to start", func() bool {
		return waiters(n.a, Key{"chat", subKeyOf(0, "blocker")}) == 1 && queuedCommits(n.a) == 0
	})
	return n, blocker
}

// takeBoth takes 2 gapless numbers of ka (request id ra) and of kb
// (request id rb), keys of two shards, and returns once both persists
// wait in the committer's queue (behind groupNode's held group commit).
func takeBoth(t *testing.T, n *node, ka, kb Key) (ra, rb chan takeResult) {
	t.Helper()
	gapless := bizMode("chat", segment.OrderedGapless)
	ra, rb = make(chan takeResult, 1), make(chan takeResult, 1)
	for _, c := range []struct {
		key Key
		id  string
		out chan takeResult
	}{{ka, "ra", ra}, {kb, "rb", rb}} {
		go func() {
			r, err := n.a.Take(context.Background(), gapless, c.key.SubKey, 2, segment.RequestID{ID: c.id})
			c.out <- takeResult{r, err}
		}()
	}
	wait.For(t, 10*time.Second, "both shards' persists to queue", func() bool { return queuedCommits(n.a) == 2 })
	return ra, rb
}

// TestGroupCommitFencedShardFailsAlone: two shards' requests in one group
// commit, one shard taken over by a newer owner meanwhile. The fenced
// shard's request is refused (retryably) and writes nothing; the other
// shard's request in the same transaction is answered. The negative
// control (a store that ignores epochs) shows the check would see the
// fenced shard's write.
func TestGroupCommitFencedShardFailsAlone(t *testing.T) {
	for _, noFence := range []bool{false, true} {
		t.Run(fmt.Sprintf("noFence=%v", noFence), func(t *testing.T) {
			store := newFakeStore()
			store.noFence = noFence
			n, blocker := groupNode(t, store)
			ka, kb := Key{"chat", subKeyOf(3, "a")}, Key{"chat", subKeyOf(5, "b")}
			ra, rb := takeBoth(t, n, ka, kb)
			// Shard 3's new owner claims it while the parts wait.
			if err := store.Claim(context.Background(), 3, 2, "b:1 x"); err != nil {
				t.Fatal(err)
			}
			close(store.hold)
			if err := <-blocker; err != nil {
				t.Fatalf("the held request: %v", err)
			}
			a, b := <-ra, <-rb
			if b.err != nil || b.r != (segment.Range{First: 1, Last: 2}) {
				t.Fatalf("the request of the shard still owned: %v %v, want 1..2", b.r, b.err)
			}
			if got := store.row(kb); got != 2 {
				t.Fatalf("row of the shard still owned: %d, want 2", got)
			}
			store.mu.Lock()
			calls, stored := store.calls, store.reqs[RequestKey{Biz: "chat", ID: "ra"}]
			store.mu.Unlock()
			if calls != 2 {
				t.Fatalf("%d group commits, want 2 (the held one, then both shards' parts in one)", calls)
			}
			if noFence {
				// The negative control: the deposed owner's part landed,
				// which the checks below would have caught.
				if a.err != nil || store.row(ka) != 2 || stored.ID != "ra" {
					t.Fatalf("negative control: the fenced part did not land (%v, row %d): the test cannot see a broken fence", a.err, store.row(ka))
				}
				return
			}
			var ue *UnavailableError
			if !errors.As(a.err, &ue) {
				t.Fatalf("the fenced shard's request: %v %v, want a retryable refusal", a.r, a.err)
			}
			if got := store.row(ka); got != 0 || stored.ID != "" {
				t.Fatalf("the fenced shard's part wrote row %d, request %+v", got, stored)
			}
			if n.coord.fenced.Load() != 1 {
				t.Fatalf("coordinator told of %d fenced shards, want 1", n.coord.fenced.Load())
			}
		})
	}
}

// TestGroupCommitDuplicateFailsOnlyItsShard: a request id stored by an
// earlier owner, retried in a group commit beside another shard's new
// request: the retry is answered from the store (a replay), the other
// request is answered with its own range in the same transaction.
func TestGroupCommitDuplicateFailsOnlyItsShard(t *testing.T) {
	store := newFakeStore()
	ka, kb := Key{"chat", subKeyOf(3, "a")}, Key{"chat", subKeyOf(5, "b")}
	// Served by an earlier owner: rows and the request id are stored.
	store.epochs[3], store.epochs[5] = 0, 0
	if err := store.Persist(context.Background(), 3, 0, []Row{{Key: ka, Num: 7}},
		[]Request{{Biz: "chat", ID: "ra", SubKey: ka.SubKey, Count: 2, Range: segment.Range{First: 6, Last: 7}}}); err != nil {
		t.Fatal(err)
	}
	n, blocker := groupNode(t, store)
	ra, rb := takeBoth(t, n, ka, kb)
	close(store.hold)
	if err := <-blocker; err != nil {
		t.Fatal(err)
	}
	a, b := <-ra, <-rb
	if a.err != nil || a.r != (segment.Range{First: 6, Last: 7}) {
		t.Fatalf("retry of a stored request id: %v %v, want the stored 6..7", a.r, a.err)
	}
	if b.err != nil || b.r != (segment.Range{First: 1, Last: 2}) {
		t.Fatalf("the other shard's request: %v %v, want 1..2", b.r, b.err)
	}
	// (Row a may since hold the replay's displaced allocation, 9: a gap.)
	if store.row(kb) != 2 || store.row(ka) < 7 {
		t.Fatalf("rows a=%d b=%d, want at least 7 and 2", store.row(ka), store.row(kb))
	}
	store.mu.Lock()
	stored := store.reqs[RequestKey{Biz: "chat", ID: "ra"}]
	store.mu.Unlock()
	if stored.Range != (segment.Range{First: 6, Last: 7}) {
		t.Fatalf("stored request ra is now %+v, want its first range 6..7", stored)
	}
}

// TestGroupCommitOneTransactionForManyShards: requests of many shards
// queued while a group commit runs go into the next one together.
func TestGroupCommitOneTransactionForManyShards(t *testing.T) {
	store := newFakeStore()
	n, blocker := groupNode(t, store)
	gapless := bizMode("chat", segment.OrderedGapless)
	const shards = 16
	results := make(chan takeResult, shards)
	for s := 1; s <= shards; s++ {
		go func() {
			r, err := n.a.Take(context.Background(), gapless, subKeyOf(s, "k"), 1, segment.RequestID{})
			results <- takeResult{r, err}
		}()
	}
	wait.For(t, 10*time.Second, "every shard's persist to queue", func() bool { return queuedCommits(n.a) == shards })
	close(store.hold)
	if err := <-blocker; err != nil {
		t.Fatal(err)
	}
	for range shards {
		if res := <-results; res.err != nil || res.r != (segment.Range{First: 1, Last: 1}) {
			t.Fatalf("request: %v %v", res.r, res.err)
		}
	}
	store.mu.Lock()
	defer store.mu.Unlock()
	if store.calls != 2 || store.persists != shards+1 {
		t.Fatalf("%d group commits of %d parts, want 2 of %d", store.calls, store.persists, shards+1)
	}
}

// TestQueuedBehindPersistInFlightIsPersistedWhenItEnds: requests that
// arrive while their shard's persist is in flight (MaxInFlight 1: the
// persist loop can launch nothing, so they do not wake it) go into the
// persist launched when that one ends, one persist carrying both keys'.
func TestQueuedBehindPersistInFlightIsPersistedWhenItEnds(t *testing.T) {
	store := newFakeStore()
	n, blocker := groupNode(t, store)
	gapless := bizMode("chat", segment.OrderedGapless)
	hot, other := Key{"chat", subKeyOf(0, "blocker")}, Key{"chat", subKeyOf(0, "other")}
	second, third := make(chan takeResult, 1), make(chan takeResult, 1)
	for _, c := range []struct {
		key Key
		out chan takeResult
	}{{hot, second}, {other, third}} {
		go func() {
			r, err := n.a.Take(context.Background(), gapless, c.key.SubKey, 1, segment.RequestID{})
			c.out <- takeResult{r, err}
		}()
	}
	wait.For(t, 10*time.Second, "both requests to wait behind the persist in flight", func() bool {
		return waiters(n.a, hot) == 2 && waiters(n.a, other) == 1
	})
	if q := queuedCommits(n.a); q != 0 {
		t.Fatalf("%d persists queued while the shard's persist is in flight, want 0", q)
	}
	close(store.hold)
	if err := <-blocker; err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		out  chan takeResult
		want segment.Range
	}{{"second number of the hot key", second, segment.Range{First: 2, Last: 2}}, {"other key", third, segment.Range{First: 1, Last: 1}}} {
		select {
		case res := <-c.out:
			if res.err != nil || res.r != c.want {
				t.Fatalf("%s: %v %v, want %v", c.name, res.r, res.err, c.want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: not answered: its persist was never launched (the loop missed a wake-up)", c.name)
		}
	}
	store.mu.Lock()
	defer store.mu.Unlock()
	if store.calls != 2 || store.persists != 2 {
		t.Fatalf("%d group commits of %d parts, want 2 of 1 each", store.calls, store.persists)
	}
}
