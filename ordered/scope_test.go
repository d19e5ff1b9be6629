package ordered

import (
	"context"
	"testing"
	"time"

	"github.com/idgen/idgen/internal/wait"
	"github.com/idgen/idgen/segment"
)

// TestRequestIDsScopedOnTheOwner: on the shard owners' path (issue 30,
// item 3) a request id is the caller's own: the same id from another scope
// gets a range of its own, from memory, from the store on a new owner, and
// while the first attempt is still queued; an id another scope used first
// does not block the victim.
func TestRequestIDsScopedOnTheOwner(t *testing.T) {
	for _, mode := range []segment.OrderedMode{segment.OrderedGapless, segment.OrderedCached} {
		t.Run(mode.String(), func(t *testing.T) {
			store := newFakeStore()
			clk := newFakeClock()
			n := newNode(t, store, clk, "a:1")
			n.acquireAll(t, 1, time.Time{})
			biz := bizMode("chat", mode)
			bg := context.Background()
			victim := segment.RequestID{ID: "r", Scope: "0123456789abcdef"}
			attacker := segment.RequestID{ID: "r", Scope: "fedcba9876543210"}
			v, err := n.a.Take(bg, biz, "room", 3, victim)
			if err != nil {
				t.Fatal(err)
			}
			a, err := n.a.Take(bg, biz, "room", 3, attacker)
			if err != nil || a.First <= v.Last {
				t.Fatalf("another scope reusing the victim's id: %v, %v; want a new range above %v", a, err, v)
			}
			pre := segment.RequestID{ID: "future", Scope: attacker.Scope}
			if _, err := n.a.Take(bg, biz, "elsewhere", 1, pre); err != nil {
				t.Fatal(err)
			}
			later, err := n.a.Take(bg, biz, "room", 2, segment.RequestID{ID: "future", Scope: victim.Scope})
			if err != nil {
				t.Fatalf("the victim's use of an id another scope used first: %v", err)
			}
			if again, err := n.a.Take(bg, biz, "room", 3, victim); err != nil || again != v {
				t.Fatalf("victim's retry: %v, %v; want %v", again, err, v)
			}
			if mode != segment.OrderedGapless {
				return
			}
			// A new owner finds each scope's own request in the store.
			b := newNode(t, store, clk, "b:1")
			b.acquireAll(t, 2, time.Time{})
			for _, tc := range []struct {
				sub  string
				n    int64
				rid  segment.RequestID
				want segment.Range
			}{{"room", 3, victim, v}, {"room", 3, attacker, a}, {"room", 2, segment.RequestID{ID: "future", Scope: victim.Scope}, later}} {
				if got, err := b.a.Take(bg, biz, tc.sub, tc.n, tc.rid); err != nil || got != tc.want {
					t.Fatalf("retry of %+v on a new owner: %v, %v; want %v", tc.rid, got, err, tc.want)
				}
			}
		})
	}
}

// TestQueuedAttemptJoinedOnlyInItsScope: a retry joins a queued attempt of
// its request id (issue 29, hole i) only in its own scope: another
// caller's request with the same id while the victim's attempt waits for
// the store gets a range of its own.
func TestQueuedAttemptJoinedOnlyInItsScope(t *testing.T) {
	store := newFakeStore()
	clk := newFakeClock()
	n := newNode(t, store, clk, "a:1")
	n.acquireAll(t, 1, time.Time{})
	biz := bizMode("chat", segment.OrderedGapless)
	key := Key{"chat", "room"}
	bg := context.Background()
	store.hold = make(chan struct{})
	victim, attacker := make(chan takeResult, 1), make(chan takeResult, 1)
	go func() {
		r, err := n.a.Take(bg, biz, key.SubKey, 3, segment.RequestID{ID: "r", Scope: "aaaa"})
		victim <- takeResult{r, err}
	}()
	wait.For(t, 10*time.Second, "the victim's attempt to queue", func() bool { return waiters(n.a, key) == 1 })
	go func() {
		r, err := n.a.Take(bg, biz, key.SubKey, 3, segment.RequestID{ID: "r", Scope: "bbbb"})
		attacker <- takeResult{r, err}
	}()
	wait.For(t, 10*time.Second, "the other caller's request to queue", func() bool { return waiters(n.a, key) == 2 })
	close(store.hold)
	v, a := <-victim, <-attacker
	if v.err != nil || a.err != nil {
		t.Fatalf("victim %v, other caller %v", v.err, a.err)
	}
	if v.r == a.r {
		t.Fatalf("the other caller got %v, the victim %v: joined across scopes", a.r, v.r)
	}
}
