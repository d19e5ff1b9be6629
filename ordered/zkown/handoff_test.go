package zkown

import (
	"fmt"
	"testing"

	"github.com/idgen/idgen/ordered"
)

// Issue 29 hole a (3): a hand-off whose exact write-back the handler could
// not make (the barrier's gate refused it after a MySQL failover) must not
// release the shard as clean: the store may hold less than the old owner
// handed out, so the next owner waits out a lease instead of serving at
// once. Before the fix the coordinator released the znode with no wait and
// the next owner was granted the shard with NotBefore = now.
func TestUncleanHandOffReleasesWithLeaseWait(t *testing.T) {
	w := newWorld(t)
	a := w.node(addrA, nil)
	a.step()
	a.h.releaseErr = func(s int) error {
		return fmt.Errorf("%w: shard %d: the gate stayed closed", ordered.ErrUncleanHandOff, s)
	}
	b := w.node(addrB, nil)
	mark := w.j.len()
	settle(t, w, 80, a, b)
	evs := w.j.since(mark)
	released := map[int]event{}
	for _, e := range filter(evs, addrA, "release") {
		released[e.shard] = e
	}
	if len(released) == 0 {
		t.Fatal("no hand-off: the test shows nothing")
	}
	for _, e := range filter(evs, addrB, "acquire") {
		rel, ok := released[e.shard]
		if !ok {
			continue
		}
		if wait := e.grant.NotBefore.Sub(rel.at); wait < testLease {
			t.Fatalf("shard %d: released unclean at %v, next owner serves %v later (want at least the lease %v)",
				e.shard, rel.at, wait, testLease)
		}
	}
	checkEpochs(t, w)
}

// ErrHandOffDeferred: the handler changed nothing (its gate is closed); the
// shard stays this node's, held and owned in ZooKeeper, and is handed off
// once the handler agrees. Before the fix the coordinator released it
// anyway while the handler still served it.
func TestDeferredHandOffKeepsTheShard(t *testing.T) {
	w := newWorld(t)
	a := w.node(addrA, nil)
	a.step()
	deferAll := true
	a.h.releaseErr = func(int) error {
		if deferAll {
			return fmt.Errorf("%w: gate closed", ordered.ErrHandOffDeferred)
		}
		return nil
	}
	b := w.node(addrB, nil)
	for range 40 { // ten leases of rounds: the hand-off is due long before
		w.stepAll(testTick, a, b)
	}
	if got := len(a.held()); got != Shards {
		t.Fatalf("A holds %d shards while its handler defers every hand-off, want %d", got, Shards)
	}
	if got := len(b.held()); got != 0 {
		t.Fatalf("B holds %d shards A's handler never released", got)
	}
	checkAssignment(t, w, a, b)
	a.h.mu.Lock()
	deferAll = false
	a.h.mu.Unlock()
	settle(t, w, 80, a, b)
	checkEpochs(t, w)
}
