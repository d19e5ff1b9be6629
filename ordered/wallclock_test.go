package ordered

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idgen/idgen/segment"
)

// TestLeaseEndsOnTheWallClock: a VM frozen past its lease resumes with a
// monotonic clock that lost the freeze, so the lease still runs there,
// while the other owners, on their clocks, took its shards over. The
// wall clock went on: the lease ended on it, and the node refuses (the
// simulator's hole:vm-freeze found real-time order violations on cached
// keys before). Negative control: IDGEN_FAULT_LEASE_MONOTONIC_ONLY=1.
func TestLeaseEndsOnTheWallClock(t *testing.T) {
	t.Setenv("IDGEN_FAULT_LEASE_MONOTONIC_ONLY", "1")
	control := faultInjectBuild
	mono, wall := newFakeClock(), newFakeClock()
	coord := newFakeCoord("a:1", mono.Now().Add(3*time.Second))
	wallEnd := wall.Now().Add(3 * time.Second)
	coord.validUntilWall.Store(&wallEnd)
	a, err := New(Config{Store: newFakeStore(), Coordinator: coord, Clock: mono, Wall: wall, Self: "a:1"})
	if err != nil {
		t.Fatal(err)
	}
	n := &node{a: a, coord: coord}
	n.acquireAll(t, 1, time.Time{})
	biz := bizMode("chat", segment.OrderedCached)
	if _, err := a.Take(context.Background(), biz, "k", 1, segment.RequestID{}); err != nil {
		t.Fatal(err)
	}
	wall.Add(5 * time.Second) // frozen for 5 s: the monotonic clock did not move
	_, err = a.Take(context.Background(), biz, "k", 1, segment.RequestID{})
	if control {
		if err != nil {
			t.Fatalf("negative control: refused (%v): the switch does not reopen the hole", err)
		}
		return
	}
	var ue *UnavailableError
	if !errors.As(err, &ue) || ue.NotOwner {
		t.Fatalf("after a freeze past the lease: %v, want a retryable refusal", err)
	}
	if a.Serves(segment.Shard("k")) {
		t.Fatal("the shard counts as served after the lease ran out on the wall clock")
	}
}
