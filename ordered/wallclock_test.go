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
//
// With the system's clocks (production's), the allocator takes the wall
// reading from the same time.Now as the monotonic one (Allocator.wallAt):
// the second case shows the wall check still refuses there, with a lease
// whose wall end passed while its monotonic end did not.
func TestLeaseEndsOnTheWallClock(t *testing.T) {
	t.Setenv("IDGEN_FAULT_LEASE_MONOTONIC_ONLY", "1")
	control := faultInjectBuild
	fakeMono, fakeWall := newFakeClock(), newFakeClock()
	for _, tc := range []struct {
		name       string
		mono, wall Clock // nil: the defaults
		// monoEnd and wallEnd are the lease's ends; freeze moves the
		// clocks (or the wall end) as a freeze past the lease does.
		monoEnd, wallEnd time.Time
		freeze           func(coord *fakeCoord)
	}{
		{name: "fake clocks", mono: fakeMono, wall: fakeWall,
			monoEnd: fakeMono.Now().Add(3 * time.Second), wallEnd: fakeWall.Now().Add(3 * time.Second),
			// Frozen for 5 s: the monotonic clock did not move.
			freeze: func(*fakeCoord) { fakeWall.Add(5 * time.Second) }},
		{name: "system clocks",
			monoEnd: time.Now().Add(time.Hour), wallEnd: time.Now().Round(0).Add(time.Hour),
			// The real clocks cannot be frozen here: the wall end passes
			// instead, and the monotonic end stays an hour ahead.
			freeze: func(coord *fakeCoord) {
				end := time.Now().Round(0).Add(-time.Second)
				coord.validUntilWall.Store(&end)
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			coord := newFakeCoord("a:1", tc.monoEnd)
			coord.validUntilWall.Store(&tc.wallEnd)
			a, err := New(Config{Store: newFakeStore(), Coordinator: coord, Clock: tc.mono, Wall: tc.wall, Self: "a:1"})
			if err != nil {
				t.Fatal(err)
			}
			if a.systemClocks != (tc.mono == nil) {
				t.Fatalf("systemClocks %v with Clock %v: the case does not test the path it names", a.systemClocks, tc.mono)
			}
			n := &node{a: a, coord: coord}
			n.acquireAll(t, 1, time.Time{})
			biz := bizMode("chat", segment.OrderedCached)
			if _, err := a.Take(context.Background(), biz, "k", 1, segment.RequestID{}); err != nil {
				t.Fatal(err)
			}
			tc.freeze(coord)
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
		})
	}
}

// TestLeaseWaitLoadsAndRemembers: a request refused during a new owner's
// lease wait loads its key, and the stored number (which the previous
// owner, now paused, may have handed out) is in Remembered, so a barrier
// after a lossy failover during the wait raises the row to it (the fault
// scenario async-failover-paused, seed 32: the new owner's first load came
// after the failover, from the new server, and it repeated the paused
// owner's last 74 numbers). Negative control:
// IDGEN_FAULT_ORDERED_FORGET_LOADED=1 (the number is not remembered).
func TestLeaseWaitLoadsAndRemembers(t *testing.T) {
	t.Setenv("IDGEN_FAULT_ORDERED_FORGET_LOADED", "1")
	control := faultInjectBuild
	store, clk := newFakeStore(), newFakeClock()
	k := Key{Biz: "chat", SubKey: "k"}
	store.rows[k] = 380 // the previous owner's last persist
	b := newNode(t, store, clk, "b:1")
	b.acquireAll(t, 2, clk.Now().Add(3*time.Second))
	biz := bizMode("chat", segment.OrderedCached)
	if _, err := b.a.Take(context.Background(), biz, "k", 1, segment.RequestID{}); err == nil {
		t.Fatal("answered during the lease wait")
	}
	remembered := func() int64 {
		var got int64
		b.a.Remembered(func(biz, sub string, last int64) {
			if biz == k.Biz && sub == k.SubKey {
				got = last
			}
		})
		return got
	}
	loaded := func() bool {
		sh := b.a.shards[segment.Shard("k")].Load()
		sh.mu.Lock()
		defer sh.mu.Unlock()
		ks := sh.keys[k]
		return ks != nil && ks.loaded
	}
	deadline := time.Now().Add(10 * time.Second)
	for !loaded() && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if !loaded() {
		t.Fatal("the key was not loaded during the lease wait")
	}
	if control {
		if remembered() != 0 {
			t.Fatal("negative control: the loaded number is remembered: the switch does not reopen the hole")
		}
		return
	}
	if got := remembered(); got != 380 {
		t.Fatalf("remembered %d for the key loaded during the lease wait, want 380", got)
	}
	if store.persists != 0 {
		t.Fatalf("%d persists during the lease wait, want none", store.persists)
	}
}
